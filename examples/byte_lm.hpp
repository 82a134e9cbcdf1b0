// A whole byte-level language model run with the library: the small models that
// tools/train_sink_pair.py trains, gated and ungated (tests/data/byte_lm_<gate>.safetensors).
//
//   tokens: bytes 0..255 and BOS (256)
//   x = embed[tokens]                                                    [len, hidden]
//   per layer: h = x + GatedMultiHeadAttention(input_norm(x))            bf16 projection weights
//              x = h + down(silu(gate(n)) * up(n)),  n = post_norm(h)    SwiGLU MLP, bf16 weights
//   logits = norm(x) embed^T                                             [len, 257], tied
//
// Every RMSNorm is zero-centred (x_hat * (1 + w)), as in Qwen3-Next. forward() runs one sequence
// as a prefill and can gather the attention kernels' statistics of every layer (AttentionStats).
// Shared by examples/attention_sink_report.cpp and tests/test_byte_lm.cpp.
#pragma once

#include <gated_attention/gated_attention.hpp>
#include <gated_attention/io/safetensors.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace byte_lm {

namespace ga = gated_attention;

inline constexpr std::int64_t kVocab = 257;
inline constexpr std::int32_t kBos = 256;

struct ByteLmConfig {
  ga::BlockConfig attention;
  std::int64_t layers = 0;
  std::int64_t intermediate = 0;  // SwiGLU width
  std::int64_t max_tokens = 0;    // the training window (BOS included)
};

// What forward() measures, per layer, token and query head: [layers, len, heads] row-major.
struct ByteLmStatistics {
  std::int64_t layers = 0, len = 0, heads = 0;
  std::vector<float> sink_share;      // attention probability on the first token (BOS)
  std::vector<float> gate_mean;       // mean gate score over the head's dims (1 ungated)
  std::vector<float> gate_below_0_1;  // fraction of the head's gate scores below 0.1
  std::vector<float>
      max_abs_before;                // max |attention output| over the head's dims, before the gate
  std::vector<float> max_abs_after;  // ... and after it
  std::vector<float> max_abs_hidden;  // [layers + 1]: max |x| entering each layer, leaving the last

  float at(const std::vector<float>& stat, std::int64_t layer, std::int64_t token,
           std::int64_t head) const {
    return stat[static_cast<std::size_t>((layer * len + token) * heads + head)];
  }
};

namespace detail {

inline std::vector<float> widen(const ga::TensorView<const ga::bf16, 1>& v) {
  std::vector<float> out(static_cast<std::size_t>(v.extents[0]));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = ga::to_float(v.data[i]);
  return out;
}

inline ga::Status gate_mode_of(const std::string& name, ga::GateMode* out) {
  if (name == "none")
    *out = ga::GateMode::none;
  else if (name == "headwise")
    *out = ga::GateMode::headwise;
  else if (name == "elementwise")
    *out = ga::GateMode::elementwise;
  else
    return ga::Status::error(ga::StatusCode::invalid_argument,
                             "byte_lm: gate_mode: expected none, headwise or elementwise, got "
                             "'%.20s'",
                             name.c_str());
  return ga::Status::ok();
}

inline ga::Status read_config(const ga::io::SafetensorsFile& f, ByteLmConfig* out) {
  ga::BlockConfig& c = out->attention;
  double eps = 0.0;
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("hidden", &c.hidden_size));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("num_q_heads", &c.num_q_heads));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("num_kv_heads", &c.num_kv_heads));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("head_dim", &c.head_dim));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("rotary_dim", &c.rotary_dim));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_number("rope_theta", &c.rope_theta));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_number("rms_norm_eps", &eps));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("layers", &out->layers));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("intermediate", &out->intermediate));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("seq_len", &out->max_tokens));
  const std::string* gate = f.find_metadata("gate_mode");
  GATED_ATTENTION_RETURN_IF_ERROR(gate_mode_of(gate ? *gate : std::string(), &c.gate_mode));
  c.gate_activation = ga::GateActivation::sigmoid;
  c.q_gate_layout = ga::QGateLayout::qwen3_next;
  c.qk_norm = ga::QkNorm::zero_centered_rms;
  c.rms_norm_eps = static_cast<float>(eps);
  GATED_ATTENTION_RETURN_IF_ERROR(ga::validate(c));
  if (out->layers < 1 || out->intermediate < 1 || out->max_tokens < 1) {
    return ga::Status::error(ga::StatusCode::invalid_argument,
                             "byte_lm: layers, intermediate and seq_len must be >= 1");
  }
  return ga::Status::ok();
}

}  // namespace detail

