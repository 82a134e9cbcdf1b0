// Concurrent calls: several std::threads run sdpa (and the output gate) at the same time on the
// same inputs, each with its own workspace and outputs, and each through a different executor
// (serial, its own ThreadPool, run_phase() over std::threads). Every result must equal, bit for
// bit, the same call made alone. Tagged [threads]: the ThreadSanitizer build runs these.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sdpa_problem.hpp"
#include "support.hpp"

namespace ga = gated_attention;

namespace {

using ga::testing::sdpa::Case;
using ga::testing::sdpa::GateKind;
using ga::testing::sdpa::Problem;

// How a caller runs the op.
enum class Caller { serial, pool2, pool3, phases3 };

// One caller's outputs: its own out, lse and workspace.
struct Outputs {
  std::vector<float> out, lse;
};

Outputs run_once(const Problem& p, Caller caller) {
  Outputs o;
  o.out.assign(p.ref_out.data.size(), -1.0f);
  o.lse.assign(p.ref_lse.data.size(), -1.0f);
  ga::SdpaArgs<float> args = p.args();
  args.out = ga::split_heads(ga::TensorView<float, 4>::contiguous(o.out.data(), p.ref_out.extents),
                             p.c.hkv);
  args.maybe_lse = ga::TensorView<float, 4>::contiguous(o.lse.data(), p.ref_lse.extents);
  const int workers = caller == Caller::serial ? 1 : caller == Caller::pool2 ? 2 : 3;
  std::vector<std::byte> ws(ga::workspace_size(args, workers));
  const ga::Workspace w(ws.data(), ws.size());
  if (caller == Caller::phases3) {
    for (int phase = 0; phase < ga::num_phases(args, workers); ++phase) {
      std::vector<ga::Status> statuses(static_cast<std::size_t>(workers));
      std::vector<std::thread> threads;
      for (int ith = 0; ith < workers; ++ith) {
        threads.emplace_back([&, ith, phase] {
          statuses[static_cast<std::size_t>(ith)] = ga::run_phase(args, w, phase, ith, workers);
        });
      }
      for (auto& t : threads) t.join();
      for (const auto& s : statuses) {
        if (!s.is_ok()) o.out.clear();  // reported by the caller's comparison
      }
    }
    return o;
  }
  std::unique_ptr<ga::ThreadPool> pool;
  ga::Executor executor;
  if (workers > 1) {
    pool = std::make_unique<ga::ThreadPool>(workers);
    executor = pool->executor();
  }
  if (!ga::run(args, w, executor).is_ok()) o.out.clear();
  return o;
}

}  // namespace

TEST_CASE("threads: concurrent sdpa calls with separate workspaces give the serial results",
          "[sdpa][threads]") {
  const std::vector<Case> cases = {
      Case::make("concurrent prefill", 2, 50, 50, 8, 2, 64, 64)
          .causal()
          .with_lse()
          .with_gate(GateKind::elementwise),
      // Long decode: the pools split the keys and merge in a second phase.
      Case::make("concurrent split decode", 1, 1, 1500, 8, 1, 32, 32)
          .with_lse()
          .with_sinks(ga::testing::sdpa::SinkKind::learned),
  };
  const Caller callers[] = {Caller::serial, Caller::pool2, Caller::pool3, Caller::phases3};
  for (const Case& c : cases) {
    INFO(c.name);
    Problem p(c);
    // Each caller kind alone first.
    std::vector<Outputs> alone;
    for (Caller caller : callers) alone.push_back(run_once(p, caller));
    for (const Outputs& o : alone) REQUIRE_FALSE(o.out.empty());
    // Then two threads of each kind at once, each repeating its call.
    constexpr int kRepeats = 3;
    std::vector<std::vector<Outputs>> results(8);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int r = 0; r < kRepeats; ++r) results[t].push_back(run_once(p, callers[t % 4]));
      });
    }
    for (auto& t : threads) t.join();
    for (int t = 0; t < 8; ++t) {
      INFO("thread " << t);
      for (const Outputs& o : results[t]) {
        CHECK(o.out == alone[t % 4].out);
        CHECK(o.lse == alone[t % 4].lse);
      }
    }
    // And the callers agree with each other within the documented tolerance (the split ones
    // round differently).
    REQUIRE(p.run_reference().is_ok());
    for (const Outputs& o : alone) {
      CHECK(ga::testing::max_tolerance_ratio(o.out, p.ref_out.data, ga::testing::kSdpaAtol,
                                             ga::testing::kSdpaRtol) <= 1.0);
    }
  }
}

TEST_CASE("threads: concurrent output gate calls give the serial results",
          "[output_gate][threads]") {
  const std::array<std::int64_t, 5> e = {2, 40, 2, 4, 96};
  auto rng = ga::testing::make_rng(0x7a7e);
  const auto attn = ga::testing::random_vector<float>(rng, 2 * 40 * 2 * 4 * 96, -3.0, 3.0);
  const auto gate = ga::testing::random_vector<float>(rng, 2 * 40 * 2 * 4 * 96, -8.0, 8.0);
  const auto run_gate = [&](int workers) {
    std::vector<float> out(attn.size(), 0.0f);
    ga::OutputGateArgs<float> args;
    args.attn = ga::TensorView<const float, 5>::contiguous(attn.data(), e);
    args.gate.values = ga::TensorView<const float, 5>::contiguous(gate.data(), e);
    args.gate.activation = ga::GateActivation::silu;
    args.out = ga::TensorView<float, 5>::contiguous(out.data(), e);
    ga::ThreadPool pool(workers);
    if (!ga::run(args, ga::Workspace(nullptr, 0), workers > 1 ? pool.executor() : ga::Executor{})
             .is_ok()) {
      out.clear();
    }
    return out;
  };
  const std::vector<float> alone = run_gate(1);
  REQUIRE_FALSE(alone.empty());
  std::vector<std::vector<float>> results(6);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) threads.emplace_back([&, t] { results[t] = run_gate(1 + t % 3); });
  for (auto& t : threads) t.join();
  for (const auto& r : results) CHECK(r == alone);
}
