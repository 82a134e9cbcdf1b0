// Arguments of scaled dot-product attention, shared by the reference and the kernels.
//
// Query i of batch entry b sits at position p = i + kv_len_b - q_len (bottom-right alignment, so
// a chunk of new queries lines up with the end of its KV cache). It attends key j iff
//   j < kv_len_b  and  (window_left < 0 or j >= p - window_left)
//                 and  (window_right < 0 or j <= p + window_right).
// Logits are scale * dot(q, k_j); a learned sink logit (or 0, for softmax+1) joins the softmax
// normaliser but has no value row. A row with no attended key outputs 0 (before the gate).
//
// K/V are either one cache per entry, k [b, kv_len, kv_heads, dk], or pages shared by every entry
// (vLLM, FlashInfer and OpenVINO's paged attention), k [num_pages, page_size, kv_heads, dk], with a
// page table: key n of entry b is then row n % page_size of page page_table(b, n / page_size).
//
// Queries are either q_len per entry, q [b, q_len, ...], or packed (flash-attn's varlen layout):
// q [1, total_q, ...] with cu_seqlens_q [b + 1], entry b's queries being rows
// [cu_seqlens_q(b), cu_seqlens_q(b + 1)), its q_len their count. out, the gate, lse and the
// statistics follow q's layout.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "gated_attention/core/dtypes.hpp"
#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"
#include "gated_attention/core/validate.hpp"
#include "gated_attention/dispatch/cpu.hpp"
#include "gated_attention/ops/heads.hpp"
#include "gated_attention/ops/output_gate_args.hpp"

#if GATED_ATTENTION_X86
#include <emmintrin.h>
#elif GATED_ATTENTION_AARCH64
#include <arm_neon.h>
#endif

namespace gated_attention {

// Largest head dim (dk and dv) any path accepts.
inline constexpr std::int64_t kMaxHeadDim = 512;

struct Mask {
  std::int64_t window_left = -1;   // keys at most this far before the query; -1: unbounded
  std::int64_t window_right = -1;  // keys at most this far after the query; -1: unbounded

  static constexpr Mask none() { return {-1, -1}; }
  static constexpr Mask causal() { return {-1, 0}; }
  // Causal sliding window of `size` keys ending at the query (Mistral, gpt-oss style).
  static constexpr Mask causal_window(std::int64_t size) { return {size - 1, 0}; }
  static constexpr Mask window(std::int64_t left, std::int64_t right) { return {left, right}; }

  // Window sizes may be anything up to INT64_MAX: only key - query_pos (bounded by the tensors'
  // extents) is computed.
  constexpr bool allows(std::int64_t query_pos, std::int64_t key) const {
    const std::int64_t offset = key - query_pos;
    return (window_left < 0 || offset >= -window_left) &&
           (window_right < 0 || offset <= window_right);
  }
};

// Optional per-row statistics of what the paper measures, all [b, q_len, kv_heads, group]: the
// attention sink and the gate's sparsity. A null view is not computed; with every view null the
// kernels skip the statistics entirely.
struct AttentionStats {
  std::int64_t n_sink = 1;              // the first n_sink keys count as the sink
  TensorView<float, 4> sink_share;      // softmax probability on keys [0, n_sink)
  TensorView<float, 4> gate_mean;       // mean of act(gate) over d (1 without a gate)
  TensorView<float, 4> gate_below_0_1;  // fraction of act(gate) < 0.1 over d (0 without a gate)
  TensorView<float, 4> max_abs_before;  // max |attention output| over d, before the gate
  TensorView<float, 4> max_abs_after;   // max |output| over d, after the gate