// Row r of the held-out text stored with a model (validation.tokens [rows, len - 1]) as the
// sequence the model runs: BOS, then the row's bytes.
inline std::vector<std::int32_t> sequence_of(const ga::TensorView<const std::uint8_t, 2>& rows,
                                             std::int64_t r) {
  std::vector<std::int32_t> tokens = {kBos};
  for (std::int64_t t = 0; t < rows.extents[1]; ++t) tokens.push_back(rows(r, t));
  return tokens;
}

// Holds the file it reads; views point into it, so a model is neither copied nor moved.
class ByteLm {
 public:
  ByteLm() = default;
  ByteLm(const ByteLm&) = delete;
  ByteLm& operator=(const ByteLm&) = delete;

  ga::Status load(const std::string& path) {
    GATED_ATTENTION_RETURN_IF_ERROR(file_.read(path));
    GATED_ATTENTION_RETURN_IF_ERROR(detail::read_config(file_, &config_));
    ga::TensorView<const ga::bf16, 2> embed;
    GATED_ATTENTION_RETURN_IF_ERROR(file_.view("embed", &embed));
    const std::int64_t hid = config_.attention.hidden_size;
    if (embed.extents[0] != kVocab) {
      return ga::Status::shape_mismatch("embed", 0, "vocab", kVocab, embed.extents[0]);
    }
    if (embed.extents[1] != hid) {
      return ga::Status::shape_mismatch("embed", 1, "hidden", hid, embed.extents[1]);
    }
    embed_ = detail::widen({embed.data, {kVocab * hid}, {1}});
    GATED_ATTENTION_RETURN_IF_ERROR(norm_weight("norm", &final_norm_));
    layers_.clear();
    layers_.resize(static_cast<std::size_t>(config_.layers));
    for (std::int64_t i = 0; i < config_.layers; ++i) {
      GATED_ATTENTION_RETURN_IF_ERROR(
          load_layer("layers." + std::to_string(i) + ".", &layers_[static_cast<std::size_t>(i)]));
    }
    return ga::Status::ok();
  }

  const ByteLmConfig& config() const { return config_; }
  const ga::io::SafetensorsFile& file() const { return file_; }

