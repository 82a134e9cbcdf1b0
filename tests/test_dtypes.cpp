// Tests for bf16 / f16 storage types. The float -> bf16 / f16 conversions are checked against an
// independent reference that picks the nearest representable value by exact comparisons in
// double, rather than by bit manipulation.
#include "gated_attention/core/dtypes.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace ga = gated_attention;

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// A binary format with 1 sign, `exponent_bits` exponent and `mantissa_bits` mantissa bits, IEEE
// layout. value() of the Inf pattern is 2^(emax+1), the next value the format would have with an
// unbounded exponent, so that rounding to nearest even between the largest finite value and it
// yields IEEE overflow behaviour directly.
struct Format {
  int exponent_bits;
  int mantissa_bits;

  std::uint32_t inf_bits() const {
    return ((1u << exponent_bits) - 1u) << static_cast<unsigned>(mantissa_bits);
  }
  std::uint32_t sign_bit() const {
    return 1u << static_cast<unsigned>(exponent_bits + mantissa_bits);
  }
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }

  // Magnitude of a non-negative, non-NaN bit pattern (bits <= inf_bits()).
  double value(std::uint32_t bits) const {
    const std::uint32_t e = bits >> static_cast<unsigned>(mantissa_bits);
    const std::uint32_t m = bits & ((1u << mantissa_bits) - 1u);
    if (e == 0) return std::ldexp(static_cast<double>(m), 1 - bias() - mantissa_bits);
    return std::ldexp(static_cast<double>(m + (1u << mantissa_bits)),
                      static_cast<int>(e) - bias() - mantissa_bits);
  }
};

constexpr Format kF16{5, 10};
constexpr Format kBF16{8, 7};

// Round a finite float to `format`, ties to even. Bit patterns 0..inf_bits are increasing in value,
// so the result is one of the two patterns bracketing |x|; sums of adjacent values and 2|x| are
// exact in double, so the comparison is exact.
class Reference {
 public:
  explicit Reference(Format format) : format_(format) {
    for (std::uint32_t b = 0; b <= format.inf_bits(); ++b) values_.push_back(format.value(b));
  }

  std::uint32_t round(float x) const {
    const double a = std::fabs(static_cast<double>(x));
    const std::uint32_t sign = std::signbit(x) ? format_.sign_bit() : 0u;
    if (a >= values_.back()) return sign | format_.inf_bits();
    std::uint32_t lo = 0;  // largest pattern with value <= a
    std::uint32_t hi = format_.inf_bits();
    while (hi - lo > 1) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (values_[mid] <= a) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    if (values_[lo] == a) return sign | lo;
    const double twice = 2.0 * a;
    const double sum = values_[lo] + values_[lo + 1];
    if (twice < sum) return sign | lo;
    if (twice > sum) return sign | (lo + 1);
    return sign | ((lo & 1u) == 0u ? lo : lo + 1);
  }

 private:
  Format format_;
  std::vector<double> values_;
};

// Floats to test against the reference: every representable value and every halfway point of the
// format, each with its float neighbours, plus pseudo-random float bit patterns; both signs.
std::vector<float> probe_floats(Format format) {
  std::vector<float> out;
  const auto add_neighbourhood = [&out](float centre) {
    float up = centre;
    float down = centre;
    out.push_back(centre);
    for (int k = 0; k < 3; ++k) {
      up = std::nextafter(up, std::numeric_limits<float>::infinity());
      down = std::nextafter(down, -std::numeric_limits<float>::infinity());
      out.push_back(up);
      out.push_back(down);
    }
  };
  for (std::uint32_t b = 0; b <= format.inf_bits(); ++b) {
    const double v = format.value(b);
    if (v <= std::numeric_limits<float>::max()) add_neighbourhood(static_cast<float>(v));
    if (b < format.inf_bits()) {
      const double mid = 0.5 * (v + format.value(b + 1));
      if (mid <= std::numeric_limits<float>::max()) add_neighbourhood(static_cast<float>(mid));
    }
  }
  // Float denormals, including the smallest ones.
  for (std::uint32_t u = 0; u < 4096; ++u) out.push_back(float_of(u));
  for (std::uint32_t u = 1; u < 0x00800000u; u += 997) out.push_back(float_of(u));
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < (1 << 20); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float x = float_of(static_cast<std::uint32_t>(state >> 32) & 0x7fffffffu);
    if (!std::isnan(x)) out.push_back(x);
  }
  const std::size_t n = out.size();
  for (std::size_t i = 0; i < n; ++i) out.push_back(-out[i]);
  return out;
}

