// Tests for the reference output gate, RMSNorm, RoPE and linear layer. Expected values come from
// closed forms or hand calculations (written out in the comments), or from small formulas written
// independently here, never from a second call to the code under test.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "support.hpp"

namespace ga = gated_attention;
namespace ref = gated_attention::reference;
using ga::testing::make_rng;
using ga::testing::max_tolerance_ratio;
using ga::testing::Tensor;

namespace {

using Index5 = std::array<std::int64_t, 5>;

using ga::testing::for_each_index;

// sigmoid written through tanh, a different formula from the reference's 1 / (1 + exp(-x)).
double sigmoid_tanh(double x) {
  return 0.5 * (1.0 + std::tanh(0.5 * x));
}

// worst = max(worst, ratio), with NaN making the result infinite rather than being ignored.
void track(double& worst, double ratio) {
  worst = std::isnan(ratio) ? std::numeric_limits<double>::infinity() : std::max(worst, ratio);
}

bool contains(const ga::Status& s, const char* what) {
  return std::string(s.message()).find(what) != std::string::npos;
}

template <class T>
double dbl(T x) {
  return ref::as_double(x);
}

template <class T>
ga::OutputGateArgs<T> gate_args(const ga::TensorView<const T, 5>& attn,
                                const ga::TensorView<const T, 5>& gate,
                                const ga::TensorView<T, 5>& out,
                                ga::GateActivation act = ga::GateActivation::sigmoid,
                                ga::GateCombine combine = ga::GateCombine::multiply) {
  ga::OutputGateArgs<T> args;
  args.attn = attn;
  args.gate.values = gate;
  args.gate.activation = act;
  args.gate.combine = combine;
  args.out = out;
  return args;
}

const Index5 kGateShape = {2, 3, 2, 2, 4};  // [b, len, kv heads, group, d]

}  // namespace

// ------------------------------------------------------------------------------------------------
// Output gate
// ------------------------------------------------------------------------------------------------

TEST_CASE("output gate: sigmoid(0) times attn halves attn exactly", "[reference][output_gate]") {
  auto rng = make_rng(101);
  Tensor<float, 5> attn(kGateShape, rng, -4.0, 4.0);
  Tensor<float, 5> gate(kGateShape, 0.0f);
  Tensor<float, 5> out(kGateShape, std::numeric_limits<float>::quiet_NaN());
  REQUIRE(ref::output_gate(gate_args<float>(attn.cview(), gate.cview(), out.view())).is_ok());
  // sigmoid(0) = 1 / (1 + e^0) = 1/2, and halving a normal float is exact.
  for (std::size_t i = 0; i < attn.data.size(); ++i) {
    INFO("i = " << i);
    REQUIRE(out.data[i] == attn.data[i] * 0.5f);
  }
}

TEST_CASE("output gate: SiLU(0) times attn is zero", "[reference][output_gate]") {
  auto rng = make_rng(102);
  Tensor<float, 5> attn(kGateShape, rng, -4.0, 4.0);
  Tensor<float, 5> gate(kGateShape, 0.0f);
  Tensor<float, 5> out(kGateShape, std::numeric_limits<float>::quiet_NaN());
  REQUIRE(ref::output_gate(
              gate_args<float>(attn.cview(), gate.cview(), out.view(), ga::GateActivation::silu))
              .is_ok());
  // silu(0) = 0 * sigmoid(0) = 0.
  for (float v : out.data) REQUIRE(v == 0.0f);
}

TEST_CASE("output gate: add combine gives attn + sigmoid(g)", "[reference][output_gate]") {
  SECTION("closed-form points") {
    // sigmoid(0) = 1/2, sigmoid(ln 3) = 1 / (1 + 1/3) = 3/4, sigmoid(-ln 3) = 1/4,
    // sigmoid(ln 9) = 9/10.
    const Index5 shape = {1, 1, 1, 1, 4};
    Tensor<float, 5> attn(shape);
    attn.data = {1.0f, -2.0f, 0.5f, 10.0f};
    Tensor<float, 5> gate(shape);
    gate.data = {0.0f, static_cast<float>(std::log(3.0)), static_cast<float>(-std::log(3.0)),
                 static_cast<float>(std::log(9.0))};
    Tensor<float, 5> out(shape);
    REQUIRE(ref::output_gate(gate_args<float>(attn.cview(), gate.cview(), out.view(),
                                              ga::GateActivation::sigmoid, ga::GateCombine::add))
                .is_ok());
    CHECK(out.data[0] == Approx(1.5).epsilon(1e-6));
    CHECK(out.data[1] == Approx(-1.25).epsilon(1e-6));
    CHECK(out.data[2] == Approx(0.75).epsilon(1e-6));
    CHECK(out.data[3] == Approx(10.9).epsilon(1e-6));
  }
  SECTION("random values against the tanh form of sigmoid") {
    auto rng = make_rng(103);
    Tensor<float, 5> attn(kGateShape, rng, -3.0, 3.0);
    Tensor<float, 5> gate(kGateShape, rng, -6.0, 6.0);
    Tensor<float, 5> out(kGateShape);
    REQUIRE(ref::output_gate(gate_args<float>(attn.cview(), gate.cview(), out.view(),
                                              ga::GateActivation::sigmoid, ga::GateCombine::add))
                .is_ok());
    std::vector<double> expected(attn.data.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      expected[i] = attn.data[i] + sigmoid_tanh(gate.data[i]);
    }
    CHECK(max_tolerance_ratio(out.data, expected, 1e-6, 1e-6) <= 1.0);
  }
}

