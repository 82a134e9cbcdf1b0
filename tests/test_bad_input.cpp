// Bad arguments: every op returns a Status whose message names the tensor (and the dimension,
// where there is one) instead of reading or writing out of bounds. For sdpa and the output gate,
// run() must return exactly what can_implement() says and write nothing; workspace_size() and
// num_phases() must not fail on them. The wrong workspace size and the sink/scale options are
// covered in test_sdpa.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "sdpa_problem.hpp"
#include "support.hpp"

namespace ga = gated_attention;
using ga::StatusCode;

namespace {

using ga::testing::sdpa::Case;
using ga::testing::sdpa::GateKind;
using ga::testing::sdpa::Problem;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Checks one sdpa rejection: the code, every expected part of the message, run() and run_phase()
// returning the same Status, nothing written, and workspace_size()/num_phases() answering.
void expect_rejected(Problem& p, const ga::SdpaArgs<float>& args,
                     const std::vector<std::string>& parts,
                     StatusCode code = StatusCode::invalid_argument) {
  const ga::Status s = ga::can_implement(args);
  const std::string message = s.message();
  INFO("message: " << message);
  CHECK(s.code() == code);
  for (const std::string& part : parts) {
    INFO("expected part: " << part);
    CHECK(contains(message, part));
  }
  CHECK(ga::workspace_size(args, 2) == 0);
  CHECK(ga::num_phases(args, 2) == 1);
  std::vector<std::byte> ws(1 << 20);
  p.reset_outputs();
  ga::ThreadPool pool(2);
  const ga::Status by_run = ga::run(args, ga::Workspace(ws.data(), ws.size()), pool.executor());
  const ga::Status by_phase = ga::run_phase(args, ga::Workspace(ws.data(), ws.size()), 0, 1, 2);
  CHECK(std::string(by_run.message()) == message);
  CHECK(std::string(by_phase.message()) == message);
  const auto untouched = [](const std::vector<float>& storage, float sentinel) {
    for (float x : storage) {
      if (!(x == sentinel)) return false;
    }
    return true;
  };
  CHECK(untouched(p.out.storage, ga::testing::sdpa::kOutSentinel));
  CHECK(untouched(p.lse.storage, ga::testing::sdpa::kLseSentinel));
  for (const auto& stat : p.stats) CHECK(untouched(stat.storage, ga::testing::sdpa::kOutSentinel));
}

// A valid problem with every optional view: gate, lse and the five statistics.
Case full_case() {
  return Case::make("bad input", 2, 3, 10, 4, 2, 16, 8)
      .with_lse()
      .with_gate(GateKind::elementwise)
      .with_stats(1);
}

struct SdpaTensor {
  const char* name;
  int rank;
  std::function<std::int64_t*(ga::SdpaArgs<float>&)> extents;
  std::function<std::int64_t*(ga::SdpaArgs<float>&)> strides;
};

// Every view sdpa reads or writes, with its rank.
std::vector<SdpaTensor> sdpa_tensors() {
  using A = ga::SdpaArgs<float>;
  return {
      {"q", 5, [](A& a) { return a.q.extents.data(); }, [](A& a) { return a.q.strides.data(); }},
      {"k", 4, [](A& a) { return a.k.extents.data(); }, [](A& a) { return a.k.strides.data(); }},
      {"v", 4, [](A& a) { return a.v.extents.data(); }, [](A& a) { return a.v.strides.data(); }},
      {"out", 5, [](A& a) { return a.out.extents.data(); },
       [](A& a) { return a.out.strides.data(); }},
      {"gate", 5, [](A& a) { return a.gate.values.extents.data(); },
       [](A& a) { return a.gate.values.strides.data(); }},
      {"lse", 4, [](A& a) { return a.maybe_lse.extents.data(); },
       [](A& a) { return a.maybe_lse.strides.data(); }},
      {"stats.sink_share", 4, [](A& a) { return a.stats.sink_share.extents.data(); },
       [](A& a) { return a.stats.sink_share.strides.data(); }},
      {"stats.gate_mean", 4, [](A& a) { return a.stats.gate_mean.extents.data(); },
       [](A& a) { return a.stats.gate_mean.strides.data(); }},
      {"stats.gate_below_0_1", 4, [](A& a) { return a.stats.gate_below_0_1.extents.data(); },
       [](A& a) { return a.stats.gate_below_0_1.strides.data(); }},
      {"stats.max_abs_before", 4, [](A& a) { return a.stats.max_abs_before.extents.data(); },
       [](A& a) { return a.stats.max_abs_before.strides.data(); }},
      {"stats.max_abs_after", 4, [](A& a) { return a.stats.max_abs_after.extents.data(); },
       [](A& a) { return a.stats.max_abs_after.strides.data(); }},
  };
}

std::string dim(int d) {
  return "dim " + std::to_string(d);
}

// One row of a bad-input table: the section's name, how it breaks valid arguments, and the parts
// the message must contain.
template <class Args>
struct BadArgs {
  const char* name;
  std::function<void(Args&)> mutate;
  std::vector<std::string> parts;
};

// Runs every row in its own section: check(valid() broken by the row, the row's parts).
template <class Args, class Valid, class Check>
void for_each_row(const std::vector<BadArgs<Args>>& rows, Valid&& valid, Check&& check) {
  for (const BadArgs<Args>& row : rows) {
    DYNAMIC_SECTION(row.name) {
      Args a = valid();
      row.mutate(a);
      check(a, row.parts);
    }
  }
}

using SdpaRows = std::vector<BadArgs<ga::SdpaArgs<float>>>;

float* writable(const float* x) {
  return const_cast<float*>(x);
}

// Each row in its own section, through expect_rejected() on p's valid arguments.
void expect_rows_rejected(Problem& p, const SdpaRows& rows) {
  for_each_row(
      rows, [&] { return p.args(); },
      [&](const ga::SdpaArgs<float>& a, const std::vector<std::string>& parts) {
        expect_rejected(p, a, parts);
      });
}

}  // namespace

