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
// than the hardware prefetcher alone brings it in).
GATED_ATTENTION_ALWAYS_INLINE void prefetch_line_l2(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 2);
#else
  (void)p;
#endif
}

// Rows [0, rows) of a strided array, fetched a few at a time while a loop over the same indices
// of another array runs: whole rows (fetch), or line by line in step with a tile that walks the
// other array's rows (fetch_line). Default-constructed: fetches nothing.
struct RowPrefetch {
  const void* first = nullptr;
  std::int64_t stride_bytes = 0, rows = 0, bytes = 0;
  // fetch_line takes only the lines whose index i in their row has (i & line_mask) == line_phase
  // (see share).
  std::int64_t line_mask = 0, line_phase = 0;

  GATED_ATTENTION_ALWAYS_INLINE void fetch(std::int64_t from, std::int64_t count) const {
    if (from >= rows) return;
    prefetch_rows(static_cast<const char*>(first) + from * stride_bytes, stride_bytes,
                  from + count < rows ? count : rows - from, bytes);
  }
  // The line at byte `offset` of row `row`, if both are in range.
  GATED_ATTENTION_ALWAYS_INLINE void fetch_line(std::int64_t row, std::int64_t offset) const {
    if (row < rows && offset < bytes && ((offset / kCacheLine) & line_mask) == line_phase) {
      prefetch_line_l2(static_cast<const char*>(first) + row * stride_bytes + offset);
    }
  }
  // The lines of rows [0, count) from byte `offset` to the end of each row.
  GATED_ATTENTION_ALWAYS_INLINE void fetch_tails(std::int64_t count, std::int64_t offset) const {
    for (std::int64_t r = 0; r < count; ++r) {
      for (std::int64_t o = offset; o < bytes; o += kCacheLine) fetch_line(r, o);
    }
  }
  // The same rows from row `row` on.
  RowPrefetch from_row(std::int64_t row) const {
    if (row >= rows) return {};
    return {static_cast<const char*>(first) + row * stride_bytes,
            stride_bytes,
            rows - row,
            bytes,
            line_mask,
            line_phase};
  }
  // Share `part` of `parts` of the lines, for one of `parts` loops over the same rows that
  // together fetch each line once: every parts-th line when parts is a power of two, else all of
  // them for part 0.
  RowPrefetch share(std::int64_t part, std::int64_t parts) const {
    RowPrefetch s = *this;
    if ((parts & (parts - 1)) == 0) {
      s.line_mask = parts - 1;
      s.line_phase = part;
    } else if (part != 0) {
      s.rows = 0;
    }
    return s;
  }
};

}  // namespace gated_attention::kernels
