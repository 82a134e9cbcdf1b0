// The neon path: the generic kernels compiled over neon vectors, in their own namespace.
#pragma once

#include "gated_attention/kernels/prelude.hpp"

#if GATED_ATTENTION_AARCH64
#include <arm_neon.h>

namespace gated_attention::kernels::neon {
#define GATED_ATTENTION_IN_KERNEL_REGION 1
// clang-format off
#include "gated_attention/kernels/neon/simd.inl"
#include "gated_attention/kernels/generic/math.inl"
#include "gated_attention/kernels/generic/sdpa.inl"
#include "gated_attention/kernels/generic/output_gate.inl"
// clang-format on
#undef GATED_ATTENTION_IN_KERNEL_REGION
}  // namespace gated_attention::kernels::neon
#endif