TEST_CASE("output gate: SiLU values at hand-computed points", "[reference][output_gate]") {
  // silu(x) = x * sigmoid(x):
  //   silu(1)   =  1 * 0.7310585786300049  =  0.7310585786300049
  //   silu(-1)  = -1 * 0.2689414213699951  = -0.2689414213699951
  //   silu(2)   =  2 * 0.8807970779778823  =  1.7615941559557646
  //   silu(-2)  = -2 * 0.11920292202211755 = -0.2384058440442351
  //   silu(0.5) = 0.5 * 0.6224593312018546 =  0.3112296656009273
  //   silu(3)   =  3 * 0.9525741268224334  =  2.8577223804673
  const Index5 shape = {1, 1, 1, 2, 3};
  const std::vector<float> g = {1.0f, -1.0f, 2.0f, -2.0f, 0.5f, 3.0f};
  const std::vector<double> silu = {0.7310585786300049,  -0.2689414213699951, 1.7615941559557646,
                                    -0.2384058440442351, 0.3112296656009273,  2.8577223804673};
  Tensor<float, 5> gate(shape);
  gate.data = g;
  SECTION("multiply by attn = 1 gives silu(g)") {
    Tensor<float, 5> attn(shape, 1.0f);
    Tensor<float, 5> out(shape);
    REQUIRE(ref::output_gate(
                gate_args<float>(attn.cview(), gate.cview(), out.view(), ga::GateActivation::silu))
                .is_ok());
    for (std::size_t i = 0; i < g.size(); ++i) {
      INFO("g = " << g[i]);
      CHECK(out.data[i] == Approx(silu[i]).epsilon(1e-6));
    }
  }
  SECTION("multiply by attn = -3 gives -3 silu(g)") {
    Tensor<float, 5> attn(shape, -3.0f);
    Tensor<float, 5> out(shape);
    REQUIRE(ref::output_gate(
                gate_args<float>(attn.cview(), gate.cview(), out.view(), ga::GateActivation::silu))
                .is_ok());
    for (std::size_t i = 0; i < g.size(); ++i) {
      INFO("g = " << g[i]);
      CHECK(out.data[i] == Approx(-3.0 * silu[i]).epsilon(1e-6));
    }
  }
  SECTION("add to attn = 0.25 gives 0.25 + silu(g)") {
    Tensor<float, 5> attn(shape, 0.25f);
    Tensor<float, 5> out(shape);
    REQUIRE(ref::output_gate(gate_args<float>(attn.cview(), gate.cview(), out.view(),
                                              ga::GateActivation::silu, ga::GateCombine::add))
                .is_ok());
    for (std::size_t i = 0; i < g.size(); ++i) {
      INFO("g = " << g[i]);
      CHECK(out.data[i] == Approx(0.25 + silu[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("output gate: broadcast gate variants", "[reference][output_gate]") {
  auto rng = make_rng(104);
  const Index5 e = kGateShape;
  const std::int64_t B = e[0], L = e[1], KV = e[2], G = e[3], D = e[4];
  Tensor<float, 5> attn(e, rng, -2.0, 2.0);
  Tensor<float, 5> out(e, std::numeric_limits<float>::quiet_NaN());

  // Expected: attn[idx] * sigmoid(g_of(idx)), with g_of reading the compact gate storage.
  auto check = [&](const ga::TensorView<const float, 5>& gate_view, auto g_of) {
    REQUIRE(ga::validate(gate_args<float>(attn.cview(), gate_view, out.view())).is_ok());
    REQUIRE(ref::output_gate(gate_args<float>(attn.cview(), gate_view, out.view())).is_ok());
    const auto a = attn.cview();
    const auto o = out.view();
    double worst = 0.0;
    for_each_index(e, [&](const Index5& i) {
      const double expected = dbl(a[i]) * sigmoid_tanh(g_of(i));
      track(worst, std::fabs(dbl(o[i]) - expected) / (1e-6 + 1e-6 * std::fabs(expected)));
    });
    CHECK(worst <= 1.0);
  };

  SECTION("headwise: stride 0 over d, one value per (token, head)") {
    Tensor<float, 4> g({B, L, KV, G}, rng, -3.0, 3.0);
    const ga::TensorView<const float, 5> view(g.data.data(), e, {L * KV * G, KV * G, G, 1, 0});
    check(view, [&](const Index5& i) {
      return static_cast<double>(
          g.data[static_cast<std::size_t>(((i[0] * L + i[1]) * KV + i[2]) * G + i[3])]);
    });
    // With attn = 1 every dim of a head carries the same activated value.
    std::fill(attn.data.begin(), attn.data.end(), 1.0f);
    REQUIRE(ref::output_gate(gate_args<float>(attn.cview(), view, out.view())).is_ok());
    const auto o = out.view();
    for_each_index(e, [&](const Index5& i) { CHECK(o[i] == o(i[0], i[1], i[2], i[3], 0)); });
  }
  SECTION("head-shared: stride 0 over kv heads and group") {
    Tensor<float, 3> g({B, L, D}, rng, -3.0, 3.0);
    const ga::TensorView<const float, 5> view(g.data.data(), e, {L * D, D, 0, 0, 1});
    check(view, [&](const Index5& i) {
      return static_cast<double>(g.data[static_cast<std::size_t>((i[0] * L + i[1]) * D + i[4])]);
    });
  }
  SECTION("query-independent: stride 0 over batch and length") {
    Tensor<float, 3> g({KV, G, D}, rng, -3.0, 3.0);
    const ga::TensorView<const float, 5> view(g.data.data(), e, {0, 0, G * D, D, 1});
    check(view, [&](const Index5& i) {
      return static_cast<double>(g.data[static_cast<std::size_t>((i[2] * G + i[3]) * D + i[4])]);
    });
  }
  SECTION("scalar gate: stride 0 everywhere") {
    const float g = 0.75f;
    const ga::TensorView<const float, 5> view(&g, e, {0, 0, 0, 0, 0});
    check(view, [&](const Index5&) { return 0.75; });
  }
}

TEST_CASE("output gate: in place matches out of place", "[reference][output_gate]") {
  auto rng = make_rng(105);
  Tensor<float, 5> attn(kGateShape, rng, -2.0, 2.0);
  Tensor<float, 5> gate(kGateShape, rng, -4.0, 4.0);
  const std::vector<float> original = attn.data;
  for (auto act : {ga::GateActivation::sigmoid, ga::GateActivation::silu}) {
    for (auto combine : {ga::GateCombine::multiply, ga::GateCombine::add}) {
      attn.data = original;
      Tensor<float, 5> out(kGateShape);
      REQUIRE(
          ref::output_gate(gate_args<float>(attn.cview(), gate.cview(), out.view(), act, combine))
              .is_ok());
      // In place: out is the attn view itself.
      REQUIRE(
          ref::output_gate(gate_args<float>(attn.cview(), gate.cview(), attn.view(), act, combine))
              .is_ok());
      CHECK(attn.data == out.data);
      // And both match the formula.
      std::vector<double> expected(original.size());
      for (std::size_t i = 0; i < original.size(); ++i) {
        const double g = gate.data[i];
        const double a = act == ga::GateActivation::sigmoid ? sigmoid_tanh(g) : g * sigmoid_tanh(g);
        expected[i] = combine == ga::GateCombine::multiply ? original[i] * a : original[i] + a;
      }
      CHECK(max_tolerance_ratio(attn.data, expected, 1e-6, 1e-6) <= 1.0);
    }
  }
}

TEST_CASE("output gate: saturated gates are exact and never NaN", "[reference][output_gate]") {
  auto rng = make_rng(106);
  Tensor<float, 5> attn(kGateShape, rng, -5.0, 5.0);
  Tensor<float, 5> out(kGateShape);
  Tensor<float, 5> big(kGateShape, 1e4f);
  Tensor<float, 5> small(kGateShape, -1e4f);
  auto run = [&](const Tensor<float, 5>& gate, ga::GateActivation act, ga::GateCombine combine) {
    std::fill(out.data.begin(), out.data.end(), std::numeric_limits<float>::quiet_NaN());
    REQUIRE(ref::output_gate(gate_args<float>(attn.cview(), gate.cview(), out.view(), act, combine))
                .is_ok());
    for (float v : out.data) REQUIRE_FALSE(std::isnan(v));
  };
  using A = ga::GateActivation;
  using C = ga::GateCombine;
  SECTION("sigmoid(+1e4) * attn == attn") {
    run(big, A::sigmoid, C::multiply);
    CHECK(out.data == attn.data);
  }
  SECTION("sigmoid(-1e4) * attn == 0") {
    run(small, A::sigmoid, C::multiply);
    for (float v : out.data) CHECK(v == 0.0f);
  }
  SECTION("silu(-1e4) * attn == 0, not NaN") {
    // -1e4 * sigmoid(-1e4) = -1e4 * 0 (exp(1e4) overflows to Inf) = -0, not Inf * 0.
    run(small, A::silu, C::multiply);
    for (float v : out.data) CHECK(v == 0.0f);
  }
  SECTION("silu(+1e4) * attn == 1e4 * attn") {
    run(big, A::silu, C::multiply);
    for (std::size_t i = 0; i < out.data.size(); ++i) CHECK(out.data[i] == attn.data[i] * 1e4f);
  }
  SECTION("attn + sigmoid(-1e4) == attn and attn + silu(-1e4) == attn") {
    run(small, A::sigmoid, C::add);
    CHECK(out.data == attn.data);
    run(small, A::silu, C::add);
    CHECK(out.data == attn.data);
  }
  SECTION("attn + sigmoid(+1e4) == attn + 1") {
    run(big, A::sigmoid, C::add);
    for (std::size_t i = 0; i < out.data.size(); ++i) CHECK(out.data[i] == attn.data[i] + 1.0f);
  }
}

TEST_CASE("output gate: validation", "[reference][output_gate]") {
  const Index5 e = kGateShape;
  Tensor<float, 5> attn(e, 1.0f);
  Tensor<float, 5> gate(e, 0.0f);
  Tensor<float, 5> out(e, -7.0f);

  SECTION("valid arguments are accepted") {
    CHECK(ga::validate(gate_args<float>(attn.cview(), gate.cview(), out.view())).is_ok());
  }
  SECTION("gate extents mismatch names the gate and the dim") {
    Tensor<float, 5> bad({2, 3, 2, 2, 3});
    const auto s = ga::validate(gate_args<float>(attn.cview(), bad.cview(), out.view()));
    CHECK_FALSE(s.is_ok());
    CHECK(s.code() == ga::StatusCode::invalid_argument);
    INFO(s.message());
    CHECK(contains(s, "gate"));
    CHECK(contains(s, "dim 4"));
    CHECK(contains(s, "expected 4, got 3"));
    // The reference refuses and leaves out alone.
    CHECK_FALSE(ref::output_gate(gate_args<float>(attn.cview(), bad.cview(), out.view())).is_ok());
    for (float v : out.data) CHECK(v == -7.0f);
  }
  SECTION("gate mismatch over kv heads names that dim") {
    Tensor<float, 5> bad({2, 3, 1, 2, 4});
    const auto s = ga::validate(gate_args<float>(attn.cview(), bad.cview(), out.view()));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "gate"));
    CHECK(contains(s, "dim 2"));
    CHECK(contains(s, "kv heads"));
  }
  SECTION("out extents mismatch names out") {
    Tensor<float, 5> bad({2, 3, 2, 2, 5});
    const auto s = ga::validate(gate_args<float>(attn.cview(), gate.cview(), bad.view()));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "out"));
    CHECK(contains(s, "dim 4"));
  }
  SECTION("out partially overlapping attn is rejected") {
    std::vector<float> buffer(static_cast<std::size_t>(attn.cview().num_elements() + 1), 1.0f);
    const auto a = ga::TensorView<const float, 5>::contiguous(buffer.data(), e);
    const auto o = ga::TensorView<float, 5>::contiguous(buffer.data() + 1, e);
    const auto s = ga::validate(gate_args<float>(a, gate.cview(), o));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "overlaps"));
    CHECK(contains(s, "attn"));
    const std::vector<float> before = buffer;
    CHECK_FALSE(ref::output_gate(gate_args<float>(a, gate.cview(), o)).is_ok());
    CHECK(buffer == before);
  }
  SECTION("out overlapping the gate is rejected") {
    const auto s = ga::validate(gate_args<float>(attn.cview(), gate.cview(), gate.view()));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "overlaps"));
    CHECK(contains(s, "gate"));
  }
  SECTION("innermost stride 2 on attn is rejected") {
    std::vector<float> buffer(static_cast<std::size_t>(2 * attn.cview().num_elements()), 1.0f);
    auto a = ga::TensorView<const float, 5>::contiguous(buffer.data(), e);
    for (auto& st : a.strides) st *= 2;
    const auto s = ga::validate(gate_args<float>(a, gate.cview(), out.view()));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "attn"));
    CHECK(contains(s, "innermost stride"));
  }
  SECTION("null gate is rejected") {
    const auto s = ga::validate(
        gate_args<float>(attn.cview(), ga::TensorView<const float, 5>(nullptr, e, {}), out.view()));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "gate"));
    CHECK_FALSE(ref::output_gate(
                    gate_args<float>(attn.cview(), ga::TensorView<const float, 5>(), out.view()))
                    .is_ok());
  }
  SECTION("innermost stride 2 on the gate is rejected, stride 0 accepted") {
    std::vector<float> buffer(static_cast<std::size_t>(2 * attn.cview().num_elements()), 0.0f);
    auto g = ga::TensorView<const float, 5>::contiguous(buffer.data(), e);
    for (auto& st : g.strides) st *= 2;
    CHECK_FALSE(ga::validate(gate_args<float>(attn.cview(), g, out.view())).is_ok());
    g.strides[4] = 0;
    CHECK(ga::validate(gate_args<float>(attn.cview(), g, out.view())).is_ok());
  }
}

