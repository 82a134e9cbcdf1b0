// Context parallelism in the block (ContextParallel): ranks, here threads of one process, each hold
// a disjoint part of every sequence's keys; each runs the same call, exchanges its part with the
// others and merges. Every rank's y must equal the unsplit block's, step after step: prefill and
// chunks of different sizes per sequence (packed), then decode, the appending rank moving from step
// to step (so that some ranks start with empty parts), in every gate mode and q/gate layout,
// through forward() and through run_phase() with two workers per rank.
//
// Tolerance: the block test's (test_block.cpp), |y - y_ref| <= 1e-4 + 1e-3 |y_ref|: the merge sums
// the parts' outputs in another order than one softmax over all keys.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "block_model.hpp"
#include "support.hpp"

namespace ga = gated_attention;
using namespace ga::testing;

namespace {

constexpr double kAtol = 1e-4, kRtol = 1e-3;

// The exchange of a group of ranks (threads): each posts its part and waits for all of them.
struct Group {
  explicit Group(int n) : parts(static_cast<std::size_t>(n)) {}

  std::mutex mutex;
  std::condition_variable all_posted;
  int posted = 0;
  bool fail = false;  // every exchange returns an error instead
  std::vector<ga::AttentionPart<float>> parts;
};

struct Rank {
  Group* group;
  int rank;

  static ga::Status exchange(void* context, const ga::AttentionPart<float>& local,
                             const ga::AttentionPart<float>** parts, std::int64_t* num_parts) {
    const Rank& self = *static_cast<const Rank*>(context);
    Group& g = *self.group;
    std::unique_lock<std::mutex> lock(g.mutex);
    g.parts[static_cast<std::size_t>(self.rank)] = local;
    ++g.posted;
    g.all_posted.notify_all();
    g.all_posted.wait(lock, [&] { return g.posted == static_cast<int>(g.parts.size()); });
    if (g.fail) return ga::Status::error(ga::StatusCode::invalid_argument, "peer lost");
    *parts = g.parts.data();
    *num_parts = static_cast<std::int64_t>(g.parts.size());
    return ga::Status::ok();
  }
};

// New tokens per sequence at each step (packed): prefill, a chunk, decode, one sequence idle.
const std::vector<std::vector<std::int32_t>> kSteps = {{5, 3}, {4, 2}, {1, 1}, {1, 1}, {1, 0}};
constexpr std::int64_t kCapacity = 12;

struct Step {
  std::vector<float> x;
  Positions positions;
  std::vector<std::int32_t> cu;
  std::int64_t total = 0;
};

Step make_step(const ga::BlockConfig& c, const std::vector<std::int32_t>& counts,
               const std::vector<std::int64_t>& held, Rng& rng) {
  Step st;
  st.cu.push_back(0);
  for (std::size_t s = 0; s < counts.size(); ++s) {
    for (std::int32_t t = 0; t < counts[s]; ++t) st.positions.push_back(held[s] + t);
    st.cu.push_back(st.cu.back() + counts[s]);
  }
  st.total = st.cu.back();
  st.x = random_vector<float>(rng, st.total * c.hidden_size, -1.0, 1.0);
  return st;
}

template <class KvT>
ga::BlockForwardArgs<float, KvT> step_args(const ga::BlockConfig& c, const Step& st,
                                           const ga::KvCacheView<KvT>& cache,
                                           std::vector<float>& y) {
  const std::int64_t hid = c.hidden_size;
  y.assign(static_cast<std::size_t>(st.total * hid), 0.0f);
  ga::BlockForwardArgs<float, KvT> args;
  args.x = ga::TensorView<const float, 3>::contiguous(st.x.data(), {1, st.total, hid});
  args.positions =
      ga::TensorView<const std::int64_t, 2>::contiguous(st.positions.data(), {1, st.total});
  args.cache = cache;
  args.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, st.total, hid});
  args.maybe_cu_seqlens = ga::TensorView<const std::int32_t, 1>::contiguous(
      st.cu.data(), {static_cast<std::int64_t>(st.cu.size())});
  return args;
}

