// aarch64 Advanced SIMD f32 vectors: the Simd contract (kernels/simd_contract.hpp) on 4 lanes.
// Included inside kernels::neon by kernels/isa_region.inl.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

struct Simd {
  using V = float32x4_t;
  static constexpr int kLanes = 4;

  static V zero() { return vdupq_n_f32(0.0f); }
  static V set1(float x) { return vdupq_n_f32(x); }
  static V load(const float* p) { return vld1q_f32(p); }
  // FMAs take no memory operand here: both loads are plain.
  static V load_shared(const float* p) { return vld1q_f32(p); }
  static V load_pinned(const float* p) { return load_shared(p); }
  static void store(float* p, V v) { vst1q_f32(p, v); }
  static V load_partial(const float* p, int n) {
    float lanes[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < n; ++i) lanes[i] = p[i];
    return vld1q_f32(lanes);
  }
  static void store_partial(float* p, V v, int n) {
    float lanes[4];
    vst1q_f32(lanes, v);
    for (int i = 0; i < n; ++i) p[i] = lanes[i];
  }
  // 16- and 8-bit elements widened to f32 (bf16 by shift, f16 by vcvt, int8 exactly).
  static V load(const bf16* p) {
    return vreinterpretq_f32_u32(
        vshll_n_u16(vld1_u16(reinterpret_cast<const std::uint16_t*>(p)), 16));
  }
  static V load(const f16* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const std::uint16_t*>(p))));
  }
  static V load(const std::int8_t* p) {
    std::int32_t word;
    std::memcpy(&word, p, sizeof word);
    const int16x8_t wide = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(word)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide)));
  }
  // p[0, 2 kLanes) as f32: even = p[0], p[2], ...; odd = p[1], p[3], ...
  static void load_pairs(const bf16* p, V& even, V& odd) {
    const uint32x4_t x = vld1q_u32(reinterpret_cast<const std::uint32_t*>(p));
    even = vreinterpretq_f32_u32(vshlq_n_u32(x, 16));
    odd = vreinterpretq_f32_u32(vandq_u32(x, vdupq_n_u32(0xffff0000u)));
  }
  template <class E>
  static V load_partial(const E* p, int n) {
    E lanes[kLanes] = {};
    std::memcpy(lanes, p, static_cast<std::size_t>(n) * sizeof(E));
    return load(lanes);
  }
  static V fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }
  static V mul(V a, V b) { return vmulq_f32(a, b); }
  static V add(V a, V b) { return vaddq_f32(a, b); }
  static V sub(V a, V b) { return vsubq_f32(a, b); }
  static V max(V a, V b) { return vmaxq_f32(a, b); }
  static V min(V a, V b) { return vminq_f32(a, b); }
  static V round_nearest(V x) { return vrndnq_f32(x); }
  // p * 2^n for integral n in [-126, 127].
  static V scale_pow2(V p, V n) { return mul(p, pow2_integral(n)); }
  static V select_less(V a, V b, V if_less, V otherwise) {
    return vbslq_f32(vcltq_f32(a, b), if_less, otherwise);
  }
  static float reduce_add(V v) { return vaddvq_f32(v); }
  // out[i] = reduce_add(v[i]) for 4 vectors: 3 pairwise adds.
  GATED_ATTENTION_ALWAYS_INLINE static void reduce_add_4(const V (&v)[4], float* out) {
    vst1q_f32(out, vpaddq_f32(vpaddq_f32(v[0], v[1]), vpaddq_f32(v[2], v[3])));
  }
  // out[k * stride + r] = reduce_add(v[k][r]) for 4 x 4 vectors: reduce_add_4 per k.
  GATED_ATTENTION_ALWAYS_INLINE static void reduce_add_4x4(const V (&v)[4][4], float* out,
                                                           std::int64_t stride) {
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < 4; ++k) reduce_add_4(v[k], out + k * stride);
  }
  // v with adjacent groups of `width` lanes swapped (width 1 or 2).
  static V swap_groups(V v, int width) { return width == 2 ? vextq_f32(v, v, 2) : vrev64q_f32(v); }
  static float reduce_max(V v) { return vmaxvq_f32(v); }
  static V reciprocal(V x) { return vdivq_f32(vdupq_n_f32(1.0f), x); }

 private:
  static V pow2_integral(V n) {
    const int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vreinterpretq_f32_s32(bits);
  }
};