TEMPLATE_TEST_CASE("output gate: 16-bit element types", "[reference][output_gate]", ga::bf16,
                   ga::f16) {
  using T = TestType;
  auto rng = make_rng(107);
  Tensor<T, 5> attn(kGateShape, rng, -3.0, 3.0);
  Tensor<T, 5> gate(kGateShape, rng, -4.0, 4.0);
  Tensor<T, 5> out(kGateShape);
  // One rounding of the exact result to T: relative error <= 2^-8 (bf16) or 2^-11 (f16).
  const double rtol = std::is_same_v<T, ga::bf16> ? 1.0 / 256.0 : 1.0 / 2048.0;
  for (auto act : {ga::GateActivation::sigmoid, ga::GateActivation::silu}) {
    for (auto combine : {ga::GateCombine::multiply, ga::GateCombine::add}) {
      REQUIRE(ref::output_gate(gate_args<T>(attn.cview(), gate.cview(), out.view(), act, combine))
                  .is_ok());
      std::vector<double> expected(attn.data.size());
      for (std::size_t i = 0; i < expected.size(); ++i) {
        const double g = dbl(gate.data[i]);
        const double a = act == ga::GateActivation::sigmoid ? sigmoid_tanh(g) : g * sigmoid_tanh(g);
        expected[i] =
            combine == ga::GateCombine::multiply ? dbl(attn.data[i]) * a : dbl(attn.data[i]) + a;
      }
      CHECK(max_tolerance_ratio(out.data, expected, 1e-7, rtol) <= 1.0);
    }
  }
  // sigmoid(0) halves attn exactly in T as well.
  Tensor<T, 5> zero(kGateShape, ga::reference::from_double<T>(0.0));
  REQUIRE(ref::output_gate(gate_args<T>(attn.cview(), zero.cview(), out.view())).is_ok());
  for (std::size_t i = 0; i < out.data.size(); ++i) {
    CHECK(dbl(out.data[i]) == dbl(attn.data[i]) * 0.5);
  }
}

// ------------------------------------------------------------------------------------------------
// RMSNorm
// ------------------------------------------------------------------------------------------------

namespace {

// Independent RMSNorm of one row: x / sqrt(mean(x^2) + eps) * scale.
std::vector<double> rms_row(const std::vector<double>& x, const std::vector<double>& scale,
                            double eps) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double rms = std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] / rms * (scale.empty() ? 1.0 : scale[i]);
  return y;
}

template <int Rank>
ga::RmsNormArgs<float, Rank> rms_args(const ga::TensorView<const float, Rank>& x,
                                      const ga::TensorView<float, Rank>& out, float eps,
                                      const float* weight = nullptr,
                                      ga::RmsNormWeight w = ga::RmsNormWeight::standard) {
  ga::RmsNormArgs<float, Rank> args;
  args.x = x;
  args.out = out;
  args.eps = eps;
  args.maybe_weight = weight;
  args.weighting = w;
  return args;
}

