// The Simd contract: what the generic kernels (kernels/generic/) require of an ISA's vector type,
// and what its Tuning holds. Each path defines both in kernels/<isa>/simd.inl and tuning.inl;
// kernels/isa_region.inl compiles the generic code over them and checks this contract. Every
// operation is required (none is optional); helpers beyond it are private.
//
// struct Simd {
//   using V;                         // a vector of kLanes f32 lanes (a plain float on scalar)
//   static constexpr int kLanes;     // 1, 4, 8 or 16
//   V zero();                        // all lanes 0
//   V set1(float x);                 // all lanes x
//   V load(const float* p);          // p[0, kLanes), any alignment
//   V load_shared(const float* p);   // load that several FMAs of a prefill tile use
//   V load_pinned(const float* p);   // load that several FMAs of a decode tile use, in a register
//   V load_partial(const float* p, int n);       // p[0, n), other lanes 0; 0 <= n <= kLanes
//   V load(const E* p);              // E in bf16, f16, std::int8_t: p[0, kLanes) widened to f32
//   V load_partial(const E* p, int n);           // the same for p[0, n), other lanes 0
//   void load_pairs(const bf16* p, V& even, V& odd);  // p[0, 2 kLanes) widened: even elements
//                                    // to `even`, odd ones to `odd` (two bitwise ops)
//   void store(float* p, V v);                   // p[0, kLanes), any alignment
//   void store_partial(float* p, V v, int n);    // p[0, n) only
//   V fma(V a, V b, V c);            // a * b + c, fused (one rounding) where the ISA has it
//   V mul(V a, V b), add(V a, V b), sub(V a, V b), max(V a, V b), min(V a, V b);
//   V round_nearest(V x);            // to the nearest integer, ties to even
//   V scale_pow2(V p, V n);          // p * 2^n, n integral in [-126, 127]
//   V select_less(V a, V b, V if_less, V otherwise);  // per lane: a < b ? if_less : otherwise
//   V swap_groups(V v, int width);   // adjacent groups of `width` lanes swapped; width a power
//                                    // of two below kLanes
//   float reduce_add(V v), reduce_max(V v);          // over all lanes
//   void reduce_add_4(const V (&v)[4], float* out);  // out[i] = reduce_add(v[i])
//   void reduce_add_4x4(const V (&v)[4][4], float* out, std::int64_t stride);
//                                    // out[k * stride + r] = reduce_add(v[k][r])
//   V reciprocal(V x);               // 1 / x within about an ulp; exactly 1 for x = 1
// };
//
// struct Tuning {
//   static constexpr int kTileAccumulators;      // accumulator registers a tile may hold
//   static constexpr int kScoreTileKeys;         // prefill S^T tile: keys x row vectors
//   static constexpr int kScoreTileRowVectors;
//   static constexpr int kValueTileRows;         // prefill P.V tile: rows x dv vectors
//   static constexpr int kValueTileVectors;
//   static constexpr std::int64_t kDecodeBlock;        // keys per decode block
//   static constexpr bool kWidenOncePerUnit;   // 8-row decode units widen K/V once for all rows
//   static constexpr std::int64_t kDecodeFetchBlocks;  // blocks ahead each decode phase fetches
//   static constexpr std::int64_t kGatherFetchKeys;    // keys ahead a page gather fetches
// };
//
// tests/test_simd.cpp checks every operation on every path the host runs against scalar code.
#pragma once

#include <cstdint>
#include <type_traits>

#include "gated_attention/core/dtypes.hpp"

namespace gated_attention::kernels {

// Compile-time check of the parts of the contract the compiler can see: the members' presence
// and result sizes, and tile shapes that fit the accumulator budget.
template <class S, class Tuning>
constexpr bool satisfies_simd_contract() {
  using V = typename S::V;
  static_assert(S::kLanes == 1 || S::kLanes == 4 || S::kLanes == 8 || S::kLanes == 16);
  static_assert(sizeof(S::fma(V{}, V{}, V{})) == sizeof(V));
  static_assert(sizeof(S::load(static_cast<const bf16*>(nullptr))) == sizeof(V));
  static_assert(sizeof(S::load(static_cast<const f16*>(nullptr))) == sizeof(V));
  static_assert(sizeof(S::load(static_cast<const std::int8_t*>(nullptr))) == sizeof(V));
  static_assert(sizeof(S::load_partial(static_cast<const bf16*>(nullptr), 0)) == sizeof(V));
  static_assert(sizeof(S::load_partial(static_cast<const f16*>(nullptr), 0)) == sizeof(V));
  static_assert(sizeof(S::load_partial(static_cast<const std::int8_t*>(nullptr), 0)) == sizeof(V));
  static_assert(sizeof(S::select_less(V{}, V{}, V{}, V{})) == sizeof(V));
  static_assert(sizeof(S::swap_groups(V{}, 1)) == sizeof(V));
  static_assert(std::is_same_v<decltype(S::reduce_add(V{})), float>);
  static_assert(std::is_same_v<decltype(S::reduce_max(V{})), float>);
  static_assert(sizeof(S::reciprocal(V{})) == sizeof(V));
  static_assert(sizeof(S::scale_pow2(V{}, V{})) == sizeof(V));
  static_assert(sizeof(S::round_nearest(V{})) == sizeof(V));
  static_assert(Tuning::kScoreTileKeys * Tuning::kScoreTileRowVectors <= Tuning::kTileAccumulators);
  static_assert(Tuning::kValueTileRows * Tuning::kValueTileVectors <= Tuning::kTileAccumulators);
  static_assert(Tuning::kDecodeBlock > 0 && Tuning::kDecodeFetchBlocks >= 0);
  static_assert(Tuning::kGatherFetchKeys >= 0);
  return true;
}

}  // namespace gated_attention::kernels
