// AVX-512 f32 vectors for the generic kernels (included inside kernels::avx512 and its target
// region by kernels/avx512/kernels.hpp).
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

struct Simd {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kKeyBlock = 8;    // S^T microkernel: keys x row vectors
  static constexpr int kRowVectors = 2;  //   8 x 2 = 16 accumulators of 32
  static constexpr int kRowBlock = 8;    // P.V microkernel: rows x dv vectors
  static constexpr int kDimVectors = 2;  //   8 x 2 = 16 accumulators
  // Keys per block with few rows (decode): 16, whose P.V tiles load and store their accumulators
  // half as often as at 8 (AVX2's block, for Zen 3's L1). Zen 4, paired decode_read_share at a
  // fetch distance of 16 keys: qwen3next_decode_32k 1 thread 0.89-0.97 against 0.74-0.85 at 8
  // (2 blocks ahead); llama8b_decode_8k no different; 32 and 64 keys were slower.
  static constexpr std::int64_t kDecodeBlock = 16;
  // Blocks further ahead that each decode phase fetches (see SdpaKernel::task): 1, 16 keys. Zen 4
  // ran both decode shapes 1.2-1.3x faster at 2 blocks of 8 than at 0; with blocks of 16, 3 ahead
  // was slower than 1 (decode_read_share 0.80-0.97 against 0.90-1.02).
  static constexpr std::int64_t kDecodeFetchBlocks = 1;

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  // A load that several FMAs of a prefill tile use: the FMAs may take it as a memory operand
  // (pinned, dense1p7b_prefill_2k and gpt2_prefill_1k ran 2-4% slower on Zen 4).
  static V load_shared(const float* p) { return _mm512_loadu_ps(p); }
  // A load that several FMAs of a decode tile use, kept in a register: folded into each FMA it
  // costs a load per use, and decode tiles already load K or V rows at every step (Zen 4, with
  // the fetch distance above: llama8b_decode_8k 1.1-1.2x, qwen3next_decode_32k 1.3x faster).
  static V load_pinned(const float* p) {
    V v = _mm512_loadu_ps(p);
    __asm__("" : "+v"(v));
    return v;
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static __mmask16 first(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static V load_partial(const float* p, int n) { return _mm512_maskz_loadu_ps(first(n), p); }
  static void store_partial(float* p, V v, int n) { _mm512_mask_storeu_ps(p, first(n), v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
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
  // out[k * stride + r] = reduce_add(v[k][r]) for 4 x 4 vectors, as a transpose-and-add tree:
  // 31 shuffles and 15 adds instead of 16 separate reductions of ~8 operations each.
  static constexpr bool kHasReduceAdd4x4 = true;
  // out[i] = reduce_add(v[i]) for 4 vectors (tiles of fewer than 4 keys). Both reductions are
  // always inlined (on every ISA): they take a tile's accumulators by reference, and where GCC 12
  // kept one out of line the accumulators lived in memory, stored at every step of the tile's
  // loop (a translation unit of its own ran Qwen3-Next decode with 1K keys 1.7x slower).
  GATED_ATTENTION_ALWAYS_INLINE static void reduce_add_4(const V (&v)[4], float* out) {
    GATED_ATTENTION_UNROLL
    for (int i = 0; i < 4; ++i) out[i] = reduce_add(v[i]);
  }
  GATED_ATTENTION_ALWAYS_INLINE static void reduce_add_4x4(const V (&v)[4][4], float* out,
                                                           std::int64_t stride) {
    const V* x = &v[0][0];  // x[i], i = 4 k + r
    V a[8], b[4], c[2];
    GATED_ATTENTION_UNROLL
    for (int i = 0; i < 8; ++i) {  // a[i]: lanes 0-7 fold x[2i], lanes 8-15 fold x[2i+1]
      a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0x44),
                           _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0xEE));
    }
    GATED_ATTENTION_UNROLL
    for (int j = 0; j < 4; ++j) {  // b[j]: 128-bit lane q folds x[4j + q]
      b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0x88),
                           _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0xDD));
    }
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < 2; ++k) {  // c[k], lane q: 2 partials of x[8k + q], then of x[8k + 4 + q]
      c[k] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * k], b[2 * k + 1], 0x44),
                           _mm512_shuffle_ps(b[2 * k], b[2 * k + 1], 0xEE));
    }
    // Lane q, element e: the sum of x[q + 4 e]; permuted so that element i holds x[i].
    const V sums =
        _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const V ordered = _mm512_permutexvar_ps(order, sums);
    _mm_storeu_ps(out, _mm512_castps512_ps128(ordered));
    _mm_storeu_ps(out + stride, _mm512_extractf32x4_ps(ordered, 1));
    _mm_storeu_ps(out + 2 * stride, _mm512_extractf32x4_ps(ordered, 2));
    _mm_storeu_ps(out + 3 * stride, _mm512_extractf32x4_ps(ordered, 3));
  }
  // v with adjacent groups of `width` lanes swapped (width 4 or 8).
  static V swap_groups(V v, int width) {
    return width == 8 ? _mm512_shuffle_f32x4(v, v, 0x4E) : _mm512_shuffle_f32x4(v, v, 0xB1);
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
};