// Runs rms_norm over the view `x`/`out` and checks every row against rms_row().
template <int Rank>
void check_rms_rows(const ga::TensorView<const float, Rank>& x,
                    const ga::TensorView<float, Rank>& out, const std::vector<float>& weight,
                    float eps) {
  REQUIRE(
      ref::rms_norm(rms_args<Rank>(x, out, eps, weight.empty() ? nullptr : weight.data())).is_ok());
  const std::int64_t d = x.extents[Rank - 1];
  std::array<std::int64_t, Rank> rows = x.extents;
  rows[Rank - 1] = 1;
  const std::vector<double> scale(weight.begin(), weight.end());
  double worst = 0.0;
  for_each_index(rows, [&](std::array<std::int64_t, Rank> i) {
    std::vector<double> row;
    for (std::int64_t k = 0; k < d; ++k) {
      i[Rank - 1] = k;
      row.push_back(x[i]);
    }
    const auto y = rms_row(row, scale, eps);
    for (std::int64_t k = 0; k < d; ++k) {
      i[Rank - 1] = k;
      const double e = y[static_cast<std::size_t>(k)];
      track(worst, std::fabs(out[i] - e) / (1e-6 + 1e-6 * std::fabs(e)));
    }
  });
  CHECK(worst <= 1.0);
}

}  // namespace

TEST_CASE("rms_norm: hand example x = 3 and 4", "[reference][rms_norm]") {
  // mean(x^2) = (9 + 16) / 2 = 12.5, rms = sqrt(12.5) = 3.5355339059327378:
  //   3 / rms = 0.848528137423857, 4 / rms = 1.131370849898476.
  Tensor<float, 2> x({1, 2});
  x.data = {3.0f, 4.0f};
  Tensor<float, 2> out({1, 2});

  SECTION("no weight") {
    REQUIRE(ref::rms_norm(rms_args<2>(x.cview(), out.view(), 0.0f)).is_ok());
    CHECK(out.data[0] == Approx(0.848528137423857).epsilon(1e-6));
    CHECK(out.data[1] == Approx(1.131370849898476).epsilon(1e-6));
  }
  SECTION("standard weight multiplies") {
    // w = [2, -0.5]: [1.697056274847714, -0.565685424949238].
    const std::vector<float> w = {2.0f, -0.5f};
    REQUIRE(ref::rms_norm(rms_args<2>(x.cview(), out.view(), 0.0f, w.data())).is_ok());
    CHECK(out.data[0] == Approx(1.697056274847714).epsilon(1e-6));
    CHECK(out.data[1] == Approx(-0.565685424949238).epsilon(1e-6));
  }
  SECTION("zero-centred weight 0 equals no weight") {
    const std::vector<float> w = {0.0f, 0.0f};
    REQUIRE(ref::rms_norm(rms_args<2>(x.cview(), out.view(), 0.0f, w.data(),
                                      ga::RmsNormWeight::zero_centered))
                .is_ok());
    CHECK(out.data[0] == Approx(0.848528137423857).epsilon(1e-6));
    CHECK(out.data[1] == Approx(1.131370849898476).epsilon(1e-6));
  }
  SECTION("standard weight 0 zeroes the row") {
    const std::vector<float> w = {0.0f, 0.0f};
    REQUIRE(ref::rms_norm(rms_args<2>(x.cview(), out.view(), 0.0f, w.data())).is_ok());
    CHECK(out.data[0] == 0.0f);
    CHECK(out.data[1] == 0.0f);
  }
  SECTION("zero-centred w equals standard 1 + w") {
    // 1 + [1, -1.5] = [2, -0.5]: the standard-weight values above.
    const std::vector<float> w = {1.0f, -1.5f};
    REQUIRE(ref::rms_norm(rms_args<2>(x.cview(), out.view(), 0.0f, w.data(),
                                      ga::RmsNormWeight::zero_centered))
                .is_ok());
    CHECK(out.data[0] == Approx(1.697056274847714).epsilon(1e-6));
    CHECK(out.data[1] == Approx(-0.565685424949238).epsilon(1e-6));
  }
  SECTION("scaling x does not change the result when eps = 0") {
    x.data = {-300.0f, -400.0f};
    REQUIRE(ref::rms_norm(rms_args<2>(x.cview(), out.view(), 0.0f)).is_ok());
    CHECK(out.data[0] == Approx(-0.848528137423857).epsilon(1e-6));
    CHECK(out.data[1] == Approx(-1.131370849898476).epsilon(1e-6));
  }
}

TEST_CASE("rms_norm: zero-centred and standard weights on random rows", "[reference][rms_norm]") {
  auto rng = make_rng(201);
  const std::int64_t D = 16;
  Tensor<float, 2> x({5, D}, rng, -2.0, 2.0);
  // Weights on a 1/64 grid, so that 1 + w is exact in float.
  auto w = ga::testing::random_vector<float>(rng, D, -0.5, 0.5);
  for (auto& v : w) v = std::round(v * 64.0f) / 64.0f;
  std::vector<float> one_plus_w(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) one_plus_w[i] = 1.0f + w[i];
  Tensor<float, 2> zc({5, D}), st({5, D});
  REQUIRE(ref::rms_norm(
              rms_args<2>(x.cview(), zc.view(), 1e-6f, w.data(), ga::RmsNormWeight::zero_centered))
              .is_ok());
  REQUIRE(ref::rms_norm(rms_args<2>(x.cview(), st.view(), 1e-6f, one_plus_w.data())).is_ok());
  CHECK(zc.data == st.data);
  // And against the formula with scale 1 + w.
  check_rms_rows<2>(x.cview(), st.view(), one_plus_w, 1e-6f);
}

TEST_CASE("rms_norm: eps on tiny and zero rows", "[reference][rms_norm]") {
  Tensor<float, 2> x({3, 2});
  // Row 0: zeros. Row 1: [1e-3, -1e-3], mean(x^2) = 1e-6. Row 2: [3, 4].
  x.data = {0.0f, 0.0f, 1e-3f, -1e-3f, 3.0f, 4.0f};
  Tensor<float, 2> out({3, 2}, std::numeric_limits<float>::quiet_NaN());
  SECTION("eps = 1e-6") {
    REQUIRE(ref::rms_norm(rms_args<2>(x.cview(), out.view(), 1e-6f)).is_ok());
    // A zero row stays zero (0 / sqrt(eps)), not NaN.
    CHECK(out.data[0] == 0.0f);
    CHECK(out.data[1] == 0.0f);
    // 1e-3 / sqrt(1e-6 + 1e-6) = 1 / sqrt(2) = 0.7071067811865476.
    CHECK(out.data[2] == Approx(0.7071067811865476).epsilon(1e-5));
    CHECK(out.data[3] == Approx(-0.7071067811865476).epsilon(1e-5));
    // eps barely moves a row of rms 3.5: 3 / sqrt(12.5 + 1e-6) = 0.8485281034...
    CHECK(out.data[4] == Approx(0.848528137423857).epsilon(1e-6));
  }
  SECTION("eps = 0") {
    REQUIRE(ref::rms_norm(rms_args<2>(x.cview(), out.view(), 0.0f)).is_ok());
    // 1e-3 / sqrt(1e-6) = 1.
    CHECK(out.data[2] == Approx(1.0).epsilon(1e-5));
    CHECK(out.data[3] == Approx(-1.0).epsilon(1e-5));
  }
  SECTION("large eps dominates") {
    // 3 / sqrt(12.5 + 87.5) = 0.3, 4 / 10 = 0.4.
    REQUIRE(ref::rms_norm(rms_args<2>(x.cview(), out.view(), 87.5f)).is_ok());
    CHECK(out.data[4] == Approx(0.3).epsilon(1e-6));
    CHECK(out.data[5] == Approx(0.4).epsilon(1e-6));
    CHECK(out.data[0] == 0.0f);
  }
}

