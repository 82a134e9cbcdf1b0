// Tensor parallelism over heads (block/head_shard.hpp): the sum of the shards' outputs equals the
// unsharded block, step after step through each shard's own KV cache, in every q/gate layout and
// gate mode, with even and uneven shards; bad shards are a Status.
//
// Tolerance: the block test's (test_block.cpp), |y - y_ref| <= 1e-4 + 1e-3 |y_ref|: the shards
// sum o_proj's products in another order than one product over all heads.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "block_model.hpp"
#include "support.hpp"

namespace ga = gated_attention;
using namespace ga::testing;

namespace {

constexpr double kAtol = 1e-4, kRtol = 1e-3;

// y of one step of `len` tokens at `start` (one sequence), through `cache`.
std::vector<float> step(const ga::GatedMultiHeadAttention<float>& block,
                        const std::vector<float>& x, std::int64_t len, std::int64_t start,
                        const ga::KvCacheView<float>& cache, const ga::Executor& executor) {
  const std::int64_t hid = block.config().hidden_size;
  const Positions pos = positions_from(1, len, start);
  std::vector<float> y(static_cast<std::size_t>(len * hid));
  ga::BlockForwardArgs<float> args;
  args.x = ga::TensorView<const float, 3>::contiguous(x.data() + start * hid, {1, len, hid});
  args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {1, len});
  args.cache = cache;
  args.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, len, hid});
  std::vector<std::byte> ws(block.workspace_size(args, executor));
  const ga::Status s = block.forward(args, ga::Workspace(ws.data(), ws.size()), executor);
  INFO(s.message());
  REQUIRE(s.is_ok());
  return y;
}

// hidden 32, 6 query heads over 3 KV heads, head_dim 8.
ga::BlockConfig three_kv_heads(ga::GateMode mode, ga::QGateLayout layout) {
  ga::BlockConfig c = small_config(mode, layout);
  c.num_q_heads = 6;
  c.num_kv_heads = 3;
  return c;
}

}  // namespace

TEST_CASE("Head shards sum to the unsharded block in every layout and gate mode",
          "[block][shard]") {
  Rng rng = make_rng(3510);
  ga::ThreadPool pool(2);
  const std::vector<std::vector<ga::HeadShard>> splits = {
      {{0, 3}}, {{0, 1}, {1, 2}}, {{0, 2}, {2, 1}}, {{0, 1}, {1, 1}, {2, 1}}};
  for (ga::QGateLayout layout : kLayouts) {
    for (ga::GateMode mode :
         {ga::GateMode::none, ga::GateMode::headwise, ga::GateMode::elementwise}) {
      const ga::BlockConfig c = three_kv_heads(mode, layout);
      const Model<float> m = make_model<float>(c, rng);
      const ga::BlockWeights<float> w = m.weights();
      const std::int64_t prefill = 5, total = 8, hid = c.hidden_size;
      const std::vector<float> x = random_vector<float>(rng, total * hid, -1.0, 1.0);
      const ga::GatedMultiHeadAttention<float> whole(c, w);
      Cache<float> whole_cache(c, 1, total);
      std::vector<std::vector<float>> expected;
      expected.push_back(step(whole, x, prefill, 0, whole_cache.view(), pool.executor()));
      for (std::int64_t t = prefill; t < total; ++t) {
        expected.push_back(step(whole, x, 1, t, whole_cache.view(), pool.executor()));
      }
      for (const std::vector<ga::HeadShard>& shards : splits) {
        INFO("layout " << name_of(layout) << ", gate " << name_of(mode) << ", shards "
                       << shards.size());
        REQUIRE(ga::validate_head_shards(c, shards.data(), std::int64_t(shards.size())).is_ok());
        std::vector<std::vector<float>> sum(expected.size());
        for (const ga::HeadShard& shard : shards) {
          ga::BlockConfig sc;
          ga::BlockWeights<float> sw;
          const ga::Status s = ga::shard_heads(c, w, shard, &sc, &sw);
          INFO(s.message());
          REQUIRE(s.is_ok());
          CHECK(sc.num_kv_heads == shard.kv_count);
          const ga::GatedMultiHeadAttention<float> part(sc, sw);
          Cache<float> cache(sc, 1, total);
          for (std::size_t i = 0; i < expected.size(); ++i) {
            const std::int64_t start = i == 0 ? 0 : prefill + std::int64_t(i) - 1;
            const std::vector<float> y =
                step(part, x, i == 0 ? prefill : 1, start, cache.view(), ga::Executor{});
            sum[i].resize(y.size(), 0.0f);
            for (std::size_t k = 0; k < y.size(); ++k) sum[i][k] += y[k];
          }
        }
        for (std::size_t i = 0; i < expected.size(); ++i) {
          CHECK(max_tolerance_ratio(sum[i], expected[i], kAtol, kRtol) <= 1.0);
        }
      }
    }
  }
}

TEST_CASE("Head shards that do not cover the heads once are a Status", "[block][shard]") {
  const ga::BlockConfig c = three_kv_heads(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  Rng rng = make_rng(3511);
  const Model<float> m = make_model<float>(c, rng);
  const auto message = [&](std::vector<ga::HeadShard> shards) {
    return std::string(
        ga::validate_head_shards(c, shards.data(), std::int64_t(shards.size())).message());
  };
  CHECK(message({{0, 1}, {2, 1}}) == "shards: KV head 1 is in no shard");
  CHECK(message({{0, 2}, {1, 2}}) == "shards: KV head 1 is in shards 0 and 1");
  CHECK(message({}) == "shards: KV head 0 is in no shard");
  CHECK(message({{0, 3}, {3, 1}}).find("shard: KV heads [3, 4)") != std::string::npos);
  ga::BlockConfig sc;
  ga::BlockWeights<float> sw;
  const ga::Status empty = ga::shard_heads(c, m.weights(), {1, 0}, &sc, &sw);
  CHECK(contains(empty, "expected a non-empty range within [0, 3)"));
  const ga::Status past = ga::shard_heads(c, m.weights(), {2, 2}, &sc, &sw);
  CHECK(contains(past, "shard: KV heads [2, 4)"));
}
