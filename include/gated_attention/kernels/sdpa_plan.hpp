// How one SDPA call is cut into tasks and what scratch each takes. ISA-independent: every path
// runs the same plan, so workspace_size() does not depend on the path taken.
//
// A unit is (batch entry, KV head, block of query positions): its rows are the block's positions
// times the KV head's group of query heads, stacked so each K/V tile is read once for all of them.
// A unit's visible keys may be split into `splits` tasks (decode, short chunks) whose partial
// results phase 2 merges by log-sum-exp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "gated_attention/core/workspace.hpp"
#include "gated_attention/ops/sdpa_args.hpp"

namespace gated_attention::kernels {

inline constexpr std::int64_t kRowPadding = 16;   // rows padded to the widest vector
inline constexpr std::int64_t kTargetRows = 256;  // rows per unit: fewer K/V passes from L3
inline constexpr std::int64_t kKvBlock = 64;      // keys per prefill block: S^T tile and P.V reuse
// Floats after each column of a packed V block, so that the columns lie an odd number of cache
// lines apart and packing a V row stores to every L1 set.
inline constexpr std::int64_t kPackedColumnPadding = 16;
inline constexpr std::int64_t kMinKeysPerSplit = 256;
// Units of at most this many rows (positions x group) take the decode regime.
inline constexpr std::int64_t kDecodeMaxRows = 8;
// Paged K/V: pages of at least this many keys are read as strided runs, each block ending where
// its page does; smaller pages are read through tables of rows (decode) or gathered block by block
// into the worker's scratch (prefill, and decode V of a runtime dv) (docs/design.md, "Paged K/V").
inline constexpr std::int64_t kPrefillMinPageInPlace = kKvBlock;
inline constexpr std::int64_t kDecodeMinPageInPlace = 16;

// How a unit's rows meet the keys; decided once per call by the plan.
enum class SdpaRegime : std::uint8_t {
  // Many rows of one KV head: S^T = K q^T with the rows along vector lanes, so the softmax is
  // vertical; V blocks packed once for every row block.
  prefill,
  // Few rows of every KV head of a batch entry: dot products along d, V read in place, so that
  // each K/V row is read whole, in one sequential stream through the cache.
  decode,
};

constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) {
  return (x + m - 1) / m * m;
}

// A head dim: the kernel's compile-time kDim where it is specialised for one (> 0), so that loops
// over it have a constant trip count; else the call's `runtime` value.
template <int kDim>
constexpr std::int64_t head_dim(std::int64_t runtime) {
  return kDim > 0 ? kDim : runtime;
}

// How the units of one regime hold their rows.
struct UnitGeometry {
  SdpaRegime regime = SdpaRegime::prefill;
  std::int64_t q_block = 0;     // query positions per unit, at most
  std::int64_t heads = 1;       // KV heads per unit
  std::int64_t rows = 0;        // q_block * group
  std::int64_t row_stride = 0;  // rows padded to kRowPadding: stride of the row-indexed tiles
  bool gathers = false;         // pages below the regime's minimum: gathered or read by tables

  std::int64_t head_slots() const { return heads * row_stride; }  // per-row arrays of all heads
};

// Units of one call. With q_len per entry, every unit takes one regime, entries x KV heads x query
// blocks in an order computed from the index. Packed queries: each entry takes the regime of its
// own q_len, prefill units (one KV head, blocks of q_len) first, then decode units (every KV head,
// all of q_len; the longest keys first), through the per-call table of
// SdpaWorkerScratch::unit_offsets.
struct SdpaPlan {
  std::int64_t batch = 0, q_len = 0, kv_len = 0, kv_heads = 0, group = 0, dk = 0, dv = 0;
  std::int64_t dv_padded = 0;
  bool packed = false;  // q_len: total_q, entries' lengths from cu_seqlens_q
  SdpaRegime regime{};  // every unit's, with q_len per entry
  UnitGeometry decode, prefill;
  std::int64_t num_q_blocks = 0;  // with q_len per entry
  std::int64_t units = 0;
  std::int64_t prefill_units = 0;  // packed: units [0, prefill_units) are prefill
  // Units [unsplit_units, units) have their keys split into `splits` tasks each, whose partial
  // results phase 2 merges; the others are one task each.
  std::int64_t unsplit_units = 0;
  std::int64_t splits = 1;
  std::int64_t page_size = 0;  // paged K/V: keys per page; 0: contiguous
  int num_workers = 1;

