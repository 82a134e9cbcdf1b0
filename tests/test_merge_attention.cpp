// ops/merge_attention: parts over disjoint key sets merged into the unsplit result. The reference
// merge against the unsplit reference SDPA; the kernels on every path and activation type against
// the reference merge of the same parts; the library's own SDPA split into parts and merged
// against its unsplit call; bad input.
#include <catch2/catch.hpp>

#include <gated_attention/gated_attention.hpp>

#include "support.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace ga = gated_attention;
using ga::testing::Tensor;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
const ga::Workspace kNoWorkspace(nullptr, 0);  // the merge needs none

enum class Sinks { none, learned, plus_one };

// Heads' sink logits for `kind` (one -inf among them), or null.
const float* sink_logits(Sinks kind, std::vector<float>* storage, std::int64_t heads,
                         std::mt19937_64& rng) {
  if (kind != Sinks::learned) return nullptr;
  *storage = ga::testing::random_vector<float>(rng, heads, -2.0, 3.0);
  (*storage)[0] = kNegInf;
  return storage->data();
}

// Key ranges [bounds[p], bounds[p + 1]) of each part.
using Bounds = std::vector<std::int64_t>;

// An SDPA problem in T over kv_len keys: q, k, v, gate, and views of key range [lo, hi).
template <class T>
struct Problem {
  std::array<std::int64_t, 5> q_extents, out_extents;
  Tensor<T, 5> q, gate;
  Tensor<T, 4> k, v;

  Problem(std::int64_t b, std::int64_t len, std::int64_t kv_heads, std::int64_t group,
          std::int64_t kv_len, std::int64_t d, std::mt19937_64& rng)
      : q_extents{b, len, kv_heads, group, d},
        out_extents{b, len, kv_heads, group, d},
        q(q_extents, rng, -1.0, 1.0),
        gate(out_extents, rng, -3.0, 3.0),
        k({b, kv_len, kv_heads, d}, rng, -1.0, 1.0),
        v({b, kv_len, kv_heads, d}, rng, -2.0, 2.0) {}

  ga::SdpaArgs<T> args(std::int64_t lo, std::int64_t hi, ga::TensorView<T, 5> out,
                       ga::TensorView<float, 4> lse) const {
    ga::SdpaArgs<T> a;
    a.q = q.cview();
    a.k = k.cview();
    a.v = v.cview();
    a.k.data += lo * a.k.strides[1];
    a.v.data += lo * a.v.strides[1];
    a.k.extents[1] = a.v.extents[1] = hi - lo;
    a.out = out;
    a.maybe_lse = lse;
    return a;
  }
  std::array<std::int64_t, 4> rows() const {
    return {q_extents[0], q_extents[1], q_extents[2], q_extents[3]};
  }
};

// The parts of `p` over `bounds`, each through `sdpa` (reference or kernels): outputs and lses.
template <class T, class Sdpa>
void run_parts(const Problem<T>& p, const Bounds& bounds, std::vector<Tensor<T, 5>>* outs,
               std::vector<Tensor<float, 4>>* lses, std::vector<ga::AttentionPart<T>>* parts,
               Sdpa&& sdpa) {
  outs->clear();
  lses->clear();
  parts->clear();
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    outs->emplace_back(p.out_extents);
    lses->emplace_back(p.rows());
  }
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    Tensor<T, 5>& out = (*outs)[i];
    Tensor<float, 4>& lse = (*lses)[i];
    if (bounds[i + 1] == bounds[i]) {  // a part with no keys: what a rank without them sends
      std::fill(lse.data.begin(), lse.data.end(), kNegInf);
    } else {
      const ga::Status s = sdpa(p.args(bounds[i], bounds[i + 1], out.view(), lse.view()));
      INFO(s.message());
      REQUIRE(s.is_ok());
    }
    parts->push_back({out.cview(), lse.cview()});
  }
}

