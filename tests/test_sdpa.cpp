// ops/sdpa (the kernels, every ISA path the host supports) against reference::sdpa.
//
// Each case is a random problem described by a `Case` (sdpa_problem.hpp, shared with the fuzzer):
// shape, mask, per-batch kv lengths, sinks, log-sum-exp, output gate, memory layout, pointer
// alignment and thread count. check_case() builds it once, runs reference::sdpa (double arithmetic
// on the same float inputs) and then the kernels under every available ISA limit, and compares.
//
// Tolerance, per output element: |got - ref| <= atol + rtol * |ref| with atol = 1e-5, rtol = 1e-4,
// and over the whole output NMSE = sum (got - ref)^2 / sum ref^2 <= 1e-10. Why: the kernels keep
// scores, the online-softmax sums and the P.V accumulators in f32. A sum of n positive terms in
// f32 is off by at most ~n * 6e-8 relative (6e-5 for the ~1e3 keys of the longest case here, well
// under rtol) and typically ~sqrt(n) * 6e-8; exp2 is a degree-6 polynomial with 2e-7 relative
// error; q is pre-scaled by scale * log2(e) in f32. atol covers outputs that are near 0 because
// the weighted values (uniform in [-1, 1]) cancel: there the error is relative to |v| ~ 1, not to
// |out|. NMSE 1e-10 (relative RMS error 1e-5) is much tighter than the worst element allows, so a
// systematic error (a wrong key, a lost rescale) fails it even when every element passes.
// Log-sum-exp: |got - ref| <= 1e-4 (+ lse_rtol * |ref| for the logits of +-1e4, where the f32
// spacing alone is 1e-3).
//
// Inputs are adversarial where the API allows: K/V rows past a batch entry's kv length and every
// padding element of q/k/v hold NaN (a kernel that reads them poisons its output), output and lse
// padding hold a sentinel that must survive (no stray writes), and "misaligned" cases offset every
// data pointer by one float.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sdpa_problem.hpp"
#include "support.hpp"

namespace ga = gated_attention;
using ga::Isa;

namespace {

using namespace ga::testing::sdpa;  // Case, Problem, compare(), check_every_path(), ...
using ga::testing::available_isas;

void require_close(const Problem& p, const Comparison& r) {
  const std::string wrong = failures(p, r);
  INFO(wrong);
  CHECK(wrong.empty());
}

// Whether every element of an output buffer still holds the sentinel (nothing was written).
bool untouched(const std::vector<float>& storage) {
  return std::all_of(storage.begin(), storage.end(), [](float x) { return x == kOutSentinel; });
}

// Builds `c`, runs the reference once and the kernels on every available path; returns the
// outputs of the last path (for cross-checks between calls).
std::vector<float> check_case(const Case& c) {
  const PathCheck r = check_every_path(c);
  INFO(r.failure);
  CHECK(r.failure.empty());
  return r.last_output;
}

}  // namespace

TEST_CASE("sdpa: scaled-down model shapes match the reference on every path", "[sdpa][shapes]") {
  using GK = GateKind;
  const std::vector<Case> cases = {
      // Qwen3-Next full-attention layers: 16 query heads, 2 KV heads, head dim 256, gated.
      Case::make("qwen3next prefill", 1, 130, 130, 16, 2, 256, 256)
          .causal()
          .with_gate(GK::elementwise)
          .with_lse(),
      Case::make("qwen3next chunk", 1, 24, 90, 16, 2, 256, 256)
          .causal()
          .with_gate(GK::elementwise)
          .with_layout(Layout::kv_cache),
      Case::make("qwen3next decode", 2, 1, 200, 16, 2, 256, 256)
          .causal()
          .with_kv_lens({200, 77})
          .with_gate(GK::elementwise)
          .with_threads(2),
      // Qwen3-1.7B-like dense: 16/8, head dim 128.
      Case::make("dense1p7b prefill", 1, 100, 100, 16, 8, 128, 128)
          .causal()
          .with_gate(GK::headwise),
      // Llama-3-8B decode: 32/8, head dim 128, ragged batch.
      Case::make("llama8b decode", 3, 1, 300, 32, 8, 128, 128)
          .causal()
          .with_kv_lens({300, 1, 129})
          .with_threads(3),
      // GPT-2: 12 heads, no GQA, head dim 64, [b, h, s, d] memory.
      Case::make("gpt2 prefill", 1, 130, 130, 12, 12, 64, 64).causal().with_layout(Layout::bhsd),
  };
  for (const Case& c : cases) check_case(c);
}