  int num_phases() const { return splits > 1 ? 2 : 1; }
  const UnitGeometry& geometry(SdpaRegime r) const {
    return r == SdpaRegime::decode ? decode : prefill;
  }
  bool uses(SdpaRegime r) const { return packed ? geometry(r).q_block > 0 : regime == r; }
  // The largest head_slots(), row_stride and heads of the geometries in use: scratch sizes.
  std::int64_t max_head_slots() const {
    return std::max(uses(SdpaRegime::decode) ? decode.head_slots() : 0,
                    uses(SdpaRegime::prefill) ? prefill.head_slots() : 0);
  }
  std::int64_t max_row_stride() const {
    return std::max(uses(SdpaRegime::decode) ? decode.row_stride : 0,
                    uses(SdpaRegime::prefill) ? prefill.row_stride : 0);
  }
  std::int64_t max_heads() const {
    return std::max(uses(SdpaRegime::decode) ? decode.heads : 0,
                    uses(SdpaRegime::prefill) ? prefill.heads : 0);
  }
  bool gathers() const {
    return (uses(SdpaRegime::decode) && decode.gathers) ||
           (uses(SdpaRegime::prefill) && prefill.gathers);
  }
  std::int64_t split_units() const { return units - unsplit_units; }
  std::int64_t tasks() const { return unsplit_units + split_units() * splits; }
};

// The geometry of `regime`'s units of at most q_block positions (0: none).
inline UnitGeometry make_unit_geometry(const SdpaShape& shape, SdpaRegime regime,
                                       std::int64_t q_block) {
  UnitGeometry g;
  g.regime = regime;
  g.q_block = q_block;
  g.heads = regime == SdpaRegime::decode ? shape.kv_heads : 1;
  g.rows = q_block * shape.group;
  // An odd number of cache lines: a column of a [kKvBlock, row_stride] tile (one line per key)
  // then spreads over every L1 set instead of a few.
  g.row_stride = round_up(g.rows, kRowPadding);
  if (g.row_stride / kRowPadding % 2 == 0) g.row_stride += kRowPadding;
  const std::int64_t in_place_pages =
      regime == SdpaRegime::decode ? kDecodeMinPageInPlace : kPrefillMinPageInPlace;
  g.gathers = shape.page_size > 0 && shape.page_size < in_place_pages;
  return g;
}

// Key splits of `units` units: enough tasks to keep every worker busy, at least kMinKeysPerSplit
// keys each.
inline std::int64_t key_splits(std::int64_t units, std::int64_t kv_len, int num_workers) {
  if (num_workers <= 1 || units <= 0 || units >= 2 * num_workers) return 1;
  const std::int64_t wanted = (2 * num_workers + units - 1) / units;
  return std::max<std::int64_t>(1, std::min(wanted, kv_len / kMinKeysPerSplit));
}

// The plan of a call with q_len per entry: one regime for every unit.
inline void plan_uniform_units(SdpaPlan& p, const SdpaShape& shape) {
  const std::int64_t q_block = std::max<std::int64_t>(1, std::min(p.q_len, kTargetRows / p.group));
  p.regime = q_block * p.group <= kDecodeMaxRows ? SdpaRegime::decode : SdpaRegime::prefill;
  (p.regime == SdpaRegime::decode ? p.decode : p.prefill) =
      make_unit_geometry(shape, p.regime, q_block);
  p.num_q_blocks = p.q_len > 0 ? (p.q_len + q_block - 1) / q_block : 0;
  p.units = p.batch * (p.kv_heads / p.geometry(p.regime).heads) * p.num_q_blocks;
  p.splits = key_splits(p.units, p.kv_len, p.num_workers);
  p.unsplit_units = 0;
}

// The plan of packed queries from the shape alone (so the workspace and phases do not depend on
// the entries' lengths): until count_packed_units() counts them, the units are the most that
// split (one decode unit per entry). Only decode units split, and only when there are fewer
// entries than twice the workers.
inline void plan_packed_units(SdpaPlan& p, const SdpaShape& shape) {
  p.decode = make_unit_geometry(shape, SdpaRegime::decode, kDecodeMaxRows / p.group);
  p.prefill = make_unit_geometry(shape, SdpaRegime::prefill,
                                 std::max<std::int64_t>(1, kTargetRows / p.group));
  p.splits = p.decode.q_block > 0 ? key_splits(p.batch, p.kv_len, p.num_workers) : 1;
  p.units = p.batch;
  p.prefill_units = p.unsplit_units = 0;
}