template <class T>
ga::MergeAttentionArgs<T> merge_args(const std::vector<ga::AttentionPart<T>>& parts,
                                     ga::TensorView<T, 5> out, ga::TensorView<float, 4> lse,
                                     Sinks sinks, const float* logits, const ga::GateSpec<T>& g) {
  ga::MergeAttentionArgs<T> m;
  m.parts = parts.data();
  m.num_parts = static_cast<std::int64_t>(parts.size());
  m.out = out;
  m.maybe_lse = lse;
  m.maybe_sink_logits = logits;
  m.softmax_plus_one = sinks == Sinks::plus_one;
  m.gate = g;
  return m;
}

const std::vector<Bounds> kSplits = {{0, 13}, {0, 6, 13}, {0, 1, 5, 5, 13}, {0, 12, 13}};

}  // namespace

TEST_CASE("merge_attention: the reference merge of parts equals the unsplit reference",
          "[merge_attention][reference]") {
  auto rng = ga::testing::make_rng(3501);
  const Problem<double> p(2, 3, 2, 2, 13, 8, rng);
  for (Sinks sinks : {Sinks::none, Sinks::learned, Sinks::plus_one}) {
    std::vector<float> storage;
    const float* logits = sink_logits(sinks, &storage, 4, rng);
    for (bool gated : {false, true}) {
      ga::GateSpec<double> g;
      if (gated) g.values = p.gate.cview();
      Tensor<double, 5> full(p.out_extents);
      Tensor<float, 4> full_lse(p.rows());
      ga::SdpaArgs<double> a = p.args(0, 13, full.view(), full_lse.view());
      a.maybe_sink_logits = logits;
      a.softmax_plus_one = sinks == Sinks::plus_one;
      a.gate = g;
      REQUIRE(ga::reference::sdpa(a).is_ok());
      for (const Bounds& bounds : kSplits) {
        INFO("sinks " << int(sinks) << ", gated " << gated << ", parts " << bounds.size() - 1);
        std::vector<Tensor<double, 5>> outs;
        std::vector<Tensor<float, 4>> lses;
        std::vector<ga::AttentionPart<double>> parts;
        run_parts(p, bounds, &outs, &lses, &parts,
                  [](const ga::SdpaArgs<double>& s) { return ga::reference::sdpa(s); });
        Tensor<double, 5> merged(p.out_extents);
        Tensor<float, 4> merged_lse(p.rows());
        REQUIRE(ga::reference::merge_attention(
                    merge_args(parts, merged.view(), merged_lse.view(), sinks, logits, g))
                    .is_ok());
        // The parts' lse are floats: relative 2^-24 on values of a few units.
        for (std::size_t i = 0; i < full.data.size(); ++i) {
          CHECK(merged.data[i] == Approx(full.data[i]).margin(1e-6));
        }
        for (std::size_t i = 0; i < full_lse.data.size(); ++i) {
          CHECK(merged_lse.data[i] == Approx(full_lse.data[i]).margin(1e-5));
        }
      }
    }
  }
}

