// The trained byte-level LMs (tools/train_sink_pair.py) run through the library as a whole model
// (examples/byte_lm.hpp): logits and the attention kernels' statistics against PyTorch's, saved
// at export from the same bf16 weights.
#include <catch2/catch.hpp>

#include "byte_lm.hpp"
#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace ga = gated_attention;

namespace {

// PyTorch ran the same weights in f32 with the attention in f64; the library accumulates in f32
// in another order, so the logits differ by f32 rounding carried through four layers: a few
// 2^-24 relative per operation, compounded over the layers. The bound: 2^-13 of the largest
// |logit|.
constexpr double kLogitTolerance = 1.0 / 8192;
// Probabilities and mean gate scores: absolute, the same f32 rounding.
constexpr double kShareTolerance = 1e-4;
// Tokens the paths other than the widest run (the model is causal: a prefix's logits are the
// first rows of the whole row's); the widest runs the whole row on both executors.
constexpr std::size_t kPrefixTokens = 64;

// Rows of the statistics compared: all that PyTorch saved, or GATED_ATTENTION_FIXTURE_ROWS (the
// sanitizer and qemu presets set 1).
std::int64_t fixture_rows(std::int64_t saved) {
  if (const char* env = std::getenv("GATED_ATTENTION_FIXTURE_ROWS")) {
    return std::max<std::int64_t>(1, std::min<std::int64_t>(saved, std::strtoll(env, nullptr, 10)));
  }
  return saved;
}

std::vector<std::string> model_paths() {
  std::vector<std::string> paths;
  for (const char* gate : {"none", "elementwise", "headwise"}) {
    const std::string path =
        std::string(GATED_ATTENTION_TEST_DATA_DIR) + "/byte_lm_" + gate + ".safetensors";
    if (std::ifstream(path)) paths.push_back(path);
  }
  return paths;
}

std::vector<std::int32_t> validation_row(const byte_lm::ByteLm& model, std::int64_t r) {
  ga::TensorView<const std::uint8_t, 2> rows;
  REQUIRE(model.file().view("validation.tokens", &rows).is_ok());
  return byte_lm::sequence_of(rows, r);
}

void load(const std::string& path, byte_lm::ByteLm* model) {
  const ga::Status s = model->load(path);
  INFO(path << ": " << s.message());
  REQUIRE(s.is_ok());
}

// A [layers, rows, len, heads] statistic saved by PyTorch against ours for row r.
template <class Check>
void compare_statistic(const byte_lm::ByteLm& model, const char* name,
                       const std::vector<float>& ours, const byte_lm::ByteLmStatistics& s,
                       std::int64_t r, Check&& check) {
  ga::TensorView<const float, 4> expected;
  REQUIRE(model.file().view(std::string("expected.") + name, &expected).is_ok());
  REQUIRE(expected.extents[0] == s.layers);
  REQUIRE(expected.extents[2] == s.len);
  REQUIRE(expected.extents[3] == s.heads);
  for (std::int64_t l = 0; l < s.layers; ++l) {
    for (std::int64_t t = 0; t < s.len; ++t) {
      for (std::int64_t h = 0; h < s.heads; ++h) {
        check(expected(l, r, t, h), s.at(ours, l, t, h));
      }
    }
  }
}

}  // namespace

TEST_CASE("Byte LMs: the library's logits match PyTorch's on every path", "[byte_lm][fixture]") {
  const std::vector<std::string> paths = model_paths();
  REQUIRE(paths.size() >= 2);  // the gated and the ungated model are committed
  ga::ThreadPool pool(2);
  for (const std::string& path : paths) {
    byte_lm::ByteLm model;
    load(path, &model);
    ga::TensorView<const float, 2> expected;
    REQUIRE(model.file().view("expected.logits", &expected).is_ok());
    const std::vector<std::int32_t> tokens = validation_row(model, 0);
    REQUIRE(expected.extents[0] == static_cast<std::int64_t>(tokens.size()));
    REQUIRE(expected.extents[1] == byte_lm::kVocab);
    double max_logit = 0.0;
    for (std::int64_t i = 0; i < expected.extents[0] * expected.extents[1]; ++i) {
      max_logit = std::max(max_logit, std::fabs(double{expected.data[i]}));
    }
    const std::vector<ga::Isa> isas = ga::testing::available_isas();
    for (const ga::Isa isa : isas) {
      ga::set_isa_limit(isa);
      const bool widest = isa == isas.back();
      const std::vector<std::int32_t> run(tokens.begin(),
                                          widest ? tokens.end() : tokens.begin() + kPrefixTokens);
      const std::vector<ga::Executor> executors =
          widest ? std::vector<ga::Executor>{ga::Executor{}, pool.executor()}
                 : std::vector<ga::Executor>{ga::Executor{}};
      for (const ga::Executor& executor : executors) {
        std::vector<float> logits(run.size() * byte_lm::kVocab);
        const ga::Status s = model.forward(run, logits.data(), nullptr, executor);
        INFO(path << ", path " << ga::to_string(isa) << ", workers " << executor.num_workers
                  << ", tokens " << run.size() << ": " << s.message());
        REQUIRE(s.is_ok());
        double worst = 0.0;
        for (std::size_t i = 0; i < logits.size(); ++i) {
          worst = std::max(worst, std::fabs(double{logits[i]} - expected.data[i]));
        }
        INFO("max |logit| " << max_logit << ", max |difference| " << worst);
        CHECK(worst <= kLogitTolerance * max_logit);
      }
    }
    ga::clear_isa_limit();
  }
}

