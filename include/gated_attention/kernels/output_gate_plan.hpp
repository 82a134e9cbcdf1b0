// How the standalone output gate is cut into tasks: blocks of whole rows (one row = d elements of
// one token and head).
#pragma once

#include <cstdint>

#include "gated_attention/ops/output_gate_args.hpp"

namespace gated_attention::kernels {

inline constexpr std::int64_t kGateRowsPerTask = 256;

template <class T>
struct OutputGateContext {
  const OutputGateArgs<T>* args = nullptr;
  std::int64_t rows = 0;  // b * len * kv_heads * group
};

}  // namespace gated_attention::kernels
