// Storage-only 16-bit floating-point types: bf16 (bfloat16: 1 sign, 8 exponent, 7 mantissa bits)
// and f16 (IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits). They hold bits and convert to
// and from float; arithmetic is done in float.
//
// Conversion contracts (portable integer code, independent of the FPU's rounding mode and of
// flush-to-zero / denormals-are-zero settings):
// - float -> bf16 / f16 rounds to nearest, ties to even, with IEEE overflow: a value whose rounding
//   (with an unbounded exponent) exceeds the largest finite value becomes Inf. Float denormals are
//   kept (bf16) or rounded into f16 denormals / zero. The sign of zero is kept.
// - NaN stays NaN of the same sign, with the quiet bit set and the top payload bits kept.
// - bf16 / f16 -> float is exact for every bit pattern; NaN payloads (signaling or not) are kept.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace gated_attention {

namespace detail {

inline std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

inline std::uint16_t float_to_bf16_bits(float x) {
  const std::uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  }
  // Adding 0x7fff plus the kept lsb rounds the dropped 16 bits to nearest even; a carry out of the
  // mantissa bumps the exponent, and out of the largest finite value it gives Inf.
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

inline float bf16_bits_to_float(std::uint16_t h) {
  return bits_float(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t float_to_f16_bits(float x) {
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;

  if (a >= 0x7f800000u) {  // Inf or NaN
    if (a == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x03ffu));
  }
  if (a >= 0x477ff000u) {  // >= 65520 = 65504 + half an ulp: the tie goes to the even Inf
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (a >= 0x38800000u) {  // >= 2^-14: normal f16
    // Rebias the exponent (127 -> 15) and round the dropped 13 bits to nearest even; a mantissa
    // carry bumps the exponent, which stays finite below 65520.
    const std::uint32_t rounding = 0x0fffu + ((a >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((a - 0x38000000u + rounding) >> 13));
  }
  if (a <= 0x33000000u) {  // <= 2^-25, half the smallest subnormal: the tie goes to even zero
    return static_cast<std::uint16_t>(sign);
  }
  // 2^-25 < |x| < 2^-14, a normal float: f16 subnormal in units of 2^-24. A result of 0x400 is the
  // smallest normal, which is the right encoding.
  const std::uint32_t exponent = a >> 23;  // 102..112
  const std::uint32_t mantissa = (a & 0x007fffffu) | 0x00800000u;
  const std::uint32_t shift = 126u - exponent;  // 14..24
  std::uint32_t q = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u) != 0u)) ++q;
  return static_cast<std::uint16_t>(sign | q);
}

inline float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x03ffu;

  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0u) return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0u) return bits_float(sign);
  // Subnormal m * 2^-24: normalise so the leading one becomes the implicit bit.
  std::uint32_t e = 113u;
  while ((mantissa & 0x0400u) == 0u) {
    mantissa <<= 1;
    --e;
  }
  return bits_float(sign | (e << 23) | ((mantissa & 0x03ffu) << 13));
}

}  // namespace detail

struct bf16 {
  std::uint16_t bits = 0;

  constexpr bf16() = default;
  explicit bf16(float x) : bits(detail::float_to_bf16_bits(x)) {}

  static constexpr bf16 from_bits(std::uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }

  explicit operator float() const { return detail::bf16_bits_to_float(bits); }
};

struct f16 {
  std::uint16_t bits = 0;

  constexpr f16() = default;
  explicit f16(float x) : bits(detail::float_to_f16_bits(x)) {}

  static constexpr f16 from_bits(std::uint16_t b) {
    f16 r;
    r.bits = b;
    return r;
  }

  explicit operator float() const { return detail::f16_bits_to_float(bits); }
};