  // logits [len, 257] for tokens[0, len) (1 <= len <= max_tokens; a sequence starts with BOS);
  // stats, if not null, is resized and filled.
  ga::Status forward(const std::vector<std::int32_t>& tokens, float* logits,
                     ByteLmStatistics* stats, const ga::Executor& executor) {
    const auto len = static_cast<std::int64_t>(tokens.size());
    GATED_ATTENTION_RETURN_IF_ERROR(prepare(tokens, stats));
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      if (stats) stats->max_abs_hidden[l] = max_abs(x_);
      GATED_ATTENTION_RETURN_IF_ERROR(
          attention(layers_[l], len, stats, static_cast<std::int64_t>(l), executor));
      GATED_ATTENTION_RETURN_IF_ERROR(mlp(layers_[l], len, executor));
    }
    if (stats) stats->max_abs_hidden[layers_.size()] = max_abs(x_);
    const std::int64_t hid = config_.attention.hidden_size;
    GATED_ATTENTION_RETURN_IF_ERROR(rms_norm(x_.data(), final_norm_, len, executor));
    return ga::run(
        ga::LinearArgs<float>{rows(normed_.data(), len, hid), rows(embed_.data(), kVocab, hid),
                              nullptr, ga::TensorView<float, 2>::contiguous(logits, {len, kVocab})},
        executor);
  }

 private:
  struct Layer {
    ga::BlockWeights<float, ga::bf16> weights;
    std::vector<float> input_norm, post_norm, q_norm, k_norm;
    ga::TensorView<const ga::bf16, 2> gate_proj, up_proj, down_proj;
    std::unique_ptr<ga::GatedMultiHeadAttention<float, float, ga::bf16>> attention;
  };

  static ga::TensorView<const float, 2> rows(const float* data, std::int64_t n, std::int64_t w) {
    return ga::TensorView<const float, 2>::contiguous(data, {n, w});
  }
  static float max_abs(const std::vector<float>& v) {
    float m = 0.0f;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
  }

  ga::Status norm_weight(const std::string& name, std::vector<float>* out) const {
    ga::TensorView<const ga::bf16, 1> w;
    GATED_ATTENTION_RETURN_IF_ERROR(file_.view(name, &w));
    *out = detail::widen(w);
    return ga::Status::ok();
  }

  ga::Status load_layer(const std::string& prefix, Layer* layer) {
    GATED_ATTENTION_RETURN_IF_ERROR(norm_weight(prefix + "input_norm", &layer->input_norm));
    GATED_ATTENTION_RETURN_IF_ERROR(norm_weight(prefix + "post_norm", &layer->post_norm));
    GATED_ATTENTION_RETURN_IF_ERROR(norm_weight(prefix + "attn.q_norm", &layer->q_norm));
    GATED_ATTENTION_RETURN_IF_ERROR(norm_weight(prefix + "attn.k_norm", &layer->k_norm));
    ga::BlockWeights<float, ga::bf16>& w = layer->weights;
    GATED_ATTENTION_RETURN_IF_ERROR(file_.view(prefix + "attn.q_proj", &w.q_proj));
    GATED_ATTENTION_RETURN_IF_ERROR(file_.view(prefix + "attn.k_proj", &w.k_proj));
    GATED_ATTENTION_RETURN_IF_ERROR(file_.view(prefix + "attn.v_proj", &w.v_proj));
    GATED_ATTENTION_RETURN_IF_ERROR(file_.view(prefix + "attn.o_proj", &w.o_proj));
    w.maybe_q_norm = layer->q_norm.data();
    w.maybe_k_norm = layer->k_norm.data();
    GATED_ATTENTION_RETURN_IF_ERROR(ga::validate(config_.attention, w));
    GATED_ATTENTION_RETURN_IF_ERROR(file_.view(prefix + "mlp.gate_proj", &layer->gate_proj));
    GATED_ATTENTION_RETURN_IF_ERROR(file_.view(prefix + "mlp.up_proj", &layer->up_proj));
    GATED_ATTENTION_RETURN_IF_ERROR(file_.view(prefix + "mlp.down_proj", &layer->down_proj));
    const std::int64_t hid = config_.attention.hidden_size, inter = config_.intermediate;
    for (const auto* m : {&layer->gate_proj, &layer->up_proj}) {
      if (m->extents[0] != inter || m->extents[1] != hid) {
        return ga::Status::shape_mismatch((prefix + "mlp.gate_proj/up_proj").c_str(), 0,
                                          "intermediate", inter, m->extents[0]);
      }
    }
    if (layer->down_proj.extents[0] != hid || layer->down_proj.extents[1] != inter) {
      return ga::Status::shape_mismatch((prefix + "mlp.down_proj").c_str(), 1, "intermediate",
                                        inter, layer->down_proj.extents[1]);
    }
    layer->attention =
        std::make_unique<ga::GatedMultiHeadAttention<float, float, ga::bf16>>(config_.attention, w);
    return ga::Status::ok();
  }

  // Sizes the buffers for `tokens` (capacity kept from longer calls) and embeds them into x_.
  ga::Status prepare(const std::vector<std::int32_t>& tokens, ByteLmStatistics* stats) {
    const auto len = static_cast<std::int64_t>(tokens.size());
    if (len < 1 || len > config_.max_tokens) {
      return ga::Status::error(
          ga::StatusCode::invalid_argument, "tokens: dim 0 (len): expected 1..%lld, got %lld",
          static_cast<long long>(config_.max_tokens), static_cast<long long>(len));
    }
    const ga::BlockConfig& c = config_.attention;
    const auto n = [](std::int64_t count) { return static_cast<std::size_t>(count); };
    x_.resize(n(len * c.hidden_size));
    normed_.resize(x_.size());
    attn_out_.resize(x_.size());
    gate_.resize(n(len * config_.intermediate));
    up_.resize(gate_.size());
    k_cache_.resize(n(config_.max_tokens * c.kv_width()));
    v_cache_.resize(k_cache_.size());
    positions_.resize(n(len));
    for (std::int64_t t = 0; t < len; ++t) {
      const std::int32_t token = tokens[n(t)];
      if (token < 0 || token >= kVocab) {
        return ga::Status::error(ga::StatusCode::invalid_argument,
                                 "tokens: element %lld: expected 0..256, got %d",
                                 static_cast<long long>(t), token);
      }
      std::copy_n(embed_.begin() + token * c.hidden_size, c.hidden_size,
                  x_.begin() + t * c.hidden_size);
      positions_[n(t)] = t;
    }
    if (stats) {
      stats->layers = config_.layers;
      stats->len = len;
      stats->heads = c.num_q_heads;
      for (auto* s : {&stats->sink_share, &stats->gate_mean, &stats->gate_below_0_1,
                      &stats->max_abs_before, &stats->max_abs_after}) {
        s->assign(n(config_.layers * len * c.num_q_heads), 0.0f);
      }
      stats->max_abs_hidden.assign(n(config_.layers + 1), 0.0f);
    }
    return ga::Status::ok();
  }

  ga::Status rms_norm(const float* in, const std::vector<float>& weight, std::int64_t len,
                      const ga::Executor& executor) {
    const std::int64_t hid = config_.attention.hidden_size;
    return ga::run(
        ga::RmsNormArgs<float, 2>{rows(in, len, hid), weight.data(),
                                  ga::TensorView<float, 2>::contiguous(normed_.data(), {len, hid}),
                                  config_.attention.rms_norm_eps, ga::RmsNormWeight::zero_centered},
        executor);
  }

  // x += attention(input_norm(x)), with a fresh cache; the statistics land in layer `l` of stats.
  ga::Status attention(Layer& layer, std::int64_t len, ByteLmStatistics* stats, std::int64_t l,
                       const ga::Executor& executor) {
    const ga::BlockConfig& c = config_.attention;
    GATED_ATTENTION_RETURN_IF_ERROR(rms_norm(x_.data(), layer.input_norm, len, executor));
    const std::array<std::int64_t, 4> cache_extents = {1, config_.max_tokens, c.num_kv_heads,
                                                       c.head_dim};
    cache_length_ = 0;
    ga::BlockForwardArgs<float> args;
    args.x = ga::TensorView<const float, 3>::contiguous(normed_.data(), {1, len, c.hidden_size});
    args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(positions_.data(), {1, len});
    args.cache = {ga::TensorView<float, 4>::contiguous(k_cache_.data(), cache_extents),
                  ga::TensorView<float, 4>::contiguous(v_cache_.data(), cache_extents),
                  &cache_length_};
    args.y = ga::TensorView<float, 3>::contiguous(attn_out_.data(), {1, len, c.hidden_size});
    if (stats) {
      const std::array<std::int64_t, 4> e = {1, len, c.num_kv_heads, c.group_size()};
      const std::size_t offset = static_cast<std::size_t>(l * len * c.num_q_heads);
      args.stats.sink_share = ga::TensorView<float, 4>::contiguous(&stats->sink_share[offset], e);
      args.stats.gate_mean = ga::TensorView<float, 4>::contiguous(&stats->gate_mean[offset], e);
      args.stats.gate_below_0_1 =
          ga::TensorView<float, 4>::contiguous(&stats->gate_below_0_1[offset], e);
      args.stats.max_abs_before =
          ga::TensorView<float, 4>::contiguous(&stats->max_abs_before[offset], e);
      args.stats.max_abs_after =
          ga::TensorView<float, 4>::contiguous(&stats->max_abs_after[offset], e);
    }
    const std::size_t bytes = layer.attention->workspace_size(args, executor.num_workers);
    if (workspace_.size() < bytes) workspace_.resize(bytes);
    GATED_ATTENTION_RETURN_IF_ERROR(layer.attention->forward(
        args, ga::Workspace(workspace_.data(), workspace_.size()), executor));
    for (std::size_t i = 0; i < x_.size(); ++i) x_[i] += attn_out_[i];
    return ga::Status::ok();
  }

  // x += down(silu(gate(n)) * up(n)), n = post_norm(x).
  ga::Status mlp(const Layer& layer, std::int64_t len, const ga::Executor& executor) {
    GATED_ATTENTION_RETURN_IF_ERROR(rms_norm(x_.data(), layer.post_norm, len, executor));
    const auto project = [&](const ga::TensorView<const ga::bf16, 2>& w, const float* in,
                             float* out) {
      const std::int64_t rows_out = w.extents[0], rows_in = w.extents[1];
      return ga::run(ga::LinearArgs<float, ga::bf16>{rows(in, len, rows_in), w, nullptr,
                                                     ga::TensorView<float, 2>::contiguous(
                                                         out, {len, rows_out})},
                     executor);
    };
    GATED_ATTENTION_RETURN_IF_ERROR(project(layer.gate_proj, normed_.data(), gate_.data()));
    GATED_ATTENTION_RETURN_IF_ERROR(project(layer.up_proj, normed_.data(), up_.data()));
    for (std::size_t i = 0; i < gate_.size(); ++i) {
      gate_[i] = gate_[i] / (1.0f + std::exp(-gate_[i])) * up_[i];
    }
    GATED_ATTENTION_RETURN_IF_ERROR(project(layer.down_proj, gate_.data(), attn_out_.data()));
    for (std::size_t i = 0; i < x_.size(); ++i) x_[i] += attn_out_[i];
    return ga::Status::ok();
  }

  ga::io::SafetensorsFile file_;
  ByteLmConfig config_;
  std::vector<float> embed_, final_norm_;
  std::vector<Layer> layers_;
  std::vector<float> x_, normed_, attn_out_, gate_, up_, k_cache_, v_cache_;
  std::vector<std::int64_t> positions_;
  std::vector<std::byte> workspace_;
  std::int64_t cache_length_ = 0;
};

}  // namespace byte_lm
