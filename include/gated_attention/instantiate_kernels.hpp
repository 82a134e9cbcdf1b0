// Compiles every path's f32 kernels in the one translation unit that includes this header, for a
// program whose other units define GATED_ATTENTION_EXTERN_KERNELS (see kernels/isa_kernels.hpp).
// Include it in exactly one unit of the program.
//
// Or one unit per path, which build in parallel: each defines one of
// GATED_ATTENTION_INSTANTIATE_ONLY_SCALAR, _AVX2, _AVX512, _AVX512_BF16 (K/V type combinations
// only) or _NEON before including this header.
// A path the target platform lacks compiles to nothing, so the same four units build everywhere.
#pragma once

#include "gated_attention/gated_attention.hpp"

// With GATED_ATTENTION_INSTANTIATE_TYPED_KERNELS also defined, the unit compiles the K/V type
// combinations of GATED_ATTENTION_TYPED_KERNELS_OF too (for programs built with
// GATED_ATTENTION_EXTERN_TYPED_KERNELS). Or, with GATED_ATTENTION_INSTANTIATE_GROUP defined to n
// instead, only that path's group n of them (GATED_ATTENTION_TYPED_KERNELS_<n>; 1 to 3 for
// _AVX512_BF16): a unit per path and group, each of which compiles in under a minute at -O2.
#define GATED_ATTENTION_INSTANTIATE_CAT2(a, b) a##b
#define GATED_ATTENTION_INSTANTIATE_CAT(a, b) GATED_ATTENTION_INSTANTIATE_CAT2(a, b)
#if defined(GATED_ATTENTION_INSTANTIATE_GROUP)
#define GATED_ATTENTION_INSTANTIATE_PATH(isa)                        \
  GATED_ATTENTION_INSTANTIATE_CAT(GATED_ATTENTION_TYPED_KERNELS_,    \
                                  GATED_ATTENTION_INSTANTIATE_GROUP) \
  (, isa)
#define GATED_ATTENTION_INSTANTIATE_STORAGE_DOT GATED_ATTENTION_INSTANTIATE_PATH(avx512_bf16)
#elif defined(GATED_ATTENTION_INSTANTIATE_TYPED_KERNELS)
#define GATED_ATTENTION_INSTANTIATE_PATH(isa) \
  GATED_ATTENTION_F32_KERNELS_OF(, isa)       \
  GATED_ATTENTION_TYPED_KERNELS_OF(, isa)
#define GATED_ATTENTION_INSTANTIATE_STORAGE_DOT \
  GATED_ATTENTION_STORAGE_DOT_KERNELS_OF(, avx512_bf16)
#else
#define GATED_ATTENTION_INSTANTIATE_PATH(isa) GATED_ATTENTION_F32_KERNELS_OF(, isa)
#define GATED_ATTENTION_INSTANTIATE_STORAGE_DOT
#endif

namespace gated_attention {
#if defined(GATED_ATTENTION_INSTANTIATE_ONLY_SCALAR)
GATED_ATTENTION_INSTANTIATE_PATH(scalar)
#elif defined(GATED_ATTENTION_INSTANTIATE_ONLY_AVX2)
#if GATED_ATTENTION_X86
GATED_ATTENTION_INSTANTIATE_PATH(avx2)
#endif
#elif defined(GATED_ATTENTION_INSTANTIATE_ONLY_AVX512)
#if GATED_ATTENTION_X86
GATED_ATTENTION_INSTANTIATE_PATH(avx512)
#endif
#elif defined(GATED_ATTENTION_INSTANTIATE_ONLY_AVX512_BF16)
#if GATED_ATTENTION_X86
GATED_ATTENTION_INSTANTIATE_STORAGE_DOT
#endif
#elif defined(GATED_ATTENTION_INSTANTIATE_ONLY_NEON)
#if GATED_ATTENTION_AARCH64
GATED_ATTENTION_INSTANTIATE_PATH(neon)
#endif
#else
GATED_ATTENTION_F32_KERNELS()
#endif
}  // namespace gated_attention
#undef GATED_ATTENTION_INSTANTIATE_PATH
#undef GATED_ATTENTION_INSTANTIATE_STORAGE_DOT
#undef GATED_ATTENTION_INSTANTIATE_CAT
#undef GATED_ATTENTION_INSTANTIATE_CAT2