static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2, "bf16 must be 2 bytes, 2-aligned");
static_assert(sizeof(f16) == 2 && alignof(f16) == 2, "f16 must be 2 bytes, 2-aligned");
static_assert(std::is_trivially_copyable_v<bf16>, "bf16 must be trivially copyable");
static_assert(std::is_trivially_copyable_v<f16>, "f16 must be trivially copyable");

// Element-type-generic conversions: to_float accepts float, bf16 and f16.
inline float to_float(float x) {
  return x;
}
inline float to_float(bf16 x) {
  return detail::bf16_bits_to_float(x.bits);
}
inline float to_float(f16 x) {
  return detail::f16_bits_to_float(x.bits);
}

inline bf16 to_bf16(float x) {
  return bf16(x);
}
inline f16 to_f16(float x) {
  return f16(x);
}

// from_float<T>: float -> T for T in {float, bf16, f16}.
template <class T>
T from_float(float x) {
  static_assert(sizeof(T) == 0, "from_float<T>: T must be float, bf16 or f16");
  return T(x);
}
template <>
inline float from_float<float>(float x) {
  return x;
}
template <>
inline bf16 from_float<bf16>(float x) {
  return bf16(x);
}
template <>
inline f16 from_float<f16>(float x) {
  return f16(x);
}

// K/V cache element types: float, bf16, f16 and std::int8_t (rows with one f32 scale each).
template <class E>
inline constexpr bool is_kv_type_v = std::is_same_v<E, float> || std::is_same_v<E, bf16> ||
                                     std::is_same_v<E, f16> || std::is_same_v<E, std::int8_t>;

// Activation element types (q, gate, out): float, bf16, f16.
template <class E>
inline constexpr bool is_activation_type_v =
    std::is_same_v<E, float> || std::is_same_v<E, bf16> || std::is_same_v<E, f16>;

namespace detail {
// The largest |x| of a row of d values; NaN if the row holds NaN or Inf.
inline float row_max_abs(const float* x, std::int64_t d) {
  // kWays independent chains (a max waits for the one before it); the result does not depend on
  // the order.
  constexpr int kWays = 8;
  float max_abs[kWays] = {}, non_finite[kWays] = {};
  std::int64_t i = 0;
  for (; i + kWays <= d; i += kWays) {
    for (int j = 0; j < kWays; ++j) {
      max_abs[j] = std::max(max_abs[j], std::fabs(x[i + j]));
      non_finite[j] += x[i + j] * 0.0f;  // 0 for finite x, NaN for NaN and +-Inf
    }
  }
  for (int j = 0; j < kWays && i + j < d; ++j) {
    max_abs[j] = std::max(max_abs[j], std::fabs(x[i + j]));
    non_finite[j] += x[i + j] * 0.0f;
  }
  for (int j = 1; j < kWays; ++j) {
    max_abs[0] = std::max(max_abs[0], max_abs[j]);
    non_finite[0] += non_finite[j];
  }
  return max_abs[0] + non_finite[0];
}
}  // namespace detail

// Symmetric int8 rows: a row of largest magnitude max_abs is stored as q = x * 127 / max_abs
// rounded to nearest even, with the scale max_abs / 127 (0 for a zero row). Below 127 / FLT_MAX
// the inverse is FLT_MAX (127 / max_abs would be infinite): every product x * inverse stays finite
// and such a row is stored coarsely, each element within max_abs of its value.
inline float int8_scale(float max_abs) {
  return max_abs / 127.0f;
}
inline float int8_inverse_scale(float max_abs) {
  return max_abs > 0.0f ? std::min(127.0f / max_abs, std::numeric_limits<float>::max()) : 0.0f;
}
// x (finite, |x| <= max_abs) quantised with inverse_scale = int8_inverse_scale(max_abs).
inline std::int8_t quantize_int8(float x, float inverse_scale) {
  const float q = std::nearbyint(x * inverse_scale);  // ties to even (the default rounding mode)
  return static_cast<std::int8_t>(std::clamp(q, -127.0f, 127.0f));
}

}  // namespace gated_attention