inline SdpaPlan make_sdpa_plan(const SdpaShape& shape, int num_workers) {
  SdpaPlan p;
  p.batch = shape.batch;
  p.q_len = shape.q_len;
  p.kv_heads = shape.kv_heads;
  p.group = shape.group;
  p.dk = shape.dk;
  p.kv_len = shape.kv_len;
  p.dv = shape.dv;
  p.dv_padded = round_up(p.dv, kRowPadding);
  p.page_size = shape.page_size;
  p.packed = shape.packed;
  p.num_workers = std::max(1, num_workers);
  if (p.packed) {
    plan_packed_units(p, shape);
  } else {
    plan_uniform_units(p, shape);
  }
  return p;
}

// The regime of a packed entry of q_len queries.
inline SdpaRegime packed_regime(const SdpaPlan& p, std::int64_t q_len) {
  return q_len <= p.decode.q_block ? SdpaRegime::decode : SdpaRegime::prefill;
}

// Units of a packed entry of q_len queries, in its regime.
inline std::int64_t packed_units_of(const SdpaPlan& p, std::int64_t q_len) {
  if (q_len == 0) return 0;
  if (packed_regime(p, q_len) == SdpaRegime::decode) return 1;
  return p.kv_heads * ((q_len + p.prefill.q_block - 1) / p.prefill.q_block);
}

// A packed plan's units from the entries' lengths; fills offsets [2 * (batch + 1)]: the first
// prefill unit of each entry (and the total), so unit_at() finds a prefill unit's entry by
// bisection, then the decoding entries, longest keys first (the longest task first: dynamic
// scheduling then ends the call evenly).
template <class T, class KT, class VT>
void count_packed_units(SdpaPlan& p, const SdpaArgs<T, KT, VT>& args, std::int64_t* offsets) {
  std::int64_t* prefill = offsets;
  std::int64_t* decoding = offsets + p.batch + 1;
  std::int64_t decode_units = 0;
  prefill[0] = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t q_len = args.q_len(b), units = packed_units_of(p, q_len);
    const bool decodes = units > 0 && packed_regime(p, q_len) == SdpaRegime::decode;
    prefill[b + 1] = prefill[b] + (decodes ? 0 : units);
    if (decodes) decoding[decode_units++] = b;
  }
  std::sort(decoding, decoding + decode_units, [&](std::int64_t x, std::int64_t y) {
    return args.kv_len(x) != args.kv_len(y) ? args.kv_len(x) > args.kv_len(y) : x < y;
  });
  p.prefill_units = prefill[p.batch];
  p.units = p.prefill_units + decode_units;
  p.unsplit_units = p.prefill_units;
}

template <class T, class KT, class VT>
SdpaPlan make_sdpa_plan(const SdpaArgs<T, KT, VT>& args, int num_workers) {
  return make_sdpa_plan(SdpaShape::of(args), num_workers);
}

// Scratch of one worker, and the partial results of split units. Per-row arrays hold a unit's
// heads one after another, head h at h * row_stride (its geometry's); sized for the largest
// geometry in use (SdpaPlan::max_head_slots(): "slots").
struct SdpaWorkerScratch {
  float* q_t = nullptr;           // [heads][dk_padded, row_stride] scaled queries, transposed
  float* scores = nullptr;        // [heads * kKvBlock, row_stride] S^T, then P^T: one block,
                                  // or (decode) each head's block of Tuning::kDecodeBlock keys
                                  // in turn, rows packed 4 or 8 to a key
  float* out = nullptr;           // [heads][row_stride, dv_padded] unnormalised output
  float* kv_block = nullptr;      // one V block packed by column, [dv_padded / lanes, kKvBlock,
                                  // lanes] with columns kPackedColumnPadding floats apart; or
                                  // (prefill) one K block of another type widened, [kKvBlock, dk]
  float* max = nullptr;           // [heads][row_stride] running max, log2 units
  float* sum = nullptr;           // [heads][row_stride] running sum of exp2(s - max)
  float* alpha = nullptr;         // [heads][row_stride] rescale factors of the current block
  float* sink = nullptr;          // [heads][row_stride] probability mass on the sink keys
  void* k_rows = nullptr;         // gathered pages: one block of K [kKvBlock, heads, dk] and of V
  void* v_rows = nullptr;         //   [kKvBlock, heads, dv] (elements of 4 bytes at most)
  float* k_row_scales = nullptr;  //   and their row scales [kKvBlock, heads]
  float* v_row_scales = nullptr;
  std::int64_t* key_lo = nullptr;  // [row_stride] first visible key per row
  std::int64_t* key_hi = nullptr;  // [row_stride] last visible key per row (< key_lo: none)
  float* block_lo = nullptr;       // [row_stride] key_lo, then key_hi, relative to a masked
  float* block_hi = nullptr;       //   block's first key and clamped to it: small exact floats
  // Packed queries: count_packed_units()'s offsets [2 * (batch + 1)], written by the worker that
  // plans the call (run(): the caller's, as worker 0; run_phase(): each worker its own).
  std::int64_t* unit_offsets = nullptr;
};

