// Software prefetch for the kernels: memory the hardware prefetcher does not follow (rows strided
// by heads) or does not reach in time (the next block of a streamed KV cache).
#pragma once

#include <cstdint>

#include "gated_attention/core/config.hpp"

namespace gated_attention::kernels {

inline constexpr std::int64_t kCacheLine = 64;  // bytes

// Starts fetching `rows` rows of `bytes` bytes into the cache, the first at `first`, each
// `stride_bytes` after the previous one; kForWrite: lines about to be written. No effect where
// the compiler has no prefetch builtin. Always inlined: GCC 12 finds a prefetch-only function
// free of side effects and drops calls to it that stay out of line (as between target regions).
template <bool kForWrite = false>
GATED_ATTENTION_ALWAYS_INLINE void prefetch_rows(const void* first, std::int64_t stride_bytes,
                                                 std::int64_t rows, std::int64_t bytes) {
#if defined(__GNUC__) || defined(__clang__)
  const char* row = static_cast<const char*>(first);
  for (std::int64_t r = 0; r < rows; ++r, row += stride_bytes) {
    for (std::int64_t offset = 0; offset < bytes; offset += kCacheLine)
      __builtin_prefetch(row + offset, kForWrite ? 1 : 0);
  }
#else
  (void)first, (void)stride_bytes, (void)rows, (void)bytes;
#endif
}

// Starts fetching the line that holds p, hinted for L2 (Intel keeps it out of L1; Zen 3 fills L1
// too): data a later phase reads, fetched while the current one works (a KV cache streamed faster
// than the hardware prefetcher alone brings it in). On Zen 4 the non-temporal hint halved decode's
// speed (llama8b_decode_8k, 1 thread: decode_read_share 0.49-0.53 against 0.98-1.02); T2 was
// no different from T1.
GATED_ATTENTION_ALWAYS_INLINE void prefetch_line_l2(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 2);
#else
  (void)p;
#endif
}

// Rows [0, rows) of `bytes` bytes of a strided array, to be fetched. Default-constructed: none.
struct RowPrefetch {
  const void* first = nullptr;
  std::int64_t stride_bytes = 0, rows = 0, bytes = 0;

  // Rows [from, from + count), whole.
  GATED_ATTENTION_ALWAYS_INLINE void fetch(std::int64_t from, std::int64_t count) const {
    if (from >= rows) return;
    prefetch_rows(static_cast<const char*>(first) + from * stride_bytes, stride_bytes,
                  from + count < rows ? count : rows - from, bytes);
  }
  std::int64_t lines_per_row() const { return (bytes + kCacheLine - 1) / kCacheLine; }
};

// Walks the lines of a RowPrefetch a few at a time, column by column (line j of every row, then
// line j + 1): a phase's tiles fetch what the next phase reads in even shares, so that the fetches
// spread over the phase. Row by row instead was 1.12-1.16x slower on Zen 3 (qwen3next_decode_32k,
// llama8b_decode_8k: the rows are KV cache rows a power of two apart). On Zen 4 (decode_read_share,
// llama8b_decode_8k, 1 thread, against 0.85-1.00 in the same runs), these were slower: tiles
// walking a register copy of the cursor, 0.79-0.85, though 1-3% faster with K/V in L3; each tile
// fetching whole rows of its own, 0.75-0.81; only each row's first 1-4 lines, 0.42-0.47; the
// unit's rows of all heads in address order, 0.76-0.90, or column by column, 0.68-0.69.
struct LineCursor {
  RowPrefetch rows;
  std::int64_t row = 0, offset = 0;
  const char* line = static_cast<const char*>(rows.first);  // line `offset` of row `row`
  std::int64_t left = lines();                              // lines not fetched yet

  std::int64_t lines() const { return rows.rows * rows.lines_per_row(); }
  // The next `count` lines (fewer at the end).
  GATED_ATTENTION_ALWAYS_INLINE void fetch(std::int64_t count) {
    for (count = count < left ? count : left, left -= count > 0 ? count : 0; count > 0; --count) {
      prefetch_line_l2(line);
      line += rows.stride_bytes;
      if (++row == rows.rows) {
        row = 0;
        offset += kCacheLine;
        line = static_cast<const char*>(rows.first) + offset;
      }
    }
  }
  // Every line not fetched yet.
  void fetch_rest() { fetch(left); }
};

}  // namespace gated_attention::kernels