TEST_CASE("bad input: sdpa views with negative extents or strides name the tensor and dim",
          "[bad_input][sdpa]") {
  Problem p(full_case());
  REQUIRE(ga::can_implement(p.args()).is_ok());
  for (const SdpaTensor& t : sdpa_tensors()) {
    for (int d = 0; d < t.rank; ++d) {
      INFO(t.name << " " << dim(d));
      {
        ga::SdpaArgs<float> a = p.args();
        t.extents(a)[d] = -1;
        expect_rejected(p, a, {std::string(t.name) + ": " + dim(d), "negative extent"});
      }
      {
        ga::SdpaArgs<float> a = p.args();
        t.strides(a)[d] = -3;
        expect_rejected(p, a, {std::string(t.name) + ": " + dim(d), "negative stride"});
      }
    }
  }
}

TEST_CASE("bad input: sdpa shapes that disagree between q, k, v, out, gate, lse and statistics",
          "[bad_input][sdpa]") {
  Problem p(full_case());
  // The dims each tensor must share with q (and v's length with k's); the others are free.
  struct Tied {
    const char* name;
    std::vector<int> dims;
  };
  const std::vector<Tied> tied = {
      {"k", {0, 2, 3}},
      {"v", {0, 1, 2}},
      {"out", {0, 1, 2, 3, 4}},
      {"gate", {0, 1, 2, 3, 4}},
      {"lse", {0, 1, 2, 3}},
      {"stats.sink_share", {0, 1, 2, 3}},
      {"stats.gate_mean", {0, 1, 2, 3}},
      {"stats.gate_below_0_1", {0, 1, 2, 3}},
      {"stats.max_abs_before", {0, 1, 2, 3}},
      {"stats.max_abs_after", {0, 1, 2, 3}},
  };
  for (const SdpaTensor& t : sdpa_tensors()) {
    for (const Tied& entry : tied) {
      if (std::string(entry.name) != t.name) continue;
      for (int d : entry.dims) {
        INFO(t.name << " " << dim(d));
        ga::SdpaArgs<float> a = p.args();
        const std::int64_t expected = t.extents(a)[d];
        t.extents(a)[d] += 1;
        expect_rejected(
            p, a,
            {std::string(t.name) + ": " + dim(d),
             "expected " + std::to_string(expected) + ", got " + std::to_string(expected + 1)});
      }
    }
  }
}