struct SdpaLayout {
  SdpaWorkerScratch* workers = nullptr;  // [num_workers]
  // Per split task (split unit, split): [slots, dv_padded], and [slots] each
  float* partial_out = nullptr;
  float* partial_max = nullptr;
  float* partial_sum = nullptr;
  float* partial_sink = nullptr;
  bool complete = false;  // every allocation succeeded
};

// Carves the plan's scratch from `ws`; in counting mode it only sizes it. The table of worker
// scratch lives in `ws`: with only_worker >= 0 only that worker's entry is written (run_phase():
// every worker carves the same workspace at the same time, and reads only its own entry).
inline SdpaLayout carve_sdpa_layout(Workspace& ws, const SdpaPlan& p, int only_worker = -1) {
  SdpaLayout layout;
  layout.workers = ws.allocate<SdpaWorkerScratch>(static_cast<std::size_t>(p.num_workers));
  const auto slots = static_cast<std::size_t>(p.max_head_slots());
  const auto rs = static_cast<std::size_t>(p.max_row_stride());
  for (int w = 0; w < p.num_workers; ++w) {
    SdpaWorkerScratch s;
    s.q_t = ws.allocate<float>(slots * static_cast<std::size_t>(round_up(p.dk, kRowPadding)));
    s.scores = ws.allocate<float>(slots * static_cast<std::size_t>(kKvBlock));
    s.out = ws.allocate<float>(slots * static_cast<std::size_t>(p.dv_padded));
    s.kv_block = ws.allocate<float>(  // dv_padded columns at most (one lane), or dk
        static_cast<std::size_t>((kKvBlock + kPackedColumnPadding) *
                                 std::max(p.dv_padded, round_up(p.dk, kRowPadding))));
    s.max = ws.allocate<float>(slots);
    s.sum = ws.allocate<float>(slots);
    s.alpha = ws.allocate<float>(slots);
    s.sink = ws.allocate<float>(slots);
    if (p.gathers()) {
      const auto block_rows = static_cast<std::size_t>(p.max_heads() * kKvBlock);
      s.k_rows = ws.allocate<float>(block_rows * static_cast<std::size_t>(p.dk));
      s.v_rows = ws.allocate<float>(block_rows * static_cast<std::size_t>(p.dv));
      s.k_row_scales = ws.allocate<float>(block_rows);
      s.v_row_scales = ws.allocate<float>(block_rows);
    }
    s.key_lo = ws.allocate<std::int64_t>(rs);
    s.key_hi = ws.allocate<std::int64_t>(rs);
    s.block_lo = ws.allocate<float>(rs);
    s.block_hi = ws.allocate<float>(rs);
    if (p.packed)
      s.unit_offsets = ws.allocate<std::int64_t>(2 * static_cast<std::size_t>(p.batch + 1));
    if (layout.workers != nullptr && (only_worker < 0 || only_worker == w)) layout.workers[w] = s;
  }
  if (p.splits > 1) {
    const auto partials = static_cast<std::size_t>(p.split_units() * p.splits) * slots;
    layout.partial_out = ws.allocate<float>(partials * static_cast<std::size_t>(p.dv_padded));
    layout.partial_max = ws.allocate<float>(partials);
    layout.partial_sum = ws.allocate<float>(partials);
    layout.partial_sink = ws.allocate<float>(partials);
  }
  layout.complete = !ws.is_counting() && !ws.exhausted();
  return layout;
}

