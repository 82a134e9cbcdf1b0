// The kernels of every ISA path this platform compiles (scalar, avx2 and avx512 on x86; scalar and
// neon on aarch64), and their entry points as lists: f32, and any type combination.
//
// Build time: every translation unit that runs an op compiles that op's kernels for every path and
// head dim (tens of seconds per unit). A program with many such units can compile them once:
// define GATED_ATTENTION_EXTERN_KERNELS in every unit (the entry points below are then declared
// `extern template`), and include <gated_attention/instantiate_kernels.hpp> in exactly one unit.
#pragma once

#include <cstdint>

#include "gated_attention/core/executor.hpp"
#include "gated_attention/dispatch/amx.hpp"
#include "gated_attention/kernels/amx_tiles.hpp"
#include "gated_attention/kernels/prelude.hpp"

#if GATED_ATTENTION_X86
#include <immintrin.h>
#elif GATED_ATTENTION_AARCH64
#include <arm_neon.h>
#endif

// clang-format off
#define GATED_ATTENTION_REGION_NAMESPACE scalar
#define GATED_ATTENTION_REGION_SIMD "gated_attention/kernels/scalar/simd.inl"
#define GATED_ATTENTION_REGION_TUNING "gated_attention/kernels/scalar/tuning.inl"
#include "gated_attention/kernels/isa_region.inl"

#if GATED_ATTENTION_X86
#define GATED_ATTENTION_REGION_NAMESPACE avx2
#define GATED_ATTENTION_REGION_SIMD "gated_attention/kernels/avx2/simd.inl"
#define GATED_ATTENTION_REGION_TUNING "gated_attention/kernels/avx2/tuning.inl"
#define GATED_ATTENTION_REGION_TARGET GATED_ATTENTION_AVX2_TARGET
#include "gated_attention/kernels/isa_region.inl"

#define GATED_ATTENTION_REGION_NAMESPACE avx512
#define GATED_ATTENTION_REGION_SIMD "gated_attention/kernels/avx512/simd.inl"
#define GATED_ATTENTION_REGION_TUNING "gated_attention/kernels/avx512/tuning.inl"
#define GATED_ATTENTION_REGION_TARGET GATED_ATTENTION_AVX512_TARGET
#include "gated_attention/kernels/isa_region.inl"

// The avx512 path with AVX512-BF16 and VNNI: only the SDPA of 16- and 8-bit K/V under
// DotPrecision::storage runs here (ops/sdpa.hpp).
#define GATED_ATTENTION_REGION_NAMESPACE avx512_bf16
#define GATED_ATTENTION_REGION_SIMD "gated_attention/kernels/avx512/simd.inl"
#define GATED_ATTENTION_REGION_TUNING "gated_attention/kernels/avx512/tuning.inl"
#define GATED_ATTENTION_REGION_STORAGE_DOT "gated_attention/kernels/avx512/storage_dot.inl"
#define GATED_ATTENTION_REGION_TARGET GATED_ATTENTION_AVX512_BF16_TARGET
#include "gated_attention/kernels/isa_region.inl"
#endif

#if GATED_ATTENTION_AARCH64
#define GATED_ATTENTION_REGION_NAMESPACE neon
#define GATED_ATTENTION_REGION_SIMD "gated_attention/kernels/neon/simd.inl"
#define GATED_ATTENTION_REGION_TUNING "gated_attention/kernels/neon/tuning.inl"
#include "gated_attention/kernels/isa_region.inl"
#endif
// clang-format on

// The SDPA entry points of one path for activations T and K/V types KT, VT; `prefix` is `extern`
// (declaration) or empty (definition).
#define GATED_ATTENTION_SDPA_KERNELS_OF(prefix, isa, T, KT, VT)                            \
  prefix template TaskFn kernels::isa::sdpa_task_fn<T, KT, VT>(std::int64_t, std::int64_t, \
                                                               DotPrecision);              \
  prefix template void kernels::isa::sdpa_merge<T, KT, VT>(void*, std::int64_t, int);

// The f32 entry points of one path, and the linear kernel of f32 activations with f32 and bf16
// weights.
#define GATED_ATTENTION_F32_KERNELS_OF(prefix, isa)                                         \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, isa, float, float, float)                         \
  prefix template void kernels::isa::output_gate_task<float>(void*, std::int64_t, int);     \
  prefix template void kernels::isa::merge_attention_task<float>(void*, std::int64_t, int); \
  prefix template void kernels::isa::linear_rows<float>(const LinearArgs<float, float>&);   \
  prefix template void kernels::isa::linear_rows<bf16>(const LinearArgs<float, bf16>&);

// Every path's, at namespace gated_attention scope.
#if GATED_ATTENTION_X86
#define GATED_ATTENTION_F32_KERNELS(prefix)      \
  GATED_ATTENTION_F32_KERNELS_OF(prefix, scalar) \
  GATED_ATTENTION_F32_KERNELS_OF(prefix, avx2)   \
  GATED_ATTENTION_F32_KERNELS_OF(prefix, avx512)
