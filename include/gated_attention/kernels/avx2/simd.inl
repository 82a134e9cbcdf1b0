// AVX2 + FMA f32 vectors for the generic kernels (included inside kernels::avx2 and its target
// region by kernels/avx2/kernels.hpp).
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

struct Simd {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kKeyBlock = 6;  // 16 ymm registers: 6 x 2 accumulators + operands
  static constexpr int kRowVectors = 2;
  static constexpr int kRowBlock = 6;
  static constexpr int kDimVectors = 2;
  // Keys per block with few rows (decode). 8: V rows of a power-of-two stride map to few L1 sets,
  // and 16 of them per column chunk (with the next block's rows fetched alongside) overflowed
  // Zen 3's 8-way L1: 16 took 1.27-1.33x longer on qwen3next_decode_32k and llama8b_decode_8k.
  static constexpr std::int64_t kDecodeBlock = 8;
  // Blocks further ahead that each decode phase fetches (see SdpaKernel::task): 0, the next
  // phase's rows only; on Zen 3, whose prefetches fill L1 too, a block further was slower.
  static constexpr std::int64_t kDecodeFetchBlocks = 0;

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  // A load that several FMAs of a tile use: kept in a register. Compilers otherwise fold it into
  // each FMA as a memory operand, one load per use, and AVX2 cores issue two loads per cycle for
  // two FMAs (a 4x4 dot tile then spent 15 loads per 12 FMAs). The same for prefill and decode
  // tiles.
  static V load_pinned(const float* p) {
    V v = _mm256_loadu_ps(p);
    __asm__("" : "+x"(v));
    return v;
  }
  static V load_shared(const float* p) { return load_pinned(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static __m256i first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V load_partial(const float* p, int n) { return _mm256_maskload_ps(p, first(n)); }
  static void store_partial(float* p, V v, int n) { _mm256_maskstore_ps(p, first(n), v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V round_nearest(V x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static V pow2_integral(V n) {
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(bits);
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
  static constexpr bool kHasReduceAdd4x4 = false;  // reduce_add_4 per key instead
  // out[i] = reduce_add(v[i]) for 4 vectors: 3 horizontal adds and one 128-bit fold.
  GATED_ATTENTION_ALWAYS_INLINE static void reduce_add_4(const V (&v)[4], float* out) {
    const V h = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
  }
  // v with adjacent groups of `width` lanes swapped (width 4).
  static V swap_groups(V v, int) { return _mm256_permute2f128_ps(v, v, 1); }
  static float reduce_max(V v) {
    __m128 b = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_max_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_max_ss(b, _mm_movehdup_ps(b)));
  }
  // 1 / x, correctly rounded: the divider works beside the FMA pipes (Zen 3: one 256-bit divide
  // per 3.5 cycles), where a 12-bit estimate and two Newton steps took 5 of their slots
  // (gpt2_prefill_1k elementwise-gated / ungated 1.022 -> 1.018, 3 x 121 pairs).
  static V reciprocal(V x) { return _mm256_div_ps(_mm256_set1_ps(1.0f), x); }
};
