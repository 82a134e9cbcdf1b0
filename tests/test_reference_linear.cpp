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

namespace {

// One backend against a double-precision sum of the same (widened) elements, on shapes around the
// backends' own choices (OpenBLAS: the kernel up to 16 rows, GEMM above; the kernel's tiles of 4
// and blocks of 64 rows; empty products), dense and padded rows, 1 and 2 workers. y is filled with
// NaN first (every element must be written) and its padding checked untouched. Bound per element:
// (in + 2) 2^-24 (sum_i |x_i w_i| + |b|). Where rounds_x(in), the sums take x rounded to bf16.
template <class W>
void check_linear_backend(const ga::LinearHook<float, W>& hook, std::uint64_t seed,
                          bool (*rounds_x)(std::int64_t in) = nullptr) {
  std::mt19937_64 rng = make_rng(seed);
  std::normal_distribution<float> normal;
  ga::ThreadPool pool(2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::int64_t rows : {0, 1, 2, 3, 4, 9, 16, 17, 70}) {
    for (const std::int64_t in : {0, 1, 7, 64, 100}) {
      for (const std::int64_t out : {1, 5, 70}) {
        for (const bool bias : {false, true}) {
          for (const std::int64_t pad : {0, 3}) {
            INFO("rows " << rows << ", in " << in << ", out " << out << ", bias " << bias
                         << ", pad " << pad);
            std::vector<float> x(static_cast<std::size_t>(rows * (in + pad)));
            std::vector<W> w(static_cast<std::size_t>(out * (in + pad)));
            std::vector<W> b(static_cast<std::size_t>(out));
            for (float& e : x) e = normal(rng);
            for (W& e : w) e = ga::from_float<W>(normal(rng));
            for (W& e : b) e = ga::from_float<W>(normal(rng));
            const bool rounded = rounds_x != nullptr && rounds_x(in);
            ga::LinearArgs<float, W> args;
            args.x = ga::TensorView<const float, 2>(x.data(), {rows, in}, {in + pad, 1});
            args.weight = ga::TensorView<const W, 2>(w.data(), {out, in}, {in + pad, 1});
            args.maybe_bias = bias ? b.data() : nullptr;
            for (const ga::Executor& executor : {ga::Executor{}, pool.executor()}) {
              std::vector<float> y(static_cast<std::size_t>(rows * (out + pad)), nan);
              args.y = ga::TensorView<float, 2>(y.data(), {rows, out}, {out + pad, 1});
              const ga::Status s = ga::run(args, executor, hook);
              INFO(s.message());
              REQUIRE(s.is_ok());
              double worst = 0.0;
              bool padding_kept = true;
              for (std::int64_t r = 0; r < rows; ++r) {
                for (std::int64_t o = 0; o < out; ++o) {
                  double sum = bias ? ga::to_float(b[static_cast<std::size_t>(o)]) : 0.0;
                  double magnitude = std::fabs(sum);
                  for (std::int64_t i = 0; i < in; ++i) {
                    const float x_ri =
                        rounded ? ga::to_float(ga::bf16(args.x(r, i))) : args.x(r, i);
                    const double term = static_cast<double>(x_ri) * ga::to_float(args.weight(o, i));
                    sum += term;
                    magnitude += std::fabs(term);
                  }
                  const double bound = (static_cast<double>(in) + 2.0) * 0x1p-24 * magnitude;
                  const double error = std::fabs(static_cast<double>(args.y(r, o)) - sum);
                  worst = std::max(worst, std::isnan(error) ? 1e30 : error - bound);
                }
                for (std::int64_t o = out; o < out + pad; ++o) {
                  padding_kept =
                      padding_kept && std::isnan(y[static_cast<std::size_t>(r * (out + pad) + o)]);
                }
              }
              CHECK(worst <= 0.0);
              CHECK(padding_kept);
            }
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("linear: every projection backend matches the reference: rows, bias, strides, threads",
          "[linear]") {
  for (const ga::testing::LinearBackend& backend : ga::testing::linear_backends()) {
    INFO("backend " << backend.name);
    check_linear_backend(backend.hook, 33);
  }
}

TEST_CASE("linear: the library's kernel, f32 and bf16 weights, on every path", "[linear]") {
  for (const ga::Isa isa : ga::testing::available_isas()) {
    INFO("path " << ga::to_string(isa));
    ga::set_isa_limit(isa);
    check_linear_backend<float>({&ga::linear_kernel<float>, nullptr}, 34);
    check_linear_backend<ga::bf16>({}, 35);  // the default for bf16 weights
    CHECK(std::string(ga::linear_backend<float, ga::bf16>()) == "kernel");
  }
  ga::clear_isa_limit();
}

namespace {

// linear_widened with scratch of its own per call (the hook runs on several workers at once).
ga::Status widened_with_own_scratch(void*, const ga::LinearArgs<float, ga::bf16>& args) {
  std::vector<float> floats(
      ga::widened_weight_floats(args.weight.extents[0], args.weight.extents[1]));
  ga::WidenScratch scratch{floats.data(), floats.size()};
  return ga::linear_widened(&scratch, args);
}

}  // namespace

TEST_CASE("linear: bf16 weights widened into scratch, then the f32 default backend", "[linear]") {
  check_linear_backend<ga::bf16>({&widened_with_own_scratch, nullptr}, 37);
  CHECK(std::string(ga::linear_backend<float, ga::bf16>({&ga::linear_widened, nullptr})) ==
        "widened");

  // Scratch one float short: refused before anything is written.
  const std::int64_t rows = 2, in = 5, out = 3;
  std::vector<float> x(rows * in, 1.0f), y(rows * out, -1.0f);
  std::vector<ga::bf16> w(out * in, ga::bf16(0.5f)), b(out, ga::bf16(1.0f));
  ga::LinearArgs<float, ga::bf16> args;
  args.x = ga::TensorView<const float, 2>::contiguous(x.data(), {rows, in});
  args.weight = ga::TensorView<const ga::bf16, 2>::contiguous(w.data(), {out, in});
  args.maybe_bias = b.data();
  args.y = ga::TensorView<float, 2>::contiguous(y.data(), {rows, out});
  std::vector<float> floats(ga::widened_weight_floats(out, in));
  ga::WidenScratch short_scratch{floats.data(), floats.size() - 1};
  const ga::Status s = ga::linear_widened(&short_scratch, args);
  CHECK(s.code() == ga::StatusCode::workspace_too_small);
  CHECK(std::string(s.message()).find("expected scratch of >= 18 floats, got 17") !=
        std::string::npos);
  CHECK(y == std::vector<float>(rows * out, -1.0f));
  CHECK(ga::linear_widened(nullptr, args).code() == ga::StatusCode::workspace_too_small);
  ga::WidenScratch scratch{floats.data(), floats.size()};
  REQUIRE(ga::linear_widened(&scratch, args).is_ok());
  CHECK(y == std::vector<float>(rows * out, 3.5f));  // 5 * 0.5 + 1
}

namespace {

// linear_tiles with scratch of its own per call.
ga::Status tiles_with_own_scratch(void*, const ga::LinearArgs<float, ga::bf16>& args) {
  std::vector<float> floats(ga::tile_weight_floats(args.weight.extents[0], args.weight.extents[1]));
  ga::WidenScratch scratch{floats.data(), floats.size()};
  return ga::linear_tiles(&scratch, args);
}

}  // namespace

TEST_CASE("linear: bf16 weights on AMX tiles, x rounded to bf16, or widened where tiles do not run",
          "[linear][amx]") {
  for (const ga::Isa isa : ga::testing::available_isas()) {
    INFO("path " << ga::to_string(isa) << ", AMX tiles " << ga::linear_tiles_run(64));
    ga::set_isa_limit(isa);
    check_linear_backend<ga::bf16>({&tiles_with_own_scratch, nullptr}, 38, &ga::linear_tiles_run);
  }
  ga::clear_isa_limit();
  CHECK(std::string(ga::linear_backend<float, ga::bf16>({&ga::linear_tiles, nullptr})) == "amx");

  // A product of many rows and panels (several blocks of x, a last panel of 16 + 3 rows).
  std::mt19937_64 rng = make_rng(39);
  std::normal_distribution<float> normal;
  const std::int64_t rows = 300, in = 96, out = 275;
  std::vector<float> x(rows * in), y(rows * out);
  std::vector<ga::bf16> w(out * in), b(out);
  for (float& e : x) e = normal(rng);
  for (ga::bf16& e : w) e = ga::bf16(normal(rng));
  for (ga::bf16& e : b) e = ga::bf16(normal(rng));
  ga::LinearArgs<float, ga::bf16> args;
  args.x = ga::TensorView<const float, 2>::contiguous(x.data(), {rows, in});
  args.weight = ga::TensorView<const ga::bf16, 2>::contiguous(w.data(), {out, in});
  args.maybe_bias = b.data();
  args.y = ga::TensorView<float, 2>::contiguous(y.data(), {rows, out});
  REQUIRE(tiles_with_own_scratch(nullptr, args).is_ok());
  const bool rounded = ga::linear_tiles_run(in);
  double worst = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out; ++o) {
      double sum = ga::to_float(b[o]), magnitude = std::fabs(sum);
      for (std::int64_t i = 0; i < in; ++i) {
        const float x_ri = rounded ? ga::to_float(ga::bf16(x[r * in + i])) : x[r * in + i];
        const double term = static_cast<double>(x_ri) * ga::to_float(w[o * in + i]);
        sum += term;
        magnitude += std::fabs(term);
      }
      worst = std::max(worst, std::fabs(y[r * out + o] - sum) - (in + 2) * 0x1p-24 * magnitude);
    }
  }
  CHECK(worst <= 0.0);

  // Scratch too small: refused, naming what it needs.
  std::vector<float> floats(ga::tile_weight_floats(out, in) - 1);
  ga::WidenScratch short_scratch{floats.data(), floats.size()};
  CHECK(ga::linear_tiles(&short_scratch, args).code() == ga::StatusCode::workspace_too_small);
}

TEST_CASE("linear: no default backend for types only an engine multiplies", "[linear]") {
  CHECK(ga::default_linear_fn<ga::bf16, ga::bf16>() == nullptr);
  CHECK(std::string(ga::linear_backend<ga::bf16, ga::bf16>()) == "none");
}

#if GATED_ATTENTION_OPENBLAS
TEST_CASE("linear: OpenBLAS's double products (dgemm) equal a double sum", "[linear]") {
  std::mt19937_64 rng = make_rng(36);
  std::normal_distribution<double> normal;
  const std::int64_t rows = 20, in = 33, out = 40;
  std::vector<double> x(rows * in), w(out * in), b(out), y(rows * out, 0.0);
  for (double& e : x) e = normal(rng);
  for (double& e : w) e = normal(rng);
  for (double& e : b) e = normal(rng);
  ga::LinearArgs<double> args;
  args.x = ga::TensorView<const double, 2>::contiguous(x.data(), {rows, in});
  args.weight = ga::TensorView<const double, 2>::contiguous(w.data(), {out, in});
  args.maybe_bias = b.data();
  args.y = ga::TensorView<double, 2>::contiguous(y.data(), {rows, out});
  REQUIRE(ga::run(args, ga::Executor{}, ga::openblas_linear_hook<double>()).is_ok());
  double worst = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out; ++o) {
      double sum = b[o], magnitude = std::fabs(b[o]);
      for (std::int64_t i = 0; i < in; ++i) {
        sum += x[r * in + i] * w[o * in + i];
        magnitude += std::fabs(x[r * in + i] * w[o * in + i]);
      }
      worst = std::max(worst, std::fabs(y[r * out + o] - sum) - (in + 2) * 0x1p-53 * magnitude);
    }
  }
  CHECK(worst <= 0.0);
}
#endif

TEST_CASE("linear: the default backend is OpenBLAS where the build has it, Eigen otherwise",
          "[linear]") {
#if GATED_ATTENTION_OPENBLAS
  CHECK(std::string(ga::linear_backend<float>()) == "openblas");
#else
  CHECK(std::string(ga::linear_backend<float>()) == "eigen");
#endif
  CHECK(std::string(ga::linear_backend<float>({&ga::linear_eigen<float>, nullptr})) == "eigen");
  CHECK(std::string(ga::linear_backend<float>(
            {[](void*, const ga::LinearArgs<float>&) { return ga::Status::ok(); }, nullptr})) ==
        "engine");
}