  bool enabled() const {
    return sink_share.data || gate_mean.data || gate_below_0_1.data || max_abs_before.data ||
           max_abs_after.data;
  }
};

// How the dot products read 16- and 8-bit K/V (docs/design.md, "Dot precision").
enum class DotPrecision : std::uint8_t {
  // K/V widened to f32; q and the softmax weights stay f32.
  exact,
  // q rounded per row to K's type (round_query_row), on every path, unless q already has K's
  // type (then the dot products of q and K are exact, the scale applied after them). Where the
  // path has a dot instruction for the types, the softmax weights are rounded too: to bf16 for a
  // bf16 V, to 8 bits per block of keys for an int8 V. f32 K/V: as exact.
  storage,
};

// Where a key lies in k, v and their row scales: the index along their dims 0 and 1.
struct KeyAt {
  std::int64_t index, row;  // (entry, key), or (page, row within the page)
};

// Where a query lies in q, out, the gate, lse and the statistics: the index along their dims 0
// and 1.
struct QueryAt {
  std::int64_t index, row;  // (entry, position), or (0, packed row)
};

template <class T, class KT = T, class VT = KT>
struct SdpaArgs {
  TensorView<const T, 5> q;   // [b, q_len, kv_heads, group, dk]
  TensorView<const KT, 4> k;  // [b, kv_len, kv_heads, dk], or paged [num_pages, page_size, ...]
  TensorView<const VT, 4> v;  // [b, kv_len, kv_heads, dv], or paged as k
  // int8 K or V only: one scale per row, the row being scale * (its int8 values); finite, >= 0.
  TensorView<const float, 3> maybe_k_scales;  // [b, kv_len, kv_heads], or paged as k
  TensorView<const float, 3> maybe_v_scales;  // [b, kv_len, kv_heads], or paged as k
  // Paged K/V: entry b's pages, in key order; entries may share pages (the kernels only read
  // them). Requires maybe_kv_lens; only the entries of an entry's first ceil(len / page_size)
  // columns are read.
  TensorView<const std::int32_t, 2> maybe_page_table;  // [b, max_pages], values in [0, num_pages)
  // Packed queries: entry b's rows of q (and out, ...) start at cu_seqlens_q(b); non-decreasing
  // from 0 to total_q. Under a mask bounded on the right (causal), q_len <= the entry's keys.
  TensorView<const std::int32_t, 1> maybe_cu_seqlens_q;  // [b + 1]
  TensorView<T, 5> out;                                  // [b, q_len, kv_heads, group, dv]
  float scale = 0.0f;                                    // logit scale; 0: 1 / sqrt(dk)
  Mask mask;                                             // default: no mask
  const std::int64_t* maybe_kv_lens = nullptr;  // [b] valid keys per entry, <= kv_len; null: kv_len
  const float* maybe_sink_logits = nullptr;     // [kv_heads * group] learned sink logit per head
  bool softmax_plus_one = false;                // a zero sink logit for every head
  TensorView<float, 4> maybe_lse;  // [b, q_len, kv_heads, group] log of the softmax normaliser
                                   // (natural log, sinks included); -inf for rows without keys
  GateSpec<T> gate;                // optional output gate, applied to every output row
  AttentionStats stats;            // optional statistics (sink share, gate sparsity, magnitudes)
  DotPrecision dot_precision = DotPrecision::exact;

  float effective_scale() const {
    return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(q.extents[4]));
  }
  // The factor the kernels scale q by: the logit scale in log2 units (scores are base-2 exponents).
  float scale_log2() const { return effective_scale() * 1.4426950408889634f; }

  bool packed() const { return maybe_cu_seqlens_q.data != nullptr; }
  // Batch entries: q's dim 0, or (packed) cu_seqlens_q's entries - 1.
  std::int64_t batch() const {
    return packed() ? std::max<std::int64_t>(0, maybe_cu_seqlens_q.extents[0] - 1) : q.extents[0];
  }
  // Entry b's queries.
  std::int64_t q_len(std::int64_t b) const {
    return packed() ? maybe_cu_seqlens_q(b + 1) - maybe_cu_seqlens_q(b) : q.extents[1];
  }
  // Query i of entry b.
  QueryAt query_at(std::int64_t b, std::int64_t i) const {
    return packed() ? QueryAt{0, maybe_cu_seqlens_q(b) + i} : QueryAt{b, i};
  }
  // Entry b's valid keys.
  std::int64_t kv_len(std::int64_t b) const {
    return maybe_kv_lens != nullptr ? maybe_kv_lens[b] : kv_capacity();
  }

  bool paged() const { return maybe_page_table.data != nullptr; }
  std::int64_t page_size() const { return paged() ? k.extents[1] : 0; }
  // Keys an entry may hold: kv_len, or the page table's columns times the page size.
  std::int64_t kv_capacity() const {
    return paged() ? maybe_page_table.extents[1] * k.extents[1] : k.extents[1];
  }
  // Key n of entry b (n below its length when paged).
  KeyAt key_at(std::int64_t b, std::int64_t n) const {
    if (!paged()) return {b, n};
    const std::int64_t page_size = k.extents[1];
    return {maybe_page_table(b, n / page_size), n % page_size};
  }
};

namespace detail {

// A query row of d values quantised as store_kv quantises a cache row, into q; returns the row's
// scale, NaN (and q all 0) when the row holds NaN or Inf.
inline float quantize_query_row(const float* row, std::int64_t d, std::int8_t* q) {
  const float max_abs = row_max_abs(row, d);
  const bool finite = std::isfinite(max_abs);
  const float inverse_scale = finite ? int8_inverse_scale(max_abs) : 0.0f;
  for (std::int64_t i = 0; i < d; ++i) {
    q[i] = finite ? quantize_int8(row[i], inverse_scale) : std::int8_t{0};
  }
  return finite ? int8_scale(max_abs) : std::numeric_limits<float>::quiet_NaN();
}

}  // namespace detail

