// The f32 kernels of every path, compiled once for this binary; its other units define
// GATED_ATTENTION_EXTERN_KERNELS (see gated_attention/kernels/isa_kernels.hpp).
#include <gated_attention/instantiate_kernels.hpp>
