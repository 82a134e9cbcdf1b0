// GatedMultiHeadAttention (f32) against transformers' Qwen3NextAttention (f32), on the fixture of
// tests/data (see test_qwen3_next_fixture.cpp for how it was made and for the tolerance, which is
// the same here): prefill then decode through one cache, and two sequences of different lengths
// decoding as one batch; every ISA path, 1 and 2 workers. And the block with a bf16, f16 or int8
// cache, or with bf16 weights, within the format's own effect on the output (computed by the
// reference block).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "qwen3_next_fixture.hpp"
#include "support.hpp"

namespace ga = gated_attention;
using ga::testing::Qwen3NextFixture;
using ga::testing::Qwen3NextFixtureStep;
using ga::testing::Tensor;

namespace {

constexpr double kRelativeBound = 1e-5, kAtol = 1e-5, kRtol = 1e-4;

// Runs one step (all of the cache's sequences) and checks it against transformers.
void check_step(const ga::GatedMultiHeadAttention<float>& block, const Qwen3NextFixtureStep& step,
                const ga::KvCacheView<float>& cache, const ga::Executor& executor) {
  Tensor<float, 3> y(step.output.extents);
  ga::BlockForwardArgs<float> args;
  args.x = step.hidden_states;
  args.positions = step.position_ids;
  args.cache = cache;
  args.y = y.view();
  std::vector<std::byte> ws(block.workspace_size(args, executor));
  const ga::Status s = block.forward(args, ga::Workspace(ws.data(), ws.size()), executor);
  INFO(s.message());
  REQUIRE(s.is_ok());
  const ga::testing::Agreement a = ga::testing::measure_agreement(
      y.data.data(), step.output.data, step.output.num_elements(), kAtol, kRtol);
  INFO("position " << step.position_ids(0, 0) << ": max abs error " << a.max_abs_error
                   << ", relative " << a.relative_error() << ", atol+rtol ratio " << a.worst_ratio);
  CHECK(a.finite);
  CHECK(a.relative_error() <= kRelativeBound);
  CHECK(a.worst_ratio <= 1.0);
}

// A cache of one sequence in E (int8 with its row scales).
template <class E>
struct TypedCache {
  Tensor<E, 4> k, v;
  Tensor<float, 3> k_scales, v_scales;
  std::vector<std::int64_t> lengths = {0};