// Under DotPrecision::storage, each query row scaled by scale_log2() (in float) is rounded to K's
// type before the dot products (unless q already has K's type: rounds_query_v): bf16 and f16 to
// nearest even; int8 as store_kv quantises a cache row (detail::quantize_query_row), kept as its
// values times the row's scale (a row with NaN or Inf is left as it is); f32 K (or any other type):
// unchanged. `row` holds d <= kMaxHeadDim values. Whether DotPrecision::storage rounds a query of
// type T for a K of type KT.
template <class T, class KT>
inline constexpr bool rounds_query_v = !std::is_same_v<T, KT>;

template <class KT>
void round_query_row(float* row, std::int64_t d) {
  if constexpr (std::is_same_v<KT, std::int8_t>) {
    std::int8_t q[kMaxHeadDim];
    const float scale = detail::quantize_query_row(row, d, q);
    if (std::isnan(scale)) return;
    for (std::int64_t i = 0; i < d; ++i) row[i] = static_cast<float>(q[i]) * scale;
  } else if constexpr (std::is_same_v<KT, bf16> || std::is_same_v<KT, f16>) {
    for (std::int64_t i = 0; i < d; ++i) row[i] = to_float(from_float<KT>(row[i]));
  }
}

namespace detail {

// The fields of `from` besides q, k, v, their scales, out and the gate values, into `to`.
template <class A, class B>
void copy_sdpa_options(const A& from, B& to) {
  to.gate.activation = from.gate.activation;
  to.gate.combine = from.gate.combine;
  to.scale = from.scale;
  to.mask = from.mask;
  to.maybe_kv_lens = from.maybe_kv_lens;
  to.maybe_page_table = from.maybe_page_table;
  to.maybe_cu_seqlens_q = from.maybe_cu_seqlens_q;
  to.maybe_sink_logits = from.maybe_sink_logits;
  to.softmax_plus_one = from.softmax_plus_one;
  to.maybe_lse = from.maybe_lse;
  to.stats = from.stats;
  to.dot_precision = from.dot_precision;
}

}  // namespace detail

// `args` reading K and V from other views, possibly of other types (int8 ones with their row
// scales); every other field kept.
template <class KT2, class VT2, class T, class KT, class VT>
SdpaArgs<T, KT2, VT2> with_kv(const SdpaArgs<T, KT, VT>& args, TensorView<const KT2, 4> k,
                              TensorView<const VT2, 4> v,
                              TensorView<const float, 3> maybe_k_scales = {},
                              TensorView<const float, 3> maybe_v_scales = {}) {
  SdpaArgs<T, KT2, VT2> a;
  a.q = args.q;
  a.k = k;
  a.v = v;
  a.maybe_k_scales = maybe_k_scales;
  a.maybe_v_scales = maybe_v_scales;
  a.out = args.out;
  a.gate.values = args.gate.values;
  detail::copy_sdpa_options(args, a);
  return a;
}

// `args` reading q (and the gate values, where `args` has a gate) from, and writing out to, other
// views, possibly of another activation type; every other field kept.
template <class T2, class T, class KT, class VT>
SdpaArgs<T2, KT, VT> with_activations(const SdpaArgs<T, KT, VT>& args, TensorView<const T2, 5> q,
                                      TensorView<T2, 5> out,
                                      TensorView<const T2, 5> gate_values = {}) {
  SdpaArgs<T2, KT, VT> a;
  a.q = q;
  a.k = args.k;
  a.v = args.v;
  a.maybe_k_scales = args.maybe_k_scales;
  a.maybe_v_scales = args.maybe_v_scales;
  a.out = out;
  a.gate.values = gate_values;
  detail::copy_sdpa_options(args, a);
  return a;
}

// The sizes of an SDPA call: all that its plan, workspace size and phase count depend on, so an
// engine (or the block) can size a workspace before its buffers exist.
struct SdpaShape {
  std::int64_t batch = 0, q_len = 0, kv_len = 0, kv_heads = 0, group = 0, dk = 0, dv = 0;
  std::int64_t page_size = 0;  // paged K/V: keys per page (kv_len: the table's capacity); 0: not
  bool packed = false;         // packed queries (q_len: total_q, any split among the entries)