TEST_CASE("bad input: sdpa innermost strides other than 1 (0 allowed only for the gate)",
          "[bad_input][sdpa]") {
  Problem p(full_case());
  for (const SdpaTensor& t : sdpa_tensors()) {
    for (std::int64_t stride : {0, 2}) {
      const int inner = t.rank - 1;
      INFO(t.name << " innermost stride " << stride);
      ga::SdpaArgs<float> a = p.args();
      t.strides(a)[inner] = stride;
      if (std::string(t.name) == "gate" && stride == 0) {
        CHECK(ga::can_implement(a).is_ok());  // headwise
        continue;
      }
      // Only the innermost dimension's extent is > 1 among the statistics' inner dims here, so a
      // stride of 0 may be reported as a stride or as elements written twice: both name the dim.
      expect_rejected(p, a, {std::string(t.name) + ": " + dim(inner)});
    }
  }
}

TEST_CASE("bad input: sdpa null data pointers", "[bad_input][sdpa]") {
  Problem p(full_case());
  using A = ga::SdpaArgs<float>;
  const SdpaRows rows = {
      {"q", [](A& a) { a.q.data = nullptr; }, {"q: null data pointer"}},
      {"k", [](A& a) { a.k.data = nullptr; }, {"k: null data pointer"}},
      {"v", [](A& a) { a.v.data = nullptr; }, {"v: null data pointer"}},
      {"out", [](A& a) { a.out.data = nullptr; }, {"out: null data pointer"}},
  };
  expect_rows_rejected(p, rows);
  SECTION("null optional views and empty views are valid") {
    // A null gate, lse or statistics view means "none"; a null pointer into an empty view is fine.
    ga::SdpaArgs<float> a = p.args();
    a.gate.values.data = nullptr;
    a.maybe_lse.data = nullptr;
    a.stats.gate_mean.data = nullptr;
    CHECK(ga::can_implement(a).is_ok());
    Problem empty(Case::make("bad input, empty", 0, 3, 10, 4, 2, 16, 8));
    ga::SdpaArgs<float> e = empty.args();
    e.q.data = nullptr;
    e.out.data = nullptr;
    e.k.data = nullptr;
    e.v.data = nullptr;
    CHECK(ga::can_implement(e).is_ok());
    std::vector<std::byte> ws(ga::workspace_size(e, 1));
    CHECK(ga::run(e, ga::Workspace(ws.data(), ws.size())).is_ok());
  }
}

TEST_CASE("bad input: sdpa head counts and head dims", "[bad_input][sdpa]") {
  Problem p(full_case());
  using A = ga::SdpaArgs<float>;
  const ga::TensorView<const float, 4> q_heads(p.q.view);
  const std::int64_t big = ga::kMaxHeadDim + 1;
  const std::string got_big = "got " + std::to_string(big);
  expect_rows_rejected(
      p, {
             // 4 query heads over 3 KV heads: split_heads leaves a group of 0
             {"query heads not a multiple of kv heads",
              [&](A& a) { a.q = ga::split_heads(q_heads, 3); },
              {"q: dim 3", "multiple of kv heads"}},
             {"no kv heads", [](A& a) { a.q.extents[2] = 0; }, {"q: dim 2"}},
             {"dk 0", [](A& a) { a.q.extents[4] = a.k.extents[3] = 0; }, {"q: dim 4", "got 0"}},
             {"dk above the maximum",
              [&](A& a) { a.q.extents[4] = a.k.extents[3] = big; },
              {"q: dim 4", got_big}},
             {"dv 0", [](A& a) { a.v.extents[3] = 0; }, {"v: dim 3", "got 0"}},
             {"dv above the maximum", [&](A& a) { a.v.extents[3] = big; }, {"v: dim 3", got_big}},
         });
}

