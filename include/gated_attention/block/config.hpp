// Configuration, weight views, q/gate layouts and KV cache view of the gated attention block.
//
// Per token: [q | gate] = x W_q^T (or q = x W_q^T and gate = x W_gate^T), k = x W_k^T,
// v = x W_v^T; q and k are RMS-normalised per head and rotated (RoPE); k and v are appended to the
// cache; a = SDPA(q, cache, causal) * act(gate); y = a W_o^T.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"
#include "gated_attention/core/validate.hpp"
#include "gated_attention/ops/output_gate_args.hpp"
#include "gated_attention/ops/rms_norm_args.hpp"
#include "gated_attention/ops/sdpa_args.hpp"

namespace gated_attention {

enum class GateMode : std::uint8_t {
  none,         // ungated attention: the same block, for like-for-like comparisons
  headwise,     // one gate value per head
  elementwise,  // one gate value per head and dim (Qwen3-Next)
};

// Where the gate's rows sit in the projection weights.
enum class QGateLayout : std::uint8_t {
  qwen3_next,  // q_proj rows per query head: [q_h (D) | gate_h (D, or 1 if headwise)]
  grouped,     // q_proj rows per KV group of g heads: [q (g*D) | gate (g*D, or g if headwise)]
  separate,    // q_proj has the q rows only; gate_proj has the gate rows, head-major
};

enum class QkNorm : std::uint8_t {
  none,
  rms,                // x_hat * w
  zero_centered_rms,  // x_hat * (1 + w) (Qwen3-Next)
};

struct BlockConfig {
  std::int64_t hidden_size = 0;
  std::int64_t num_q_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  GateMode gate_mode = GateMode::elementwise;
  GateActivation gate_activation = GateActivation::sigmoid;
  QGateLayout q_gate_layout = QGateLayout::qwen3_next;
  QkNorm qk_norm = QkNorm::zero_centered_rms;
  double rope_theta = 10000.0;
  std::int64_t rotary_dim = 0;  // leading dims of each head that RoPE rotates; 0: no RoPE
  float rms_norm_eps = 1e-6f;
  float scale = 0.0f;  // 0: 1 / sqrt(head_dim)