#elif GATED_ATTENTION_AARCH64
#define GATED_ATTENTION_F32_KERNELS(prefix)      \
  GATED_ATTENTION_F32_KERNELS_OF(prefix, scalar) \
  GATED_ATTENTION_F32_KERNELS_OF(prefix, neon)
#else
#define GATED_ATTENTION_F32_KERNELS(prefix) GATED_ATTENTION_F32_KERNELS_OF(prefix, scalar)
#endif

// Every path's SDPA kernels for one type combination, at namespace gated_attention scope. Other
// combinations than f32 compile in each unit that runs them; a program can compile one once by
// writing, inside namespace gated_attention, GATED_ATTENTION_SDPA_KERNELS(extern, float, bf16,
// bf16) in every unit and GATED_ATTENTION_SDPA_KERNELS(, float, bf16, bf16) in one.
#if GATED_ATTENTION_X86
#define GATED_ATTENTION_SDPA_KERNELS(prefix, T, KT, VT)      \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, scalar, T, KT, VT) \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, avx2, T, KT, VT)   \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, avx512, T, KT, VT) \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, avx512_bf16, T, KT, VT)
#elif GATED_ATTENTION_AARCH64
#define GATED_ATTENTION_SDPA_KERNELS(prefix, T, KT, VT)      \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, scalar, T, KT, VT) \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, neon, T, KT, VT)
#else
#define GATED_ATTENTION_SDPA_KERNELS(prefix, T, KT, VT) \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, scalar, T, KT, VT)
#endif

// The type combinations beyond f32 the project's own programs (tests, benchmarks) compile once,
// in its kernels library, under GATED_ATTENTION_EXTERN_TYPED_KERNELS; of one path. In groups by K
// type, which share most of their code, so that a build can compile each group in a unit of its
// own (GATED_ATTENTION_INSTANTIATE_GROUP in instantiate_kernels.hpp): 0 f16 K (and the output gate
// and the merge of bf16 and f16 activations), 1 bf16 K, 2 and 3 int8 K. Groups 1 to 3 are those the
// storage dot reads, the only ones the avx512_bf16 path compiles.
#define GATED_ATTENTION_TYPED_KERNELS_0(prefix, isa)                                       \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, isa, float, f16, f16)                            \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, isa, f16, f16, f16)                              \
  prefix template void kernels::isa::output_gate_task<bf16>(void*, std::int64_t, int);     \
  prefix template void kernels::isa::output_gate_task<f16>(void*, std::int64_t, int);      \
  prefix template void kernels::isa::merge_attention_task<bf16>(void*, std::int64_t, int); \
  prefix template void kernels::isa::merge_attention_task<f16>(void*, std::int64_t, int);
#define GATED_ATTENTION_TYPED_KERNELS_1(prefix, isa)              \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, isa, float, bf16, bf16) \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, isa, bf16, bf16, bf16)  \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, isa, float, bf16, std::int8_t)
#define GATED_ATTENTION_TYPED_KERNELS_2(prefix, isa) \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, isa, float, std::int8_t, std::int8_t)
#define GATED_ATTENTION_TYPED_KERNELS_3(prefix, isa) \
  GATED_ATTENTION_SDPA_KERNELS_OF(prefix, isa, float, std::int8_t, f16)
#define GATED_ATTENTION_TYPED_KERNELS_OF(prefix, isa) \
  GATED_ATTENTION_TYPED_KERNELS_0(prefix, isa)        \
  GATED_ATTENTION_STORAGE_DOT_KERNELS_OF(prefix, isa)
#define GATED_ATTENTION_STORAGE_DOT_KERNELS_OF(prefix, isa) \
  GATED_ATTENTION_TYPED_KERNELS_1(prefix, isa)              \
  GATED_ATTENTION_TYPED_KERNELS_2(prefix, isa)              \
  GATED_ATTENTION_TYPED_KERNELS_3(prefix, isa)

#ifdef GATED_ATTENTION_EXTERN_KERNELS
namespace gated_attention {
GATED_ATTENTION_F32_KERNELS(extern)
#ifdef GATED_ATTENTION_EXTERN_TYPED_KERNELS
#if GATED_ATTENTION_X86
GATED_ATTENTION_TYPED_KERNELS_OF(extern, scalar)
GATED_ATTENTION_TYPED_KERNELS_OF(extern, avx2)
GATED_ATTENTION_TYPED_KERNELS_OF(extern, avx512)
GATED_ATTENTION_STORAGE_DOT_KERNELS_OF(extern, avx512_bf16)
#elif GATED_ATTENTION_AARCH64
GATED_ATTENTION_TYPED_KERNELS_OF(extern, scalar)
GATED_ATTENTION_TYPED_KERNELS_OF(extern, neon)
#else
GATED_ATTENTION_TYPED_KERNELS_OF(extern, scalar)
#endif
#endif
}  // namespace gated_attention
#endif