bool is_f16_nan(std::uint16_t b) {
  return (b & 0x7c00u) == 0x7c00u && (b & 0x03ffu) != 0u;
}
bool is_bf16_nan(std::uint16_t b) {
  return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0u;
}

std::uint16_t f16_bits(float x) {
  return ga::to_f16(x).bits;
}
std::uint16_t bf16_bits(float x) {
  return ga::to_bf16(x).bits;
}

}  // namespace

TEST_CASE("dtypes: layout and construction", "[core][dtypes]") {
  static_assert(sizeof(ga::bf16) == 2 && alignof(ga::bf16) == 2);
  static_assert(sizeof(ga::f16) == 2 && alignof(ga::f16) == 2);
  static_assert(std::is_trivially_copyable_v<ga::bf16>);
  static_assert(std::is_trivially_copyable_v<ga::f16>);
  static_assert(!std::is_convertible_v<float, ga::bf16>, "float -> bf16 must be explicit");
  static_assert(!std::is_convertible_v<float, ga::f16>, "float -> f16 must be explicit");
  static_assert(!std::is_convertible_v<ga::bf16, float>, "bf16 -> float must be explicit");
  static_assert(!std::is_convertible_v<ga::f16, float>, "f16 -> float must be explicit");
  static_assert(ga::bf16::from_bits(0x3f80).bits == 0x3f80);
  static_assert(ga::f16::from_bits(0x3c00).bits == 0x3c00);
  static_assert(ga::bf16().bits == 0 && ga::f16().bits == 0);

  ga::bf16 b;
  ga::f16 h;
  CHECK(b.bits == 0);
  CHECK(h.bits == 0);
  CHECK(ga::bf16(1.5f).bits == 0x3fc0);
  CHECK(ga::f16(1.5f).bits == 0x3e00);
  CHECK(static_cast<float>(ga::bf16::from_bits(0x3fc0)) == 1.5f);
  CHECK(static_cast<float>(ga::f16::from_bits(0x3e00)) == 1.5f);
}

TEST_CASE("dtypes: generic to_float / from_float", "[core][dtypes]") {
  static_assert(std::is_same_v<decltype(ga::from_float<float>(1.0f)), float>);
  static_assert(std::is_same_v<decltype(ga::from_float<ga::bf16>(1.0f)), ga::bf16>);
  static_assert(std::is_same_v<decltype(ga::from_float<ga::f16>(1.0f)), ga::f16>);

  CHECK(ga::to_float(0.1f) == 0.1f);
  CHECK(ga::from_float<float>(0.1f) == 0.1f);
  // 0.1f = 0x3dcccccd: bf16 keeps 0x3dcc, dropped 0xcccd > half -> 0x3dcd.
  CHECK(ga::from_float<ga::bf16>(0.1f).bits == 0x3dcd);
  // 0.1 in f16 is 0x2e66 (0.0999755859375).
  CHECK(ga::from_float<ga::f16>(0.1f).bits == 0x2e66);
  CHECK(ga::to_float(ga::bf16::from_bits(0x3dcd)) == 0.10009765625f);
  CHECK(ga::to_float(ga::f16::from_bits(0x2e66)) == 0.0999755859375f);
}