  template <class T, class KT, class VT>
  static SdpaShape of(const SdpaArgs<T, KT, VT>& args) {
    const auto& q = args.q.extents;
    return {args.batch(),     q[1],         args.kv_capacity(), q[2], q[3], q[4], args.v.extents[3],
            args.page_size(), args.packed()};
  }
};

// Sizes that can_implement() could accept: none negative, kv_heads and group >= 1, head dims
// 1..kMaxHeadDim.
inline Status validate(const SdpaShape& s) {
  if (s.batch < 0 || s.q_len < 0 || s.kv_len < 0 || s.page_size < 0) {
    return Status::error(StatusCode::invalid_argument,
                         "shape: expected batch, q_len, kv_len, page_size >= 0, got %lld, %lld, "
                         "%lld, %lld",
                         static_cast<long long>(s.batch), static_cast<long long>(s.q_len),
                         static_cast<long long>(s.kv_len), static_cast<long long>(s.page_size));
  }
  if (s.kv_heads < 1 || s.group < 1) {
    return Status::error(StatusCode::invalid_argument,
                         "shape: expected kv_heads, group >= 1, got %lld, %lld",
                         static_cast<long long>(s.kv_heads), static_cast<long long>(s.group));
  }
  if (s.dk < 1 || s.dk > kMaxHeadDim || s.dv < 1 || s.dv > kMaxHeadDim) {
    return Status::error(StatusCode::invalid_argument,
                         "shape: expected dk, dv in 1..%lld, got %lld, %lld",
                         static_cast<long long>(kMaxHeadDim), static_cast<long long>(s.dk),
                         static_cast<long long>(s.dv));
  }
  return Status::ok();
}

namespace detail {

constexpr std::array<const char*, 4> kSdpaRowDims = {"batch", "q length", "kv heads", "group"};

constexpr std::array<const char*, 3> kKvRowDims = {"batch", "kv length", "kv heads"};

// An int8 K or V takes a view of its row scales [b, kv_len, kv_heads] (any strides); the other
// types take none.
template <class E>
Status check_row_scales(const char* name, const char* tensor, const TensorView<const float, 3>& s,
                        const std::array<std::int64_t, 3>& extents) {
  constexpr bool quantised = std::is_same_v<E, std::int8_t>;
  const bool empty = extents[0] * extents[1] * extents[2] == 0;
  if (quantised && s.data == nullptr && !empty) {
    return Status::error(StatusCode::invalid_argument,
                         "%s: expected a [b, kv_len, kv_heads] view for an int8 %s, got none", name,
                         tensor);
  }
  if (!quantised && s.data != nullptr) {
    return Status::error(StatusCode::invalid_argument,
                         "%s: expected none for a float, bf16 or f16 %s, got a view", name, tensor);
  }
  if (s.data == nullptr) return Status::ok();
  return check_view(name, s, extents, kKvRowDims, InnerStride::any);
}

// Whether a row scale is finite and >= 0 (a zero of either sign included; NaN fails both).
inline bool scale_good(float x) {
  return (x >= 0.0f) & (x <= std::numeric_limits<float>::max());
}

// Whether every one of the n floats at `scales` is scale_good. Every call checks the scales of
// every row it attends to, so this runs on the vectors every CPU of the architecture has (SSE2,
// NEON), which need no target flags (performance-notes "int8 decode: the row-scale check on
// SSE2/NEON vectors, the query rows' maxima").
inline bool all_scales_good(const float* scales, std::int64_t n) {
  constexpr float kMax = std::numeric_limits<float>::max();
  std::int64_t i = 0;
  bool ok = true;
#if GATED_ATTENTION_X86
  const __m128 zero = _mm_setzero_ps(), max = _mm_set1_ps(kMax);
  __m128 good = _mm_castsi128_ps(_mm_set1_epi32(-1));
  for (; i + 4 <= n; i += 4) {
    const __m128 x = _mm_loadu_ps(scales + i);
    good = _mm_and_ps(good, _mm_and_ps(_mm_cmpge_ps(x, zero), _mm_cmple_ps(x, max)));
  }
  ok = _mm_movemask_ps(good) == 0xF;
#elif GATED_ATTENTION_AARCH64
  uint32x4_t good = vdupq_n_u32(~0u);
  for (; i + 4 <= n; i += 4) {
    const float32x4_t x = vld1q_f32(scales + i);
    good = vandq_u32(good,
                     vandq_u32(vcgeq_f32(x, vdupq_n_f32(0.0f)), vcleq_f32(x, vdupq_n_f32(kMax))));
  }
  ok = vminvq_u32(good) != 0;
#endif
  for (; i < n; ++i) ok &= scale_good(scales[i]);
  return ok;
}

// Whether rows [row, row + count) of index `index` (an entry, or a page) of a row-scale view, KV
// heads [h0, h0 + heads), are all scale_good: one pass where those scales are contiguous.
inline bool scale_rows_good(const TensorView<const float, 3>& s, std::int64_t index,
                            std::int64_t row, std::int64_t count, std::int64_t h0,
                            std::int64_t heads) {
  if (s.strides[2] == 1 && (count == 1 || (heads == s.extents[2] && s.strides[1] == heads))) {
    return all_scales_good(&s(index, row, h0), count * heads);
  }
  bool ok = true;
  for (std::int64_t n = row; n < row + count; ++n) {
    for (std::int64_t h = h0; h < h0 + heads; ++h) ok &= scale_good(s(index, n, h));
  }
  return ok;
}

// Rows [0, count) of index `index` of a row-scale view (an entry, or a page), finite and >= 0;
// an error names entry b and its position first + n.
inline Status check_scale_rows(const char* name, const TensorView<const float, 3>& s,
                               std::int64_t index, std::int64_t count, std::int64_t b,
                               std::int64_t first) {
  const std::int64_t heads = s.extents[2];
  if (scale_rows_good(s, index, 0, count, 0, heads)) return Status::ok();
  for (std::int64_t n = 0; n < count; ++n) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const float x = s(index, n, h);
      if (scale_good(x)) continue;
      return Status::error(StatusCode::invalid_argument,
                           "%s: batch %lld, position %lld, kv head %lld: expected a finite scale "
                           ">= 0, got %g",
                           name, static_cast<long long>(b), static_cast<long long>(first + n),
                           static_cast<long long>(h), static_cast<double>(x));
    }
  }
  return Status::ok();
}