TEST_CASE("bad input: sdpa outputs that overlap inputs, each other or themselves",
          "[bad_input][sdpa]") {
  Problem p(full_case());
  using A = ga::SdpaArgs<float>;
  expect_rows_rejected(
      p, {
             {"out on v", [](A& a) { a.out.data = writable(a.v.data); }, {"out: overlaps v"}},
             {"out on the gate",
              [](A& a) { a.out.data = writable(a.gate.values.data); },
              {"out: overlaps gate"}},
             {"lse on q", [](A& a) { a.maybe_lse.data = writable(a.q.data); }, {"lse: overlaps q"}},
             {"lse inside out",
              [](A& a) { a.maybe_lse.data = a.out.data + 1; },
              {"lse: overlaps out"}},
             {"a statistic on k",
              [](A& a) { a.stats.max_abs_before.data = writable(a.k.data); },
              {"stats.max_abs_before: overlaps k"}},
             {"a statistic on lse",
              [](A& a) { a.stats.gate_mean.data = a.maybe_lse.data; },
              {"stats.gate_mean: overlaps lse"}},
             {"two statistics on one buffer",
              [](A& a) { a.stats.max_abs_after.data = a.stats.sink_share.data; },
              {"stats.max_abs_after: overlaps stats.sink_share"}},
             {"every query position writes the same row",
              [](A& a) { a.out.strides[1] = 0; },
              {"out: dim 1", "more than once"}},
             {"rows closer than their length (dv 8)",
              [](A& a) { a.out.strides[3] = 4; },
              {"out: dim 3", "more than once"}},
             {"lse rows on one another",
              [](A& a) { a.maybe_lse.strides[0] = 0; },
              {"lse: dim 0", "more than once"}},
         });
}

TEST_CASE("bad input: sdpa windows, kv lengths, statistics and phases", "[bad_input][sdpa]") {
  Problem p(full_case());
  using A = ga::SdpaArgs<float>;
  const std::int64_t below[2] = {10, -1}, above[2] = {10, 11};  // kv_len 10
  expect_rows_rejected(
      p,
      {
          {"window left -2", [](A& a) { a.mask = ga::Mask::window(-2, 0); }, {"mask:", "window"}},
          {"window right -7", [](A& a) { a.mask = ga::Mask::window(3, -7); }, {"mask:", "window"}},
          {"window left at the int64 minimum",
           [](A& a) {
             a.mask = ga::Mask{std::numeric_limits<std::int64_t>::min(), -1};
           },
           {"mask:", "window"}},
          {"a kv length below 0",
           [&](A& a) { a.maybe_kv_lens = below; },
           {"kv_lens: entry 1", "got -1"}},
          {"a kv length above kv_len",
           [&](A& a) { a.maybe_kv_lens = above; },
           {"kv_lens: entry 1", "got 11"}},
          {"n_sink -1", [](A& a) { a.stats.n_sink = -1; }, {"stats.n_sink", "got -1"}},
          // sizes whose element count or span does not fit 64-bit offsets
          {"2^62 keys",
           [](A& a) { a.k.extents[1] = std::int64_t{1} << 62; },
           {"k: dim 1", "64-bit"}},
          {"a stride of half the int64 range",
           [](A& a) { a.v.strides[0] = std::numeric_limits<std::int64_t>::max() / 2; },
           {"v: dim 0", "64-bit"}},
      });
  SECTION("a phase beyond num_phases()") {
    const ga::SdpaArgs<float> a = p.args();
    std::vector<std::byte> ws(ga::workspace_size(a, 2));
    REQUIRE(ga::num_phases(a, 2) == 1);
    for (int phase : {-1, 1, 2}) {
      const ga::Status s = ga::run_phase(a, ga::Workspace(ws.data(), ws.size()), phase, 0, 2);
      INFO("phase " << phase << ": " << s.message());
      CHECK(s.code() == StatusCode::invalid_argument);
      CHECK(contains(s.message(), "phase: expected 0..0"));
    }
    CHECK(ga::run_phase(a, ga::Workspace(ws.data(), ws.size()), 0, 0, 2).is_ok());
  }
}