TEST_CASE("rms_norm: strided rows and views of rank 2 to 5", "[reference][rms_norm]") {
  auto rng = make_rng(202);
  const std::int64_t D = 8;
  const auto w = ga::testing::random_vector<float>(rng, D, 0.5, 1.5);

  SECTION("rank 2 with padded rows leaves the padding alone") {
    const std::int64_t rows = 4, pitch = D + 3;
    std::vector<float> xb = ga::testing::random_vector<float>(rng, rows * pitch, -2.0, 2.0);
    std::vector<float> ob(static_cast<std::size_t>(rows * pitch), 99.0f);
    const ga::TensorView<const float, 2> x(xb.data(), {rows, D}, {pitch, 1});
    const ga::TensorView<float, 2> out(ob.data(), {rows, D}, {pitch, 1});
    check_rms_rows<2>(x, out, w, 1e-6f);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t k = D; k < pitch; ++k)
        CHECK(ob[static_cast<std::size_t>(r * pitch + k)] == 99.0f);
    }
  }
  SECTION("rank 3 with swapped outer dims") {
    // Logical [3, 2, D] stored as [2, 3, D].
    std::vector<float> xb = ga::testing::random_vector<float>(rng, 3 * 2 * D, -2.0, 2.0);
    const ga::TensorView<const float, 3> x(xb.data(), {3, 2, D}, {D, 3 * D, 1});
    Tensor<float, 3> out({3, 2, D});
    check_rms_rows<3>(x, out.view(), {}, 1e-5f);
  }
  SECTION("rank 5, non-contiguous x and out") {
    const std::array<std::int64_t, 5> e = {2, 2, 3, 2, D};
    // x rows 2 apart within a [2, 2, 3, 2, 2 D] buffer; out with a permuted layout.
    std::vector<float> xb =
        ga::testing::random_vector<float>(rng, 2 * 2 * 3 * 2 * 2 * D, -3.0, 3.0);
    const ga::TensorView<const float, 5> x(xb.data(), e,
                                           {2 * 3 * 2 * 2 * D, 3 * 2 * 2 * D, 2 * 2 * D, 2 * D, 1});
    std::vector<float> ob(static_cast<std::size_t>(2 * 2 * 3 * 2 * D));
    // out stored [group, kv, len, batch, D].
    const ga::TensorView<float, 5> out(ob.data(), e, {D, 2 * D, 2 * 2 * D, 3 * 2 * 2 * D, 1});
    check_rms_rows<5>(x, out, w, 1e-6f);
  }
  SECTION("broadcast rows (stride 0) give identical rows") {
    std::vector<float> xb = ga::testing::random_vector<float>(rng, D, -1.0, 1.0);
    const ga::TensorView<const float, 2> x(xb.data(), {3, D}, {0, 1});
    Tensor<float, 2> out({3, D});
    check_rms_rows<2>(x, out.view(), w, 1e-6f);
    for (std::int64_t k = 0; k < D; ++k) {
      CHECK(out.data[static_cast<std::size_t>(k)] == out.data[static_cast<std::size_t>(2 * D + k)]);
    }
  }
}

TEST_CASE("rms_norm: in place", "[reference][rms_norm]") {
  auto rng = make_rng(203);
  const std::int64_t D = 12;
  Tensor<float, 3> x({2, 3, D}, rng, -2.0, 2.0);
  const auto w = ga::testing::random_vector<float>(rng, D, -0.5, 0.5);
  Tensor<float, 3> out({2, 3, D});
  REQUIRE(ref::rms_norm(ga::RmsNormArgs<float, 3>{x.cview(), w.data(), out.view(), 1e-6f,
                                                  ga::RmsNormWeight::zero_centered})
              .is_ok());
  const Tensor<float, 3> original = x;
  REQUIRE(ref::rms_norm(ga::RmsNormArgs<float, 3>{x.cview(), w.data(), x.view(), 1e-6f,
                                                  ga::RmsNormWeight::zero_centered})
              .is_ok());
  CHECK(x.data == out.data);
  std::vector<float> scale(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) scale[i] = 1.0f + w[i];
  Tensor<float, 3> check_out({2, 3, D});
  check_rms_rows<3>(original.cview(), check_out.view(), scale, 1e-6f);
  CHECK(max_tolerance_ratio(x.data, check_out.data, 1e-6, 1e-6) <= 1.0);
}

TEST_CASE("rms_norm: validation", "[reference][rms_norm]") {
  Tensor<float, 2> x({2, 4}, 1.0f);
  Tensor<float, 2> out({2, 4}, -7.0f);
  CHECK(ga::validate(rms_args<2>(x.cview(), out.view(), 0.0f)).is_ok());
  CHECK(ga::validate(rms_args<2>(x.cview(), out.view(), 1e-6f)).is_ok());
  for (float eps :
       {-1e-6f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    INFO("eps = " << eps);
    const auto s = ga::validate(rms_args<2>(x.cview(), out.view(), eps));
    CHECK_FALSE(s.is_ok());
    CHECK(contains(s, "eps"));
    CHECK_FALSE(ref::rms_norm(rms_args<2>(x.cview(), out.view(), eps)).is_ok());
  }
  for (float v : out.data) CHECK(v == -7.0f);
  {
    Tensor<float, 2> bad({2, 5});
    const auto s = ga::validate(rms_args<2>(x.cview(), bad.view(), 1e-6f));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "out"));
    CHECK(contains(s, "dim 1"));
  }
  {
    Tensor<float, 2> bad({3, 4});
    const auto s = ga::validate(rms_args<2>(x.cview(), bad.view(), 1e-6f));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "out"));
    CHECK(contains(s, "dim 0"));
  }
  {
    std::vector<float> buffer(9, 1.0f);
    const auto xs = ga::TensorView<const float, 2>::contiguous(buffer.data(), {2, 4});
    const auto os = ga::TensorView<float, 2>::contiguous(buffer.data() + 1, {2, 4});
    const auto s = ga::validate(rms_args<2>(xs, os, 1e-6f));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "overlaps"));
  }
}

// ------------------------------------------------------------------------------------------------
// RoPE
// ------------------------------------------------------------------------------------------------