  TypedCache(const ga::BlockConfig& c, std::int64_t capacity)
      : k({1, capacity, c.num_kv_heads, c.head_dim}),
        v({1, capacity, c.num_kv_heads, c.head_dim}),
        k_scales({std::is_same_v<E, std::int8_t> ? 1 : 0, capacity, c.num_kv_heads}),
        v_scales({std::is_same_v<E, std::int8_t> ? 1 : 0, capacity, c.num_kv_heads}) {}
  ga::KvCacheView<E> view() {
    ga::KvCacheView<E> view{k.view(), v.view(), lengths.data()};
    if constexpr (std::is_same_v<E, std::int8_t>) {
      view.maybe_k_scales = k_scales.view();
      view.maybe_v_scales = v_scales.view();
    }
    return view;
  }
};

// y of one step through the reference block with `cache` (and the fixture's weights, or others).
template <class E, class W = float>
Tensor<float, 3> reference_step(const Qwen3NextFixture& f, const Qwen3NextFixtureStep& step,
                                const ga::KvCacheView<E>& cache,
                                const ga::BlockWeights<float, W>* weights = nullptr) {
  Tensor<float, 3> y(step.output.extents);
  ga::Status s;
  if constexpr (std::is_same_v<W, float>) {
    if (weights == nullptr) weights = &f.weights;
  }
  s = ga::reference::block_forward(f.config, *weights, step.hidden_states, step.position_ids, cache,
                                   y.view());
  INFO(s.message());
  REQUIRE(s.is_ok());
  return y;
}

// The block with an E cache, prefill then decode, on every path. Per element, by the triangle
// inequality over the reference block with the same cache and with an f32 one:
//   |ours - theirs| <= (kernel error: kAtol + kRtol |theirs|)
//                      + |reference(E cache) - reference(f32 cache)|   (the format's effect)
//                      + (reference vs transformers: kAtol + kRtol |theirs|)
// The format's effect itself must be present (> 0) and within `format_bound` of max |y|: K and V
// rounded with relative error u move an output by about u |v| through V and u |logit| through
// the weights; logits here are O(1), so a few u (u = 2^-8 bf16, 2^-11 f16, 1/254 of the row's
// largest element int8).
template <class E, class W = float>
void check_typed_cache(const Qwen3NextFixture& f,
                       const ga::GatedMultiHeadAttention<float, E, W>& block, double format_bound) {
  for (const ga::Isa isa : ga::testing::available_isas()) {
    ga::set_isa_limit(isa);
    TypedCache<E> ours(f.config, 64), theirs(f.config, 64);
    TypedCache<float> exact(f.config, 64);
    for (const Qwen3NextFixtureStep& step : f.steps) {
      const std::int64_t position = step.position_ids(0, 0);
      INFO("path " << ga::to_string(isa) << ", position " << position);
      Tensor<float, 3> y(step.output.extents);
      ga::BlockForwardArgs<float, E> args;
      args.x = step.hidden_states;
      args.positions = step.position_ids;
      args.cache = ours.view();
      args.y = y.view();
      std::vector<std::byte> ws(block.workspace_size(args, 1));
      const ga::Status s = block.forward(args, ga::Workspace(ws.data(), ws.size()));
      INFO(s.message());
      REQUIRE(s.is_ok());
      const Tensor<float, 3> with_format = reference_step(f, step, theirs.view(), &block.weights());
      const Tensor<float, 3> without = reference_step(f, step, exact.view());
      double effect = 0.0, max_y = 0.0, worst = 0.0;
      for (std::size_t i = 0; i < y.data.size(); ++i) {
        effect = std::max(effect, std::fabs(double{with_format.data[i]} - without.data[i]));
        max_y = std::max(max_y, std::fabs(double{step.output.data[i]}));
      }
      for (std::size_t i = 0; i < y.data.size(); ++i) {
        const double theirs_i = step.output.data[i];
        const double tol = 2.0 * (kAtol + kRtol * std::fabs(theirs_i)) +
                           std::fabs(double{with_format.data[i]} - without.data[i]);
        worst = std::max(worst, std::fabs(y.data[i] - theirs_i) / tol);
      }
      INFO("format effect " << effect << " of max |y| " << max_y << ", worst ratio " << worst);
      CHECK(worst <= 1.0);
      CHECK(effect > 0.0);
      CHECK(effect <= format_bound * max_y);
    }
  }
  ga::clear_isa_limit();
}

// The fixture's projection weights and biases rounded to bf16 (the QK norm weights stay f32).
struct Bf16Weights {
  std::vector<std::vector<ga::bf16>> storage;
  ga::BlockWeights<float, ga::bf16> views;

  explicit Bf16Weights(const ga::BlockWeights<float>& w) {
    views.q_proj = matrix(w.q_proj);
    views.maybe_gate_proj = matrix(w.maybe_gate_proj);
    views.k_proj = matrix(w.k_proj);
    views.v_proj = matrix(w.v_proj);
    views.o_proj = matrix(w.o_proj);
    views.maybe_q_bias = vector(w.maybe_q_bias, w.q_proj.extents[0]);
    views.maybe_gate_bias = vector(w.maybe_gate_bias, w.maybe_gate_proj.extents[0]);
    views.maybe_k_bias = vector(w.maybe_k_bias, w.k_proj.extents[0]);
    views.maybe_v_bias = vector(w.maybe_v_bias, w.v_proj.extents[0]);
    views.maybe_o_bias = vector(w.maybe_o_bias, w.o_proj.extents[0]);
    views.maybe_q_norm = w.maybe_q_norm;
    views.maybe_k_norm = w.maybe_k_norm;
  }
  ga::TensorView<const ga::bf16, 2> matrix(const ga::TensorView<const float, 2>& m) {
    if (m.data == nullptr) return {};
    std::vector<ga::bf16>& out = storage.emplace_back();
    for (std::int64_t r = 0; r < m.extents[0]; ++r) {
      for (std::int64_t c = 0; c < m.extents[1]; ++c) out.push_back(ga::bf16(m(r, c)));
    }
    return ga::TensorView<const ga::bf16, 2>::contiguous(out.data(), m.extents);
  }
  const ga::bf16* vector(const float* v, std::int64_t n) {
    if (v == nullptr) return nullptr;
    std::vector<ga::bf16>& out = storage.emplace_back(v, v + n);
    return out.data();
  }
};

}  // namespace