  std::int64_t group_size() const { return num_kv_heads > 0 ? num_q_heads / num_kv_heads : 0; }
  // Gate values per token.
  std::int64_t gate_width() const {
    switch (gate_mode) {
      case GateMode::headwise:
        return num_q_heads;
      case GateMode::elementwise:
        return num_q_heads * head_dim;
      case GateMode::none:
        break;
    }
    return 0;
  }
  std::int64_t q_width() const { return num_q_heads * head_dim; }
  std::int64_t kv_width() const { return num_kv_heads * head_dim; }
  // Rows of q_proj: the gate's rows are packed into it unless the layout is separate.
  std::int64_t q_proj_rows() const {
    return q_width() + (q_gate_layout == QGateLayout::separate ? 0 : gate_width());
  }
  bool has_gate_proj() const {
    return gate_mode != GateMode::none && q_gate_layout == QGateLayout::separate;
  }
};

inline Status validate(const BlockConfig& c) {
  if (c.hidden_size < 1)
    return Status::shape_mismatch("config", 0, "hidden_size >= 1", 1, c.hidden_size);
  if (c.num_kv_heads < 1 || c.num_q_heads < 1 || c.num_q_heads % c.num_kv_heads != 0) {
    return Status::error(StatusCode::invalid_argument,
                         "config: num_q_heads (%lld) must be a positive multiple of num_kv_heads "
                         "(%lld)",
                         static_cast<long long>(c.num_q_heads),
                         static_cast<long long>(c.num_kv_heads));
  }
  if (c.head_dim < 1 || c.head_dim > kMaxHeadDim) {
    return Status::error(StatusCode::invalid_argument,
                         "config: head_dim: expected 1..%lld, got %lld",
                         static_cast<long long>(kMaxHeadDim), static_cast<long long>(c.head_dim));
  }
  if (c.rotary_dim < 0 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim) {
    return Status::error(StatusCode::invalid_argument,
                         "config: rotary_dim: expected even and in 0..%lld (head_dim), got %lld",
                         static_cast<long long>(c.head_dim), static_cast<long long>(c.rotary_dim));
  }
  if (!(c.rope_theta > 0.0) || !std::isfinite(c.rope_theta)) {
    return Status::error(StatusCode::invalid_argument,
                         "config: rope_theta: expected finite > 0, got %g", c.rope_theta);
  }
  if (!(c.rms_norm_eps >= 0.0f) || !std::isfinite(c.rms_norm_eps)) {
    return Status::error(StatusCode::invalid_argument,
                         "config: rms_norm_eps: expected finite >= 0, got %g",
                         static_cast<double>(c.rms_norm_eps));
  }
  if (!std::isfinite(c.scale)) {
    return Status::error(StatusCode::invalid_argument, "config: scale: expected finite, got %g",
                         static_cast<double>(c.scale));
  }
  return Status::ok();
}

// Non-owning views of the block's weights, PyTorch's [out, in] layout: the projections' matrices
// and biases in W, the QK norm weights in the activations' type T.
template <class T, class W = T>
struct BlockWeights {
  TensorView<const W, 2> q_proj;           // [q_proj_rows, hidden]
  TensorView<const W, 2> maybe_gate_proj;  // [gate_width, hidden]; separate layout only
  TensorView<const W, 2> k_proj;           // [num_kv_heads * head_dim, hidden]
  TensorView<const W, 2> v_proj;           // [num_kv_heads * head_dim, hidden]
  TensorView<const W, 2> o_proj;           // [hidden, num_q_heads * head_dim]
  const W* maybe_q_bias = nullptr;         // [q_proj_rows]
  const W* maybe_gate_bias = nullptr;      // [gate_width]
  const W* maybe_k_bias = nullptr;         // [num_kv_heads * head_dim]
  const W* maybe_v_bias = nullptr;         // [num_kv_heads * head_dim]
  const W* maybe_o_bias = nullptr;         // [hidden]
  const T* maybe_q_norm = nullptr;         // [head_dim]; required unless qk_norm is none
  const T* maybe_k_norm = nullptr;         // [head_dim]; required unless qk_norm is none
};

template <class T, class W>
Status validate(const BlockConfig& c, const BlockWeights<T, W>& w) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(c));
  constexpr std::array<const char*, 2> dims = {"out features", "in features"};
  const std::int64_t h = c.hidden_size;
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("q_proj", w.q_proj, {c.q_proj_rows(), h}, dims));
  if (c.has_gate_proj()) {
    GATED_ATTENTION_RETURN_IF_ERROR(
        check_view("gate_proj", w.maybe_gate_proj, {c.gate_width(), h}, dims));
    if (w.maybe_gate_proj.data == nullptr) {
      return Status::error(StatusCode::invalid_argument,
                           "gate_proj: null data pointer (required by the separate layout)");
    }
  }
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("k_proj", w.k_proj, {c.kv_width(), h}, dims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("v_proj", w.v_proj, {c.kv_width(), h}, dims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("o_proj", w.o_proj, {h, c.q_width()}, dims));
  if (c.qk_norm != QkNorm::none && (w.maybe_q_norm == nullptr || w.maybe_k_norm == nullptr)) {
    return Status::error(StatusCode::invalid_argument,
                         "q_norm/k_norm: null weight, required when qk_norm is not none");
  }
  return Status::ok();
}

// Strides (elements) of q and gate inside one token's projection row, per layout.
struct QGateStrides {
  std::int64_t q_group = 0, q_head = 0;  // q: between KV groups, between heads of a group
  std::int64_t gate_offset = 0;          // gate start within its row (q_proj's or gate_proj's)
  std::int64_t gate_group = 0, gate_head = 0, gate_dim = 0;
};

