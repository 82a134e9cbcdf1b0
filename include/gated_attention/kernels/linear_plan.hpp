// How the library's own linear kernel (kernels/generic/linear_rows.inl) blocks its work.
#pragma once

#include <cstdint>

#include "gated_attention/ops/linear_args.hpp"

namespace gated_attention::kernels {

// Rows of x per block: 64 rows of up to 4096 floats (1 MiB) stay in L2 while the weight rows of a
// panel pass once per block.
inline constexpr std::int64_t kLinearRowBlock = 64;

}  // namespace gated_attention::kernels