namespace {

// The kernels on every path against the reference merge of the same parts (random outputs and
// lses, some -inf), T = float, bf16 or f16. Per element: the f32 sums' rounding and the sigmoid's
// error, plus, in bf16 and f16, one unit in the last place of T (the reference and the kernels
// round to T values that may lie either side of a rounding boundary):
// |got - ref| <= u |ref| + 1e-6 max(1, |ref|) + 4e-7, u = 0 (f32), 2^-7 (bf16), 2^-10 (f16).
template <class T>
void check_kernels(std::uint64_t seed, double u) {
  auto rng = ga::testing::make_rng(seed);
  const std::array<std::int64_t, 5> e = {2, 5, 2, 3, 37};
  const std::array<std::int64_t, 4> rows = {2, 5, 2, 3};
  ga::ThreadPool pool(2);
  for (std::int64_t n : {1, 2, 3, 5}) {
    std::vector<Tensor<T, 5>> outs;
    std::vector<Tensor<float, 4>> lses;
    std::vector<ga::AttentionPart<T>> parts;
    for (std::int64_t i = 0; i < n; ++i) {
      outs.emplace_back(e, rng, -2.0, 2.0);
      lses.emplace_back(rows, rng, -4.0, 30.0);
      for (std::size_t r = static_cast<std::size_t>(i); r < lses.back().data.size(); r += 7) {
        lses.back().data[r] = kNegInf;  // rows this part saw no key of; some rows none saw
      }
    }
    for (std::int64_t i = 0; i < n; ++i) parts.push_back({outs[i].cview(), lses[i].cview()});
    const Tensor<T, 5> gate_values(e, rng, -4.0, 4.0);
    for (Sinks sinks : {Sinks::none, Sinks::learned, Sinks::plus_one}) {
      std::vector<float> storage;
      const float* logits = sink_logits(sinks, &storage, 6, rng);
      for (int gate_kind = 0; gate_kind < 3; ++gate_kind) {
        ga::GateSpec<T> g;
        if (gate_kind > 0) g.values = gate_values.cview();
        if (gate_kind == 2) {  // headwise, SiLU, added
          g.values.strides[4] = 0;
          g.activation = ga::GateActivation::silu;
          g.combine = ga::GateCombine::add;
        }
        Tensor<T, 5> expected(e);
        Tensor<float, 4> expected_lse(rows);
        REQUIRE(ga::reference::merge_attention(
                    merge_args(parts, expected.view(), expected_lse.view(), sinks, logits, g))
                    .is_ok());
        for (const ga::Isa isa : ga::testing::available_isas()) {
          ga::set_isa_limit(isa);
          for (const ga::Executor& executor : {ga::Executor{}, pool.executor()}) {
            INFO("parts " << n << ", sinks " << int(sinks) << ", gate " << gate_kind << ", path "
                          << ga::to_string(isa) << ", workers " << executor.num_workers);
            Tensor<T, 5> out(e, T(777.0f));
            Tensor<float, 4> lse(rows, 555.0f);
            const ga::Status s =
                ga::run(merge_args(parts, out.view(), lse.view(), sinks, logits, g), kNoWorkspace,
                        executor);
            INFO(s.message());
            REQUIRE(s.is_ok());
            double worst = 0.0;
            for (std::size_t i = 0; i < out.data.size(); ++i) {
              const double ref = ga::reference::as_double(expected.data[i]);
              const double got = ga::reference::as_double(out.data[i]);
              const double tol = u * std::fabs(ref) + 1e-6 * std::max(1.0, std::fabs(ref)) + 4e-7;
              ga::testing::track(worst, std::fabs(got - ref) / tol);
            }
            CHECK(worst <= 1.0);
            for (std::size_t i = 0; i < lse.data.size(); ++i) {
              const double ref = expected_lse.data[i];
              if (std::isinf(ref)) {
                CHECK(lse.data[i] == expected_lse.data[i]);
              } else {
                CHECK(std::fabs(lse.data[i] - ref) <= 4e-7 * std::max(1.0, std::fabs(ref)));
              }
            }
          }
        }
        ga::clear_isa_limit();
      }
    }
  }
}

}  // namespace

TEST_CASE("merge_attention: the kernels match the reference merge on every path and type",
          "[merge_attention][isa]") {
  check_kernels<float>(3502, 0.0);
  check_kernels<ga::bf16>(3503, 1.0 / 128);
  check_kernels<ga::f16>(3504, 1.0 / 1024);
}

