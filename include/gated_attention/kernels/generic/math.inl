// Vectorised math shared by the kernels, written once over the enclosing ISA's `Simd` (included
// inside kernels::scalar, kernels::avx2, ... and their target regions).
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

// 2^t for t in [-126, 126]: 2^round(t) times a degree-6 polynomial on the fraction (a minimax
// fit of the relative error on [-0.5, 0.5]; 1e-7 at most when evaluated in f32).
GATED_ATTENTION_ALWAYS_INLINE Simd::V exp2_in_range(Simd::V t) {
  using S = Simd;
  const S::V n = S::round_nearest(t);
  const S::V f = S::sub(t, n);  // [-0.5, 0.5]
  S::V p = S::set1(1.53460394e-04f);
  p = S::fma(p, f, S::set1(1.33999332e-03f));
  p = S::fma(p, f, S::set1(9.61848814e-03f));
  p = S::fma(p, f, S::set1(5.55032864e-02f));
  p = S::fma(p, f, S::set1(2.40226462e-01f));
  p = S::fma(p, f, S::set1(6.93147182e-01f));
  p = S::fma(p, f, S::set1(1.0f));
  return S::scale_pow2(p, n);
}

// 2^x in f32 lanes: max relative error 2e-7 (the bound the "exp2" test in tests/test_sdpa.cpp
// checks); x < -126 gives exactly 0 (no denormals), x > 126 saturates at 2^126.
GATED_ATTENTION_ALWAYS_INLINE Simd::V exp2_lanes(Simd::V x) {
  using S = Simd;
  const S::V lowest = S::set1(-126.0f);
  const S::V clamped = S::min(S::max(x, lowest), S::set1(126.0f));
  return S::select_less(x, lowest, S::zero(), exp2_in_range(clamped));
}

// exp2_lanes over an array (tests measure its error through this).
inline void exp2_array(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + Simd::kLanes <= n; i += Simd::kLanes)
    Simd::store(y + i, exp2_lanes(Simd::load(x + i)));
  if (i < n) {
    const int tail = static_cast<int>(n - i);
    Simd::store_partial(y + i, exp2_lanes(Simd::load_partial(x + i, tail)), tail);
  }
}

// sigmoid(x) = 1 / (1 + 2^(-x log2 e)): absolute error <= 1e-7, relative error
// <= 4e-7 + 7e-8 |x| (x log2 e is rounded to float; tests/test_output_gate.cpp). Saturates without
// overflow or denormals: exactly 1 above x = 87.4, and 2^-125 (a normal number) below x = -86.6.
GATED_ATTENTION_ALWAYS_INLINE Simd::V sigmoid_lanes(Simd::V x) {
  using S = Simd;
  const S::V one = S::set1(1.0f);
  // 2^t below t = -126 is no different from 0 next to 1, so exp2_lanes' zeroing is not needed.
  // Simd::reciprocal is the cheaper of a division and a refined estimate on each ISA.
  const S::V t = S::max(S::min(S::mul(x, S::set1(-kLog2e)), S::set1(125.0f)), S::set1(-126.0f));
  return S::reciprocal(S::add(one, exp2_in_range(t)));
}

GATED_ATTENTION_ALWAYS_INLINE Simd::V activation_lanes(Simd::V g, GateActivation activation) {
  const Simd::V s = sigmoid_lanes(g);
  return activation == GateActivation::silu ? Simd::mul(g, s) : s;
}

GATED_ATTENTION_ALWAYS_INLINE Simd::V combine_lanes(Simd::V attn, Simd::V activated,
                                                    GateCombine combine) {
  return combine == GateCombine::multiply ? Simd::mul(attn, activated) : Simd::add(attn, activated);
}

GATED_ATTENTION_ALWAYS_INLINE Simd::V gate_lanes(Simd::V attn, Simd::V g, GateActivation activation,
                                                 GateCombine combine) {
  return combine_lanes(attn, activation_lanes(g, activation), combine);
}

