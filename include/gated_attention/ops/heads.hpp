// Query-head tensors are rank-5 views [b, len, kv_heads, group, d]: query head h = kv * group + j
// reads KV head kv (GQA/MQA). Splitting the head dimension lets one view address layouts where the
// heads of a KV group are not evenly spaced, such as the official gated-attention q_proj layout
// (per KV group [q for g heads | gate for g heads]), without copies.
#pragma once

#include <cstdint>

#include "gated_attention/core/tensor_view.hpp"

namespace gated_attention {

// [b, len, heads, d] -> [b, len, num_kv_heads, heads / num_kv_heads, d]. If heads is not a multiple
// of num_kv_heads the group extent is 0 and the ops' validation reports the tensor.
template <class T>
TensorView<T, 5> split_heads(const TensorView<T, 4>& x, std::int64_t num_kv_heads) {
  const std::int64_t heads = x.extents[2];
  const bool divisible = num_kv_heads > 0 && heads % num_kv_heads == 0;
  const std::int64_t group = divisible ? heads / num_kv_heads : 0;
  return TensorView<T, 5>(
      x.data, {x.extents[0], x.extents[1], num_kv_heads, group, x.extents[3]},
      {x.strides[0], x.strides[1], group * x.strides[2], x.strides[2], x.strides[3]});
}

}  // namespace gated_attention
