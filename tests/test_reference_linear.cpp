// Tests for the reference linear layer (reference/linear.hpp). Expected values come from closed
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