// sigmoid_lanes over an array (tests measure its error through this).
inline void sigmoid_array(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + Simd::kLanes <= n; i += Simd::kLanes) {
    Simd::store(y + i, sigmoid_lanes(Simd::load(x + i)));
  }
  if (i < n) {
    const int tail = static_cast<int>(n - i);
    Simd::store_partial(y + i, sigmoid_lanes(Simd::load_partial(x + i, tail)), tail);
  }
}

// One vector of a K or V row as f32: f32 rows loaded into a register (load_pinned), 16- and
// 8-bit rows widened.
template <class E>
GATED_ATTENTION_ALWAYS_INLINE Simd::V load_row_vector(const E* p) {
  if constexpr (std::is_same_v<E, float>) {
    return Simd::load_pinned(p);
  } else {
    return Simd::load(p);
  }
}

// count <= kLanes elements of a row as f32, other lanes 0.
template <class E>
GATED_ATTENTION_ALWAYS_INLINE Simd::V load_row_part(const E* p, int count) {
  return count == Simd::kLanes ? Simd::load(p) : Simd::load_partial(p, count);
}

// count <= kLanes lanes of v stored as E: f32 as they are, bf16 and f16 rounded to nearest even
// (from_float). Outputs are stored once per row, so the narrowing goes lane by lane.
template <class E>
GATED_ATTENTION_ALWAYS_INLINE void store_row_part(E* p, Simd::V v, int count) {
  if constexpr (std::is_same_v<E, float>) {
    if (count == Simd::kLanes) {
      Simd::store(p, v);
    } else {
      Simd::store_partial(p, v, count);
    }
  } else {
    float lanes[Simd::kLanes];
    Simd::store(lanes, v);
    for (int k = 0; k < count; ++k) p[k] = from_float<E>(lanes[k]);
  }
}

// Pair order (Simd::load_pairs reads bf16 rows so): each whole chunk of 2 kLanes floats of a row
// holds its even elements, then its odd ones; a shorter tail stays in order. to_pair_order puts
// the first `whole` (a multiple of 2 kLanes) floats of a row in it, from_pair_order back.
template <bool kToPairs>
void reorder_pairs(float* row, std::int64_t whole) {
  constexpr int L = Simd::kLanes;
  float chunk[2 * L];
  for (std::int64_t d = 0; d < whole; d += 2 * L) {
    for (int j = 0; j < 2 * L; ++j) {
      const int natural = 2 * (j % L) + j / L;  // the element at pair slot j
      if constexpr (kToPairs) {
        chunk[j] = row[d + natural];
      } else {
        chunk[natural] = row[d + j];
      }
    }
    std::copy(chunk, chunk + 2 * L, row + d);
  }
}
inline void to_pair_order(float* row, std::int64_t whole) {
  reorder_pairs<true>(row, whole);
}
inline void from_pair_order(float* row, std::int64_t whole) {
  reorder_pairs<false>(row, whole);
}

// A bf16 row of d elements (a multiple of 2 kLanes) widened to f32 into out[0, d), in pair order.
GATED_ATTENTION_ALWAYS_INLINE void widen_pairs(const bf16* row, std::int64_t d, float* out) {
  constexpr int L = Simd::kLanes;
  for (std::int64_t c = 0; c < d; c += 2 * L) {
    Simd::V even, odd;
    Simd::load_pairs(row + c, even, odd);
    Simd::store(out + c, even);
    Simd::store(out + c + L, odd);
  }
}

// n rows of d elements (`stride` apart) widened to f32 into out [n, d].
template <class E>
void widen_rows(const E* rows, std::int64_t stride, std::int64_t n, std::int64_t d, float* out) {
  constexpr int L = Simd::kLanes;
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t c = 0; c < d; c += L) {
      const int count = static_cast<int>(std::min<std::int64_t>(L, d - c));
      const Simd::V x = load_row_part(rows + r * stride + c, count);
      if (count == L) {
        Simd::store(out + r * d + c, x);
      } else {
        Simd::store_partial(out + r * d + c, x, count);
      }
    }
  }
}
