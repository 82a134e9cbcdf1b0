// Every operation of the Simd contract (kernels/simd_contract.hpp) on every path this host runs,
// against scalar arithmetic on the same lanes: the vector types tested on their own, not only
// through the kernels.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support.hpp"

namespace simd_test {

enum class Op {
  zero,
  set1,
  load,
  load_shared,
  load_pinned,
  load_partial,
  store_partial,
  fma,
  mul,
  add,
  sub,
  max,
  min,
  round_nearest,
  scale_pow2,
  select_less,
  swap_groups,
  reduce_add,
  reduce_max,
  reciprocal,
  reduce_add_4,
  reduce_add_4x4
};

namespace scalar {
using S = gated_attention::kernels::scalar::Simd;
#include "simd_ops.inl"
}  // namespace scalar

}  // namespace simd_test

#if GATED_ATTENTION_X86
GATED_ATTENTION_TARGET_BEGIN(GATED_ATTENTION_AVX2_TARGET)
namespace simd_test::avx2 {
using S = gated_attention::kernels::avx2::Simd;
#include "simd_ops.inl"
}  // namespace simd_test::avx2
GATED_ATTENTION_TARGET_END

GATED_ATTENTION_TARGET_BEGIN(GATED_ATTENTION_AVX512_TARGET)
namespace simd_test::avx512 {
using S = gated_attention::kernels::avx512::Simd;
#include "simd_ops.inl"
}  // namespace simd_test::avx512
GATED_ATTENTION_TARGET_END
#endif

#if GATED_ATTENTION_AARCH64
namespace simd_test::neon {
using S = gated_attention::kernels::neon::Simd;
#include "simd_ops.inl"
}  // namespace simd_test::neon
#endif

namespace {

namespace ga = gated_attention;
using simd_test::Op;

struct SimdPath {
  const char* name;
  int lanes;
  void (*apply)(Op, const float*, const float*, const float*, int, float*);
  void (*widen)(int, const void*, int, float*);
};

std::vector<SimdPath> simd_paths() {
  std::vector<SimdPath> paths = {
      {"scalar", 1, &simd_test::scalar::apply, &simd_test::scalar::widen}};
#if GATED_ATTENTION_X86
  if (ga::isa_available(ga::Isa::avx2))
    paths.push_back({"avx2", 8, &simd_test::avx2::apply, &simd_test::avx2::widen});
  if (ga::isa_available(ga::Isa::avx512)) {
    paths.push_back({"avx512", 16, &simd_test::avx512::apply, &simd_test::avx512::widen});
  }
#endif
#if GATED_ATTENTION_AARCH64
  paths.push_back({"neon", 4, &simd_test::neon::apply, &simd_test::neon::widen});
#endif
  return paths;
}

// Inputs for one op: a, b, c of 16 lanes' room (16 vectors for the 4x4 reduction), random in
// [-4, 4], and an output pre-filled with a sentinel so that lanes an op must not write show.
struct Lanes {
  std::vector<float> a, b, c, out;
  explicit Lanes(std::mt19937_64& rng) : a(256), b(256), c(256), out(256, 7.0f) {
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    for (auto* v : {&a, &b, &c}) {
      for (float& x : *v) x = dist(rng);
    }
  }
};

bool same_float(float x, float y) {
  return std::memcmp(&x, &y, sizeof x) == 0 || (x == 0.0f && y == 0.0f);
}

}  // namespace