// The scales of the rows the call may read (those below each entry's kv_lens): finite and >= 0.
template <class T, class KT, class VT>
Status check_row_scale_values(const char* name, const TensorView<const float, 3>& s,
                              const SdpaArgs<T, KT, VT>& args) {
  if (s.data == nullptr) return Status::ok();
  const std::int64_t page = args.paged() ? args.page_size() : args.kv_capacity();
  for (std::int64_t b = 0; b < args.batch(); ++b) {
    const std::int64_t valid = args.kv_len(b);
    for (std::int64_t n0 = 0; n0 < valid; n0 += page) {
      const KeyAt at = args.key_at(b, n0);
      GATED_ATTENTION_RETURN_IF_ERROR(
          check_scale_rows(name, s, at.index, std::min(page, valid - n0), b, n0));
    }
  }
  return Status::ok();
}

// Both row-scale views' values, the first bad scale named.
template <class T, class KT, class VT>
Status check_all_row_scales(const SdpaArgs<T, KT, VT>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(check_row_scale_values("k_scales", args.maybe_k_scales, args));
  return check_row_scale_values("v_scales", args.maybe_v_scales, args);
}

// Whether the K and V scales of keys [n0, n1) of entry b, KV heads [h0, h0 + heads), are finite
// and >= 0: what one SDPA task reads, checked by the task itself (in parallel, and into the cache
// of the core that reads them next).
template <class T, class KT, class VT>
bool key_scales_good(const SdpaArgs<T, KT, VT>& args, std::int64_t b, std::int64_t n0,
                     std::int64_t n1, std::int64_t h0, std::int64_t heads) {
  bool ok = true;
  for (std::int64_t n = n0; n < n1 && ok;) {
    const KeyAt at = args.key_at(b, n);
    const std::int64_t count = args.paged() ? std::min(n1 - n, args.page_size() - at.row) : n1 - n;
    for (const TensorView<const float, 3>* s : {&args.maybe_k_scales, &args.maybe_v_scales}) {
      if (s->data != nullptr) ok &= scale_rows_good(*s, at.index, at.row, count, h0, heads);
    }
    n += count;
  }
  return ok;
}

// Pages of page_size >= 1 keys (the pool's dim 1), max_pages of them (the table's dim 1) within
// 64 bits of keys.
inline Status check_page_geometry(const char* pool, const char* table, std::int64_t page_size,
                                  std::int64_t max_pages) {
  if (page_size < 1) {
    return Status::error(StatusCode::invalid_argument,
                         "%s: dim 1 (page size): expected >= 1 with a page table, got %lld", pool,
                         static_cast<long long>(page_size));
  }
  if (max_pages > std::numeric_limits<std::int64_t>::max() / page_size) {
    return Status::error(StatusCode::invalid_argument,
                         "%s: dim 1 (pages): %lld pages of %lld keys overflow 64 bits", table,
                         static_cast<long long>(max_pages), static_cast<long long>(page_size));
  }
  return Status::ok();
}