inline QGateStrides q_gate_strides(const BlockConfig& c) {
  const std::int64_t d = c.head_dim, g = c.group_size();
  const bool headwise = c.gate_mode == GateMode::headwise;
  const std::int64_t gate_per_head = headwise ? 1 : d;
  QGateStrides s;
  s.gate_dim = headwise ? 0 : 1;
  if (c.gate_mode == GateMode::none || c.q_gate_layout == QGateLayout::separate) {
    s.q_head = d;
    s.q_group = g * d;
    s.gate_head = gate_per_head;
    s.gate_group = g * gate_per_head;
  } else if (c.q_gate_layout == QGateLayout::qwen3_next) {
    s.q_head = d + gate_per_head;
    s.q_group = g * s.q_head;
    s.gate_offset = d;
    s.gate_head = s.q_head;
    s.gate_group = s.q_group;
  } else {  // grouped
    s.q_head = d;
    s.q_group = g * (d + gate_per_head);
    s.gate_offset = g * d;
    s.gate_head = gate_per_head;
    s.gate_group = s.q_group;
  }
  return s;
}

// Query view [b, len, kv_heads, group, head_dim] into q_proj's output [b, len, q_proj_rows].
template <class T>
TensorView<T, 5> q_view(const BlockConfig& c, const TensorView<T, 3>& q_proj_out) {
  const QGateStrides s = q_gate_strides(c);
  const auto& st = q_proj_out.strides;
  return TensorView<T, 5>(
      q_proj_out.data,
      {q_proj_out.extents[0], q_proj_out.extents[1], c.num_kv_heads, c.group_size(), c.head_dim},
      {st[0], st[1], s.q_group, s.q_head, 1});
}

// Gate view [b, len, kv_heads, group, head_dim] (stride 0 over dims if headwise) into the output
// that holds the gate: q_proj's [b, len, q_proj_rows], or gate_proj's for the separate layout.
template <class T>
TensorView<T, 5> gate_view(const BlockConfig& c, const TensorView<T, 3>& gate_source) {
  const QGateStrides s = q_gate_strides(c);
  const auto& st = gate_source.strides;
  // Null while a workspace is only being sized: no offset is applied to it.
  return TensorView<T, 5>(
      gate_source.data == nullptr ? nullptr : gate_source.data + s.gate_offset,
      {gate_source.extents[0], gate_source.extents[1], c.num_kv_heads, c.group_size(), c.head_dim},
      {st[0], st[1], s.gate_group, s.gate_head, s.gate_dim});
}

// A KV cache, owned by the caller: contiguous slots for num_seqs sequences of up to `capacity`
// tokens, or (with a page table) pools of pages the engine allocates, sequence s's token n in row
// n % page_size of page page_table(s, n / page_size). forward appends each sequence's new tokens at
// lengths[s] and advances lengths[s]. Elements: float, bf16, f16 (rounded to nearest even) or
// std::int8_t (rows quantised as ops/store_kv does, their scales in maybe_k_scales /
// maybe_v_scales).
template <class KvT>
struct KvCacheView {
  TensorView<KvT, 4> k;             // [num_seqs, capacity, num_kv_heads, head_dim], or paged
                                    // [num_pages, page_size, num_kv_heads, head_dim]
  TensorView<KvT, 4> v;             // as k
  std::int64_t* lengths = nullptr;  // [num_seqs] tokens held per sequence
  TensorView<float, 3> maybe_k_scales = {};  // [num_seqs, capacity, num_kv_heads] (or paged as k):
  TensorView<float, 3> maybe_v_scales = {};  //   int8 only
  // Paged: each sequence's pages in token order. Pages may be shared (a common prefix) where
  // only read; a page that receives new tokens belongs to its sequence alone.
  TensorView<const std::int32_t, 2> maybe_page_table = {};  // [num_seqs, max_pages]

  bool paged() const { return maybe_page_table.data != nullptr; }
  std::int64_t num_seqs() const { return paged() ? maybe_page_table.extents[0] : k.extents[0]; }
  // Tokens a sequence may hold.
  std::int64_t capacity() const {
    return paged() ? maybe_page_table.extents[1] * k.extents[1] : k.extents[1];
  }
  // Where token n of sequence s lies in k, v and the scales.
  KeyAt slot(std::int64_t s, std::int64_t n) const {
    if (!paged()) return {s, n};
    return {maybe_page_table(s, n / k.extents[1]), n % k.extents[1]};
  }
};

