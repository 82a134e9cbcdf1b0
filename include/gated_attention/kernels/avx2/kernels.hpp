// The avx2 path: the generic kernels compiled over avx2 vectors, in their own namespace.
#pragma once

#include "gated_attention/kernels/prelude.hpp"

#if GATED_ATTENTION_X86
#include <immintrin.h>

GATED_ATTENTION_TARGET_BEGIN(GATED_ATTENTION_AVX2_TARGET)
namespace gated_attention::kernels::avx2 {
#define GATED_ATTENTION_IN_KERNEL_REGION 1
// clang-format off
#include "gated_attention/kernels/avx2/simd.inl"
#include "gated_attention/kernels/generic/math.inl"
#include "gated_attention/kernels/generic/sdpa.inl"
#include "gated_attention/kernels/generic/output_gate.inl"
// clang-format on
#undef GATED_ATTENTION_IN_KERNEL_REGION
}  // namespace gated_attention::kernels::avx2
GATED_ATTENTION_TARGET_END
#endif