// The pages holding the first `keys` keys of row b of a page table, each in [0, num_pages); an
// error names the row as "<row_name> b".
inline Status check_table_row(const char* table_name, const char* row_name, const char* pool,
                              const TensorView<const std::int32_t, 2>& table, std::int64_t b,
                              std::int64_t keys, std::int64_t page_size, std::int64_t num_pages) {
  for (std::int64_t i = 0; i * page_size < keys; ++i) {
    const std::int64_t page = table(b, i);
    if (page >= 0 && page < num_pages) continue;
    return Status::error(StatusCode::invalid_argument,
                         "%s: %s %lld, page %lld: expected 0..%lld (%s's pages - 1), got %lld",
                         table_name, row_name, static_cast<long long>(b), static_cast<long long>(i),
                         static_cast<long long>(num_pages - 1), pool, static_cast<long long>(page));
  }
  return Status::ok();
}

// A page table [b, max_pages] of pages of page_size >= 1 keys whose capacity fits 64 bits.
template <class T, class KT, class VT>
Status check_page_table_shape(const SdpaArgs<T, KT, VT>& args) {
  const auto& table = args.maybe_page_table;
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_view("page_table", table, {args.batch(), -1}, {"batch", "pages"}, InnerStride::any));
  return check_page_geometry("k", "page_table", args.k.extents[1], table.extents[1]);
}

// A page table whose pages hold every entry's keys: kv_lens given, each entry's length within the
// table's capacity and each page it reads in [0, num_pages).
template <class T, class KT, class VT>
Status check_page_table_values(const SdpaArgs<T, KT, VT>& args) {
  const auto& table = args.maybe_page_table;
  const std::int64_t num_pages = args.k.extents[0], page_size = args.k.extents[1];
  if (args.maybe_kv_lens == nullptr && table.extents[0] > 0) {
    return Status::error(StatusCode::invalid_argument,
                         "kv_lens: expected every entry's length with a page table, got none");
  }
  for (std::int64_t b = 0; b < table.extents[0]; ++b) {
    const std::int64_t n = args.maybe_kv_lens[b];
    if (n < 0 || n > args.kv_capacity()) {
      return Status::error(StatusCode::invalid_argument,
                           "kv_lens: entry %lld: expected 0..%lld (page_table's %lld pages of %lld "
                           "keys), got %lld",
                           static_cast<long long>(b), static_cast<long long>(args.kv_capacity()),
                           static_cast<long long>(table.extents[1]),
                           static_cast<long long>(page_size), static_cast<long long>(n));
    }
    GATED_ATTENTION_RETURN_IF_ERROR(
        check_table_row("page_table", "entry", "k", table, b, n, page_size, num_pages));
  }
  return Status::ok();
}

// A view of offsets of packed rows [b + 1], b >= 0.
inline Status check_offsets_view(const char* name, const TensorView<const std::int32_t, 1>& cu) {
  GATED_ATTENTION_RETURN_IF_ERROR(check_view(name, cu, {-1}, {"batch + 1"}, InnerStride::any));
  if (cu.extents[0] >= 1) return Status::ok();
  return Status::error(StatusCode::invalid_argument, "%s: dim 0 (batch + 1): expected >= 1, got 0",
                       name);
}

// Offsets of packed rows [b + 1]: from 0, non-decreasing, to `total` (the packed dim's extent).
inline Status check_offsets(const char* name, const TensorView<const std::int32_t, 1>& cu,
                            std::int64_t total, const char* total_name) {
  if (cu(0) != 0) {
    return Status::error(StatusCode::invalid_argument, "%s: entry 0: expected 0, got %lld", name,
                         static_cast<long long>(cu(0)));
  }
  const std::int64_t batch = cu.extents[0] - 1;
  for (std::int64_t b = 0; b < batch; ++b) {
    if (cu(b + 1) >= cu(b)) continue;
    return Status::error(StatusCode::invalid_argument,
                         "%s: entry %lld: expected >= %lld (non-decreasing), got %lld", name,
                         static_cast<long long>(b + 1), static_cast<long long>(cu(b)),
                         static_cast<long long>(cu(b + 1)));
  }
  if (cu(batch) != total) {
    return Status::error(StatusCode::invalid_argument,
                         "%s: entry %lld: expected %lld (%s), got %lld", name,
                         static_cast<long long>(batch), static_cast<long long>(total), total_name,
                         static_cast<long long>(cu(batch)));
  }
  return Status::ok();
}

