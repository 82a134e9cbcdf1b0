// How one SDPA call is cut into tasks and what scratch each takes. ISA-independent: every path
// runs the same plan, so workspace_size() does not depend on the path taken.
//
// A unit is (batch entry, KV head, block of query positions): its rows are the block's positions
// times the KV head's group of query heads, stacked so each K/V tile is read once for all of them.
// A unit's visible keys may be split into `splits` tasks (decode, short chunks) whose partial
// results phase 2 merges by log-sum-exp.
#pragma once

#include <algorithm>
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
// Paged K/V: pages of at least this many keys are read in place, each block ending where its page
// does; smaller pages are gathered block by block into the worker's scratch (docs/design.md,
// "Paged K/V").
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

struct SdpaPlan {
  std::int64_t batch = 0, q_len = 0, kv_len = 0, kv_heads = 0, group = 0, dk = 0, dv = 0;
  SdpaRegime regime = SdpaRegime::prefill;
  std::int64_t q_block = 0;     // query positions per unit
  std::int64_t unit_heads = 1;  // KV heads per unit
  std::int64_t rows = 0;        // q_block * group
  std::int64_t row_stride = 0;  // rows padded to kRowPadding: stride of the row-indexed tiles
  std::int64_t dv_padded = 0;
  std::int64_t num_q_blocks = 0;
  std::int64_t units = 0;
  std::int64_t splits = 1;
  std::int64_t tasks = 0;
  std::int64_t page_size = 0;  // paged K/V: keys per page; 0: contiguous
  bool gathers = false;        // paged K/V gathered per block (pages below the regime's minimum)
  int num_workers = 1;

  int num_phases() const { return splits > 1 ? 2 : 1; }
};

inline SdpaPlan make_sdpa_plan(const SdpaShape& shape, int num_workers) {
  SdpaPlan p;
  p.batch = shape.batch;
  p.q_len = shape.q_len;
  p.kv_heads = shape.kv_heads;
  p.group = shape.group;
  p.dk = shape.dk;
  p.kv_len = shape.kv_len;
  p.dv = shape.dv;
  p.num_workers = std::max(1, num_workers);
  p.q_block = std::max<std::int64_t>(1, std::min(p.q_len, kTargetRows / p.group));
  p.rows = p.q_block * p.group;
  // An odd number of cache lines: a column of a [kKvBlock, row_stride] tile (one line per key)
  // then spreads over every L1 set instead of a few.
  p.row_stride = round_up(p.rows, kRowPadding);
  if (p.row_stride / kRowPadding % 2 == 0) p.row_stride += kRowPadding;
  p.dv_padded = round_up(p.dv, kRowPadding);
  p.num_q_blocks = p.q_len > 0 ? (p.q_len + p.q_block - 1) / p.q_block : 0;
  p.regime = p.rows <= kDecodeMaxRows ? SdpaRegime::decode : SdpaRegime::prefill;
  p.unit_heads = p.regime == SdpaRegime::decode ? p.kv_heads : 1;
  p.page_size = shape.page_size;
  const std::int64_t in_place_pages =
      p.regime == SdpaRegime::decode ? kDecodeMinPageInPlace : kPrefillMinPageInPlace;
  p.gathers = p.page_size > 0 && p.page_size < in_place_pages;
  p.units = p.batch * (p.kv_heads / p.unit_heads) * p.num_q_blocks;
  // Split the keys when there are too few units to keep every worker busy.
  if (p.num_workers > 1 && p.units > 0 && p.units < 2 * p.num_workers) {
    const std::int64_t wanted = (2 * p.num_workers + p.units - 1) / p.units;
    p.splits = std::max<std::int64_t>(1, std::min(wanted, p.kv_len / kMinKeysPerSplit));
  }
  p.tasks = p.units * p.splits;
  return p;
}

template <class T, class KT, class VT>
SdpaPlan make_sdpa_plan(const SdpaArgs<T, KT, VT>& args, int num_workers) {
  return make_sdpa_plan(SdpaShape::of(args), num_workers);
}

// Scratch of one worker, and the partial results of split units.
struct SdpaWorkerScratch {
  // Per unit head h, at offset h * (size of one head's array):
  float* q_t = nullptr;           // [dk_padded, row_stride] scaled queries, transposed
  float* scores = nullptr;        // [heads * kKvBlock, row_stride] S^T, then P^T: one block,
                                  // or (decode) each head's block of Tuning::kDecodeBlock keys
                                  // in turn, rows packed 4 or 8 to a key
  float* out = nullptr;           // [row_stride, dv_padded] unnormalised output (per head)
  float* kv_block = nullptr;      // one V block packed by column, [dv_padded / lanes, kKvBlock,
                                  // lanes] with columns kPackedColumnPadding floats apart; or
                                  // (prefill) one K block of another type widened, [kKvBlock, dk]
  float* max = nullptr;           // [row_stride] running max, log2 units (per head)
  float* sum = nullptr;           // [row_stride] running sum of exp2(s - max) (per head)
  float* alpha = nullptr;         // [row_stride] rescale factors of the current block (per head)
  float* sink = nullptr;          // [row_stride] probability mass on the sink keys (per head)
  void* k_rows = nullptr;         // gathered pages: one block of K [kKvBlock, heads, dk] and of V
  void* v_rows = nullptr;         //   [kKvBlock, heads, dv] (elements of 4 bytes at most)
  float* k_row_scales = nullptr;  //   and their row scales [kKvBlock, heads]
  float* v_row_scales = nullptr;
  std::int64_t* key_lo = nullptr;  // [row_stride] first visible key per row
  std::int64_t* key_hi = nullptr;  // [row_stride] last visible key per row (< key_lo: none)
  float* block_lo = nullptr;       // [row_stride] key_lo, then key_hi, relative to a masked
  float* block_hi = nullptr;       //   block's first key and clamped to it: small exact floats
};