TEST_CASE("simd: lane-wise arithmetic and loads equal scalar code on every path", "[simd]") {
  auto rng = ga::testing::make_rng(0x51d);
  for (const SimdPath& path : simd_paths()) {
    INFO("path " << path.name);
    const int L = path.lanes;
    for (int round = 0; round < 20; ++round) {
      Lanes in(rng);
      const auto run = [&](Op op, int n = 0) {
        std::fill(in.out.begin(), in.out.end(), 7.0f);
        path.apply(op, in.a.data(), in.b.data(), in.c.data(), n, in.out.data());
        return in.out;
      };
      std::vector<float> out = run(Op::zero);
      for (int l = 0; l < L; ++l) CHECK(out[l] == 0.0f);
      out = run(Op::set1);
      for (int l = 0; l < L; ++l) CHECK(out[l] == in.a[0]);
      for (Op op : {Op::load, Op::load_shared, Op::load_pinned}) {
        out = run(op);
        for (int l = 0; l < L; ++l) CHECK(out[l] == in.a[l]);
      }
      CHECK(out[L] == 7.0f);  // a whole vector and no more
      out = run(Op::mul);
      for (int l = 0; l < L; ++l) CHECK(same_float(out[l], in.a[l] * in.b[l]));
      out = run(Op::add);
      for (int l = 0; l < L; ++l) CHECK(same_float(out[l], in.a[l] + in.b[l]));
      out = run(Op::sub);
      for (int l = 0; l < L; ++l) CHECK(same_float(out[l], in.a[l] - in.b[l]));
      out = run(Op::max);
      for (int l = 0; l < L; ++l) CHECK(out[l] == std::max(in.a[l], in.b[l]));
      out = run(Op::min);
      for (int l = 0; l < L; ++l) CHECK(out[l] == std::min(in.a[l], in.b[l]));
      out = run(Op::fma);  // fused or not: within one rounding of the exact a * b + c
      for (int l = 0; l < L; ++l) {
        const double exact = double{in.a[l]} * in.b[l] + in.c[l];
        const double bound = 0x1p-23 * (std::fabs(double{in.a[l]} * in.b[l]) + std::fabs(in.c[l]));
        CHECK(std::fabs(out[l] - exact) <= bound);
      }
      out = run(Op::select_less);
      for (int l = 0; l < L; ++l) CHECK(out[l] == (in.a[l] < in.b[l] ? in.c[l] : -1.0f));
    }
  }
}

TEST_CASE("simd: partial loads and stores touch the first n lanes only", "[simd]") {
  auto rng = ga::testing::make_rng(0x51e);
  for (const SimdPath& path : simd_paths()) {
    INFO("path " << path.name);
    const int L = path.lanes;
    Lanes in(rng);
    for (int n = 0; n <= L; ++n) {
      INFO("n " << n);
      std::fill(in.out.begin(), in.out.end(), 7.0f);
      path.apply(Op::load_partial, in.a.data(), in.b.data(), in.c.data(), n, in.out.data());
      for (int l = 0; l < L; ++l) CHECK(in.out[l] == (l < n ? in.a[l] : 0.0f));
      std::fill(in.out.begin(), in.out.end(), 7.0f);
      path.apply(Op::store_partial, in.a.data(), in.b.data(), in.c.data(), n, in.out.data());
      for (int l = 0; l <= L; ++l) CHECK(in.out[l] == (l < n ? in.a[l] : 7.0f));
    }
  }
}

TEST_CASE("simd: rounding, powers of two and reciprocals on every path", "[simd]") {
  for (const SimdPath& path : simd_paths()) {
    INFO("path " << path.name);
    const int L = path.lanes;
    std::vector<float> a(256), b(256), c(256), out(256);
    // Ties round to even; the lanes cycle through the cases.
    const float ties[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 0.49999997f, 3.7f, -3.7f, 126.0f};
    const float even[] = {0.0f, 2.0f, 2.0f, -0.0f, -2.0f, -2.0f, 0.0f, 4.0f, -4.0f, 126.0f};
    for (int start = 0; start < 10; start += L) {
      for (int l = 0; l < L; ++l) a[l] = ties[(start + l) % 10];
      path.apply(Op::round_nearest, a.data(), b.data(), c.data(), 0, out.data());
      for (int l = 0; l < L; ++l) CHECK(out[l] == even[(start + l) % 10]);
    }
    for (int e = -126; e <= 127; e += L) {  // p * 2^n over the whole documented range of n
      for (int l = 0; l < L; ++l) {
        a[l] = 1.0f + 0.125f * static_cast<float>(l % 8);
        b[l] = static_cast<float>(std::min(127, e + l));
      }
      path.apply(Op::scale_pow2, a.data(), b.data(), c.data(), 0, out.data());
      for (int l = 0; l < L; ++l) CHECK(out[l] == std::ldexp(a[l], static_cast<int>(b[l])));
    }
    const float xs[] = {1.0f, 3.0f, -7.5f, 1e-30f, 1e30f, 0.1f, 65504.0f, -1.0f};
    for (int start = 0; start < 8; start += L) {
      for (int l = 0; l < L; ++l) a[l] = xs[(start + l) % 8];
      path.apply(Op::reciprocal, a.data(), b.data(), c.data(), 0, out.data());
      for (int l = 0; l < L; ++l) {
        const double exact = 1.0 / a[l];
        CHECK(std::fabs(out[l] - exact) <= 2.5e-7 * std::fabs(exact));
        if (a[l] == 1.0f) CHECK(out[l] == 1.0f);
      }
    }
  }
}