// One rank's call: forward() on `executor`, or run_phase() with two workers in turn.
template <class KvT>
ga::Status run_rank(const ga::GatedMultiHeadAttention<float, KvT>& block,
                    const ga::BlockForwardArgs<float, KvT>& args, std::vector<std::byte>& ws,
                    const ga::Executor& executor, bool phases) {
  if (!phases) {
    ws.resize(block.workspace_size(args, executor));
    return block.forward(args, ga::Workspace(ws.data(), ws.size()), executor);
  }
  ws.resize(block.workspace_size(args, 2));
  for (int phase = 0; phase < block.num_phases(); ++phase) {
    for (int ith = 0; ith < 2; ++ith) {
      const ga::Status s =
          block.run_phase(args, ga::Workspace(ws.data(), ws.size()), phase, ith, 2);
      if (!s.is_ok()) return s;
    }
  }
  return ga::Status::ok();
}

// Runs kSteps over `ranks` ranks and the unsplit block, the cache in KvT; returns the worst
// tolerance ratio.
template <class KvT = float>
double context_parallel_steps(const ga::BlockConfig& c, int ranks, bool phases,
                              std::uint64_t salt) {
  Rng rng = make_rng(salt);
  const Model<float> m = make_model<float>(c, rng);
  const ga::GatedMultiHeadAttention<float, KvT> block(c, m.weights());
  Cache<KvT> whole(c, 2, kCapacity);
  std::vector<Cache<KvT>> parts(static_cast<std::size_t>(ranks), Cache<KvT>(c, 2, kCapacity));
  ga::ThreadPool pool(2);
  double worst = 0.0;
  for (std::size_t i = 0; i < kSteps.size(); ++i) {
    const Step st = make_step(c, kSteps[i], whole.lengths, rng);
    std::vector<float> expected;
    std::vector<std::byte> ws;
    REQUIRE(run_rank(block, step_args(c, st, whole.view(), expected), ws, {}, false).is_ok());
    Group group(ranks);
    std::vector<Rank> contexts;
    for (int r = 0; r < ranks; ++r) contexts.push_back({&group, r});
    std::vector<std::vector<float>> ys(static_cast<std::size_t>(ranks));
    std::vector<std::vector<std::byte>> workspaces(static_cast<std::size_t>(ranks));
    std::vector<ga::Status> statuses(static_cast<std::size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      const auto u = static_cast<std::size_t>(r);
      ga::BlockForwardArgs<float, KvT> args = step_args(c, st, parts[u].view(), ys[u]);
      args.context_parallel = {&Rank::exchange, &contexts[u], r == static_cast<int>(i) % ranks};
      threads.emplace_back([&, args, u] {
        const ga::Executor executor = u == 0 ? pool.executor() : ga::Executor{};
        statuses[u] = run_rank(block, args, workspaces[u], executor, phases);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < ranks; ++r) {
      const auto u = static_cast<std::size_t>(r);
      INFO("step " << i << ", rank " << r << " of " << ranks << ": " << statuses[u].message());
      REQUIRE(statuses[u].is_ok());
      worst = std::max(worst, max_tolerance_ratio(ys[u], expected, kAtol, kRtol));
    }
  }
  // The parts hold every key once.
  for (std::size_t s = 0; s < 2; ++s) {
    std::int64_t held = 0;
    for (const Cache<KvT>& part : parts) held += part.lengths[s];
    CHECK(held == whole.lengths[s]);
  }
  return worst;
}

}  // namespace

TEST_CASE("Context parallel block: the ranks' merged parts equal the unsplit block",
          "[block][context_parallel]") {
  std::uint64_t salt = 3530;
  for (ga::QGateLayout layout : kLayouts) {
    for (ga::GateMode mode :
         {ga::GateMode::none, ga::GateMode::headwise, ga::GateMode::elementwise}) {
      if (mode == ga::GateMode::none && layout != ga::QGateLayout::qwen3_next) continue;
      const ga::BlockConfig c = small_config(mode, layout);
      for (int ranks : {1, 2, 3}) {
        for (bool phases : {false, true}) {
          INFO("layout " << name_of(layout) << ", gate " << name_of(mode) << ", " << ranks
                         << " ranks, " << (phases ? "run_phase" : "forward"));
          CHECK(context_parallel_steps(c, ranks, phases, salt++) <= 1.0);
        }
      }
    }
  }
}

TEST_CASE("Context parallel block: a bf16 cache", "[block][context_parallel]") {
  // The parts hold the same rounded keys as the unsplit cache: the f32 tolerance holds.
  const ga::BlockConfig c = small_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  for (int ranks : {2, 3}) {
    for (bool phases : {false, true}) {
      INFO(ranks << " ranks, " << (phases ? "run_phase" : "forward"));
      CHECK(context_parallel_steps<ga::bf16>(c, ranks, phases, 3550 + ranks) <= 1.0);
    }
  }
}

TEST_CASE("Context parallel block: errors", "[block][context_parallel][bad_input]") {
  const ga::BlockConfig c = small_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  Rng rng = make_rng(3540);
  const Model<float> m = make_model<float>(c, rng);
  const ga::GatedMultiHeadAttention<float> block(c, m.weights());
  Cache<float> cache(c, 2, kCapacity);
  const Step st = make_step(c, {2, 1}, cache.lengths, rng);
  std::vector<float> y;
  std::vector<std::byte> ws;

  SECTION("a failed exchange is returned, by every worker, and the cache lengths stay") {
    Group group(1);
    group.fail = true;
    Rank self{&group, 0};
    ga::BlockForwardArgs<float> args = step_args(c, st, cache.view(), y);
    args.context_parallel = {&Rank::exchange, &self, true};
    CHECK(contains(run_rank(block, args, ws, {}, false), "peer lost"));
    // run_phase: worker 0 calls the exchange and returns its error; worker 1 reports it next.
    group.posted = 0;
    ws.resize(block.workspace_size(args, 2));
    const ga::Workspace w(ws.data(), ws.size());
    using Block = ga::GatedMultiHeadAttention<float>;
    for (int phase = 0; phase < Block::kExchange; ++phase) {
      for (int ith = 0; ith < 2; ++ith) REQUIRE(block.run_phase(args, w, phase, ith, 2).is_ok());
    }
    CHECK(contains(block.run_phase(args, w, Block::kExchange, 0, 2), "peer lost"));
    CHECK(block.run_phase(args, w, Block::kExchange, 1, 2).is_ok());
    CHECK(contains(block.run_phase(args, w, Block::kMergeParts, 1, 2),
                   "context_parallel.exchange: failed"));
    CHECK(cache.lengths == std::vector<std::int64_t>{0, 0});
  }
  SECTION("parts of the wrong shape name the part") {
    Group group(2);
    Rank self{&group, 0};
    std::vector<float> other_out(4), other_lse(1);
    group.parts[1] = {ga::TensorView<const float, 5>::contiguous(other_out.data(), {1, 1, 1, 1, 4}),
                      ga::TensorView<const float, 4>::contiguous(other_lse.data(), {1, 1, 1, 1})};
    group.posted = 1;
    ga::BlockForwardArgs<float> args = step_args(c, st, cache.view(), y);
    args.context_parallel = {&Rank::exchange, &self, true};
    CHECK(contains(run_rank(block, args, ws, {}, false), "parts[1].out: dim 1"));
  }
  SECTION("statistics are refused") {
    std::vector<float> share(static_cast<std::size_t>(st.total * c.num_q_heads));
    Group group(1);
    Rank self{&group, 0};
    ga::BlockForwardArgs<float> args = step_args(c, st, cache.view(), y);
    args.context_parallel = {&Rank::exchange, &self, true};
    args.stats.sink_share = ga::TensorView<float, 4>::contiguous(
        share.data(), {1, st.total, c.num_kv_heads, c.group_size()});
    CHECK(contains(block.can_implement(args), "stats: expected none under context parallelism"));
  }
  SECTION("a full part that does not append is accepted; one that appends is refused") {
    Cache<float> full(c, 2, 4);
    full.lengths = {4, 4};
    Group group(1);
    Rank self{&group, 0};
    ga::BlockForwardArgs<float> args = step_args(c, st, full.view(), y);
    args.context_parallel = {&Rank::exchange, &self, false};
    CHECK(block.can_implement(args).is_ok());
    args.context_parallel.appends_new_tokens = true;
    CHECK(contains(block.can_implement(args), "exceeds capacity"));
  }
}