TEST_CASE("Byte LMs: the kernels' statistics match PyTorch's", "[byte_lm][fixture]") {
  ga::ThreadPool pool(2);
  for (const std::string& path : model_paths()) {
    byte_lm::ByteLm model;
    load(path, &model);
    const ga::BlockConfig& c = model.config().attention;
    ga::TensorView<const float, 2> hidden;
    REQUIRE(model.file().view("expected.max_abs_hidden", &hidden).is_ok());
    for (std::int64_t r = 0; r < fixture_rows(hidden.extents[1]); ++r) {
      const std::vector<std::int32_t> tokens = validation_row(model, r);
      std::vector<float> logits(tokens.size() * byte_lm::kVocab);
      byte_lm::ByteLmStatistics s;
      REQUIRE(model.forward(tokens, logits.data(), &s, pool.executor()).is_ok());
      INFO(path << ", row " << r);
      for (std::int64_t l = 0; l <= s.layers; ++l) {
        CHECK(std::fabs(s.max_abs_hidden[l] - hidden(l, r)) <= 1e-5 * hidden(l, r));
      }
      const auto close = [](double tolerance) {
        return [tolerance](float theirs, float ours) {
          CHECK(std::fabs(double{theirs} - ours) <= tolerance);
        };
      };
      compare_statistic(model, "sink_share", s.sink_share, s, r, close(kShareTolerance));
      compare_statistic(model, "gate_mean", s.gate_mean, s, r, close(kShareTolerance));
      // max |output| per head: relative, as the values are O(1) to O(100).
      const auto relative = [](float theirs, float ours) {
        CHECK(std::fabs(double{theirs} - ours) <= 1e-4 * std::max(1.0, std::fabs(double{theirs})));
      };
      compare_statistic(model, "max_abs_before", s.max_abs_before, s, r, relative);
      compare_statistic(model, "max_abs_after", s.max_abs_after, s, r, relative);
      // A count over the head's dims: a score within rounding of 0.1 may fall on either side, which
      // moves the fraction by 1/head_dim; at most one such score per head here.
      long long moved = 0, total = 0;
      compare_statistic(model, "gate_below_0_1", s.gate_below_0_1, s, r,
                        [&](float theirs, float ours) {
                          const double d = std::fabs(double{theirs} - ours);
                          CHECK(d <= 1.0 / static_cast<double>(c.head_dim) + 1e-6);
                          moved += d > 1e-6;
                          ++total;
                        });
      CHECK(moved * 1000 <= total);
    }
  }
}

TEST_CASE("Byte LMs: bad tokens and lengths are a Status", "[byte_lm][bad_input]") {
  const std::vector<std::string> paths = model_paths();
  REQUIRE(!paths.empty());
  byte_lm::ByteLm model;
  load(paths.front(), &model);
  std::vector<float> logits((model.config().max_tokens + 1) * byte_lm::kVocab);
  const auto message = [&](const std::vector<std::int32_t>& tokens) {
    return std::string(model.forward(tokens, logits.data(), nullptr, {}).message());
  };
  CHECK(message({byte_lm::kBos, 300}).find("tokens: element 1: expected 0..256, got 300") !=
        std::string::npos);
  CHECK(message({-1}).find("element 0") != std::string::npos);
  CHECK(message({}).find("tokens: dim 0 (len)") != std::string::npos);
  CHECK(message(std::vector<std::int32_t>(model.config().max_tokens + 1, 65))
            .find("tokens: dim 0 (len)") != std::string::npos);

  byte_lm::ByteLm missing;
  CHECK(ga::testing::contains(missing.load("/nonexistent/byte_lm.safetensors"), "cannot open"));
}