// The new tokens of one forward call: b sequences of len each ([b, len, ...]), or packed
// ([1, total, ...] with cu_seqlens [b + 1]: sequence s's are rows [cu(s), cu(s + 1))).
struct NewTokens {
  std::int64_t extents[2] = {0, 0};           // x's dims 0 and 1
  TensorView<const std::int32_t, 1> cu = {};  // packed: offsets

  bool packed() const { return cu.data != nullptr; }
  std::int64_t batch() const { return packed() ? cu.extents[0] - 1 : extents[0]; }
  std::int64_t count(std::int64_t s) const { return packed() ? cu(s + 1) - cu(s) : extents[1]; }
  std::int64_t total() const { return extents[0] * extents[1]; }
  // The sequence and the index within it of row r of the [rows, ...] flattening of x.
  std::pair<std::int64_t, std::int64_t> of_row(std::int64_t r) const {
    if (!packed()) return {r / extents[1], r % extents[1]};
    const std::int64_t s = std::upper_bound(cu.data, cu.data + cu.extents[0], r) - cu.data - 1;
    return {s, r - cu(s)};
  }
};

namespace detail {

// The cache's views: contiguous [>= b sequences, capacity, ...] or paged (pools and a table of
// >= b rows), with their row scales.
template <class KvT>
Status check_cache_views(const BlockConfig& c, const KvCacheView<KvT>& cache, std::int64_t batch) {
  const bool paged = cache.paged();
  constexpr std::array<const char*, 4> slot_dims = {"sequences", "capacity", "kv heads", "dim"};
  constexpr std::array<const char*, 4> page_dims = {"pages", "page size", "kv heads", "dim"};
  const auto& dims = paged ? page_dims : slot_dims;
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_view("cache.k", cache.k, {-1, -1, c.num_kv_heads, c.head_dim}, dims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("cache.v", cache.v, cache.k.extents, dims));
  const auto& e = cache.k.extents;
  GATED_ATTENTION_RETURN_IF_ERROR(detail::check_row_scales<KvT>(
      "cache.k_scales", "K cache", cache.maybe_k_scales, {e[0], e[1], e[2]}));
  GATED_ATTENTION_RETURN_IF_ERROR(detail::check_row_scales<KvT>(
      "cache.v_scales", "V cache", cache.maybe_v_scales, {e[0], e[1], e[2]}));
  if (paged) {
    GATED_ATTENTION_RETURN_IF_ERROR(check_view("cache.page_table", cache.maybe_page_table, {-1, -1},
                                               {"sequences", "pages"}, InnerStride::any));
    GATED_ATTENTION_RETURN_IF_ERROR(detail::check_page_geometry("cache.k", "cache.page_table", e[1],
                                                                cache.maybe_page_table.extents[1]));
  }
  if (cache.num_seqs() < batch) {
    return Status::error(StatusCode::invalid_argument,
                         "%s: dim 0 (sequences): expected >= %lld (batch), got %lld",
                         paged ? "cache.page_table" : "cache.k", static_cast<long long>(batch),
                         static_cast<long long>(cache.num_seqs()));
  }
  return Status::ok();
}

// Room for each sequence's new tokens (none when the cache does not receive them), and (paged)
// every page its tokens use in the pools.
template <class KvT>
Status check_cache_room(const KvCacheView<KvT>& cache, const NewTokens& tokens, bool appends) {
  if (cache.lengths == nullptr && tokens.batch() > 0) {
    return Status::error(StatusCode::invalid_argument, "cache.lengths: null pointer");
  }
  const std::int64_t capacity = cache.capacity();
  for (std::int64_t s = 0; s < tokens.batch(); ++s) {
    const std::int64_t held = cache.lengths[s], adding = appends ? tokens.count(s) : 0;
    if (held < 0 || held > capacity - adding) {
      return Status::error(StatusCode::invalid_argument,
                           "cache.lengths: sequence %lld holds %lld tokens, + %lld new exceeds "
                           "capacity %lld",
                           static_cast<long long>(s), static_cast<long long>(held),
                           static_cast<long long>(adding), static_cast<long long>(capacity));
    }
    if (cache.paged()) {
      GATED_ATTENTION_RETURN_IF_ERROR(
          detail::check_table_row("cache.page_table", "sequence", "cache.k", cache.maybe_page_table,
                                  s, held + adding, cache.k.extents[1], cache.k.extents[0]));
    }
  }
  return Status::ok();
}

// Paged: every page that receives new tokens appears once in the pages the call uses (no page
// written by two sequences, or written by one and read by another). marks: [num_pages] scratch.
template <class KvT>
Status check_cache_writes(const KvCacheView<KvT>& cache, const NewTokens& tokens,
                          std::int32_t* marks) {
  if (!cache.paged()) return Status::ok();
  const std::int64_t page_size = cache.k.extents[1];
  std::fill(marks, marks + cache.k.extents[0], -1);
  const auto written = [&](std::int64_t s, std::int64_t i) {  // column i of s gets new tokens
    const std::int64_t held = cache.lengths[s], adding = tokens.count(s);
    return adding > 0 && i >= held / page_size && i <= (held + adding - 1) / page_size;
  };
  for (int pass = 0; pass < 2; ++pass) {  // marks the written pages, then looks for them
    for (std::int64_t s = 0; s < tokens.batch(); ++s) {
      const std::int64_t used = (cache.lengths[s] + tokens.count(s) + page_size - 1) / page_size;
      for (std::int64_t i = 0; i < used; ++i) {
        const std::int32_t page = cache.maybe_page_table(s, i);
        if (pass == 0 ? !written(s, i) : written(s, i)) continue;
        if (marks[page] < 0) {
          if (pass == 0) marks[page] = static_cast<std::int32_t>(s);
          continue;
        }
        return Status::error(StatusCode::invalid_argument,
                             "cache.page_table: sequence %lld, page %lld (pool page %d): "
                             "receives sequence %d's new tokens this call, expected no other use",
                             static_cast<long long>(s), static_cast<long long>(i), page,
                             marks[page]);
      }
    }
  }
  return Status::ok();
}

}  // namespace detail

