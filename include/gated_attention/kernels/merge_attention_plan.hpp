// How the merge of attention parts is cut into tasks: blocks of whole rows (one row = dv elements
// of one token and head).
#pragma once

#include <cstdint>

#include "gated_attention/ops/merge_attention_args.hpp"

namespace gated_attention::kernels {

inline constexpr std::int64_t kMergeRowsPerTask = 64;

template <class T>
struct MergeAttentionContext {
  const MergeAttentionArgs<T>* args = nullptr;
  std::int64_t rows = 0;  // b * len * kv_heads * group
};

}  // namespace gated_attention::kernels
