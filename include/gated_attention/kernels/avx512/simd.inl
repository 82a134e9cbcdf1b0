// AVX-512 f32 vectors: the Simd contract (kernels/simd_contract.hpp) on 16 lanes. Included inside
// kernels::avx512 and its target region by kernels/isa_region.inl.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

struct Simd {
  using V = __m512;
  static constexpr int kLanes = 16;

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  // Prefill tiles: the FMAs may take it as a memory operand (see docs/performance-notes.md,
  // "Pinned loads: AVX-512 prefill tiles (dropped)").
  static V load_shared(const float* p) { return _mm512_loadu_ps(p); }
  // Decode tiles: kept in a register, as their steps already load K or V rows.
  static V load_pinned(const float* p) {
    V v = _mm512_loadu_ps(p);
    __asm__("" : "+v"(v));
    return v;
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V load_partial(const float* p, int n) { return _mm512_maskz_loadu_ps(first(n), p); }
  static void store_partial(float* p, V v, int n) { _mm512_mask_storeu_ps(p, first(n), v); }
  // 16- and 8-bit elements widened to f32 (bf16 by shift, f16 by vcvtph2ps, int8 exactly).
  static V load(const bf16* p) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V load(const f16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V load(const std::int8_t* p) {
    return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // p[0, 2 kLanes) as f32: even = p[0], p[2], ...; odd = p[1], p[3], ... (one load, two
  // bitwise ops: each 32-bit lane holds a pair).
  static void load_pairs(const bf16* p, V& even, V& odd) {
    const __m512i x = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(-65536)));
  }
  static V load_partial(const bf16* p, int n) {
    return widen(_mm256_maskz_loadu_epi16(first(n), p));
  }
  static V load_partial(const f16* p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first(n), p));
  }
  static V load_partial(const std::int8_t* p, int n) {
    return widen(_mm_maskz_loadu_epi8(first(n), p));
  }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V round_nearest(V x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // p * 2^n for integral n in [-126, 127].
  static V scale_pow2(V p, V n) { return _mm512_scalef_ps(p, n); }
  // a < b ? if_less : otherwise, per lane.
  static V select_less(V a, V b, V if_less, V otherwise) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), otherwise, if_less);
  }
  static float reduce_add(V v) {
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
  }
  // out[i] = reduce_add(v[i]) for 4 vectors. Both reductions are always inlined, on every path,
  // so that a tile's accumulators stay in registers ("Dot-score reductions always inlined").
  GATED_ATTENTION_ALWAYS_INLINE static void reduce_add_4(const V (&v)[4], float* out) {
    GATED_ATTENTION_UNROLL
    for (int i = 0; i < 4; ++i) out[i] = reduce_add(v[i]);
  }
  // out[k * stride + r] = reduce_add(v[k][r]) for 4 x 4 vectors, as one transpose-and-add tree.
  GATED_ATTENTION_ALWAYS_INLINE static void reduce_add_4x4(const V (&v)[4][4], float* out,
                                                           std::int64_t stride) {
    const V ordered = fold_16(&v[0][0]);
    _mm_storeu_ps(out, _mm512_castps512_ps128(ordered));
    _mm_storeu_ps(out + stride, _mm512_extractf32x4_ps(ordered, 1));
    _mm_storeu_ps(out + 2 * stride, _mm512_extractf32x4_ps(ordered, 2));
    _mm_storeu_ps(out + 3 * stride, _mm512_extractf32x4_ps(ordered, 3));
  }
  // Element i: the sum of the lanes of x[i], for 16 vectors W of f32 (__m512) or int32 (__m512i)
  // lanes, by a tree of 30 shuffles, 15 adds and one permutation.
  template <class W>
  GATED_ATTENTION_ALWAYS_INLINE static W fold_16(const W* x) {
    W a[8], b[4], c[2];
    GATED_ATTENTION_UNROLL
    for (int i = 0; i < 8; ++i) {  // a[i]: lanes 0-7 fold x[2i], lanes 8-15 fold x[2i+1]
      a[i] = fold_add(shuffle_blocks<0x44>(x[2 * i], x[2 * i + 1]),
                      shuffle_blocks<0xEE>(x[2 * i], x[2 * i + 1]));
    }
    GATED_ATTENTION_UNROLL
    for (int j = 0; j < 4; ++j) {  // b[j]: 128-bit lane q folds x[4j + q]
      b[j] = fold_add(shuffle_blocks<0x88>(a[2 * j], a[2 * j + 1]),
                      shuffle_blocks<0xDD>(a[2 * j], a[2 * j + 1]));
    }
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < 2; ++k) {  // c[k], lane q: 2 partials of x[8k + q], then of x[8k + 4 + q]
      c[k] = fold_add(shuffle_words<0x44>(b[2 * k], b[2 * k + 1]),
                      shuffle_words<0xEE>(b[2 * k], b[2 * k + 1]));
    }
    // Lane q, element e: the sum of x[q + 4 e]; permuted so that element i holds x[i].
    const W sums = fold_add(shuffle_words<0x88>(c[0], c[1]), shuffle_words<0xDD>(c[0], c[1]));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return permute_words(order, sums);
  }
  // fold_16's steps on either lane type: add, 128-bit blocks and 32-bit words of two vectors
  // (as _mm512_shuffle_f32x4 and _mm512_shuffle_ps), a permutation of words.
  static __m512 fold_add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static __m512i fold_add(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
  template <int kImm>
  static __m512 shuffle_blocks(__m512 a, __m512 b) {
    return _mm512_shuffle_f32x4(a, b, kImm);
  }
  template <int kImm>
  static __m512i shuffle_blocks(__m512i a, __m512i b) {
    return _mm512_shuffle_i32x4(a, b, kImm);
  }
  template <int kImm>
  static __m512 shuffle_words(__m512 a, __m512 b) {
    return _mm512_shuffle_ps(a, b, kImm);
  }
  template <int kImm>
  static __m512i shuffle_words(__m512i a, __m512i b) {
    return _mm512_castps_si512(
        _mm512_shuffle_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b), kImm));
  }
  static __m512 permute_words(__m512i order, __m512 x) { return _mm512_permutexvar_ps(order, x); }
  static __m512i permute_words(__m512i order, __m512i x) {
    return _mm512_permutexvar_epi32(order, x);
  }
  // v with adjacent groups of `width` lanes swapped (width 1, 2, 4 or 8).
  static V swap_groups(V v, int width) {
    if (width == 8) return _mm512_shuffle_f32x4(v, v, 0x4E);
    if (width == 4) return _mm512_shuffle_f32x4(v, v, 0xB1);
    return width == 2 ? _mm512_permute_ps(v, 0x4E) : _mm512_permute_ps(v, 0xB1);
  }
  static float reduce_max(V v) {
    const __m256 a = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_max_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_max_ss(b, _mm_movehdup_ps(b)));
  }
  // 1 / x: 14-bit estimate and one Newton step in the form r + r (1 - x r), within about an ulp
  // (exactly 1 for x = 1).
  static V reciprocal(V x) {
    const V r = _mm512_rcp14_ps(x);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(x, r, _mm512_set1_ps(1.0f)), r);
  }

 private:
  // Lanes [0, n) set.
  static __mmask16 first(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static V widen(__m256i bf16_bits) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16_bits), 16));
  }
  static V widen(__m128i int8s) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(int8s)); }
};