namespace {

template <class T, int Rank>
ga::RopeArgs<T, Rank> rope_args(const ga::TensorView<const T, Rank>& x,
                                const ga::TensorView<const std::int64_t, 2>& positions,
                                const ga::TensorView<T, Rank>& out, std::int64_t rotary_dim,
                                double theta = 10000.0) {
  ga::RopeArgs<T, Rank> args;
  args.x = x;
  args.positions = positions;
  args.out = out;
  args.rotary_dim = rotary_dim;
  args.theta = theta;
  return args;
}

// Independent rotate-half RoPE of one head vector.
std::vector<double> rope_row(std::vector<double> x, double pos, std::int64_t rotary_dim,
                             double theta) {
  const std::size_t half = static_cast<std::size_t>(rotary_dim / 2);
  for (std::size_t i = 0; i < half; ++i) {
    // theta^(-2i / r) = exp(-2i ln(theta) / r)
    const double freq =
        std::exp(-2.0 * static_cast<double>(i) * std::log(theta) / static_cast<double>(rotary_dim));
    const double a = x[i], b = x[i + half], c = std::cos(pos * freq), s = std::sin(pos * freq);
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
  return x;
}

// Checks out == rope_row(x) for every row of a [b, len, ..., d] view.
template <class T, int Rank>
void check_rope_rows(const ga::TensorView<const T, Rank>& x,
                     const ga::TensorView<const std::int64_t, 2>& pos,
                     const ga::TensorView<const T, Rank>& out, std::int64_t rotary_dim,
                     double theta, double tol) {
  const std::int64_t d = x.extents[Rank - 1];
  std::array<std::int64_t, Rank> rows = x.extents;
  rows[Rank - 1] = 1;
  double worst = 0.0;
  for_each_index(rows, [&](std::array<std::int64_t, Rank> i) {
    std::vector<double> row;
    for (std::int64_t k = 0; k < d; ++k) {
      i[Rank - 1] = k;
      row.push_back(static_cast<double>(x[i]));
    }
    const auto y = rope_row(row, static_cast<double>(pos(i[0], i[1])), rotary_dim, theta);
    for (std::int64_t k = 0; k < d; ++k) {
      i[Rank - 1] = k;
      const double e = y[static_cast<std::size_t>(k)];
      track(worst, std::fabs(static_cast<double>(out[i]) - e) / (tol + tol * std::fabs(e)));
    }
  });
  CHECK(worst <= 1.0);
}

}  // namespace

TEST_CASE("rope: identities", "[reference][rope]") {
  auto rng = make_rng(301);
  const std::array<std::int64_t, 4> e = {2, 3, 4, 8};
  Tensor<float, 4> x(e, rng, -2.0, 2.0);
  Tensor<float, 4> out(e, std::numeric_limits<float>::quiet_NaN());
  SECTION("position 0 is the identity") {
    Tensor<std::int64_t, 2> pos({2, 3}, 0);
    REQUIRE(ref::rope(rope_args<float, 4>(x.cview(), pos.cview(), out.view(), 8)).is_ok());
    CHECK(out.data == x.data);
  }
  SECTION("rotary_dim 0 is the identity at any position") {
    Tensor<std::int64_t, 2> pos({2, 3});
    pos.data = {1, 7, 100, 5, 4096, 123456};
    REQUIRE(ref::rope(rope_args<float, 4>(x.cview(), pos.cview(), out.view(), 0)).is_ok());
    CHECK(out.data == x.data);
  }
}

TEST_CASE("rope: hand examples", "[reference][rope]") {
  SECTION("D = 2, rotary 2, position 1: [1, 0] -> [cos 1, sin 1]") {
    Tensor<float, 3> x({1, 1, 2});
    x.data = {1.0f, 0.0f};
    Tensor<std::int64_t, 2> pos({1, 1}, 1);
    Tensor<float, 3> out({1, 1, 2});
    REQUIRE(ref::rope(rope_args<float, 3>(x.cview(), pos.cview(), out.view(), 2)).is_ok());
    CHECK(out.data[0] == Approx(0.5403023058681398).epsilon(1e-6));
    CHECK(out.data[1] == Approx(0.8414709848078965).epsilon(1e-6));
  }
  SECTION("D = 2, position 1: [0, 1] -> [-sin 1, cos 1]") {
    Tensor<float, 3> x({1, 1, 2});
    x.data = {0.0f, 1.0f};
    Tensor<std::int64_t, 2> pos({1, 1}, 1);
    Tensor<float, 3> out({1, 1, 2});
    REQUIRE(ref::rope(rope_args<float, 3>(x.cview(), pos.cview(), out.view(), 2)).is_ok());
    CHECK(out.data[0] == Approx(-0.8414709848078965).epsilon(1e-6));
    CHECK(out.data[1] == Approx(0.5403023058681398).epsilon(1e-6));
  }
  SECTION("NeoX pairing on D = 4, theta = 10000, position 1") {
    // half = 2: pairs (0, 2) with frequency 10000^0 = 1 and (1, 3) with 10000^(-2/4) = 0.01.
    // x = [1, 2, 3, 4]:
    //   out0 = 1 cos 1 - 3 sin 1       = -1.9841106485555495
    //   out2 = 3 cos 1 + 1 sin 1       =  2.4623779024123156
    //   out1 = 2 cos .01 - 4 sin .01   =  1.959900667496664
    //   out3 = 4 cos .01 + 2 sin .01   =  4.019799668334994
    // (Adjacent pairs (0, 1), (2, 3) would give out0 = cos 1 - 2 sin 1 = -1.1426396637476532.)
    Tensor<float, 3> x({1, 1, 4});
    x.data = {1.0f, 2.0f, 3.0f, 4.0f};
    Tensor<std::int64_t, 2> pos({1, 1}, 1);
    Tensor<float, 3> out({1, 1, 4});
    REQUIRE(ref::rope(rope_args<float, 3>(x.cview(), pos.cview(), out.view(), 4)).is_ok());
    CHECK(out.data[0] == Approx(-1.9841106485555495).epsilon(1e-6));
    CHECK(out.data[1] == Approx(1.959900667496664).epsilon(1e-6));
    CHECK(out.data[2] == Approx(2.4623779024123156).epsilon(1e-6));
    CHECK(out.data[3] == Approx(4.019799668334994).epsilon(1e-6));
  }
  SECTION("theta changes the second pair frequency") {
    // theta = 100, D = 4: second pair frequency 100^(-1/2) = 0.1; x = e1, position 10 -> angle 1:
    // out1 = cos 1, out3 = sin 1; the first pair (frequency 1) is untouched because x0 = x2 = 0.
    Tensor<float, 3> x({1, 1, 4});
    x.data = {0.0f, 1.0f, 0.0f, 0.0f};
    Tensor<std::int64_t, 2> pos({1, 1}, 10);
    Tensor<float, 3> out({1, 1, 4});
    REQUIRE(ref::rope(rope_args<float, 3>(x.cview(), pos.cview(), out.view(), 4, 100.0)).is_ok());
    CHECK(out.data[0] == 0.0f);
    CHECK(out.data[1] == Approx(0.5403023058681398).epsilon(1e-6));
    CHECK(out.data[2] == 0.0f);
    CHECK(out.data[3] == Approx(0.8414709848078965).epsilon(1e-6));
  }
}

TEST_CASE("rope: partial rotary leaves dims >= rotary_dim untouched", "[reference][rope]") {
  // D = 16, rotary 4: frequencies use rotary_dim (10000^(-2/4) = 0.01), not the head dim
  // (10000^(-2/16) = 0.316...). Position 5: pair 0 angle 5, pair 1 angle 0.05.
  auto rng = make_rng(302);
  Tensor<float, 3> x({1, 1, 16}, rng, -2.0, 2.0);
  Tensor<std::int64_t, 2> pos({1, 1}, 5);
  Tensor<float, 3> out({1, 1, 16}, std::numeric_limits<float>::quiet_NaN());
  REQUIRE(ref::rope(rope_args<float, 3>(x.cview(), pos.cview(), out.view(), 4)).is_ok());
  for (std::size_t i = 4; i < 16; ++i) {
    INFO("dim " << i);
    CHECK(out.data[i] == x.data[i]);
  }
  const double c5 = 0.28366218546322625, s5 = -0.9589242746631385;   // cos 5, sin 5
  const double c05 = 0.9987502603949663, s05 = 0.04997916927067833;  // cos .05, sin .05
  const double x0 = x.data[0], x1 = x.data[1], x2 = x.data[2], x3 = x.data[3];
  CHECK(out.data[0] == Approx(x0 * c5 - x2 * s5).margin(1e-6));
  CHECK(out.data[2] == Approx(x2 * c5 + x0 * s5).margin(1e-6));
  CHECK(out.data[1] == Approx(x1 * c05 - x3 * s05).margin(1e-6));
  CHECK(out.data[3] == Approx(x3 * c05 + x1 * s05).margin(1e-6));
}

TEST_CASE("rope: rotation preserves the norm of each pair", "[reference][rope]") {
  auto rng = make_rng(303);
  const std::int64_t D = 32, R = 24, half = R / 2;
  Tensor<float, 4> x({2, 5, 3, D}, rng, -2.0, 2.0);
  Tensor<std::int64_t, 2> pos({2, 5});
  std::uniform_int_distribution<std::int64_t> dist(0, 40000);
  for (auto& p : pos.data) p = dist(rng);
  Tensor<float, 4> out({2, 5, 3, D});
  REQUIRE(ref::rope(rope_args<float, 4>(x.cview(), pos.cview(), out.view(), R)).is_ok());
  double worst = 0.0;
  for (std::size_t row = 0; row < 2 * 5 * 3; ++row) {
    const float* a = x.data.data() + row * D;
    const float* b = out.data.data() + row * D;
    for (std::int64_t i = 0; i < half; ++i) {
      const double before = std::hypot(static_cast<double>(a[i]), static_cast<double>(a[i + half]));
      const double after = std::hypot(static_cast<double>(b[i]), static_cast<double>(b[i + half]));
      track(worst, std::fabs(after - before));
    }
    for (std::int64_t i = R; i < D; ++i) CHECK(b[i] == a[i]);
  }
  CHECK(worst <= 1e-6);
  check_rope_rows<float, 4>(x.cview(), pos.cview(), out.cview(), R, 10000.0, 1e-6);
}

TEST_CASE("rope: dot products depend only on the position difference", "[reference][rope]") {
  auto rng = make_rng(304);
  const std::int64_t D = 8;
  Tensor<double, 3> q({1, 1, D}, rng), k({1, 1, D}, rng);
  auto rotate = [&](const Tensor<double, 3>& v, std::int64_t p) {
    Tensor<std::int64_t, 2> pos({1, 1}, p);
    Tensor<double, 3> out({1, 1, D});
    REQUIRE(ref::rope(rope_args<double, 3>(v.cview(), pos.cview(), out.view(), D)).is_ok());
    return out.data;
  };
  auto dot_at = [&](std::int64_t m, std::int64_t n) {
    const auto a = rotate(q, m), b = rotate(k, n);
    double s = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  // Closed form: for each pair (i, i + D/2) rotated by m f and n f,
  //   dot = (q_i k_i + q_j k_j) cos((n - m) f) + (q_j k_i - q_i k_j) sin((n - m) f).
  auto closed_form = [&](std::int64_t delta) {
    double s = 0.0;
    const std::size_t h = D / 2;
    for (std::size_t i = 0; i < h; ++i) {
      const double f = std::pow(10000.0, -2.0 * static_cast<double>(i) / D);
      const double a = static_cast<double>(delta) * f;
      const double qi = q.data[i], qj = q.data[i + h], ki = k.data[i], kj = k.data[i + h];
      s += (qi * ki + qj * kj) * std::cos(a) + (qj * ki - qi * kj) * std::sin(a);
    }
    return s;
  };
  for (std::int64_t delta : {0, 3, -7, 50}) {
    INFO("n - m = " << delta);
    const double expected = closed_form(delta);
    for (std::int64_t m : {0, 1, 17, 1000, 123457}) {
      INFO("m = " << m);
      CHECK(dot_at(m, m + delta) == Approx(expected).margin(1e-9));
    }
  }
  // The relative property is not vacuous: different differences give different dots.
  CHECK(std::fabs(closed_form(3) - closed_form(50)) > 1e-6);
}

TEST_CASE("rope: rank 4 and rank 5 views", "[reference][rope]") {
  auto rng = make_rng(305);
  const std::int64_t B = 2, L = 3, KV = 2, G = 3, D = 8, R = 6;
  Tensor<std::int64_t, 2> pos({B, L});
  pos.data = {0, 1, 2, 10, 11, 500};

  SECTION("rank 4 [b, l, h, d], in place and out of place") {
    Tensor<float, 4> x({B, L, KV * G, D}, rng, -1.0, 1.0);
    Tensor<float, 4> out({B, L, KV * G, D});
    REQUIRE(ref::rope(rope_args<float, 4>(x.cview(), pos.cview(), out.view(), R)).is_ok());
    check_rope_rows<float, 4>(x.cview(), pos.cview(), out.cview(), R, 10000.0, 1e-6);
    const Tensor<float, 4> original = x;
    REQUIRE(ref::rope(rope_args<float, 4>(x.cview(), pos.cview(), x.view(), R)).is_ok());
    CHECK(x.data == out.data);
    check_rope_rows<float, 4>(original.cview(), pos.cview(), x.cview(), R, 10000.0, 1e-6);
  }
  SECTION("rank 5 [b, l, kv, g, d] over an interleaved q | gate projection, in place") {
    // Per token and KV group: [q for G heads | gate for G heads], each head D wide.
    Tensor<float, 5> proj({B, L, KV, 2 * G, D}, rng, -1.0, 1.0);
    const Tensor<float, 5> original = proj;
    const std::array<std::int64_t, 5> qe = {B, L, KV, G, D};
    const std::array<std::int64_t, 5> qs = {L * KV * 2 * G * D, KV * 2 * G * D, 2 * G * D, D, 1};
    const ga::TensorView<float, 5> q(proj.data.data(), qe, qs);
    const ga::TensorView<const float, 5> q_before(original.data.data(), qe, qs);
    REQUIRE(ref::rope(rope_args<float, 5>(q, pos.cview(), q, R)).is_ok());
    check_rope_rows<float, 5>(q_before, pos.cview(), q, R, 10000.0, 1e-6);
    // The gate heads are untouched.
    const ga::TensorView<const float, 5> gate_after(proj.data.data() + G * D, qe, qs);
    const ga::TensorView<const float, 5> gate_before(original.data.data() + G * D, qe, qs);
    for_each_index(qe, [&](const Index5& i) { CHECK(gate_after[i] == gate_before[i]); });
  }
  SECTION("rank 5 from split_heads") {
    Tensor<float, 4> x({B, L, KV * G, D}, rng, -1.0, 1.0);
    Tensor<float, 4> out({B, L, KV * G, D});
    const auto x5 = ga::split_heads(x.cview(), KV);
    const auto o5 = ga::split_heads(out.view(), KV);
    REQUIRE(ref::rope(rope_args<float, 5>(x5, pos.cview(), o5, R)).is_ok());
    // Checked through the rank-4 views: every head of token (b, l) rotated by pos(b, l).
    check_rope_rows<float, 4>(x.cview(), pos.cview(), out.cview(), R, 10000.0, 1e-6);
  }
}

TEST_CASE("rope: validation", "[reference][rope]") {
  Tensor<float, 4> x({2, 3, 2, 8}, 1.0f);
  Tensor<float, 4> out({2, 3, 2, 8}, -7.0f);
  Tensor<std::int64_t, 2> pos({2, 3}, 1);
  CHECK(ga::validate(rope_args<float, 4>(x.cview(), pos.cview(), out.view(), 8)).is_ok());
  CHECK(ga::validate(rope_args<float, 4>(x.cview(), pos.cview(), out.view(), 0)).is_ok());
  for (std::int64_t r : {3, 7, 10, -2}) {
    INFO("rotary_dim = " << r);
    const auto s = ga::validate(rope_args<float, 4>(x.cview(), pos.cview(), out.view(), r));
    CHECK_FALSE(s.is_ok());
    CHECK(contains(s, "rotary_dim"));
    CHECK_FALSE(ref::rope(rope_args<float, 4>(x.cview(), pos.cview(), out.view(), r)).is_ok());
  }
  for (float v : out.data) CHECK(v == -7.0f);
  {
    Tensor<std::int64_t, 2> bad({2, 4}, 0);
    const auto s = ga::validate(rope_args<float, 4>(x.cview(), bad.cview(), out.view(), 8));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "positions"));
    CHECK(contains(s, "dim 1"));
  }
  {
    Tensor<std::int64_t, 2> bad({1, 3}, 0);
    const auto s = ga::validate(rope_args<float, 4>(x.cview(), bad.cview(), out.view(), 8));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "positions"));
    CHECK(contains(s, "dim 0"));
  }
  for (double theta : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    INFO("theta = " << theta);
    const auto s = ga::validate(rope_args<float, 4>(x.cview(), pos.cview(), out.view(), 8, theta));
    CHECK_FALSE(s.is_ok());
    CHECK(contains(s, "theta"));
  }
  {
    Tensor<float, 4> bad({2, 3, 2, 6});
    const auto s = ga::validate(rope_args<float, 4>(x.cview(), pos.cview(), bad.view(), 6));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "out"));
  }
}