TEST_CASE("bad input: zero sizes are valid and write nothing", "[bad_input][sdpa]") {
  for (const Case& c : {Case::make("zero batch", 0, 3, 10, 4, 2, 16, 8),
                        Case::make("zero queries", 2, 0, 10, 4, 2, 16, 8),
                        Case::make("zero keys", 2, 3, 0, 4, 2, 16, 8).with_lse()}) {
    INFO(c.name);
    Problem p(c);
    const ga::SdpaArgs<float> a = p.args();
    REQUIRE(ga::can_implement(a).is_ok());
    std::vector<std::byte> ws(ga::workspace_size(a, 1));
    p.reset_outputs();
    REQUIRE(ga::run(a, ga::Workspace(ws.data(), ws.size())).is_ok());
    if (c.kv_len == 0) {  // no key: outputs 0 and lse -inf
      ga::testing::for_each_index(p.out.view.extents,
                                  [&](const auto& i) { CHECK(p.out.view[i] == 0.0f); });
    } else {
      for (float x : p.out.storage) CHECK(x == ga::testing::sdpa::kOutSentinel);
    }
  }
}

namespace {

struct GateBuffers {
  std::vector<float> attn = std::vector<float>(128, 1.0f), gate = std::vector<float>(128, 0.5f),
                     out = std::vector<float>(128, 0.0f);
  ga::OutputGateArgs<float> args() {
    ga::OutputGateArgs<float> a;
    a.attn = ga::TensorView<const float, 5>::contiguous(attn.data(), {1, 2, 2, 2, 8});
    a.gate.values = ga::TensorView<const float, 5>::contiguous(gate.data(), {1, 2, 2, 2, 8});
    a.out = ga::TensorView<float, 5>::contiguous(out.data(), {1, 2, 2, 2, 8});
    return a;
  }
};

void expect_gate_rejected(GateBuffers& b, const ga::OutputGateArgs<float>& args,
                          const std::vector<std::string>& parts) {
  const ga::Status s = ga::can_implement(args);
  const std::string message = s.message();
  INFO("message: " << message);
  CHECK(s.code() == StatusCode::invalid_argument);
  for (const std::string& part : parts) {
    INFO("expected part: " << part);
    CHECK(contains(message, part));
  }
  std::fill(b.out.begin(), b.out.end(), -5.0f);
  const std::vector<float> attn_before = b.attn;
  CHECK(std::string(ga::run(args, ga::Workspace(nullptr, 0)).message()) == message);
  for (float x : b.out) CHECK(x == -5.0f);
  CHECK(b.attn == attn_before);
}

}  // namespace