// Packed query offsets (check_offsets against q's dim 1); under a mask bounded on the right
// (causal), no entry with more queries than keys (its first queries would precede its keys: a
// chunk whose K/V were not appended).
template <class T, class KT, class VT>
Status check_query_offsets(const SdpaArgs<T, KT, VT>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(check_offsets("cu_seqlens_q", args.maybe_cu_seqlens_q,
                                                args.q.extents[1], "q's dim 1, total_q"));
  for (std::int64_t b = 0; args.mask.window_right >= 0 && b < args.batch(); ++b) {
    if (args.q_len(b) <= args.kv_len(b)) continue;
    return Status::error(StatusCode::invalid_argument,
                         "cu_seqlens_q: entry %lld: expected at most its %lld keys under a "
                         "right-bounded (causal) mask, got %lld queries",
                         static_cast<long long>(b), static_cast<long long>(args.kv_len(b)),
                         static_cast<long long>(args.q_len(b)));
  }
  return Status::ok();
}

// The optional per-row statistics views, by name.
template <class T, class KT, class VT>
std::array<std::pair<const char*, const TensorView<float, 4>*>, 5> stats_views(
    const SdpaArgs<T, KT, VT>& args) {
  return {{
      {"stats.sink_share", &args.stats.sink_share},
      {"stats.gate_mean", &args.stats.gate_mean},
      {"stats.gate_below_0_1", &args.stats.gate_below_0_1},
      {"stats.max_abs_before", &args.stats.max_abs_before},
      {"stats.max_abs_after", &args.stats.max_abs_after},
  }};
}

// q, k, v, out, gate, lse and the statistics: extents, strides and head dims.
template <class T, class KT, class VT>
Status validate_sdpa_shapes(const SdpaArgs<T, KT, VT>& args) {
  const auto& q = args.q.extents;
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_view("q", args.q, {args.packed() ? 1 : -1, -1, -1, -1, -1}, kQueryHeadDims));
  if (args.packed()) {
    GATED_ATTENTION_RETURN_IF_ERROR(check_offsets_view("cu_seqlens_q", args.maybe_cu_seqlens_q));
  }
  if (q[2] < 1) return Status::shape_mismatch("q", 2, "kv heads", 1, q[2]);
  if (q[3] < 1) {
    return Status::error(StatusCode::invalid_argument,
                         "q: dim 3 (query heads per kv head): expected >= 1 (query heads must be a "
                         "multiple of kv heads), got %lld",
                         static_cast<long long>(q[3]));
  }
  if (q[4] < 1 || q[4] > kMaxHeadDim) {
    return Status::error(StatusCode::invalid_argument, "q: dim 4 (dk): expected 1..%lld, got %lld",
                         static_cast<long long>(kMaxHeadDim), static_cast<long long>(q[4]));
  }
  constexpr std::array<const char*, 4> kv_dims = {"batch", "kv length", "kv heads", "dim"};
  constexpr std::array<const char*, 4> page_dims = {"pages", "page size", "kv heads", "dim"};
  const bool paged = args.paged();
  const auto& dims = paged ? page_dims : kv_dims;
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_view("k", args.k, {paged ? -1 : args.batch(), -1, q[2], q[4]}, dims));
  const std::int64_t rows = args.k.extents[0], kv_len = args.k.extents[1];
  if (paged) GATED_ATTENTION_RETURN_IF_ERROR(check_page_table_shape(args));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("v", args.v, {rows, kv_len, q[2], -1}, dims));
  const std::int64_t dv = args.v.extents[3];
  if (dv < 1 || dv > kMaxHeadDim) {
    return Status::error(StatusCode::invalid_argument, "v: dim 3 (dv): expected 1..%lld, got %lld",
                         static_cast<long long>(kMaxHeadDim), static_cast<long long>(dv));
  }
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_row_scales<KT>("k_scales", "K", args.maybe_k_scales, {rows, kv_len, q[2]}));
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_row_scales<VT>("v_scales", "V", args.maybe_v_scales, {rows, kv_len, q[2]}));
  const std::array<std::int64_t, 5> out_extents = {q[0], q[1], q[2], q[3], dv};
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("out", args.out, out_extents, kQueryHeadDims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_gate(args.gate, out_extents));
  if (args.maybe_lse.data != nullptr) {
    GATED_ATTENTION_RETURN_IF_ERROR(
        check_view("lse", args.maybe_lse, {q[0], q[1], q[2], q[3]}, kSdpaRowDims));
  }
  for (const auto& [name, view] : stats_views(args)) {
    if (view->data == nullptr) continue;
    GATED_ATTENTION_RETURN_IF_ERROR(
        check_view(name, *view, {q[0], q[1], q[2], q[3]}, kSdpaRowDims));
  }
  return Status::ok();
}

