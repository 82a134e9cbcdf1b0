// Tensor parallelism over heads: a rank runs the block on KV heads [kv_begin, kv_begin + kv_count)
// with their query heads and gate rows (contiguous rows of every projection in every q/gate
// layout, and columns of o_proj). Its y is a partial o_proj output; the ranks' partial outputs sum
// (an all-reduce) to the unsharded block's y. Each rank keeps the KV cache of its own heads.
//
//   BlockConfig rank_config;  BlockWeights<float> rank_weights;
//   Status s = shard_heads(config, weights, {kv_begin, kv_count}, &rank_config, &rank_weights);
#pragma once

#include <cstdint>

#include "gated_attention/block/config.hpp"
#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"

namespace gated_attention {

struct HeadShard {
  std::int64_t kv_begin = 0;
  std::int64_t kv_count = 0;
};

inline Status validate(const BlockConfig& c, const HeadShard& s) {
  if (s.kv_begin < 0 || s.kv_count < 1 || s.kv_begin + s.kv_count > c.num_kv_heads) {
    return Status::error(StatusCode::invalid_argument,
                         "shard: KV heads [%lld, %lld): expected a non-empty range within [0, "
                         "%lld)",
                         static_cast<long long>(s.kv_begin),
                         static_cast<long long>(s.kv_begin + s.kv_count),
                         static_cast<long long>(c.num_kv_heads));
  }
  return Status::ok();
}

// Checks that shards[0, n) cover every KV head of c exactly once.
inline Status validate_head_shards(const BlockConfig& c, const HeadShard* shards, std::int64_t n) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(c));
  for (std::int64_t i = 0; i < n; ++i) GATED_ATTENTION_RETURN_IF_ERROR(validate(c, shards[i]));
  for (std::int64_t head = 0; head < c.num_kv_heads; ++head) {
    std::int64_t first = -1;
    for (std::int64_t i = 0; i < n; ++i) {
      if (head < shards[i].kv_begin || head >= shards[i].kv_begin + shards[i].kv_count) continue;
      if (first >= 0) {
        return Status::error(
            StatusCode::invalid_argument, "shards: KV head %lld is in shards %lld and %lld",
            static_cast<long long>(head), static_cast<long long>(first), static_cast<long long>(i));
      }
      first = i;
    }
    if (first < 0) {
      return Status::error(StatusCode::invalid_argument, "shards: KV head %lld is in no shard",
                           static_cast<long long>(head));
    }
  }
  return Status::ok();
}

namespace detail {

// Rows [begin, begin + count) of a [rows, in] view; a null view stays null.
template <class W>
TensorView<const W, 2> row_slice(TensorView<const W, 2> v, std::int64_t begin, std::int64_t count) {
  if (v.data == nullptr) return v;
  v.data += begin * v.strides[0];
  v.extents[0] = count;
  return v;
}

template <class W>
const W* offset_or_null(const W* p, std::int64_t begin) {
  return p == nullptr ? nullptr : p + begin;
}

}  // namespace detail

// The shard's config and weight views, slices of w. o_proj's bias goes with the shard that starts
// at KV head 0, so that the sum of the shards' outputs adds it once.
template <class T, class W>
Status shard_heads(const BlockConfig& c, const BlockWeights<T, W>& w, const HeadShard& s,
                   BlockConfig* shard_config, BlockWeights<T, W>* shard_weights) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(c, w));
  GATED_ATTENTION_RETURN_IF_ERROR(validate(c, s));
  const std::int64_t kv = c.num_kv_heads, d = c.head_dim;
  const std::int64_t q_rows = c.q_proj_rows() / kv, gate_rows = c.gate_width() / kv;
  const std::int64_t q_columns = c.group_size() * d;  // o_proj's inputs per KV head
  BlockConfig& sc = *shard_config;
  sc = c;
  sc.num_kv_heads = s.kv_count;
  sc.num_q_heads = s.kv_count * c.group_size();
  BlockWeights<T, W>& sw = *shard_weights;
  sw = w;
  sw.q_proj = detail::row_slice(w.q_proj, s.kv_begin * q_rows, s.kv_count * q_rows);
  sw.maybe_gate_proj =
      detail::row_slice(w.maybe_gate_proj, s.kv_begin * gate_rows, s.kv_count * gate_rows);
  sw.k_proj = detail::row_slice(w.k_proj, s.kv_begin * d, s.kv_count * d);
  sw.v_proj = detail::row_slice(w.v_proj, s.kv_begin * d, s.kv_count * d);
  sw.o_proj.data += s.kv_begin * q_columns * w.o_proj.strides[1];
  sw.o_proj.extents[1] = s.kv_count * q_columns;
  sw.maybe_q_bias = detail::offset_or_null(w.maybe_q_bias, s.kv_begin * q_rows);
  sw.maybe_gate_bias = detail::offset_or_null(w.maybe_gate_bias, s.kv_begin * gate_rows);
  sw.maybe_k_bias = detail::offset_or_null(w.maybe_k_bias, s.kv_begin * d);
  sw.maybe_v_bias = detail::offset_or_null(w.maybe_v_bias, s.kv_begin * d);
  if (s.kv_begin != 0) sw.maybe_o_bias = nullptr;
  return validate(sc, sw);
}

}  // namespace gated_attention
