// Portable one-lane "vectors": the Simd contract (kernels/simd_contract.hpp) on 1 lane. Included
// inside kernels::scalar by kernels/isa_region.inl. The compiler may still vectorise around them.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

struct Simd {
  using V = float;
  static constexpr int kLanes = 1;

  static V zero() { return 0.0f; }
  static V set1(float x) { return x; }
  static V load(const float* p) { return *p; }
  static V load_shared(const float* p) { return *p; }
  static V load_pinned(const float* p) { return load_shared(p); }
  static void store(float* p, V v) { *p = v; }
  static V load_partial(const float* p, int n) { return n > 0 ? *p : 0.0f; }
  static void store_partial(float* p, V v, int n) {
    if (n > 0) *p = v;
  }
  // 16- and 8-bit elements widened to f32.
  static V load(const bf16* p) { return to_float(*p); }
  static V load(const f16* p) { return to_float(*p); }
  static V load(const std::int8_t* p) { return static_cast<float>(*p); }
  static void load_pairs(const bf16* p, V& even, V& odd) {
    even = to_float(p[0]);
    odd = to_float(p[1]);
  }
  template <class E>
  static V load_partial(const E* p, int n) {
    return n > 0 ? load(p) : 0.0f;
  }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V mul(V a, V b) { return a * b; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V max(V a, V b) { return a > b ? a : b; }
  static V min(V a, V b) { return a < b ? a : b; }
  static V round_nearest(V x) { return std::nearbyint(x); }
  // p * 2^n for integral n in [-126, 127].
  static V scale_pow2(V p, V n) { return mul(p, pow2_integral(n)); }
  static V select_less(V a, V b, V if_less, V otherwise) { return a < b ? if_less : otherwise; }
  static float reduce_add(V v) { return v; }
  GATED_ATTENTION_ALWAYS_INLINE static void reduce_add_4(const V (&v)[4], float* out) {
    GATED_ATTENTION_UNROLL
    for (int i = 0; i < 4; ++i) out[i] = v[i];
  }
  GATED_ATTENTION_ALWAYS_INLINE static void reduce_add_4x4(const V (&v)[4][4], float* out,
                                                           std::int64_t stride) {
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < 4; ++k) reduce_add_4(v[k], out + k * stride);
  }
  static V swap_groups(V v, int /*width*/) { return v; }  // one lane: no groups to swap
  static float reduce_max(V v) { return v; }
  static V reciprocal(V x) { return 1.0f / x; }

 private:
  static V pow2_integral(V n) {
    const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23;
    float r;
    std::memcpy(&r, &bits, sizeof r);
    return r;
  }
};
