// AVX2 + FMA f32 vectors: the Simd contract (kernels/simd_contract.hpp) on 8 lanes. Included
// inside kernels::avx2 and its target region by kernels/isa_region.inl.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

struct Simd {
  using V = __m256;
  static constexpr int kLanes = 8;

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  // Kept in a register: folded into each FMA as a memory operand it would cost a load per use,
  // and AVX2 cores issue two loads per cycle for two FMAs. The same for prefill and decode tiles.
  static V load_pinned(const float* p) {
    V v = _mm256_loadu_ps(p);
    __asm__("" : "+x"(v));
    return v;
  }
  static V load_shared(const float* p) { return load_pinned(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V load_partial(const float* p, int n) { return _mm256_maskload_ps(p, first(n)); }
  static void store_partial(float* p, V v, int n) { _mm256_maskstore_ps(p, first(n), v); }
  // 16- and 8-bit elements widened to f32 (bf16 by shift, f16 by F16C, int8 exactly).
  static V load(const bf16* p) {
    const __m256i bits =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
  }
  static V load(const f16* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V load(const std::int8_t* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // p[0, 2 kLanes) as f32: even = p[0], p[2], ...; odd = p[1], p[3], ...
  static void load_pairs(const bf16* p, V& even, V& odd) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(-65536)));
  }
  template <class E>
  static V load_partial(const E* p, int n) {
    E lanes[kLanes] = {};
    std::memcpy(lanes, p, static_cast<std::size_t>(n) * sizeof(E));
    return load(lanes);
  }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V round_nearest(V x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // p * 2^n for integral n in [-126, 127].
  static V scale_pow2(V p, V n) { return mul(p, pow2_integral(n)); }
  static V select_less(V a, V b, V if_less, V otherwise) {
    return _mm256_blendv_ps(otherwise, if_less, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
  }
  static float reduce_add(V v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
  }
  // out[i] = reduce_add(v[i]) for 4 vectors: 3 horizontal adds and one 128-bit fold.
  GATED_ATTENTION_ALWAYS_INLINE static void reduce_add_4(const V (&v)[4], float* out) {
    const V h = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
  }
  // out[k * stride + r] = reduce_add(v[k][r]) for 4 x 4 vectors: reduce_add_4 per k.
  GATED_ATTENTION_ALWAYS_INLINE static void reduce_add_4x4(const V (&v)[4][4], float* out,
                                                           std::int64_t stride) {
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < 4; ++k) reduce_add_4(v[k], out + k * stride);
  }
  // v with adjacent groups of `width` lanes swapped (width 1, 2 or 4).
  static V swap_groups(V v, int width) {
    if (width == 4) return _mm256_permute2f128_ps(v, v, 1);
    return width == 2 ? _mm256_permute_ps(v, 0x4E) : _mm256_permute_ps(v, 0xB1);
  }
  static float reduce_max(V v) {
    __m128 b = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_max_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_max_ss(b, _mm_movehdup_ps(b)));
  }
  // 1 / x, correctly rounded: the divider works beside the FMA pipes (see
  // docs/performance-notes.md, "AVX2 reciprocal: division, not estimate + Newton").
  static V reciprocal(V x) { return _mm256_div_ps(_mm256_set1_ps(1.0f), x); }

 private:
  // Lanes [0, n) set.
  static __m256i first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V pow2_integral(V n) {
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(bits);
  }
};
