// The attention sink, measured by the kernels' own statistics on two small trained language models
// that differ only in the attention output gate (tools/train_sink_pair.py, examples/byte_lm.hpp).
// Runs held-out text (Revelation, not seen in training) through each model and prints per layer:
// the mean attention share on the first token (BOS), the gate's mean and fraction below 0.1, the
// largest hidden state entering the layer, and the largest attention output before and after the
// gate; per head, the first-token share; and the validation loss.
//
//   attention_sink_report [--data DIR] [--rows N] [--threads N] [--json PATH]
//
// --json writes the figures and the training loss curves for tools/plot_attention_sinks.py.
#include "byte_lm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace ga = gated_attention;

namespace {

constexpr int kHistogramBins = 20;  // of per-(token, head) mean gate scores, over [0, 1]

struct LayerSummary {
  double sink_share = 0, gate_mean = 0, gate_below_0_1 = 0;
  std::vector<double> sink_share_per_head;
  float max_abs_hidden = 0, max_abs_before = 0, max_abs_after = 0;
  std::vector<long long> gate_histogram = std::vector<long long>(kHistogramBins, 0);
};

struct ModelSummary {
  std::string gate;
  double validation_loss = 0;  // nats per byte
  long long predicted = 0, queries = 0;
  std::vector<LayerSummary> layers;
};

// Adds one row's statistics; query 0 (BOS, which can attend only to itself) is left out.
void accumulate(const byte_lm::ByteLmStatistics& s, ModelSummary* m) {
  m->layers.resize(static_cast<std::size_t>(s.layers));
  for (std::int64_t l = 0; l < s.layers; ++l) {
    LayerSummary& out = m->layers[static_cast<std::size_t>(l)];
    out.sink_share_per_head.resize(static_cast<std::size_t>(s.heads));
    out.max_abs_hidden = std::max(out.max_abs_hidden, s.max_abs_hidden[l]);
    for (std::int64_t t = 1; t < s.len; ++t) {
      for (std::int64_t h = 0; h < s.heads; ++h) {
        const float share = s.at(s.sink_share, l, t, h), gate = s.at(s.gate_mean, l, t, h);
        out.sink_share += share;
        out.sink_share_per_head[static_cast<std::size_t>(h)] += share;
        out.gate_mean += gate;
        out.gate_below_0_1 += s.at(s.gate_below_0_1, l, t, h);
        out.max_abs_before = std::max(out.max_abs_before, s.at(s.max_abs_before, l, t, h));
        out.max_abs_after = std::max(out.max_abs_after, s.at(s.max_abs_after, l, t, h));
        const int bin = std::min(kHistogramBins - 1, static_cast<int>(gate * kHistogramBins));
        ++out.gate_histogram[static_cast<std::size_t>(std::max(0, bin))];
      }
    }
  }
  m->queries += s.len - 1;
}

// Mean negative log-likelihood of each next byte: logits [len, 257] of BOS + row.
double next_byte_nll(const std::vector<float>& logits, const std::vector<std::int32_t>& tokens) {
  double total = 0;
  for (std::size_t t = 0; t + 1 < tokens.size(); ++t) {
    const float* z = &logits[t * byte_lm::kVocab];
    const float top = *std::max_element(z, z + byte_lm::kVocab);
    double sum = 0;
    for (std::int64_t i = 0; i < byte_lm::kVocab; ++i) sum += std::exp(double(z[i]) - top);
    total += std::log(sum) + top - z[tokens[t + 1]];
  }
  return total;
}

ga::Status summarise(byte_lm::ByteLm& model, std::int64_t max_rows, const ga::Executor& executor,
                     ModelSummary* out) {
  ga::TensorView<const std::uint8_t, 2> rows;
  GATED_ATTENTION_RETURN_IF_ERROR(model.file().view("validation.tokens", &rows));
  const std::int64_t n = std::min(max_rows, rows.extents[0]), len = rows.extents[1] + 1;
  std::vector<float> logits(static_cast<std::size_t>(len * byte_lm::kVocab));
  byte_lm::ByteLmStatistics stats;
  double nll = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    const std::vector<std::int32_t> tokens = byte_lm::sequence_of(rows, r);
    GATED_ATTENTION_RETURN_IF_ERROR(model.forward(tokens, logits.data(), &stats, executor));
    accumulate(stats, out);
    nll += next_byte_nll(logits, tokens);
    out->predicted += len - 1;
  }
  const double per_layer = static_cast<double>(out->queries) * stats.heads;
  for (LayerSummary& l : out->layers) {
    l.sink_share /= per_layer;
    l.gate_mean /= per_layer;
    l.gate_below_0_1 /= per_layer;
    for (double& h : l.sink_share_per_head) h /= static_cast<double>(out->queries);
  }
  out->validation_loss = nll / static_cast<double>(out->predicted);
  return ga::Status::ok();
}

void print(const ModelSummary& m) {
  std::printf("\n%s gate: validation loss %.4f nats/byte (%lld bytes)\n", m.gate.c_str(),
              m.validation_loss, m.predicted);
  std::printf(
      "layer  first-token share  gate mean  gate<0.1  max|x| in  max|attn| before  after"
      "   share per head\n");
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const LayerSummary& s = m.layers[l];
    std::printf("%5zu  %17.3f  %9.3f  %8.3f  %9.2f  %16.3f  %5.3f  ", l, s.sink_share, s.gate_mean,
                s.gate_below_0_1, static_cast<double>(s.max_abs_hidden),
                static_cast<double>(s.max_abs_before), static_cast<double>(s.max_abs_after));
    for (double h : s.sink_share_per_head) std::printf(" %.2f", h);
    std::printf("\n");
  }
}

