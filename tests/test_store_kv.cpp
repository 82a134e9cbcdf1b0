// Storing f32 K/V rows into caches of every cache type (ops/store_kv.hpp) against the reference
// and against the formats' definitions.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support.hpp"

namespace {

namespace ga = gated_attention;
using ga::testing::contains;
using ga::testing::make_rng;
using ga::testing::Tensor;

// A cache [b, capacity, kv_heads, d] and the view of positions [start, start + len) in it.
template <class KvT>
struct Cache {
  std::vector<KvT> data;
  std::vector<float> scales;
  std::int64_t b, capacity, heads, d;
  Cache(std::int64_t b_, std::int64_t cap, std::int64_t h, std::int64_t d_)
      : data(static_cast<std::size_t>(b_ * cap * h * d_), KvT(7.0f)),
        scales(static_cast<std::size_t>(b_ * cap * h), -1.0f),
        b(b_),
        capacity(cap),
        heads(h),
        d(d_) {}
  ga::TensorView<KvT, 4> rows(std::int64_t start, std::int64_t len) {
    return ga::TensorView<KvT, 4>(data.data() + start * heads * d, {b, len, heads, d},
                                  {capacity * heads * d, heads * d, d, 1});
  }
  ga::TensorView<float, 3> scale_rows(std::int64_t start, std::int64_t len) {
    return ga::TensorView<float, 3>(scales.data() + start * heads, {b, len, heads},
                                    {capacity * heads, heads, 1});
  }
};

template <class KvT>
ga::StoreKvArgs<KvT> store_args(const Tensor<float, 4>& src, Cache<KvT>& cache,
                                std::int64_t start) {
  ga::StoreKvArgs<KvT> a;
  a.src = src.cview();
  a.dst = cache.rows(start, src.extents[1]);
  if constexpr (std::is_same_v<KvT, std::int8_t>) {
    a.maybe_scales = cache.scale_rows(start, src.extents[1]);
  }
  return a;
}

}  // namespace

TEST_CASE("store_kv: float, bf16 and f16 caches hold the rounded rows, elsewhere untouched",
          "[store_kv]") {
  auto rng = make_rng(0x570e);
  Tensor<float, 4> src({2, 5, 3, 40}, rng, -300.0, 300.0);
  src.data[7] = std::numeric_limits<float>::infinity();  // representable in every 16-bit type
  src.data[8] = 1e-6f;                                   // an f16 denormal
  ga::ThreadPool pool(2);
  Cache<float> f(2, 9, 3, 40);
  REQUIRE(ga::run(store_args(src, f, 2), pool.executor()).is_ok());
  Cache<ga::bf16> bf(2, 9, 3, 40), bf_ref(2, 9, 3, 40);
  REQUIRE(ga::run(store_args(src, bf, 2), pool.executor()).is_ok());
  REQUIRE(ga::reference::store_kv(store_args(src, bf_ref, 2)).is_ok());
  Cache<ga::f16> h(2, 9, 3, 40), h_ref(2, 9, 3, 40);
  REQUIRE(ga::run(store_args(src, h, 2)).is_ok());
  REQUIRE(ga::reference::store_kv(store_args(src, h_ref, 2)).is_ok());
  ga::testing::for_each_index(std::array<std::int64_t, 4>{2, 9, 3, 40}, [&](const auto& i) {
    const std::size_t at = static_cast<std::size_t>(((i[0] * 9 + i[1]) * 3 + i[2]) * 40 + i[3]);
    if (i[1] < 2 || i[1] >= 7) {  // outside the stored positions
      CHECK(f.data[at] == 7.0f);
      CHECK(float(bf.data[at]) == 7.0f);
      CHECK(float(h.data[at]) == 7.0f);
      return;
    }
    const float x =
        src.data[static_cast<std::size_t>(((i[0] * 5 + i[1] - 2) * 3 + i[2]) * 40 + i[3])];
    CHECK(f.data[at] == x);
    CHECK(bf.data[at].bits == ga::bf16(x).bits);  // round to nearest even (core/dtypes.hpp)
    CHECK(h.data[at].bits == ga::f16(x).bits);
    CHECK(bf.data[at].bits == bf_ref.data[at].bits);
    CHECK(h.data[at].bits == h_ref.data[at].bits);
  });
}

