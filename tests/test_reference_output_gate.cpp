// Tests for the reference output gate (reference/output_gate.hpp). Expected values come from closed
// forms or hand calculations (written out in the comments), or from small formulas written
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
using ga::testing::contains;
using ga::testing::for_each_index;
using ga::testing::make_rng;
using ga::testing::max_tolerance_ratio;
using ga::testing::Tensor;
using ga::testing::track;

namespace {

using Index5 = std::array<std::int64_t, 5>;

// sigmoid written through tanh, a different formula from the reference's 1 / (1 + exp(-x)).
double sigmoid_tanh(double x) {
  return 0.5 * (1.0 + std::tanh(0.5 * x));
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