// ------------------------------------------------------------------------------------------------
// Linear
// ------------------------------------------------------------------------------------------------

namespace {

ga::LinearArgs<float> linear_args(const ga::TensorView<const float, 2>& x,
                                  const ga::TensorView<const float, 2>& w, const float* bias,
                                  const ga::TensorView<float, 2>& y) {
  ga::LinearArgs<float> args;
  args.x = x;
  args.weight = w;
  args.maybe_bias = bias;
  args.y = y;
  return args;
}

}  // namespace

TEST_CASE("linear: hand example y = x W^T + b", "[reference][linear]") {
  // x = [[1, 2, 3], [4, 5, 6]], W = [[1, 0, -1], [0.5, 2, 1]] ([out, in]), b = [0.25, -1]:
  //   y00 = 1 - 3 + 0.25           = -1.75
  //   y01 = 0.5 + 4 + 3 - 1        =  6.5
  //   y10 = 4 - 6 + 0.25           = -1.75
  //   y11 = 2 + 10 + 6 - 1         =  17
  Tensor<float, 2> x({2, 3});
  x.data = {1, 2, 3, 4, 5, 6};
  Tensor<float, 2> w({2, 3});
  w.data = {1.0f, 0.0f, -1.0f, 0.5f, 2.0f, 1.0f};
  const std::vector<float> b = {0.25f, -1.0f};
  Tensor<float, 2> y({2, 2}, std::numeric_limits<float>::quiet_NaN());

  SECTION("with bias") {
    REQUIRE(ref::linear(linear_args(x.cview(), w.cview(), b.data(), y.view())).is_ok());
    CHECK(y.data == std::vector<float>{-1.75f, 6.5f, -1.75f, 17.0f});
  }
  SECTION("without bias") {
    REQUIRE(ref::linear(linear_args(x.cview(), w.cview(), nullptr, y.view())).is_ok());
    CHECK(y.data == std::vector<float>{-2.0f, 7.5f, -2.0f, 18.0f});
  }
  SECTION("one row, three out features") {
    // W3 = [[1, 1, 1], [0, 0, 2], [-1, 0, 0]]: x0 = [1, 2, 3] -> [6, 6, -1] + [0, 0.5, 1].
    Tensor<float, 2> w3({3, 3});
    w3.data = {1, 1, 1, 0, 0, 2, -1, 0, 0};
    const std::vector<float> b3 = {0.0f, 0.5f, 1.0f};
    Tensor<float, 2> y3({1, 3});
    const ga::TensorView<const float, 2> x0(x.data.data(), {1, 3}, {3, 1});
    REQUIRE(ref::linear(linear_args(x0, w3.cview(), b3.data(), y3.view())).is_ok());
    CHECK(y3.data == std::vector<float>{6.0f, 6.5f, 0.0f});
  }
  SECTION("strided weight (padded rows, sub-block of a larger matrix) gives the same") {
    // W stored in rows of 5 with junk in the padding.
    std::vector<float> padded = {1.0f, 0.0f, -1.0f, 1e30f, 1e30f, 0.5f, 2.0f, 1.0f, 1e30f, 1e30f};
    const ga::TensorView<const float, 2> ws(padded.data(), {2, 3}, {5, 1});
    REQUIRE(ref::linear(linear_args(x.cview(), ws, b.data(), y.view())).is_ok());
    CHECK(y.data == std::vector<float>{-1.75f, 6.5f, -1.75f, 17.0f});
  }
  SECTION("strided x and y (padded rows)") {
    std::vector<float> xp = {1, 2, 3, -9, 4, 5, 6, -9};
    std::vector<float> yp(6, 42.0f);
    const ga::TensorView<const float, 2> xs(xp.data(), {2, 3}, {4, 1});
    const ga::TensorView<float, 2> ys(yp.data(), {2, 2}, {3, 1});
    REQUIRE(ref::linear(linear_args(xs, w.cview(), b.data(), ys)).is_ok());
    CHECK(yp == std::vector<float>{-1.75f, 6.5f, 42.0f, -1.75f, 17.0f, 42.0f});
  }
  SECTION(
      "a transposed weight view (W^T stored [in, out]) is rejected: in features need stride 1") {
    // W^T = [[1, 0.5], [0, 2], [-1, 1]]; W viewed with strides {1, 2}.
    std::vector<float> wt = {1.0f, 0.5f, 0.0f, 2.0f, -1.0f, 1.0f};
    const ga::TensorView<const float, 2> wv(wt.data(), {2, 3}, {1, 2});
    // The view addresses W correctly ...
    for (std::int64_t o = 0; o < 2; ++o) {
      for (std::int64_t i = 0; i < 3; ++i)
        CHECK(wv(o, i) == w.data[static_cast<std::size_t>(o * 3 + i)]);
    }
    // ... but the op requires a dense in-features dimension.
    const auto s = ga::validate(linear_args(x.cview(), wv, b.data(), y.view()));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "weight"));
    CHECK(contains(s, "innermost stride"));
  }
}

