// Tests for the reference RMSNorm (reference/rms_norm.hpp). Expected values come from closed forms
// or hand calculations (written out in the comments), or from small formulas written independently
// here, never from a second call to the code under test.
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