TEST_CASE("merge_attention: the library's SDPA split over keys and merged equals its unsplit call",
          "[merge_attention][isa]") {
  auto rng = ga::testing::make_rng(3505);
  const Problem<float> p(2, 4, 2, 4, 13, 64, rng);
  std::vector<float> storage;
  const float* logits = sink_logits(Sinks::learned, &storage, 8, rng);
  ga::GateSpec<float> g;
  g.values = p.gate.cview();
  const auto sdpa = [](const ga::SdpaArgs<float>& a) {
    std::vector<std::byte> ws(ga::workspace_size(a, 1));
    return ga::run(a, ga::Workspace(ws.data(), ws.size()));
  };
  for (const ga::Isa isa : ga::testing::available_isas()) {
    ga::set_isa_limit(isa);
    Tensor<float, 5> full(p.out_extents);
    Tensor<float, 4> full_lse(p.rows());
    ga::SdpaArgs<float> a = p.args(0, 13, full.view(), full_lse.view());
    a.maybe_sink_logits = logits;
    a.gate = g;
    REQUIRE(sdpa(a).is_ok());
    for (const Bounds& bounds : kSplits) {
      INFO("path " << ga::to_string(isa) << ", parts " << bounds.size() - 1);
      std::vector<Tensor<float, 5>> outs;
      std::vector<Tensor<float, 4>> lses;
      std::vector<ga::AttentionPart<float>> parts;
      run_parts(p, bounds, &outs, &lses, &parts, sdpa);
      // In place: the merge writes over part 0.
      const ga::Status s =
          ga::run(merge_args(parts, outs[0].view(), lses[0].view(), Sinks::learned, logits, g),
                  kNoWorkspace);
      INFO(s.message());
      REQUIRE(s.is_ok());
      const double worst = ga::testing::max_tolerance_ratio(
          outs[0].data, full.data, ga::testing::kSdpaAtol, ga::testing::kSdpaRtol);
      CHECK(worst <= 1.0);
      for (std::size_t i = 0; i < full_lse.data.size(); ++i) {
        CHECK(std::fabs(lses[0].data[i] - full_lse.data[i]) <= ga::testing::kSdpaLseAtol);
      }
    }
  }
  ga::clear_isa_limit();
}

TEST_CASE("merge_attention: bad input is a Status naming the tensor", "[merge_attention]") {
  const std::array<std::int64_t, 5> e = {1, 2, 1, 2, 8};
  Tensor<float, 5> a(e), b(e), out(e);
  Tensor<float, 4> la({1, 2, 1, 2}), lb({1, 2, 1, 2}), lse({1, 2, 1, 2});
  Tensor<float, 5> wide({1, 2, 1, 2, 9});
  std::vector<ga::AttentionPart<float>> parts = {{a.cview(), la.cview()}, {b.cview(), lb.cview()}};
  const auto message = [&](ga::MergeAttentionArgs<float> m) {
    return std::string(ga::run(m, kNoWorkspace).message());
  };
  ga::MergeAttentionArgs<float> m =
      merge_args(parts, out.view(), lse.view(), Sinks::none, nullptr, ga::GateSpec<float>{});
  CHECK(ga::run(m, kNoWorkspace).is_ok());

  ga::MergeAttentionArgs<float> bad = m;
  bad.num_parts = 0;
  CHECK(message(bad).find("parts: expected at least one part, got 0") != std::string::npos);
  bad = m;
  bad.parts = nullptr;
  CHECK(message(bad).find("null pointer") != std::string::npos);
  parts[1].out = wide.cview();
  CHECK(message(m).find("parts[1].out: dim 4") != std::string::npos);
  parts[1].out = b.cview();
  parts[1].lse = ga::TensorView<const float, 4>::contiguous(lb.data.data(), {1, 1, 1, 2});
  CHECK(message(m).find("parts[1].lse: dim 1") != std::string::npos);
  parts[1].lse = lb.cview();
  bad = m;
  std::vector<float> logits = {0.0f, 0.0f};
  bad.maybe_sink_logits = logits.data();
  bad.softmax_plus_one = true;
  CHECK(message(bad).find("exclusive") != std::string::npos);
  bad = m;
  bad.out = ga::TensorView<float, 5>(b.data.data(), e, b.view().strides);  // b is part 1's out
  CHECK(ga::run(bad, kNoWorkspace).is_ok());                               // in place: allowed
  bad.out.data += 1;  // overlaps part 1's out without being it
  CHECK(message(bad).find("out: overlaps parts[1].out") != std::string::npos);
  bad = m;
  bad.maybe_lse = ga::TensorView<float, 4>(la.data.data() + 1, {1, 2, 1, 2}, la.view().strides);
  CHECK(message(bad).find("lse: overlaps parts[0].lse") != std::string::npos);
}