TEST_CASE("sdpa: odd query and key lengths", "[sdpa][lengths]") {
  const std::int64_t lengths[] = {1, 7, 37, 127};
  for (std::int64_t ql : lengths) {
    for (std::int64_t kl : lengths) {
      const bool causal = (ql + kl) % 2 == 0;
      Case c = Case::make(
          "lengths q" + std::to_string(ql) + " kv" + std::to_string(kl) + (causal ? " causal" : ""),
          1, ql, kl, 4, 2, 32, 32);
      if (causal) c.causal();
      if (ql > kl) c.with_lse();
      check_case(c);
    }
  }
  check_case(Case::make("lengths q577 kv577 causal", 1, 577, 577, 1, 1, 16, 16).causal());
  check_case(Case::make("lengths q1 kv577", 1, 1, 577, 2, 1, 16, 16));
  check_case(Case::make("lengths q37 kv577", 1, 37, 577, 1, 1, 16, 24).causal());
  check_case(Case::make("lengths q577 kv37 causal", 1, 577, 37, 1, 1, 16, 16).causal().with_lse());
  check_case(Case::make("lengths q577 kv7", 1, 577, 7, 2, 2, 8, 8));
}

TEST_CASE("sdpa: specialised and generic head dims", "[sdpa][head_dim]") {
  const std::int64_t dims[][2] = {{64, 64}, {80, 80}, {96, 96},  {128, 128}, {256, 256}, {33, 33},
                                  {17, 17}, {48, 80}, {128, 64}, {80, 48},   {64, 20},   {20, 64},
                                  {1, 1},   {3, 130}, {512, 16}, {16, 512},  {256, 40},  {40, 256}};
  for (const auto& d : dims) {
    Case c = Case::make("dk" + std::to_string(d[0]) + " dv" + std::to_string(d[1]), 1, 19, 75, 4, 2,
                        d[0], d[1]);
    c.causal();
    check_case(c);
  }
}

TEST_CASE("sdpa: GQA ratios and query groups larger than one unit", "[sdpa][gqa]") {
  const std::int64_t heads[][2] = {{4, 4}, {4, 2},  {8, 2},  {16, 2}, {16, 1},
                                   {6, 2}, {10, 2}, {80, 1}, {96, 2}, {130, 1}};
  for (const auto& h : heads) {
    const std::string name = "gqa hq" + std::to_string(h[0]) + " hkv" + std::to_string(h[1]);
    check_case(Case::make(name, 1, 9, 70, h[0], h[1], 32, 32).causal());
    check_case(Case::make(name + " decode", 2, 1, 70, h[0], h[1], 64, 64).with_kv_lens({70, 33}));
  }
  // A group larger than a unit's target rows: one query position per unit; several positions
  // must still be right.
  const std::int64_t group = ga::kernels::kTargetRows + 44;
  const Case big =
      Case::make("gqa group > unit rows, prefill", 1, 4, 70, group, 1, 16, 16).causal().with_lse();
  REQUIRE(ga::kernels::make_sdpa_plan(Problem(big).args(), 1).prefill.q_block == 1);
  check_case(big);
}