// Bytes of workspace a plan needs: the same carving in counting mode.
inline std::size_t sdpa_workspace_bytes(const SdpaPlan& p) {
  Workspace counting = Workspace::counting();
  carve_sdpa_layout(counting, p);
  return counting.bytes_needed();
}

// A unit: query positions [i0, i0 + nq) of entry `batch` (of q_len), for `geometry->heads` KV
// heads from kv_head.
struct SdpaUnit {
  std::int64_t batch, kv_head, i0, nq, q_len;
  const UnitGeometry* geometry;
};

// Unit `unit` of a call with q_len per entry: heaviest (latest) query blocks first, so that dynamic
// scheduling balances causal work.
inline SdpaUnit uniform_unit_at(const SdpaPlan& p, std::int64_t unit) {
  const UnitGeometry& g = p.geometry(p.regime);
  const std::int64_t head_groups = p.kv_heads / g.heads;
  const std::int64_t per_block = p.batch * head_groups;
  const std::int64_t rest = unit % per_block;
  const std::int64_t i0 = (p.num_q_blocks - 1 - unit / per_block) * g.q_block;
  return {rest / head_groups,
          rest % head_groups * g.heads,
          i0,
          std::min(g.q_block, p.q_len - i0),
          p.q_len,
          &g};
}

// Unit `unit` of packed queries (offsets: count_packed_units()'s): the prefill units of every
// entry, each entry's latest query blocks first, then one decode unit per decoding entry, the
// longest first.
template <class T, class KT, class VT>
SdpaUnit packed_unit_at(const SdpaPlan& p, const SdpaArgs<T, KT, VT>& args,
                        const std::int64_t* offsets, std::int64_t unit) {
  if (unit >= p.prefill_units) {
    const std::int64_t b = offsets[p.batch + 1 + unit - p.prefill_units];
    return {b, 0, 0, args.q_len(b), args.q_len(b), &p.decode};
  }
  // The entry whose units [offsets[b], offsets[b + 1]) hold `unit`.
  const std::int64_t b = std::upper_bound(offsets, offsets + p.batch + 1, unit) - offsets - 1;
  const std::int64_t q_len = args.q_len(b);
  const std::int64_t local = unit - offsets[b], qb = p.prefill.q_block;
  const std::int64_t i0 = ((q_len + qb - 1) / qb - 1 - local / p.kv_heads) * qb;
  return {b, local % p.kv_heads, i0, std::min(qb, q_len - i0), q_len, &p.prefill};
}

// The output rows of one KV head of a unit: row r is head r % group of its query i0 + r / group.
template <class T, class KT, class VT>
struct HeadRows {
  const SdpaArgs<T, KT, VT>& args;
  const SdpaUnit& unit;
  std::int64_t kv_head, group;

  QueryAt query(std::int64_t r) const { return args.query_at(unit.batch, unit.i0 + r / group); }
  std::int64_t head(std::int64_t r) const { return r % group; }
};

// A task: unit `unit`'s keys, or split `split` of them (split_index: its partial result's).
struct SdpaTask {
  std::int64_t unit, split, split_index;
  bool split_unit;
};

inline SdpaTask task_at(const SdpaPlan& p, std::int64_t task) {
  if (task < p.unsplit_units) return {task, 0, 0, false};
  const std::int64_t rest = task - p.unsplit_units;
  return {p.unsplit_units + rest / p.splits, rest % p.splits, rest, p.splits > 1};
}

}  // namespace gated_attention::kernels

namespace gated_attention::kernels {

// What every task of one call reads: passed to the ISA's task functions through the Executor.
template <class T, class KT, class VT>
struct SdpaContext {
  const SdpaArgs<T, KT, VT>* args = nullptr;
  const SdpaPlan* plan = nullptr;
  const SdpaLayout* layout = nullptr;
  const std::int64_t* unit_offsets = nullptr;  // packed queries: count_packed_units()'s
  float scale_log2 = 0.0f;  // logit scale * log2(e): scores are kept in log2 units
  // Set by a task that found a bad int8 row scale among its keys' (and computed nothing).
  mutable std::atomic<bool> bad_row_scales{false};

  SdpaUnit unit_at(std::int64_t unit) const {
    return plan->packed ? packed_unit_at(*plan, *args, unit_offsets, unit)
                        : uniform_unit_at(*plan, unit);
  }
};

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

}  // namespace gated_attention::kernels