// Checks one forward call's views: x and y [b, len, hidden] (packed: [1, total, hidden] with
// tokens.cu), positions like x's first two dims, and a cache with room for each sequence's new
// tokens in its first b sequences (appends_new_tokens false: its lengths within its capacity).
template <class T, class KvT, class W>
Status validate_forward(const BlockConfig& c, const BlockWeights<T, W>& w,
                        const TensorView<const T, 3>& x,
                        const TensorView<const std::int64_t, 2>& positions,
                        const KvCacheView<KvT>& cache, const TensorView<T, 3>& y,
                        const TensorView<const std::int32_t, 1>& maybe_cu_seqlens = {},
                        bool appends_new_tokens = true) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(c, w));
  const bool packed = maybe_cu_seqlens.data != nullptr;
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_view("x", x, {packed ? 1 : -1, -1, c.hidden_size}, {"batch", "length", "hidden"}));
  const NewTokens tokens{{x.extents[0], x.extents[1]}, maybe_cu_seqlens};
  if (packed) {
    GATED_ATTENTION_RETURN_IF_ERROR(detail::check_offsets_view("cu_seqlens", maybe_cu_seqlens));
    GATED_ATTENTION_RETURN_IF_ERROR(
        detail::check_offsets("cu_seqlens", maybe_cu_seqlens, x.extents[1], "x's dim 1"));
  }
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_view("positions", positions, {x.extents[0], x.extents[1]}, {"batch", "length"}));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("y", y, {x.extents[0], x.extents[1], c.hidden_size},
                                             {"batch", "length", "hidden"}));
  GATED_ATTENTION_RETURN_IF_ERROR(detail::check_cache_views(c, cache, tokens.batch()));
  return detail::check_cache_room(cache, tokens, appends_new_tokens);
}

}  // namespace gated_attention
