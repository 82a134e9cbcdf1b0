// The double reference block against transformers' Qwen3NextAttention (f32, the fixture written by
// tools/make_qwen3_next_fixtures.py): prefill of 37 tokens then 3 decode steps through one KV
// cache, and a batch of two sequences of different lengths decoding together. Also checks that
// the comparison is sharp enough to tell each Qwen3-Next detail (zero-centred norm, partial
// rotary, per-head gate packing, the gate itself) from its alternatives.
//
// Tolerance. transformers runs in f32: the 256-long dot products of the projections, the norms,
// RoPE angles computed as float(position) * float(inv_freq), and the softmax each round to f32;
// the reference runs in double and rounds only the KV cache and the output to f32. The two agree
// to about 1e-6 of the output's scale, a few f32 ulps per stage (measured: 4e-7 to 7e-7 per step
// with transformers 5.24 and torch 2.15). Required, per step:
//   max |ours - theirs| <= 1e-5 * max |theirs|                  (kRelativeBound)
//   |ours - theirs| <= kAtol + kRtol * |theirs| per element     (kAtol 1e-5, kRtol 1e-4)
// Outputs are O(1) (max |y| 0.4 to 1.8). A wrong detail moves them by 1e-2 or more (last case).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "qwen3_next_fixture.hpp"
#include "support.hpp"

namespace ga = gated_attention;
using ga::testing::Agreement;
using ga::testing::Qwen3NextFixture;
using ga::testing::Qwen3NextFixtureStep;
using ga::testing::Tensor;

namespace {

constexpr double kRelativeBound = 1e-5;  // max abs error / max |expected|, per step
constexpr double kAtol = 1e-5;
constexpr double kRtol = 1e-4;

bool quiet() {
  return std::getenv("GATED_ATTENTION_TEST_QUIET") != nullptr;
}

void load(Qwen3NextFixture* f) {
  const ga::Status s =
      ga::testing::load_qwen3_next_fixture(ga::testing::qwen3_next_fixture_path(), f);
  INFO(ga::testing::qwen3_next_fixture_path() << ": " << s.message());
  REQUIRE(s.is_ok());
}

// A KV cache the test owns: [sequences, capacity, kv_heads, head_dim] for k and v.
struct OwnedCache {
  Tensor<float, 4> k, v;
  std::vector<std::int64_t> lengths;

  OwnedCache(const ga::BlockConfig& c, std::int64_t sequences, std::int64_t capacity)
      : k({sequences, capacity, c.num_kv_heads, c.head_dim}),
        v({sequences, capacity, c.num_kv_heads, c.head_dim}),
        lengths(static_cast<std::size_t>(sequences), 0) {}

  ga::KvCacheView<float> all() { return {k.view(), v.view(), lengths.data()}; }
  // Sequence s alone, as a cache of one sequence.
  ga::KvCacheView<float> sequence(std::int64_t s) {
    ga::KvCacheView<float> view = all();
    view.k.data += s * view.k.strides[0];
    view.v.data += s * view.v.strides[0];
    view.k.extents[0] = view.v.extents[0] = 1;
    view.lengths += s;
    return view;
  }
};

// Runs one fixture step through the reference block and measures the agreement with transformers.
Agreement run_step(const ga::BlockConfig& c, const ga::BlockWeights<float>& w,
                   const Qwen3NextFixtureStep& step, const ga::KvCacheView<float>& cache) {
  Tensor<float, 3> y(step.hidden_states.extents);
  const ga::Status s =
      ga::reference::block_forward(c, w, step.hidden_states, step.position_ids, cache, y.view());
  INFO(s.message());
  REQUIRE(s.is_ok());
  return ga::testing::measure_agreement(y.data.data(), step.output.data, step.output.num_elements(),
                                        kAtol, kRtol);
}

void report(const char* what, const Agreement& a) {
  if (quiet()) return;
  std::printf(
      "qwen3_next fixture %-22s max|err| %.3e  max|y| %.3f  relative %.3e  tol ratio %.3f\n", what,
      a.max_abs_error, a.max_abs_expected, a.relative_error(), a.worst_ratio);
}

void check(const Agreement& a) {
  INFO("max abs error " << a.max_abs_error << ", max |expected| " << a.max_abs_expected
                        << ", relative " << a.relative_error() << ", atol+rtol ratio "
                        << a.worst_ratio);
  CHECK(a.finite);
  CHECK(a.relative_error() <= kRelativeBound);
  CHECK(a.worst_ratio <= 1.0);
}

// The single-sequence steps (prefill, then decode) through one cache; the agreement per step.
std::vector<Agreement> run_single_sequence(const ga::BlockConfig& c,
                                           const ga::BlockWeights<float>& w,
                                           const Qwen3NextFixture& f) {
  OwnedCache cache(c, 1, 64);
  std::vector<Agreement> agreements;
  for (const Qwen3NextFixtureStep& step : f.steps) {
    agreements.push_back(run_step(c, w, step, cache.all()));
  }
  return agreements;
}

}  // namespace