struct SdpaLayout {
  SdpaWorkerScratch* workers = nullptr;  // [num_workers]
  float* partial_out = nullptr;          // [tasks, unit_heads, row_stride, dv_padded] when split
  float* partial_max = nullptr;          // [tasks, unit_heads, row_stride]
  float* partial_sum = nullptr;          // [tasks, unit_heads, row_stride]
  float* partial_sink = nullptr;         // [tasks, unit_heads, row_stride]
  bool complete = false;                 // every allocation succeeded
};

// Carves the plan's scratch from `ws`; in counting mode it only sizes it. The table of worker
// scratch lives in `ws`: with only_worker >= 0 only that worker's entry is written (run_phase():
// every worker carves the same workspace at the same time, and reads only its own entry).
inline SdpaLayout carve_sdpa_layout(Workspace& ws, const SdpaPlan& p, int only_worker = -1) {
  SdpaLayout layout;
  layout.workers = ws.allocate<SdpaWorkerScratch>(static_cast<std::size_t>(p.num_workers));
  const auto rs = static_cast<std::size_t>(p.row_stride);
  const auto heads = static_cast<std::size_t>(p.unit_heads);
  for (int w = 0; w < p.num_workers; ++w) {
    SdpaWorkerScratch s;
    s.q_t = ws.allocate<float>(heads * static_cast<std::size_t>(round_up(p.dk, kRowPadding)) * rs);
    s.scores = ws.allocate<float>(heads * static_cast<std::size_t>(kKvBlock) * rs);
    s.out = ws.allocate<float>(heads * rs * static_cast<std::size_t>(p.dv_padded));
    s.kv_block = ws.allocate<float>(  // dv_padded columns at most (one lane), or dk
        static_cast<std::size_t>((kKvBlock + kPackedColumnPadding) *
                                 std::max(p.dv_padded, round_up(p.dk, kRowPadding))));
    s.max = ws.allocate<float>(heads * rs);
    s.sum = ws.allocate<float>(heads * rs);
    s.alpha = ws.allocate<float>(heads * rs);
    s.sink = ws.allocate<float>(heads * rs);
    if (p.gathers) {
      const auto block_rows = heads * static_cast<std::size_t>(kKvBlock);
      s.k_rows = ws.allocate<float>(block_rows * static_cast<std::size_t>(p.dk));
      s.v_rows = ws.allocate<float>(block_rows * static_cast<std::size_t>(p.dv));
      s.k_row_scales = ws.allocate<float>(block_rows);
      s.v_row_scales = ws.allocate<float>(block_rows);
    }
    s.key_lo = ws.allocate<std::int64_t>(rs);
    s.key_hi = ws.allocate<std::int64_t>(rs);
    s.block_lo = ws.allocate<float>(rs);
    s.block_hi = ws.allocate<float>(rs);
    if (layout.workers != nullptr && (only_worker < 0 || only_worker == w)) layout.workers[w] = s;
  }
  if (p.splits > 1) {
    const auto partials = static_cast<std::size_t>(p.tasks) * heads;
    layout.partial_out = ws.allocate<float>(partials * rs * static_cast<std::size_t>(p.dv_padded));
    layout.partial_max = ws.allocate<float>(partials * rs);
    layout.partial_sum = ws.allocate<float>(partials * rs);
    layout.partial_sink = ws.allocate<float>(partials * rs);
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

struct SdpaUnit {
  std::int64_t batch, kv_head, q_block;  // kv_head: the first of the unit's unit_heads heads
};

// Unit index -> (batch entry, KV head, query block), heaviest (latest) query blocks first so that
// dynamic scheduling balances causal work.
inline SdpaUnit unit_at(const SdpaPlan& p, std::int64_t unit) {
  const std::int64_t head_groups = p.kv_heads / p.unit_heads;
  const std::int64_t per_block = p.batch * head_groups;
  const std::int64_t rest = unit % per_block;
  return {rest / head_groups, rest % head_groups * p.unit_heads,
          p.num_q_blocks - 1 - unit / per_block};
}

}  // namespace gated_attention::kernels

namespace gated_attention::kernels {

// What every task of one call reads: passed to the ISA's task functions through the Executor.
template <class T, class KT, class VT>
struct SdpaContext {
  const SdpaArgs<T, KT, VT>* args = nullptr;
  const SdpaPlan* plan = nullptr;
  const SdpaLayout* layout = nullptr;
  float scale_log2 = 0.0f;  // logit scale * log2(e): scores are kept in log2 units
};

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

}  // namespace gated_attention::kernels
