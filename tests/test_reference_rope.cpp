// Tests for the reference RoPE (reference/rope.hpp). Expected values come from closed forms or hand
// calculations (written out in the comments), or from small formulas written independently here,
// never from a second call to the code under test.
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
