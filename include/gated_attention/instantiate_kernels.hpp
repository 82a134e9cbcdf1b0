// Compiles every path's f32 kernels in the one translation unit that includes this header, for a
// program whose other units define GATED_ATTENTION_EXTERN_KERNELS (see kernels/isa_kernels.hpp).
// Include it in exactly one unit of the program.
#pragma once

#include "gated_attention/gated_attention.hpp"

namespace gated_attention {
GATED_ATTENTION_F32_KERNELS()
}  // namespace gated_attention
