// GatedMultiHeadAttention (f32) against transformers' Qwen3NextAttention (f32), on the fixture of
// tests/data (see test_qwen3_next_fixture.cpp for how it was made and for the tolerance, which is
// the same here): prefill then decode through one cache, and two sequences of different lengths
// decoding as one batch; every ISA path, 1 and 2 workers.
#include <catch2/catch.hpp>

#include <cstdint>
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

}  // namespace

TEST_CASE("Block matches transformers' Qwen3NextAttention on every path", "[block][fixture]") {
  Qwen3NextFixture f;
  const ga::Status loaded =
      ga::testing::load_qwen3_next_fixture(ga::testing::qwen3_next_fixture_path(), &f);
  INFO(loaded.message());
  REQUIRE(loaded.is_ok());
  const ga::BlockConfig& c = f.config;
  const ga::GatedMultiHeadAttention<float> block(c, f.weights);
  ga::ThreadPool pool(2);

  for (const ga::Isa isa : ga::testing::available_isas()) {
    ga::set_isa_limit(isa);
    for (const ga::Executor& executor : {ga::Executor{}, pool.executor()}) {
      INFO("path " << ga::to_string(isa) << ", workers " << executor.num_workers);
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
  ga::clear_isa_limit();
}