TEST_CASE("Block with bf16 weights matches transformers within the format's effect",
          "[block][fixture]") {
  Qwen3NextFixture f;
  const ga::Status loaded =
      ga::testing::load_qwen3_next_fixture(ga::testing::qwen3_next_fixture_path(), &f);
  INFO(loaded.message());
  REQUIRE(loaded.is_ok());
  const Bf16Weights weights(f.weights);
  // Weights rounded with relative error 2^-9 move each projection's outputs by at most that share
  // of their magnitude; through q, k (the logits), v, the gate and o_proj, a few of them: bound
  // 8 u max|y| with u = 2^-8.
  check_typed_cache(f, ga::GatedMultiHeadAttention<float, float, ga::bf16>(f.config, weights.views),
                    8.0 * 0x1p-8);
}

TEST_CASE("Block with bf16, f16 and int8 caches matches transformers within the format's effect",
          "[block][fixture][kv_types]") {
  Qwen3NextFixture f;
  const ga::Status loaded =
      ga::testing::load_qwen3_next_fixture(ga::testing::qwen3_next_fixture_path(), &f);
  INFO(loaded.message());
  REQUIRE(loaded.is_ok());
  check_typed_cache(f, ga::GatedMultiHeadAttention<float, ga::bf16>(f.config, f.weights),
                    8.0 * 0x1p-8);
  check_typed_cache(f, ga::GatedMultiHeadAttention<float, ga::f16>(f.config, f.weights),
                    8.0 * 0x1p-11);
  check_typed_cache(f, ga::GatedMultiHeadAttention<float, std::int8_t>(f.config, f.weights),
                    8.0 / 254.0);
}

TEST_CASE("Block matches transformers' Qwen3NextAttention on every path", "[block][fixture]") {
  Qwen3NextFixture f;
  const ga::Status loaded =
      ga::testing::load_qwen3_next_fixture(ga::testing::qwen3_next_fixture_path(), &f);
  INFO(loaded.message());
  REQUIRE(loaded.is_ok());
  const ga::BlockConfig& c = f.config;
  ga::ThreadPool pool(2);

  for (const ga::Isa isa : ga::testing::available_isas()) {
    ga::set_isa_limit(isa);
    for (const ga::Executor& executor : {ga::Executor{}, pool.executor()}) {
      for (const ga::testing::LinearBackend& backend : ga::testing::linear_backends()) {
        INFO("path " << ga::to_string(isa) << ", workers " << executor.num_workers
                     << ", projections " << backend.name);
        const ga::GatedMultiHeadAttention<float> block(c, f.weights, backend.hook);
        const std::int64_t capacity = 64;
        Tensor<float, 4> k({2, capacity, c.num_kv_heads, c.head_dim});
        Tensor<float, 4> v({2, capacity, c.num_kv_heads, c.head_dim});
        std::vector<std::int64_t> lengths = {0, 0};
        ga::KvCacheView<float> both{k.view(), v.view(), lengths.data()};
        ga::KvCacheView<float> first = both, second = both;
        first.k.extents[0] = first.v.extents[0] = 1;
        second.k =
            ga::TensorView<float, 4>(k.data.data() + k.view().strides[0],
                                     {1, capacity, c.num_kv_heads, c.head_dim}, k.view().strides);
        second.v =
            ga::TensorView<float, 4>(v.data.data() + v.view().strides[0],
                                     {1, capacity, c.num_kv_heads, c.head_dim}, v.view().strides);
        second.lengths = lengths.data() + 1;

        // Sequence 0: prefill, then decode steps, alone.
        for (const Qwen3NextFixtureStep& step : f.steps) check_step(block, step, first, executor);
        CHECK(lengths[0] == 37 + static_cast<std::int64_t>(f.batch_decode.size()));

        // The batch: sequence 0 again from its prefill, sequence 1 prefilled, then both decode.
        lengths = {0, 0};
        check_step(block, f.steps[0], first, executor);
        check_step(block, f.seq1_prefill, second, executor);
        for (const Qwen3NextFixtureStep& step : f.batch_decode) {
          check_step(block, step, both, executor);
        }
        CHECK(lengths[1] == f.seq1_prefill.hidden_states.extents[1] +
                                static_cast<std::int64_t>(f.batch_decode.size()));
      }
    }
  }
  ga::clear_isa_limit();
}