TEST_CASE("linear: validation", "[reference][linear]") {
  Tensor<float, 2> x({2, 3}, 1.0f);
  Tensor<float, 2> w({4, 3}, 1.0f);
  Tensor<float, 2> y({2, 4}, -7.0f);
  CHECK(ga::validate(linear_args(x.cview(), w.cview(), nullptr, y.view())).is_ok());
  {
    Tensor<float, 2> bad({4, 5}, 1.0f);
    const auto s = ga::validate(linear_args(x.cview(), bad.cview(), nullptr, y.view()));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "weight"));
    CHECK(contains(s, "dim 1"));
    CHECK(contains(s, "in features"));
    CHECK(contains(s, "expected 3, got 5"));
    CHECK_FALSE(ref::linear(linear_args(x.cview(), bad.cview(), nullptr, y.view())).is_ok());
    for (float v : y.data) CHECK(v == -7.0f);
  }
  {
    Tensor<float, 2> bad({2, 3});
    const auto s = ga::validate(linear_args(x.cview(), w.cview(), nullptr, bad.view()));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "y"));
    CHECK(contains(s, "out features"));
  }
  {
    // y aliasing x.
    std::vector<float> buffer(8, 1.0f);
    const auto xs = ga::TensorView<const float, 2>::contiguous(buffer.data(), {2, 3});
    const auto ys = ga::TensorView<float, 2>::contiguous(buffer.data(), {2, 4});
    const auto s = ga::validate(linear_args(xs, w.cview(), nullptr, ys));
    CHECK_FALSE(s.is_ok());
    INFO(s.message());
    CHECK(contains(s, "overlaps"));
  }
}