TEST_CASE("store_kv: int8 rows with per-row scales reconstruct within half a step", "[store_kv]") {
  auto rng = make_rng(0x5708);
  Tensor<float, 4> src({2, 6, 2, 37}, rng, -4.0, 4.0);
  for (std::int64_t i = 0; i < 37; ++i) src.data[static_cast<std::size_t>(i)] = 0.0f;  // a zero row
  src.data[37] = 1e30f;  // a row dominated by one huge value
  Cache<std::int8_t> q(2, 8, 2, 37), q_ref(2, 8, 2, 37);
  ga::ThreadPool pool(2);
  REQUIRE(ga::run(store_args(src, q, 1), pool.executor()).is_ok());
  REQUIRE(ga::reference::store_kv(store_args(src, q_ref, 1)).is_ok());
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t t = 0; t < 6; ++t) {
      for (std::int64_t h = 0; h < 2; ++h) {
        const float* x = &src.cview()(b, t, h, 0);
        const std::size_t row = static_cast<std::size_t>((b * 8 + t + 1) * 2 + h);
        const float scale = q.scales[row];
        double max_abs = 0.0;
        for (int i = 0; i < 37; ++i) max_abs = std::max(max_abs, std::fabs(double{x[i]}));
        INFO("row " << b << "," << t << "," << h << " scale " << scale);
        CHECK(scale == Approx(max_abs / 127.0).epsilon(1e-6));
        CHECK(scale == Approx(q_ref.scales[row]).epsilon(1e-6));
        int largest = 0;
        for (int i = 0; i < 37; ++i) {
          const int v = q.data[row * 37 + static_cast<std::size_t>(i)];
          largest = std::max(largest, std::abs(v));
          CHECK(std::abs(v - int{q_ref.data[row * 37 + static_cast<std::size_t>(i)]}) <= 1);
          // Half a quantisation step, plus the rounding of scale and of x * 127 / max|x| in f32.
          CHECK(std::fabs(scale * v - x[i]) <= 0.5 * scale + 1e-6 * max_abs);
        }
        CHECK(largest == (max_abs > 0.0 ? 127 : 0));
      }
    }
  }
  CHECK(q.scales[0] == -1.0f);  // position 0 untouched
  CHECK(q.data[0] == std::int8_t(7));
}

TEST_CASE("store_kv: an int8 row below 127 / FLT_MAX stores about zero, no product overflows",
          "[store_kv]") {
  auto rng = make_rng(0x570a);
  Tensor<float, 4> src({1, 1, 2, 16}, rng);
  for (std::size_t i = 0; i < 16; ++i) src.data[i] = (i % 2 ? -1.0f : 1.0f) * 1e-38f * float(i);
  Cache<std::int8_t> q(1, 1, 2, 16);
  REQUIRE(ga::run(store_args(src, q, 0)).is_ok());
  CHECK(std::isfinite(q.scales[0]));
  for (std::size_t i = 0; i < 16; ++i) {
    INFO("element " << i);
    CHECK(std::abs(int{q.data[i]}) <= 127);
    CHECK(std::fabs(q.scales[0] * q.data[i] - src.data[i]) <= 1e-36f);
  }
}

TEST_CASE("store_kv: int8 refuses rows with NaN or Inf and writes nothing", "[store_kv]") {
  auto rng = make_rng(0x5709);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    Tensor<float, 4> src({1, 3, 2, 16}, rng);
    src.data[2 * 16 + 5] = bad;  // position 1, kv head 0
    Cache<std::int8_t> q(1, 3, 2, 16);
    const ga::Status s = ga::run(store_args(src, q, 0));
    INFO(s.message());
    CHECK(s.code() == ga::StatusCode::invalid_argument);
    CHECK(contains(s, "src"));
    CHECK(contains(s, "position 1"));
    CHECK(contains(s, "kv head 0"));
    for (std::int8_t v : q.data) CHECK(v == 7);
    for (float v : q.scales) CHECK(v == -1.0f);
    CHECK_FALSE(ga::reference::store_kv(store_args(src, q, 0)).is_ok());
  }
}

TEST_CASE("store_kv: bad arguments name the tensor", "[store_kv]") {
  Tensor<float, 4> src({1, 2, 2, 8});
  Cache<std::int8_t> q(1, 4, 2, 8);
  Cache<float> f(1, 4, 2, 8);
  struct Row {
    const char* name;
    ga::Status status;
    std::vector<const char*> parts;
  };
  ga::StoreKvArgs<std::int8_t> no_scales = store_args(src, q, 0);
  no_scales.maybe_scales = {};
  ga::StoreKvArgs<float> float_scales = store_args(src, f, 0);
  float_scales.maybe_scales = q.scale_rows(0, 2);
  ga::StoreKvArgs<std::int8_t> short_scales = store_args(src, q, 0);
  short_scales.maybe_scales = q.scale_rows(0, 1);
  ga::StoreKvArgs<float> short_dst = store_args(src, f, 0);
  short_dst.dst = f.rows(0, 1);
  ga::StoreKvArgs<std::int8_t> scales_on_dst = store_args(src, q, 0);
  scales_on_dst.maybe_scales =
      ga::TensorView<float, 3>(reinterpret_cast<float*>(q.data.data()), {1, 2, 2}, {4, 2, 1});
  const std::vector<Row> rows = {
      {"int8 without scales", ga::can_implement(no_scales), {"scales", "int8"}},
      {"scales for a float cache", ga::can_implement(float_scales), {"scales", "expected none"}},
      {"scales of the wrong length", ga::can_implement(short_scales), {"scales", "dim 1"}},
      {"dst of the wrong length", ga::can_implement(short_dst), {"dst", "dim 1"}},
      {"scales overlapping dst", ga::can_implement(scales_on_dst), {"scales", "dst"}},
  };
  for (const Row& r : rows) {
    DYNAMIC_SECTION(r.name) {
      INFO(r.status.message());
      CHECK_FALSE(r.status.is_ok());
      for (const char* part : r.parts) CHECK(contains(r.status, part));
    }
  }
}