TEST_CASE("bad input: output gate", "[bad_input][output_gate]") {
  GateBuffers b;
  REQUIRE(ga::can_implement(b.args()).is_ok());
  SECTION("negative extents and strides, and shapes that disagree with attn, in every dim") {
    const char* names[] = {"attn", "gate", "out"};
    for (int t = 0; t < 3; ++t) {
      for (int d = 0; d < 5; ++d) {
        INFO(names[t] << " " << dim(d));
        auto views = [&](ga::OutputGateArgs<float>& a) {
          return t == 0 ? std::make_pair(a.attn.extents.data(), a.attn.strides.data())
                 : t == 1
                     ? std::make_pair(a.gate.values.extents.data(), a.gate.values.strides.data())
                     : std::make_pair(a.out.extents.data(), a.out.strides.data());
        };
        ga::OutputGateArgs<float> a = b.args();
        views(a).first[d] = -1;
        expect_gate_rejected(b, a, {std::string(names[t]) + ": " + dim(d), "negative extent"});
        a = b.args();
        views(a).second[d] = -1;
        expect_gate_rejected(b, a, {std::string(names[t]) + ": " + dim(d), "negative stride"});
        if (t > 0) {  // gate and out must match attn
          a = b.args();
          views(a).first[d] += 1;
          expect_gate_rejected(b, a, {std::string(names[t]) + ": " + dim(d), "expected"});
        }
      }
    }
  }
  using A = ga::OutputGateArgs<float>;
  const std::vector<BadArgs<A>> rows = {
      {"attn innermost stride 2",
       [](A& a) { a.attn.strides[4] = 2; },
       {"attn: dim 4", "innermost stride"}},
      {"gate innermost stride 3",
       [](A& a) { a.gate.values.strides[4] = 3; },
       {"gate: dim 4", "1 or 0"}},
      {"null attn", [](A& a) { a.attn.data = nullptr; }, {"attn: null data pointer"}},
      {"null gate", [](A& a) { a.gate.values.data = nullptr; }, {"gate: null data pointer"}},
      {"null out", [](A& a) { a.out.data = nullptr; }, {"out: null data pointer"}},
      {"out inside the gate",
       [&](A& a) { a.out.data = b.gate.data() + 3; },
       {"out: overlaps gate"}},
      {"out on attn shifted by a row (not in place)",
       [&](A& a) { a.out.data = b.attn.data() + 8; },
       {"out: overlaps attn"}},
      {"out heads on one another",
       [](A& a) { a.out.strides[2] = 0; },
       {"out: dim 2", "more than once"}},
  };
  for_each_row(
      rows, [&] { return b.args(); },
      [&](const A& a, const std::vector<std::string>& parts) {
        expect_gate_rejected(b, a, parts);
      });
  SECTION("in place is allowed: out is attn itself") {
    A a = b.args();
    a.out = ga::TensorView<float, 5>::contiguous(b.attn.data(), {1, 2, 2, 2, 8});
    REQUIRE(ga::run(a, ga::Workspace(nullptr, 0)).is_ok());
    for (std::size_t i = 0; i < 64; ++i) {
      CHECK(b.attn[i] == Approx(1.0 / (1.0 + std::exp(-0.5))).epsilon(1e-6));
    }
    CHECK(b.attn[64] == 1.0f);  // past the view
  }
}