TEST_CASE("sdpa: causal masks and sliding windows and per-batch kv lengths", "[sdpa][mask]") {
  std::vector<Case> cases = {
      Case::make("causal q<kv", 1, 30, 100, 4, 2, 32, 32).causal().with_lse(),
      // More queries than keys: bottom-right alignment leaves the first rows without keys.
      Case::make("causal q>kv", 2, 20, 7, 4, 2, 32, 32).causal().with_lse(),
      Case::make("causal q>kv gated", 1, 70, 65, 4, 1, 32, 32)
          .causal()
          .with_lse()
          .with_gate(GateKind::elementwise, ga::GateActivation::silu),
      Case::make("causal window 16", 1, 150, 150, 2, 1, 32, 32)
          .with_mask(ga::Mask::causal_window(16))
          .with_lse(),
      Case::make("causal window 1 (diagonal only)", 1, 40, 40, 2, 1, 32, 32)
          .with_mask(ga::Mask::causal_window(1)),
      Case::make("causal window 100, q<kv", 1, 20, 300, 2, 2, 32, 32)
          .with_mask(ga::Mask::causal_window(100)),
      Case::make("window(5, 3)", 1, 60, 60, 4, 2, 32, 32).with_mask(ga::Mask::window(5, 3)),
      Case::make("window(0, 7) q<kv", 1, 20, 90, 4, 2, 32, 32).with_mask(ga::Mask::window(0, 7)),
      Case::make("window(70, 70) multi-block", 1, 200, 200, 2, 1, 32, 32)
          .with_mask(ga::Mask::window(70, 70)),
      Case::make("window(3, 0) q>kv", 1, 30, 10, 2, 1, 32, 32)
          .with_mask(ga::Mask::window(3, 0))
          .with_lse(),
      Case::make("window(-1, 5) right only", 1, 40, 40, 2, 1, 32, 32)
          .with_mask(ga::Mask::window(-1, 5)),
      Case::make("kv_lens causal", 5, 3, 130, 4, 2, 32, 32)
          .causal()
          .with_kv_lens({0, 63, 64, 65, 130})
          .with_lse(),
      Case::make("kv_lens none", 5, 4, 130, 4, 2, 32, 32)
          .with_kv_lens({130, 0, 1, 100, 129})
          .with_lse(),
      Case::make("kv_lens window", 3, 17, 150, 2, 1, 32, 48)
          .with_mask(ga::Mask::causal_window(40))
          .with_kv_lens({150, 16, 77})
          .with_lse(),
      Case::make("kv_lens prefill chunk", 3, 70, 200, 2, 1, 32, 32)
          .causal()
          .with_kv_lens({200, 70, 10})
          .with_lse(),
  };
  for (const Case& c : cases) check_case(c);

  SECTION("rows without keys are exactly 0, lse -inf, and never NaN") {
    Problem p(
        Case::make("masked rows", 2, 6, 4, 2, 1, 16, 16).causal().with_lse().with_kv_lens({0, 4}));
    const ga::SdpaArgs<float> args = p.args();
    std::vector<std::byte> ws(ga::workspace_size(args, 1));
    PathGuard guard;
    for (Isa isa : available_isas()) {
      INFO("isa " << ga::to_string(isa));
      ga::set_isa_limit(isa);
      p.reset_outputs();
      REQUIRE(ga::run(args, ga::Workspace(ws.data(), ws.size())).is_ok());
      // Entry 0 has no keys at all; entry 1's queries sit at positions -2..3.
      for (std::int64_t b = 0; b < 2; ++b) {
        for (std::int64_t i = 0; i < 6; ++i) {
          const bool empty = b == 0 || i < 2;
          for (std::int64_t h = 0; h < 2; ++h) {
            if (empty) CHECK(p.lse.view(b, i, 0, h) == -kInf);
            if (!empty) CHECK(std::isfinite(p.lse.view(b, i, 0, h)));
            for (std::int64_t d = 0; d < 16; ++d) {
              const float x = p.out.view(b, i, h, d);
              CHECK_FALSE(std::isnan(x));
              if (empty) CHECK(x == 0.0f);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("sdpa: sink logits and softmax+1 and log-sum-exp", "[sdpa][sinks]") {
  for (SinkKind s : {SinkKind::learned, SinkKind::plus_one, SinkKind::some_neg_inf}) {
    const std::string n = to_string(s);
    check_case(Case::make("sinks " + n, 2, 33, 33, 4, 2, 64, 64).causal().with_sinks(s).with_lse());
    check_case(Case::make("sinks " + n + " no lse", 1, 5, 80, 8, 2, 48, 48).with_sinks(s));
    // Rows without keys: the sink alone fills the normaliser, the output is 0 and lse the sink.
    check_case(Case::make("sinks " + n + " masked rows", 2, 9, 5, 4, 2, 32, 32)
                   .causal()
                   .with_kv_lens({0, 5})
                   .with_sinks(s)
                   .with_lse());
    check_case(Case::make("sinks " + n + " gated", 1, 17, 70, 4, 1, 32, 32)
                   .with_mask(ga::Mask::causal_window(20))
                   .with_sinks(s)
                   .with_lse()
                   .with_gate(GateKind::elementwise));
  }
  // Every head's sink -inf is bit-identical to no sink.
  const Case no_sink = Case::make("sinks all -inf", 1, 8, 20, 2, 1, 16, 16).causal().with_lse();
  check_case(no_sink);
  Problem p(no_sink);
  std::vector<std::byte> ws(ga::workspace_size(p.args(), 1));
  PathGuard guard;
  for (Isa isa : available_isas()) {
    INFO("isa " << ga::to_string(isa));
    ga::set_isa_limit(isa);
    p.sinks.clear();
    p.reset_outputs();
    REQUIRE(ga::run(p.args(), ga::Workspace(ws.data(), ws.size())).is_ok());
    const std::vector<float> plain = p.out.storage, plain_lse = p.lse.storage;
    p.sinks.assign(2, -kInf);
    p.reset_outputs();
    REQUIRE(ga::run(p.args(), ga::Workspace(ws.data(), ws.size())).is_ok());
    CHECK(p.out.storage == plain);
    CHECK(p.lse.storage == plain_lse);
  }
}

TEST_CASE("sdpa: the fused output gate equals the reference's gate after attention",
          "[sdpa][gate]") {
  for (GateKind g : {GateKind::elementwise, GateKind::headwise, GateKind::head_shared,
                     GateKind::query_independent}) {
    for (auto act : {ga::GateActivation::sigmoid, ga::GateActivation::silu}) {
      for (auto comb : {ga::GateCombine::multiply, ga::GateCombine::add}) {
        const std::string name = std::string("gate ") + to_string(g) +
                                 (act == ga::GateActivation::silu ? " silu" : " sigmoid") +
                                 (comb == ga::GateCombine::add ? " add" : " multiply");
        // q_len > kv_len: the first rows have no keys, so the gate meets a zero attention row.
        check_case(Case::make(name, 2, 12, 9, 6, 2, 24, 40)
                       .causal()
                       .with_gate(g, act, comb)
                       .with_misaligned()
                       .with_lse());
      }
    }
    check_case(Case::make(std::string("gate ") + to_string(g) + " dv 256 decode", 2, 1, 100, 4, 2,
                          256, 256)
                   .with_gate(g)
                   .with_threads(2)
                   .with_layout(Layout::padded));
  }
}

TEST_CASE("sdpa: layouts with padded strides and misaligned pointers", "[sdpa][layout]") {
  for (Layout l : {Layout::bshd, Layout::bhsd, Layout::kv_cache, Layout::padded}) {
    for (bool mis : {false, true}) {
      const std::string name = std::string("layout ") + to_string(l) + (mis ? " misaligned" : "");
      Case c = Case::make(name, 2, 21, 70, 4, 2, 64, 20).causal().with_layout(l).with_lse();
      if (mis) c.with_misaligned();
      check_case(c);
      Case d = Case::make(name + " gated odd dims", 1, 5, 33, 6, 3, 33, 17)
                   .with_layout(l)
                   .with_gate(GateKind::elementwise)
                   .with_sinks(SinkKind::learned)
                   .with_kv_lens({30});
      if (mis) d.with_misaligned();
      check_case(d);
      Case e = Case::make(name + " d128", 1, 9, 130, 8, 2, 128, 128)
                   .causal()
                   .with_layout(l)
                   .with_threads(2);
      if (mis) e.with_misaligned();
      check_case(e);
    }
  }
}

TEST_CASE("sdpa: one to three threads give the same bits without key splits", "[sdpa][threads]") {
  std::vector<float> first;
  for (int t : {1, 2, 3}) {
    Case c = Case::make("threads prefill", 2, 100, 100, 4, 2, 64, 64)
                 .causal()
                 .with_gate(GateKind::headwise)
                 .with_lse()
                 .with_threads(t);
    REQUIRE(ga::kernels::make_sdpa_plan(Problem(c).args(), t).splits == 1);
    const std::vector<float> out = check_case(c);
    if (first.empty()) {
      first = out;
    } else {
      CHECK(out == first);
    }
  }
}

TEST_CASE("sdpa: decode splits long KV across workers and merges by log-sum-exp",
          "[sdpa][split][threads]") {
  const std::vector<Case> cases = {
      Case::make("split decode 1024 2 workers", 1, 1, 1024, 8, 1, 128, 128)
          .with_threads(2)
          .with_splits(2)
          .with_lse(),
      Case::make("split decode 1500 3 workers", 1, 1, 1500, 4, 1, 64, 64)
          .causal()
          .with_threads(3)
          .with_splits(2),
      Case::make("split decode 2100 3 workers gated sinks", 1, 1, 2100, 16, 1, 64, 64)
          .with_threads(3)
          .with_splits(4)
          .with_lse()
          .with_sinks(SinkKind::learned)
          .with_gate(GateKind::elementwise, ga::GateActivation::silu),
      Case::make("split ragged batch", 2, 1, 2100, 8, 1, 32, 32)
          .with_kv_lens({0, 1500})
          .with_threads(3)
          .with_splits(3)
          .with_lse()
          .with_sinks(SinkKind::plus_one),
      Case::make("split window smaller than a split", 1, 1, 1300, 4, 1, 32, 32)
          .with_mask(ga::Mask::causal_window(100))
          .with_threads(2)
          .with_splits(2)
          .with_lse(),
      Case::make("split chunk causal", 1, 3, 1200, 8, 1, 64, 64)
          .causal()
          .with_threads(2)
          .with_splits(2)
          .with_layout(Layout::padded)
          .with_misaligned()
          .with_lse(),
  };
  for (const Case& c : cases) check_case(c);
}

TEST_CASE("sdpa: run_phase from std::threads equals run()", "[sdpa][run_phase][threads]") {
  const std::vector<std::pair<Case, int>> cases = {
      {Case::make("phases split decode", 1, 1, 1100, 8, 1, 64, 64)
           .with_lse()
           .with_sinks(SinkKind::learned)
           .with_gate(GateKind::headwise),
       2},
      {Case::make("phases split decode 3", 2, 1, 1600, 4, 1, 32, 32).with_kv_lens({1600, 900}), 3},
      {Case::make("phases prefill", 1, 64, 64, 8, 2, 64, 64).causal().with_lse(), 3},
  };
  PathGuard guard;
  for (const auto& entry : cases) {
    const Case& c = entry.first;
    const int nth = entry.second;  // a plain variable: lambdas capture it (C++17)
    INFO("case " << describe(c) << ", nth " << nth);
    Problem p(c);
    const ga::SdpaArgs<float> args = p.args();
    REQUIRE(p.run_reference().is_ok());
    const int phases = ga::num_phases(args, nth);
    CHECK(phases == ga::kernels::make_sdpa_plan(args, nth).num_phases());
    const std::size_t bytes = ga::workspace_size(args, nth);
    ga::ThreadPool pool(nth);
    CHECK(ga::workspace_size(args, pool.executor()) == bytes);
    std::vector<std::byte> ws(bytes);
    for (Isa isa : available_isas()) {
      INFO("isa " << ga::to_string(isa));
      ga::set_isa_limit(isa);
      p.reset_outputs();
      REQUIRE(ga::run(args, ga::Workspace(ws.data(), ws.size()), pool.executor()).is_ok());
      const std::vector<float> by_run = p.out.storage;
      const std::vector<float> lse_by_run = p.lse.storage;

      p.reset_outputs();
      std::vector<ga::Status> statuses(static_cast<std::size_t>(phases * nth));
      for (int phase = 0; phase < phases; ++phase) {
        std::vector<std::thread> threads;
        for (int ith = 0; ith < nth; ++ith) {
          threads.emplace_back([&, phase, ith] {
            statuses[static_cast<std::size_t>(phase * nth + ith)] =
                ga::run_phase(args, ga::Workspace(ws.data(), ws.size()), phase, ith, nth);
          });
        }
        for (auto& t : threads) t.join();  // the barrier between phases
      }
      for (const ga::Status& s : statuses) {
        INFO(s.message());
        CHECK(s.is_ok());
      }
      CHECK(p.out.storage == by_run);
      CHECK(p.lse.storage == lse_by_run);
      require_close(p, compare(p));
    }
  }
  SECTION("bad ith/nth is reported") {
    Problem p(Case::make("phases bad", 1, 1, 10, 1, 1, 16, 16));
    std::vector<std::byte> ws(ga::workspace_size(p.args(), 2));
    const ga::Workspace w(ws.data(), ws.size());
    const std::pair<int, int> bad_workers[] = {{2, 2}, {-1, 2}, {0, 0}, {0, -1}};
    for (const auto& [ith, nth] : bad_workers) {
      const ga::Status s = ga::run_phase(p.args(), w, 0, ith, nth);
      CHECK(s.code() == ga::StatusCode::invalid_argument);
      CHECK(std::string(s.message()).find("ith/nth") != std::string::npos);
    }
  }
}

TEST_CASE("sdpa: workspace size and phases from the shape alone equal those from the arguments",
          "[sdpa][workspace]") {
  for (int workers : {1, 2, 3}) {
    for (const Case& c : {Case::make("decode", 2, 1, 3000, 8, 2, 128, 128),
                          Case::make("prefill", 1, 300, 300, 4, 2, 64, 64),
                          Case::make("odd dv", 1, 5, 40, 6, 3, 80, 48)}) {
      Problem p(c);
      const ga::SdpaArgs<float> args = p.args();
      const ga::SdpaShape shape = ga::SdpaShape::of(args);
      INFO(c.name << ", workers " << workers);
      CHECK(ga::workspace_size(shape, workers) == ga::workspace_size(args, workers));
      CHECK(ga::num_phases(shape, workers) == ga::num_phases(args, workers));
    }
  }
  ga::SdpaShape bad{1, 1, 16, 2, 1, 64, 64};
  CHECK(ga::workspace_size(bad, 1) > 0);
  bad.group = 0;
  CHECK(ga::workspace_size(bad, 1) == 0);
  CHECK(std::string(ga::validate(bad).message()).find("group") != std::string::npos);
  bad = {1, 1, 16, 2, 1, 64, ga::kMaxHeadDim + 1};
  CHECK(ga::workspace_size(bad, 1) == 0);
  CHECK(ga::num_phases(bad, 2) == 1);
}

TEST_CASE("sdpa: workspace size is enforced and reported", "[sdpa][workspace]") {
  for (int workers : {1, 2, 3}) {
    Problem p(Case::make("workspace", 1, 1, 1100, 8, 1, 64, 64).with_lse());
    const ga::SdpaArgs<float> args = p.args();
    ga::ThreadPool pool(workers);
    const std::size_t needed = ga::workspace_size(args, pool.executor());
    INFO("workers " << workers << ", workspace_size " << needed);
    REQUIRE(needed > 0);
    std::vector<std::byte> ws(needed + 64);

    // Enough from any start address.
    for (std::size_t shift : {0, 1, 4, 17, 63}) {
      p.reset_outputs();
      const ga::Status s = ga::run(args, ga::Workspace(ws.data() + shift, needed), pool.executor());
      INFO("shift " << shift << ": " << s.message());
      CHECK(s.is_ok());
    }

    // Half the size: refused, the message names what is needed and what was given.
    {
      p.reset_outputs();
      const ga::Status half = ga::run(args, ga::Workspace(ws.data(), needed / 2), pool.executor());
      INFO(half.message());
      CHECK(half.code() == ga::StatusCode::workspace_too_small);
      CHECK(std::string(half.message()).find(std::to_string(needed)) != std::string::npos);
      CHECK(std::string(half.message()).find(std::to_string(needed / 2)) != std::string::npos);
      CHECK(untouched(p.out.storage));  // a failed call writes nothing
    }

    // One byte short: workspace_size() is the contract ("expected >= N bytes"), so N - 1 bytes
    // must be refused whatever the buffer's alignment, not only when carving happens to run out.
    p.reset_outputs();
    const ga::Status s = ga::run(args, ga::Workspace(ws.data(), needed - 1), pool.executor());
    INFO(s.message());
    CHECK(s.code() == ga::StatusCode::workspace_too_small);
    const std::string message = s.message();
    CHECK(message.find(std::to_string(needed)) != std::string::npos);
    CHECK(message.find(std::to_string(needed - 1)) != std::string::npos);
    if (!s.is_ok()) {
      CHECK(untouched(p.out.storage));  // a failed call writes nothing
    }

    // No buffer at all.
    p.reset_outputs();
    const ga::Status none = ga::run(args, ga::Workspace(nullptr, 0), pool.executor());
    CHECK(none.code() == ga::StatusCode::workspace_too_small);
    CHECK(std::string(none.message()).find(std::to_string(needed)) != std::string::npos);
    CHECK(untouched(p.out.storage));
  }
}

TEST_CASE("sdpa: can_implement rejects bad arguments naming the tensor", "[sdpa][validate]") {
  Problem p(
      Case::make("validate", 2, 3, 10, 4, 2, 16, 8).with_lse().with_gate(GateKind::elementwise));
  ga::testing::Tensor<float, 4> wrong_k({2, 10, 2, 12});
  ga::testing::Tensor<float, 4> wrong_v({2, 9, 2, 8});
  ga::testing::Tensor<float, 4> wrong_out({2, 3, 4, 9});
  ga::testing::Tensor<float, 4> wrong_gate({2, 3, 4, 7});
  ga::testing::Tensor<float, 4> wrong_lse({2, 3, 2, 3});
  const std::int64_t too_long[2] = {10, 11};
  const float sink_logits[4] = {0, 0, 0, 0};

  struct Bad {
    const char* what;
    ga::SdpaArgs<float> args;
    const char* expected;  // substring of the message
  };
  std::vector<Bad> bad;
  auto a = p.args();
  a.k = wrong_k.cview();
  bad.push_back({"k dim", a, "k: dim 3 (dim): expected 16, got 12"});
  a = p.args();
  a.v = wrong_v.cview();
  bad.push_back({"v length", a, "v: dim 1 (kv length): expected 10, got 9"});
  a = p.args();
  a.out = ga::split_heads(wrong_out.view(), 2);
  bad.push_back({"out dv", a, "out: dim 4 (dim): expected 8, got 9"});
  a = p.args();
  a.gate.values = ga::split_heads(wrong_gate.cview(), 2);
  bad.push_back({"gate dv", a, "gate: dim 4"});
  a = p.args();
  a.maybe_lse = wrong_lse.view();
  bad.push_back({"lse group", a, "lse: dim 3 (group): expected 2, got 3"});
  a = p.args();
  a.q = ga::split_heads(ga::TensorView<const float, 4>(p.q.view), 3);  // 4 heads, 3 kv heads
  bad.push_back({"q heads not a multiple", a, "q: dim 3"});
  a = p.args();
  a.maybe_kv_lens = too_long;
  bad.push_back({"kv_lens", a, "kv_lens: entry 1"});
  a = p.args();
  a.softmax_plus_one = true;
  a.maybe_sink_logits = sink_logits;
  bad.push_back({"sinks", a, "sinks:"});
  a = p.args();
  a.mask = ga::Mask::window(-2, 0);
  bad.push_back({"mask", a, "mask:"});
  a = p.args();
  a.scale = INFINITY;
  bad.push_back({"scale", a, "scale:"});
  a = p.args();
  a.out = ga::split_heads(ga::TensorView<float, 4>(p.q.view.data, {2, 3, 4, 8}, {96, 32, 8, 1}), 2);
  bad.push_back({"out overlaps q", a, "out: overlaps q"});

  std::vector<std::byte> ws(1 << 20);
  for (const Bad& b : bad) {
    INFO(b.what);
    const ga::Status s = ga::can_implement(b.args);
    INFO("message: " << s.message());
    CHECK(s.code() == ga::StatusCode::invalid_argument);
    CHECK(std::string(s.message()).find(b.expected) != std::string::npos);
    // run() reports the same error.
    const ga::Status r = ga::run(b.args, ga::Workspace(ws.data(), ws.size()));
    CHECK(std::string(r.message()) == std::string(s.message()));
  }
  CHECK(ga::can_implement(p.args()).is_ok());
}

TEST_CASE("sdpa: wide logits stay accurate and one-hot logits of 1e4 give no NaN",
          "[sdpa][numerics]") {
  // Logits up to about +-80: q.k has standard deviation sqrt(dk / 9) for q, k uniform in [-1, 1],
  // so the scale puts one standard deviation at about 21. exp2 then sees arguments down to about
  // -230 (flushed to exactly 0 below -126). Tolerance x4: any f32 kernel's logits are only as
  // accurate as their dk-term f32 dot products, whose partial sums near 115 (80 in log2 units) have
  // a spacing of 7.6e-6; the accumulated rounding, ~3e-5, shifts the softmax weights by that
  // relative amount, i.e. output errors up to ~3e-5 * |v|, beyond atol 1e-5 (measured over 40
  // seeds: up to 2.2x the standard tolerance).
  std::vector<Case> wide = {
      Case::make("wide logits", 1, 40, 200, 4, 2, 64, 64).with_scale(8.0f).with_lse(),
      Case::make("wide logits causal sinks", 2, 33, 33, 4, 1, 64, 64)
          .causal()
          .with_scale(8.0f)
          .with_sinks(SinkKind::learned)
          .with_lse(),
      Case::make("wide logits split", 1, 1, 1100, 8, 1, 128, 128)
          .with_scale(5.5f)
          .with_threads(2)
          .with_splits(2)
          .with_lse(),
  };
  for (Case& c : wide) {
    c.tol_scale = ga::testing::kSdpaWideLogitsFactor;
    const double reach = max_abs_logit(Problem(c));
    INFO(c.name << ": largest |logit| " << reach);
    CHECK(reach > 60.0);
    CHECK(reach < 160.0);
    check_case(c);
  }
  // Logits of +-1e4 at scale 1: softmax is one-hot; every other weight underflows to exactly 0.
  // lse is within f32 spacing of 1e4 (1e-3) plus the rounding of 64-term sums: rtol 1e-5.
  const std::pair<std::int64_t, int> hot_cases[] = {{150, 1}, {1100, 2}};
  for (const auto& [kv, threads] : hot_cases) {
    Case c =
        Case::make("one-hot 1e4 kv" + std::to_string(kv), 1, kv > 1000 ? 1 : 20, kv, 4, 1, 64, 64)
            .with_scale(1.0f)
            .with_threads(threads)
            .with_lse();
    c.one_hot_logit = 1e4;
    c.lse_rtol = ga::testing::kSdpaHugeLogitsLseRtol;
    check_case(c);
  }
  Case causal_hot = Case::make("one-hot 1e4 causal", 1, 70, 70, 2, 1, 32, 32).causal().with_lse();
  causal_hot.scale = 1.0f;
  causal_hot.one_hot_logit = 1e4;
  causal_hot.lse_rtol = ga::testing::kSdpaHugeLogitsLseRtol;
  check_case(causal_hot);
}

TEST_CASE("sdpa: empty problems", "[sdpa][edge]") {
  check_case(Case::make("kv_len 0", 2, 3, 0, 4, 2, 16, 16).with_lse());
  check_case(
      Case::make("kv_len 0 sinks", 1, 3, 0, 4, 2, 16, 16).with_lse().with_sinks(SinkKind::learned));
  check_case(Case::make("q_len 0", 1, 0, 10, 4, 2, 16, 16).with_lse());
  check_case(Case::make("batch 0", 0, 4, 10, 4, 2, 16, 16).with_threads(2));
}

TEST_CASE("sdpa: set_isa_limit selects the path sdpa_path reports", "[sdpa][isa]") {
  PathGuard guard;
  ga::set_isa_limit(Isa::scalar);
  CHECK(ga::active_isa() == Isa::scalar);
  CHECK(std::string(ga::sdpa_path()) == "scalar");
  for (Isa isa : available_isas()) {
    ga::set_isa_limit(isa);
    CHECK(ga::active_isa() == isa);
    CHECK(std::string(ga::sdpa_path()) == ga::to_string(isa));
  }
  ga::clear_isa_limit();
  CHECK(ga::isa_available(ga::active_isa()));
}

TEST_CASE("sdpa: exp2 polynomial error and denormal cut-off on every path", "[sdpa][exp2]") {
  // Documented in kernels/generic/math.inl: relative error <= 2e-7 for x in [-126, 126], exactly 0
  // below -126 (never a denormal), saturation at 2^126 above.
  std::vector<float> x;
  for (double v = -140.0; v <= 140.0; v += 0.0173) x.push_back(static_cast<float>(v));
  for (float v : {-126.0f, -125.999f, -126.001f, 0.0f, -0.0f, 0.5f, -0.5f, 1e-9f, 126.0f})
    x.push_back(v);
  x.push_back(-std::numeric_limits<float>::infinity());
  std::vector<float> y(x.size());
  auto check = [&](const char* path) {
    INFO("path " << path);
    double worst = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double xi = x[i];
      if (xi < -126.0) {
        CHECK(y[i] == 0.0f);
        continue;
      }
      CHECK(std::fpclassify(y[i]) == FP_NORMAL);
      const double expected = std::exp2(std::min(xi, 126.0));
      worst = std::max(worst, std::fabs(y[i] - expected) / expected);
    }
    CHECK(worst <= 2e-7);
  };
  for (const auto& path : ga::testing::math_paths()) {
    path.exp2(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
    check(path.name);
  }
}
