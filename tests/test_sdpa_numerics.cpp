// Numerics at the edges, on every path against reference::sdpa (sdpa_problem.hpp's tolerance):
// rows without keys, NaN/Inf in keys a row cannot see, denormal inputs, gate pre-activations of
// +-1e4 and a row of 2^20 keys. Logits of +-1e4 are in test_sdpa.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "sdpa_problem.hpp"
#include "support.hpp"

namespace ga = gated_attention;

namespace {

using ga::testing::sdpa::Case;
using ga::testing::sdpa::GateKind;
using ga::testing::sdpa::Layout;
using ga::testing::sdpa::Problem;
using ga::testing::sdpa::SinkKind;

void check_case(const Case& c) {
  const ga::testing::sdpa::PathCheck r = ga::testing::sdpa::check_every_path(c);
  INFO(r.failure);
  CHECK(r.failure.empty());
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("numerics: rows without keys are exactly 0, lse -inf, statistics 0, with any options",
          "[numerics][sdpa]") {
  // check_every_path() requires exactly 0 in rows without keys (no gate, or a multiplying gate)
  // and the reference's -inf log-sum-exp and statistics.
  const std::vector<Case> cases = {
      Case::make("no keys: q > kv, gated, sinks, stats", 2, 30, 9, 4, 2, 32, 32)
          .causal()
          .with_lse()
          .with_gate(GateKind::elementwise, ga::GateActivation::silu)
          .with_sinks(SinkKind::learned)
          .with_stats(2),
      Case::make("no keys: kv_lens 0, headwise, softmax+1", 3, 5, 40, 8, 2, 64, 64)
          .with_kv_lens({0, 40, 0})
          .with_lse()
          .with_gate(GateKind::headwise)
          .with_sinks(SinkKind::plus_one)
          .with_stats(1),
      Case::make("no keys: additive gate gives act(g)", 1, 12, 4, 2, 1, 16, 24)
          .causal()
          .with_lse()
          .with_gate(GateKind::elementwise, ga::GateActivation::sigmoid, ga::GateCombine::add),
      Case::make("no keys: window(0, 0) past the keys", 1, 20, 8, 2, 2, 16, 16)
          .with_mask(ga::Mask::window(0, 0))
          .with_lse(),
      Case::make("no keys: split decode, ragged", 3, 1, 1500, 8, 1, 32, 32)
          .with_kv_lens({0, 1500, 0})
          .with_threads(3)
          .with_lse()
          .with_stats(1)
          .with_gate(GateKind::elementwise)
          .with_splits(2),
  };
  for (const Case& c : cases) check_case(c);
}

TEST_CASE("numerics: NaN and Inf in keys a row cannot see stay out of its output",
          "[numerics][sdpa]") {
  // Poisoned keys hold NaN in K and NaN or +-Inf in V. Rows that attend them are not compared;
  // every other row must be finite and match the reference.
  for (const float poison : {kNaN, kInf, -kInf}) {
    const std::string tag = std::to_string(poison);
    std::vector<Case> cases = {
        // Past an entry's kv length (entry 0 has 5 keys; entry 1 attends key 20).
        Case::make("poison past kv_lens " + tag, 2, 3, 40, 4, 2, 32, 32)
            .with_kv_lens({5, 40})
            .with_lse(),
        // Outside every query's sliding window (keys 0..30 when queries start at 70).
        Case::make("poison outside the window " + tag, 1, 30, 100, 4, 1, 32, 32)
            .with_mask(ga::Mask::causal_window(20))
            .with_lse(),
        // Decode with a window and key splits: keys long before the window.
        Case::make("poison outside the window, split decode " + tag, 1, 1, 1300, 8, 1, 64, 64)
            .with_mask(ga::Mask::causal_window(100))
            .with_threads(2)
            .with_splits(2)
            .with_lse(),
        // In the causal future of some queries of the same query block: rows before the key
        // share its K/V blocks with rows that attend it.
        Case::make("poison in the causal future " + tag, 1, 40, 40, 2, 1, 32, 32).causal(),
        Case::make("poison in the causal future, d128 " + tag, 1, 70, 70, 4, 2, 128, 128)
            .causal()
            .with_gate(GateKind::elementwise),
        Case::make("poison beside a window " + tag, 1, 60, 60, 2, 1, 16, 16)
            .with_mask(ga::Mask::window(3, 3)),
    };
    cases[0].poisoned_keys = {20, 39};
    cases[1].poisoned_keys = {0, 17, 30};
    cases[2].poisoned_keys = {0, 100, 600, 1150};
    cases[3].poisoned_keys = {35};
    cases[4].poisoned_keys = {50, 66};
    cases[5].poisoned_keys = {30};
    for (Case& c : cases) {
      c.poison_value = poison;
      check_case(c);
    }
  }
}

TEST_CASE("numerics: denormal inputs give the reference's results", "[numerics][sdpa]") {
  // The kernels read denormal inputs as 0 (kernels/denormals.hpp): the tolerance has an absolute
  // floor of (kv_len + 2) * 2^-126.
  for (bool tiny_values : {false, true}) {
    for (const Case& base : {Case::make("denormals prefill", 1, 70, 70, 4, 2, 64, 64).causal(),
                             Case::make("denormals decode", 2, 1, 300, 8, 2, 128, 128),
                             Case::make("denormals odd dims", 1, 9, 33, 3, 1, 17, 5)}) {
      Case c = base;
      c.name += tiny_values ? ", V at 2^-100" : "";
      c.denormals = true;
      c.with_lse().with_gate(GateKind::elementwise, ga::GateActivation::silu);
      if (tiny_values) c.v_exponent = -100;
      check_case(c);
    }
  }
}

TEST_CASE("numerics: q, k and v all denormal give finite outputs within V's range",
          "[numerics][sdpa]") {
  // Every q/k/v element below 2^-130 in magnitude. Each output row is a convex combination of V
  // rows (read as 0 where the kernels flush denormals), so it stays below 2^-126: no NaN. The
  // time of such calls against normal inputs is bench/sdpa.cpp's denormal_overhead/... rows.
  Problem p(Case::make("all denormal", 1, 64, 512, 8, 2, 64, 64).causal());
  for (auto* t : {&p.q, &p.k, &p.v}) {
    ga::testing::for_each_index(t->view.extents, [&](const auto& i) {
      t->view[i] = std::ldexp(t->view[i], -130);  // below 2^-126: denormal
    });
  }
  const ga::SdpaArgs<float> args = p.args();
  std::vector<std::byte> ws(ga::workspace_size(args, 1));
  ga::testing::sdpa::PathGuard guard;
  for (ga::Isa isa : ga::testing::available_isas()) {
    INFO("path " << ga::to_string(isa));
    ga::set_isa_limit(isa);
    p.reset_outputs();
    REQUIRE(ga::run(args, ga::Workspace(ws.data(), ws.size())).is_ok());
    bool within = true;  // NaN compares false
    ga::testing::for_each_index(p.out.view.extents, [&](const auto& i) {
      within = within && std::fabs(p.out.view[i]) <= std::ldexp(1.0f, -126);
    });
    CHECK(within);
  }
}

TEST_CASE("numerics: gate pre-activations of +-1e4", "[numerics][sdpa][gate]") {
  // Elementwise gates alternating +1e4 / -1e4 against the reference (mixtures of +-1e4, +-100,
  // +-88 are in the fuzzer), then exact properties: sigmoid(1e4) is exactly 1 and SiLU(1e4)
  // exactly 1e4, so those outputs equal the ungated output (times 1e4); sigmoid(-1e4) leaves at
  // most 2^-125 of it; nothing is NaN.
  for (auto act : {ga::GateActivation::sigmoid, ga::GateActivation::silu}) {
    for (auto combine : {ga::GateCombine::multiply, ga::GateCombine::add}) {
      Case c = Case::make("gate 1e4", 2, 9, 40, 4, 2, 32, 32)
                   .causal()
                   .with_gate(GateKind::elementwise, act, combine)
                   .with_stats(1);
      c.extreme_gate = true;
      check_case(c);
    }
  }
  Problem plain(Case::make("gate 1e4 exact", 1, 6, 30, 2, 1, 24, 24).causal());
  Problem gated(Case::make("gate 1e4 exact", 1, 6, 30, 2, 1, 24, 24)
                    .causal()
                    .with_gate(GateKind::elementwise));
  ga::testing::for_each_index(gated.gate.view.extents, [&](const auto& i) {
    gated.gate.view[i] = (i[1] + i[4]) % 2 == 0 ? 1e4f : -1e4f;
  });
  ga::testing::sdpa::PathGuard guard;
  for (ga::Isa isa : ga::testing::available_isas()) {
    INFO("path " << ga::to_string(isa));
    ga::set_isa_limit(isa);
    std::vector<std::byte> ws(ga::workspace_size(plain.args(), 1));
    REQUIRE(ga::run(plain.args(), ga::Workspace(ws.data(), ws.size())).is_ok());
    for (auto act : {ga::GateActivation::sigmoid, ga::GateActivation::silu}) {
      INFO((act == ga::GateActivation::silu ? "silu" : "sigmoid"));
      ga::SdpaArgs<float> args = gated.args();
      args.gate.activation = act;
      REQUIRE(ga::run(args, ga::Workspace(ws.data(), ws.size())).is_ok());
      ga::testing::for_each_index(gated.out.view.extents, [&](const auto& i) {
        const float x = plain.out.view[i], y = gated.out.view[i];
        const bool positive = (i[1] + i[3]) % 2 == 0;
        CHECK_FALSE(std::isnan(y));
        if (positive) {
          CHECK(y == (act == ga::GateActivation::sigmoid ? x : x * 1e4f));
        } else {
          CHECK(std::fabs(y) <= 2.0f * std::ldexp(1.0f, -125) * std::fabs(x) * 1e4f);
        }
      });
    }
  }
}

TEST_CASE("numerics: one query over 2^20 keys matches the reference", "[numerics][sdpa][long]") {
  // 1M keys, head dim 16, GQA 2: the running sums add 16k blocks in f32; with threads the keys are
  // split across workers and merged by log-sum-exp.
  for (int threads : {1, 3}) {
    Case c = Case::make("2^20 keys, " + std::to_string(threads) + " thread(s)", 1, 1,
                        std::int64_t{1} << 20, 2, 1, 16, 16)
                 .with_lse()
                 .with_threads(threads)
                 .with_splits(threads > 1 ? 2 : 1);
    check_case(c);
  }
}