// n_sink, scale, mask windows, sinks and kv_lens.
template <class T, class KT, class VT>
Status validate_sdpa_values(const SdpaArgs<T, KT, VT>& args) {
  if (args.stats.n_sink < 0) {
    return Status::error(StatusCode::invalid_argument, "stats.n_sink: expected >= 0, got %lld",
                         static_cast<long long>(args.stats.n_sink));
  }
  if (!std::isfinite(args.scale)) {
    return Status::error(StatusCode::invalid_argument, "scale: expected a finite value, got %g",
                         static_cast<double>(args.scale));
  }
  if (args.mask.window_left < -1 || args.mask.window_right < -1) {
    return Status::error(StatusCode::invalid_argument,
                         "mask: window sizes must be >= 0 or -1 (unbounded), got left %lld, right "
                         "%lld",
                         static_cast<long long>(args.mask.window_left),
                         static_cast<long long>(args.mask.window_right));
  }
  if (args.maybe_sink_logits != nullptr && args.softmax_plus_one) {
    return Status::error(StatusCode::invalid_argument,
                         "sinks: softmax_plus_one and maybe_sink_logits are exclusive");
  }
  if (args.paged()) GATED_ATTENTION_RETURN_IF_ERROR(check_page_table_values(args));
  const std::int64_t kv_len = args.k.extents[1];
  for (std::int64_t b = 0; !args.paged() && args.maybe_kv_lens && b < args.batch(); ++b) {
    const std::int64_t n = args.maybe_kv_lens[b];
    if (n < 0 || n > kv_len) {
      return Status::error(StatusCode::invalid_argument,
                           "kv_lens: entry %lld: expected 0..%lld (kv length), got %lld",
                           static_cast<long long>(b), static_cast<long long>(kv_len),
                           static_cast<long long>(n));
    }
  }
  if (args.packed()) return check_query_offsets(args);
  return Status::ok();
}

// Every written view (out, lse, statistics) addresses each element once and is disjoint from
// the inputs and from the other written views: tasks write them while others read the inputs.
template <class T, class KT, class VT>
Status validate_sdpa_written(const SdpaArgs<T, KT, VT>& args) {
  const auto check_written = [&](const char* name, const auto& view,
                                 const auto& dim_names) -> Status {
    GATED_ATTENTION_RETURN_IF_ERROR(check_distinct_elements(name, view, dim_names));
    GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap(name, view, "q", args.q));
    GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap(name, view, "k", args.k));
    GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap(name, view, "v", args.v));
    GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap(name, view, "k_scales", args.maybe_k_scales));
    GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap(name, view, "v_scales", args.maybe_v_scales));
    GATED_ATTENTION_RETURN_IF_ERROR(
        check_no_overlap(name, view, "page_table", args.maybe_page_table));
    GATED_ATTENTION_RETURN_IF_ERROR(
        check_no_overlap(name, view, "cu_seqlens_q", args.maybe_cu_seqlens_q));
    return check_no_overlap(name, view, "gate", args.gate.values);
  };
  GATED_ATTENTION_RETURN_IF_ERROR(check_written("out", args.out, kQueryHeadDims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_written("lse", args.maybe_lse, kSdpaRowDims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap("lse", args.maybe_lse, "out", args.out));
  const auto stats = stats_views(args);
  for (std::size_t i = 0; i < stats.size(); ++i) {
    const auto& [name, view] = stats[i];
    GATED_ATTENTION_RETURN_IF_ERROR(check_written(name, *view, kSdpaRowDims));
    GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap(name, *view, "out", args.out));
    GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap(name, *view, "lse", args.maybe_lse));
    for (std::size_t j = 0; j < i; ++j) {
      GATED_ATTENTION_RETURN_IF_ERROR(
          check_no_overlap(name, *view, stats[j].first, *stats[j].second));
    }
  }
  return Status::ok();
}

// All but the row scales' values: what run() checks before its tasks start (each task checks
// the scales it reads: key_scales_good).
template <class T, class KT, class VT>
Status validate_sdpa_call(const SdpaArgs<T, KT, VT>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate_sdpa_shapes(args));
  GATED_ATTENTION_RETURN_IF_ERROR(validate_sdpa_values(args));
  return validate_sdpa_written(args);
}

}  // namespace detail

// Every check, the row scales below each entry's kv_lens included.
template <class T, class KT, class VT>
Status validate(const SdpaArgs<T, KT, VT>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(detail::validate_sdpa_call(args));
  return detail::check_all_row_scales(args);
}

}  // namespace gated_attention