TEST_CASE("simd: reductions and group swaps on every path", "[simd]") {
  auto rng = ga::testing::make_rng(0x51f);
  for (const SimdPath& path : simd_paths()) {
    INFO("path " << path.name);
    const int L = path.lanes;
    Lanes in(rng);
    const auto sum_of = [&](int vector) {
      double s = 0.0;
      for (int l = 0; l < L; ++l) s += in.a[vector * L + l];
      return s;
    };
    const double tolerance = 1e-5;  // L terms in [-4, 4], summed in any order in f32
    path.apply(Op::reduce_add, in.a.data(), in.b.data(), in.c.data(), 0, in.out.data());
    CHECK(std::fabs(in.out[0] - sum_of(0)) <= tolerance * L);
    path.apply(Op::reduce_max, in.a.data(), in.b.data(), in.c.data(), 0, in.out.data());
    CHECK(in.out[0] == *std::max_element(in.a.begin(), in.a.begin() + L));
    path.apply(Op::reduce_add_4, in.a.data(), in.b.data(), in.c.data(), 0, in.out.data());
    for (int i = 0; i < 4; ++i) CHECK(std::fabs(in.out[i] - sum_of(i)) <= tolerance * L);
    const int stride = 6;  // rows of the output apart, as a score tile's row stride
    std::fill(in.out.begin(), in.out.end(), 7.0f);
    path.apply(Op::reduce_add_4x4, in.a.data(), in.b.data(), in.c.data(), stride, in.out.data());
    for (int k = 0; k < 4; ++k) {
      for (int r = 0; r < 4; ++r)
        CHECK(std::fabs(in.out[k * stride + r] - sum_of(4 * k + r)) <= tolerance * L);
      CHECK(in.out[k * stride + 4] == 7.0f);
    }
    for (int width = 1; width < L; width *= 2) {
      INFO("width " << width);
      path.apply(Op::swap_groups, in.a.data(), in.b.data(), in.c.data(), width, in.out.data());
      for (int l = 0; l < L; ++l) CHECK(in.out[l] == in.a[l ^ width]);
    }
  }
}

TEST_CASE("simd: bf16, f16 and int8 loads widen exactly on every path", "[simd][kv_types]") {
  auto rng = ga::testing::make_rng(0x51f);
  // Every 16-bit pattern once (NaN, Inf, subnormals and zeros of both signs among them), and
  // every int8 value, a vector at a time.
  std::vector<std::uint16_t> halves(0x10000);
  for (int i = 0; i < 0x10000; ++i)
    halves[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(i);
  std::shuffle(halves.begin(), halves.end(), rng);
  std::vector<std::int8_t> bytes(256);
  for (int i = 0; i < 256; ++i)
    bytes[static_cast<std::size_t>(i)] = static_cast<std::int8_t>(i - 128);
  const auto expected = [&](int type, std::size_t i) -> float {
    if (type == 0) return ga::to_float(ga::bf16::from_bits(halves[i]));
    if (type == 1) return ga::to_float(ga::f16::from_bits(halves[i]));
    return static_cast<float>(bytes[i]);
  };
  for (const SimdPath& path : simd_paths()) {
    INFO("path " << path.name);
    const int L = path.lanes;
    for (int type = 0; type < 3; ++type) {
      INFO("type " << (type == 0 ? "bf16" : type == 1 ? "f16" : "int8"));
      const std::size_t count = type == 2 ? bytes.size() : halves.size();
      std::vector<float> out(static_cast<std::size_t>(L) + 1);
      int wrong = 0;
      for (std::size_t at = 0; at + static_cast<std::size_t>(L) <= count;
           at += static_cast<std::size_t>(L)) {
        const void* p = type == 2 ? static_cast<const void*>(&bytes[at]) : &halves[at];
        const int n = static_cast<int>(at / static_cast<std::size_t>(L)) % (L + 2) - 1;  // -1..L
        std::fill(out.begin(), out.end(), 7.0f);
        path.widen(type, p, n, out.data());
        for (int l = 0; l < L; ++l) {
          const float want =
              n >= 0 && l >= n ? 0.0f : expected(type, at + static_cast<std::size_t>(l));
          const float got = out[static_cast<std::size_t>(l)];
          // F16C quiets signaling NaNs: any NaN stands for a NaN.
          if (!(same_float(got, want) || (std::isnan(got) && std::isnan(want)))) ++wrong;
        }
        if (out[static_cast<std::size_t>(L)] != 7.0f) ++wrong;
      }
      CHECK(wrong == 0);
    }
  }
}