TEST_CASE("bad input: rms_norm, rope and linear arguments", "[bad_input][ops]") {
  std::vector<float> x(64, 1.0f), y(64), w(8, 1.0f);
  std::vector<std::int64_t> positions(4, 0);
  auto view2 = [](float* p, std::int64_t rows, std::int64_t cols) {
    return ga::TensorView<float, 2>::contiguous(p, {rows, cols});
  };
  // validate() names what is wrong.
  const auto expect_named = [](const auto& a, const std::vector<std::string>& parts) {
    const std::string message = ga::validate(a).message();
    INFO("message: " << message);
    for (const std::string& part : parts) CHECK(contains(message, part));
  };
  SECTION("rms_norm") {
    using A = ga::RmsNormArgs<float, 2>;
    A valid;
    valid.x = view2(x.data(), 8, 8);
    valid.out = view2(y.data(), 8, 8);
    valid.maybe_weight = w.data();
    REQUIRE(ga::validate(valid).is_ok());
    const std::vector<BadArgs<A>> rows = {
        {"out narrower than x", [](A& a) { a.out.extents[1] = 7; }, {"out: dim 1"}},
        {"x innermost stride 2", [](A& a) { a.x.strides[1] = 2; }, {"x: dim 1"}},
        {"x negative rows", [](A& a) { a.x.extents[0] = -2; }, {"x: dim 0"}},
        {"null out", [](A& a) { a.out.data = nullptr; }, {"out: null"}},
        {"out on x shifted", [&](A& a) { a.out = view2(x.data() + 1, 8, 8); }, {"out: overlaps x"}},
        {"weight inside out",
         [&](A& a) { a.maybe_weight = y.data() + 5; },
         {"out: overlaps weight"}},
        {"out rows on one another", [](A& a) { a.out.strides[0] = 0; }, {"out: dim 0"}},
        {"negative eps", [](A& a) { a.eps = -1.0f; }, {"eps:"}},
    };
    for_each_row(
        rows, [&] { return valid; }, expect_named);
    SECTION("in place is allowed") {
      A a = valid;
      a.out = view2(x.data(), 8, 8);
      CHECK(ga::validate(a).is_ok());
    }
  }
  SECTION("rope") {
    using A = ga::RopeArgs<float, 3>;
    A valid;
    valid.x = ga::TensorView<const float, 3>::contiguous(x.data(), {2, 2, 16});
    valid.out = ga::TensorView<float, 3>::contiguous(y.data(), {2, 2, 16});
    valid.positions = ga::TensorView<const std::int64_t, 2>::contiguous(positions.data(), {2, 2});
    valid.rotary_dim = 8;
    REQUIRE(ga::validate(valid).is_ok());
    const std::vector<BadArgs<A>> rows = {
        {"positions longer than x", [](A& a) { a.positions.extents[1] = 3; }, {"positions: dim 1"}},
        {"out narrower than x", [](A& a) { a.out.extents[2] = 8; }, {"out: dim 2"}},
        {"odd rotary_dim", [](A& a) { a.rotary_dim = 7; }, {"rotary_dim"}},
        {"rotary_dim above the head dim", [](A& a) { a.rotary_dim = 18; }, {"rotary_dim"}},
        {"x innermost stride 0", [](A& a) { a.x.strides[2] = 0; }, {"x: dim 2"}},
        {"out on positions",
         [&](A& a) { a.out.data = reinterpret_cast<float*>(positions.data()); },
         {"out: overlaps positions"}},
        {"theta 0", [](A& a) { a.theta = 0.0; }, {"theta"}},
    };
    for_each_row(
        rows, [&] { return valid; }, expect_named);
  }
  SECTION("linear") {
    using A = ga::LinearArgs<float>;
    A valid;
    valid.x = view2(x.data(), 4, 8);
    valid.weight = view2(x.data() + 32, 4, 8);
    valid.maybe_bias = w.data();
    valid.y = view2(y.data(), 4, 4);
    REQUIRE(ga::validate(valid).is_ok());
    const std::vector<BadArgs<A>> rows = {
        {"weight narrower than x", [](A& a) { a.weight.extents[1] = 7; }, {"weight: dim 1"}},
        {"y wider than the weight's rows", [](A& a) { a.y.extents[1] = 5; }, {"y: dim 1"}},
        {"y with fewer rows than x", [](A& a) { a.y.extents[0] = 3; }, {"y: dim 0"}},
        {"weight innermost stride 2", [](A& a) { a.weight.strides[1] = 2; }, {"weight: dim 1"}},
        {"null x", [](A& a) { a.x.data = nullptr; }, {"x: null"}},
        {"y inside x", [&](A& a) { a.y = view2(x.data() + 2, 4, 4); }, {"y: overlaps x"}},
        {"bias inside y", [&](A& a) { a.maybe_bias = y.data() + 2; }, {"y: overlaps bias"}},
        {"y rows of 4 outputs, 2 apart", [](A& a) { a.y.strides[0] = 2; }, {"y: dim 0"}},
    };
    for_each_row(
        rows, [&] { return valid; }, expect_named);
  }
}
