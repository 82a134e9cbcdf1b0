// The scalar path: the generic kernels compiled over scalar vectors, in their own namespace.
#pragma once

#include "gated_attention/kernels/prelude.hpp"

namespace gated_attention::kernels::scalar {
#define GATED_ATTENTION_IN_KERNEL_REGION 1
// clang-format off
#include "gated_attention/kernels/scalar/simd.inl"
#include "gated_attention/kernels/generic/math.inl"
#include "gated_attention/kernels/generic/sdpa.inl"
#include "gated_attention/kernels/generic/output_gate.inl"
// clang-format on
#undef GATED_ATTENTION_IN_KERNEL_REGION
}  // namespace gated_attention::kernels::scalar