TEST_CASE("qwen3_next fixture: loads with the expected config and shapes", "[fixture]") {
  Qwen3NextFixture f;
  load(&f);
  const ga::BlockConfig& c = f.config;
  CHECK(c.hidden_size == 256);
  CHECK(c.num_q_heads == 4);
  CHECK(c.num_kv_heads == 2);
  CHECK(c.head_dim == 64);
  CHECK(c.rotary_dim == 16);  // 0.25 of 64
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.rms_norm_eps == 1e-6f);
  CHECK(f.weights.q_proj.extents == std::array<std::int64_t, 2>{2 * 4 * 64, 256});
  CHECK(f.weights.o_proj.extents == std::array<std::int64_t, 2>{256, 4 * 64});
  REQUIRE(f.steps.size() == 4);
  CHECK(f.steps[0].hidden_states.extents == std::array<std::int64_t, 3>{1, 37, 256});
  for (std::size_t s = 1; s < f.steps.size(); ++s) {
    CHECK(f.steps[s].hidden_states.extents == std::array<std::int64_t, 3>{1, 1, 256});
    CHECK(f.steps[s].position_ids(0, 0) == 36 + static_cast<std::int64_t>(s));
  }
  CHECK(f.seq1_prefill.hidden_states.extents == std::array<std::int64_t, 3>{1, 20, 256});
  REQUIRE(f.batch_decode.size() == 3);
  CHECK(f.batch_decode[2].position_ids(0, 0) == 39);
  CHECK(f.batch_decode[2].position_ids(1, 0) == 22);
  // The zero-centred norm weights are non-zero, so (1 + w) is exercised.
  double norm_weight_sum = 0.0;
  for (std::int64_t i = 0; i < c.head_dim; ++i)
    norm_weight_sum += std::fabs(f.weights.maybe_q_norm[i]);
  CHECK(norm_weight_sum > 1.0);
  CHECK(f.versions.find("transformers ") != std::string::npos);
  if (!quiet()) std::printf("qwen3_next fixture: %s\n", f.versions.c_str());
}

TEST_CASE("qwen3_next fixture: reference block matches transformers, prefill then decode",
          "[fixture]") {
  Qwen3NextFixture f;
  load(&f);
  const std::vector<Agreement> agreements = run_single_sequence(f.config, f.weights, f);
  REQUIRE(agreements.size() == f.steps.size());
  for (std::size_t s = 0; s < agreements.size(); ++s) {
    const std::string what = s == 0 ? "prefill 37" : "decode " + std::to_string(s);
    INFO(what);
    report(what.c_str(), agreements[s]);
    check(agreements[s]);
  }
}

TEST_CASE("qwen3_next fixture: reference block matches transformers, batch of two sequences",
          "[fixture]") {
  Qwen3NextFixture f;
  load(&f);
  OwnedCache cache(f.config, 2, 64);
  // Each sequence's prefill alone, into its own slot of the shared cache.
  const Agreement seq0 = run_step(f.config, f.weights, f.steps[0], cache.sequence(0));
  const Agreement seq1 = run_step(f.config, f.weights, f.seq1_prefill, cache.sequence(1));
  REQUIRE(cache.lengths == std::vector<std::int64_t>{37, 20});
  report("batch prefill seq 0", seq0);
  report("batch prefill seq 1", seq1);
  check(seq0);
  check(seq1);
  // Then one token per sequence per call, over caches of different lengths.
  for (std::size_t i = 0; i < f.batch_decode.size(); ++i) {
    const Agreement a = run_step(f.config, f.weights, f.batch_decode[i], cache.all());
    const std::string what = "batch decode " + std::to_string(i);
    INFO(what);
    report(what.c_str(), a);
    check(a);
  }
  CHECK(cache.lengths == std::vector<std::int64_t>{40, 23});
}

TEST_CASE("qwen3_next fixture: each Qwen3-Next detail changed breaks the agreement", "[fixture]") {
  Qwen3NextFixture f;
  load(&f);
  struct Variant {
    const char* what;
    ga::BlockConfig config;
  };
  std::vector<Variant> variants;
  auto add = [&](const char* what, auto&& change) {
    ga::BlockConfig c = f.config;
    change(c);
    variants.push_back({what, c});
  };
  add("plain RMSNorm weight (w, not 1 + w)",
      [](ga::BlockConfig& c) { c.qk_norm = ga::QkNorm::rms; });
  add("RoPE on every dim", [](ga::BlockConfig& c) { c.rotary_dim = c.head_dim; });
  add("no RoPE", [](ga::BlockConfig& c) { c.rotary_dim = 0; });
  add("rope_theta 1e6", [](ga::BlockConfig& c) { c.rope_theta = 1e6; });
  add("grouped q/gate layout",
      [](ga::BlockConfig& c) { c.q_gate_layout = ga::QGateLayout::grouped; });
  add("SiLU gate", [](ga::BlockConfig& c) { c.gate_activation = ga::GateActivation::silu; });
  add("scale 1/head_dim",
      [](ga::BlockConfig& c) { c.scale = 1.0f / static_cast<float>(c.head_dim); });
  for (const Variant& v : variants) {
    INFO(v.what);
    const std::vector<Agreement> agreements = run_single_sequence(v.config, f.weights, f);
    double worst = 0.0;
    for (const Agreement& a : agreements) worst = std::max(worst, a.relative_error());
    if (!quiet()) std::printf("qwen3_next fixture with %s: relative error %.3g\n", v.what, worst);
    CHECK(worst > 1e-2);
  }
}