TEST_CASE("dtypes: f16 -> float is exact for all 65536 patterns", "[core][dtypes]") {
  int mismatches = 0;
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float got = ga::to_float(ga::f16::from_bits(h));
    const std::uint32_t magnitude = b & 0x7fffu;
    const bool negative = (b & 0x8000u) != 0u;
    bool ok;
    if (is_f16_nan(h)) {
      // NaN of the same sign, payload in the top mantissa bits.
      ok = std::isnan(got) && std::signbit(got) == negative &&
           (bits_of(got) & 0x007fffffu) == ((b & 0x03ffu) << 13);
    } else {
      const double expect = magnitude == kF16.inf_bits() ? std::numeric_limits<double>::infinity()
                                                         : kF16.value(magnitude);
      ok = static_cast<double>(std::fabs(got)) == expect && std::signbit(got) == negative;
    }
    if (!ok && ++mismatches <= 10) {
      CAPTURE(b, got);
      CHECK(ok);
    }
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("dtypes: f16 -> float -> f16 round-trips all 65536 patterns", "[core][dtypes]") {
  int mismatches = 0;
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const std::uint16_t back = ga::to_f16(ga::to_float(ga::f16::from_bits(h))).bits;
    // A NaN comes back as the same NaN with the quiet bit set.
    const std::uint16_t want = is_f16_nan(h) ? static_cast<std::uint16_t>(h | 0x0200u) : h;
    if (back != want && ++mismatches <= 10) {
      CAPTURE(b, back, want);
      CHECK(back == want);
    }
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("dtypes: bf16 -> float -> bf16 round-trips all 65536 patterns", "[core][dtypes]") {
  int mismatches = 0;
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float f = ga::to_float(ga::bf16::from_bits(h));
    const std::uint16_t back = ga::to_bf16(f).bits;
    const std::uint16_t want = is_bf16_nan(h) ? static_cast<std::uint16_t>(h | 0x0040u) : h;
    const bool ok = back == want && bits_of(f) == (b << 16) && std::isnan(f) == is_bf16_nan(h);
    if (!ok && ++mismatches <= 10) {
      CAPTURE(b, back, want, f);
      CHECK(ok);
    }
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("dtypes: float -> f16 matches a double-precision reference", "[core][dtypes]") {
  const Reference reference(kF16);
  const std::vector<float> probes = probe_floats(kF16);
  REQUIRE(probes.size() > 2000000u);
  int mismatches = 0;
  for (const float x : probes) {
    const std::uint32_t want = reference.round(x);
    const std::uint16_t got = f16_bits(x);
    if (got != want && ++mismatches <= 10) {
      CAPTURE(bits_of(x), x, got, want);
      CHECK(got == want);
    }
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("dtypes: float -> bf16 matches a double-precision reference", "[core][dtypes]") {
  const Reference reference(kBF16);
  const std::vector<float> probes = probe_floats(kBF16);
  REQUIRE(probes.size() > 2000000u);
  int mismatches = 0;
  for (const float x : probes) {
    const std::uint32_t want = reference.round(x);
    const std::uint16_t got = bf16_bits(x);
    if (got != want && ++mismatches <= 10) {
      CAPTURE(bits_of(x), x, got, want);
      CHECK(got == want);
    }
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("dtypes: float NaNs stay NaN in bf16 and f16", "[core][dtypes]") {
  // Every float NaN payload, both signs: never Inf, sign kept, quiet bit set, top payload bits
  // kept.
  int mismatches = 0;
  for (std::uint32_t m = 1; m < 0x00800000u; ++m) {
    for (const std::uint32_t sign : {0u, 0x80000000u}) {
      const std::uint32_t u = sign | 0x7f800000u | m;
      const float x = float_of(u);
      const std::uint16_t b = bf16_bits(x);
      const std::uint16_t h = f16_bits(x);
      const auto want_b = static_cast<std::uint16_t>((u >> 16) | 0x0040u);
      const auto want_h = static_cast<std::uint16_t>((sign >> 16) | 0x7e00u | (m >> 13));
      if ((b != want_b || h != want_h) && ++mismatches <= 10) {
        CAPTURE(u, b, want_b, h, want_h);
        CHECK(b == want_b);
        CHECK(h == want_h);
      }
    }
  }
  REQUIRE(mismatches == 0);
  CHECK(std::isnan(ga::to_float(ga::to_f16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(ga::to_float(ga::to_bf16(std::numeric_limits<float>::signaling_NaN()))));
}

TEST_CASE("dtypes: f16 named edge values", "[core][dtypes]") {
  constexpr float inf = std::numeric_limits<float>::infinity();
  CHECK(f16_bits(0.0f) == 0x0000);
  CHECK(f16_bits(-0.0f) == 0x8000);
  CHECK(f16_bits(1.0f) == 0x3c00);      // exponent 15, mantissa 0
  CHECK(f16_bits(-2.0f) == 0xc000);     // sign, exponent 16
  CHECK(f16_bits(65504.0f) == 0x7bff);  // (2 - 2^-10) * 2^15, largest finite
  CHECK(f16_bits(65519.0f) == 0x7bff);  // below the 65520 midpoint to 2^16
  // nextafter(65520, 0) = 0x477fefff = 65519.99609375: still rounds down.
  CHECK(f16_bits(float_of(0x477fefffu)) == 0x7bff);
  CHECK(f16_bits(65520.0f) == 0x7c00);  // tie between 0x7bff (odd) and 2^16: even -> Inf
  CHECK(f16_bits(-65520.0f) == 0xfc00);
  CHECK(f16_bits(65536.0f) == 0x7c00);
  CHECK(f16_bits(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(f16_bits(inf) == 0x7c00);
  CHECK(f16_bits(-inf) == 0xfc00);

  // Ties in the normal range: 1 + 2^-11 is halfway between 1 (0x3c00) and 1 + 2^-10 (0x3c01).
  CHECK(f16_bits(1.0f + 0x1p-11f) == 0x3c00);
  CHECK(f16_bits(1.0f + 3 * 0x1p-11f) == 0x3c02);  // halfway 0x3c01 / 0x3c02 -> even
  CHECK(f16_bits(2049.0f) == 0x6800);              // ulp 2 at 2048 (0x6800): 2049 ties to 2048
  CHECK(f16_bits(2051.0f) == 0x6802);              // 2051 ties to 2052 (mantissa 2)
  // Largest mantissa carries into the exponent: 2 - 2^-11 ties to 2.0 (0x4000).
  CHECK(f16_bits(2.0f - 0x1p-11f) == 0x4000);

  // Subnormals, units of 2^-24.
  CHECK(f16_bits(0x1p-24f) == 0x0001);  // smallest subnormal
  CHECK(f16_bits(0x1p-25f) == 0x0000);  // 0.5 units: tie -> 0
  CHECK(f16_bits(-0x1p-25f) == 0x8000);
  CHECK(f16_bits(float_of(0x33000001u)) == 0x0001);  // just above 0.5 units
  CHECK(f16_bits(3 * 0x1p-26f) == 0x0001);           // 0.75 units
  CHECK(f16_bits(3 * 0x1p-25f) == 0x0002);           // 1.5 units: tie -> 2
  CHECK(f16_bits(5 * 0x1p-25f) == 0x0002);           // 2.5 units: tie -> 2
  CHECK(f16_bits(0x1p-14f) == 0x0400);               // smallest normal
  CHECK(f16_bits(0x1p-14f - 0x1p-24f) == 0x03ff);    // largest subnormal
  CHECK(f16_bits(0x1p-14f - 0x1p-25f) == 0x0400);  // 1023.5 units: tie -> 1024, the smallest normal
  CHECK(f16_bits(float_of(0x00000001u)) == 0x0000);  // float denormals flush to zero
  CHECK(f16_bits(float_of(0x80000001u)) == 0x8000);
  CHECK(f16_bits(float_of(0x007fffffu)) == 0x0000);

  // NaN with payload 0x7fc12345: quiet, sign kept, top 10 payload bits 0x209 -> 0x7e09.
  CHECK(f16_bits(float_of(0x7fc12345u)) == 0x7e09);
  CHECK(f16_bits(float_of(0xff800001u)) == 0xfe00);  // signaling NaN, low payload only
  CHECK(f16_bits(float_of(0x7f802000u)) == 0x7e01);

  CHECK(ga::to_float(ga::f16::from_bits(0x0001)) == 0x1p-24f);
  CHECK(ga::to_float(ga::f16::from_bits(0x03ff)) == 0x1p-14f - 0x1p-24f);
  CHECK(ga::to_float(ga::f16::from_bits(0x7bff)) == 65504.0f);
  CHECK(ga::to_float(ga::f16::from_bits(0x3555)) == 0.333251953125f);
  CHECK(ga::to_float(ga::f16::from_bits(0xfc00)) == -inf);
  CHECK(std::signbit(ga::to_float(ga::f16::from_bits(0x8000))));
  CHECK(std::isnan(ga::to_float(ga::f16::from_bits(0x7c01))));
}

TEST_CASE("dtypes: bf16 named edge values", "[core][dtypes]") {
  constexpr float inf = std::numeric_limits<float>::infinity();
  CHECK(bf16_bits(0.0f) == 0x0000);
  CHECK(bf16_bits(-0.0f) == 0x8000);
  CHECK(bf16_bits(1.0f) == 0x3f80);
  CHECK(bf16_bits(-2.0f) == 0xc000);
  // 1 + 2^-8 = 0x3f808000: halfway between 0x3f80 and 0x3f81 -> even 0x3f80.
  CHECK(bf16_bits(1.0f + 0x1p-8f) == 0x3f80);
  // 1 + 3 * 2^-8 = 0x3f818000: halfway between 0x3f81 and 0x3f82 -> 0x3f82 (1 + 2^-6).
  CHECK(bf16_bits(1.0f + 3 * 0x1p-8f) == 0x3f82);
  CHECK(bf16_bits(float_of(0x3f808001u)) == 0x3f81);  // just above the tie
  CHECK(bf16_bits(float_of(0x3f817fffu)) == 0x3f81);  // just below the tie
  // Mantissa carry into the exponent: 0x3fffffff (just below 2) -> 0x4000.
  CHECK(bf16_bits(float_of(0x3fffffffu)) == 0x4000);

  // Float max 0x7f7fffff lies above the midpoint 0x7f7f8000 between bf16 max 0x7f7f and 2^128:
  // IEEE round-to-nearest overflows to Inf.
  CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(bf16_bits(float_of(0x7f7f8000u)) == 0x7f80);  // tie, 0x7f7f is odd -> Inf
  CHECK(bf16_bits(float_of(0x7f7f7fffu)) == 0x7f7f);
  CHECK(bf16_bits(float_of(0xff7fffffu)) == 0xff80);
  CHECK(bf16_bits(inf) == 0x7f80);
  CHECK(bf16_bits(-inf) == 0xff80);

  // Float denormals keep their top bits with round-to-nearest-even.
  CHECK(bf16_bits(float_of(0x00000001u)) == 0x0000);
  CHECK(bf16_bits(float_of(0x00008000u)) == 0x0000);  // tie -> even 0
  CHECK(bf16_bits(float_of(0x00008001u)) == 0x0001);
  CHECK(bf16_bits(float_of(0x00018000u)) == 0x0002);  // tie -> even 2
  CHECK(bf16_bits(float_of(0x80008000u)) == 0x8000);
  CHECK(bf16_bits(float_of(0x007fffffu)) == 0x0080);  // rounds up to the smallest normal

  // NaN whose payload lies only in the dropped bits: plain truncation would give Inf 0x7f80.
  CHECK(bf16_bits(float_of(0x7f800001u)) == 0x7fc0);
  CHECK(bf16_bits(float_of(0xff800001u)) == 0xffc0);
  CHECK(bf16_bits(float_of(0x7fffffffu)) == 0x7fff);  // not rounded up into the sign bit
  CHECK(bf16_bits(float_of(0x7fc12345u)) == 0x7fc1);

  CHECK(ga::to_float(ga::bf16::from_bits(0x7f7f)) == float_of(0x7f7f0000u));
  CHECK(ga::to_float(ga::bf16::from_bits(0x0001)) == float_of(0x00010000u));
  CHECK(ga::to_float(ga::bf16::from_bits(0xff80)) == -inf);
}