void write_vector(std::FILE* f, const std::vector<double>& v) {
  std::fprintf(f, "[");
  for (std::size_t i = 0; i < v.size(); ++i) std::fprintf(f, "%s%.6g", i ? ", " : "", v[i]);
  std::fprintf(f, "]");
}

// The training curves stored with the model.
std::vector<double> file_vector(const byte_lm::ByteLm& model, const char* name) {
  std::vector<double> out;
  if (const auto* t = model.file().find(name)) {
    const unsigned char* p = model.file().bytes(*t);
    for (std::int64_t i = 0; i < t->num_elements(); ++i) {
      if (t->dtype == ga::io::SafetensorsDtype::f32) {
        float v;
        std::memcpy(&v, p + 4 * i, 4);
        out.push_back(v);
      } else if (t->dtype == ga::io::SafetensorsDtype::i64) {
        std::int64_t v;
        std::memcpy(&v, p + 8 * i, 8);
        out.push_back(static_cast<double>(v));
      }
    }
  }
  return out;
}

void write_model_json(std::FILE* f, const ModelSummary& m, const byte_lm::ByteLm& model) {
  std::fprintf(f, "    {\"gate\": \"%s\", \"validation_loss\": %.6g, \"layers\": [\n",
               m.gate.c_str(), m.validation_loss);
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const LayerSummary& s = m.layers[l];
    std::fprintf(f,
                 "      {\"sink_share\": %.6g, \"gate_mean\": %.6g, \"gate_below_0_1\": %.6g, "
                 "\"max_abs_hidden\": %.6g, \"max_abs_before\": %.6g, \"max_abs_after\": %.6g, "
                 "\"sink_share_per_head\": ",
                 s.sink_share, s.gate_mean, s.gate_below_0_1, double(s.max_abs_hidden),
                 double(s.max_abs_before), double(s.max_abs_after));
    write_vector(f, s.sink_share_per_head);
    std::fprintf(f, ", \"gate_histogram\": ");
    write_vector(f, std::vector<double>(s.gate_histogram.begin(), s.gate_histogram.end()));
    std::fprintf(f, "}%s\n", l + 1 < m.layers.size() ? "," : "");
  }
  std::fprintf(f, "    ], \"train_loss\": ");
  write_vector(f, file_vector(model, "train.loss"));
  std::fprintf(f, ", \"val_loss\": ");
  write_vector(f, file_vector(model, "train.val_loss"));
  std::fprintf(f, ", \"val_step\": ");
  write_vector(f, file_vector(model, "train.val_step"));
  std::fprintf(f, "}");
}

const char* arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef GATED_ATTENTION_TEST_DATA_DIR
  const char* default_dir = GATED_ATTENTION_TEST_DATA_DIR;
#else
  const char* default_dir = "tests/data";
#endif
  const std::string dir = arg(argc, argv, "--data", default_dir);
  const std::int64_t rows = std::atoll(arg(argc, argv, "--rows", "8"));
  const int threads = std::atoi(arg(argc, argv, "--threads", "2"));
  const char* json = arg(argc, argv, "--json", nullptr);

  ga::ThreadPool pool(std::max(1, threads));
  std::vector<ModelSummary> summaries;
  std::vector<std::unique_ptr<byte_lm::ByteLm>> models;
  for (const char* gate : {"none", "elementwise", "headwise"}) {
    const std::string path = dir + "/byte_lm_" + gate + ".safetensors";
    if (std::strcmp(gate, "headwise") == 0 && !std::ifstream(path)) continue;  // optional
    models.push_back(std::make_unique<byte_lm::ByteLm>());
    ModelSummary m;
    m.gate = gate;
    ga::Status s = models.back()->load(path);
    if (s.is_ok()) s = summarise(*models.back(), rows, pool.executor(), &m);
    if (!s) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), s.message());
      return 1;
    }
    summaries.push_back(m);
  }
  const byte_lm::ByteLmConfig& c = models.front()->config();
  std::printf("byte-level LMs: %lld layers, hidden %lld, %lld query / %lld KV heads of %lld, %s\n",
              static_cast<long long>(c.layers), static_cast<long long>(c.attention.hidden_size),
              static_cast<long long>(c.attention.num_q_heads),
              static_cast<long long>(c.attention.num_kv_heads),
              static_cast<long long>(c.attention.head_dim), ga::sdpa_path());
  double uniform = 0;  // the first-token share if every query attended uniformly
  for (std::int64_t t = 1; t < c.max_tokens; ++t) uniform += 1.0 / static_cast<double>(t + 1);
  std::printf("first-token share under uniform attention: %.3f\n",
              uniform / static_cast<double>(c.max_tokens - 1));
  for (const ModelSummary& m : summaries) print(m);

  if (json != nullptr) {
    std::FILE* f = std::fopen(json, "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", json);
      return 1;
    }
    std::fprintf(f, "{\"uniform_sink_share\": %.6g, \"models\": [\n",
                 uniform / static_cast<double>(c.max_tokens - 1));
    for (std::size_t i = 0; i < summaries.size(); ++i) {
      write_model_json(f, summaries[i], *models[i]);
      std::fprintf(f, "%s\n", i + 1 < summaries.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
