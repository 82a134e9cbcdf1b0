// Software prefetch for the kernels: memory the hardware prefetcher does not follow (rows strided
// by heads) or does not reach in time (the next block of a streamed KV cache).
#pragma once

#include <cstdint>

#include "gated_attention/core/config.hpp"

namespace gated_attention::kernels {

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
    for (std::int64_t offset = 0; offset < bytes; offset += kCacheLineBytes)
      __builtin_prefetch(row + offset, kForWrite ? 1 : 0);
  }
#else
  (void)first, (void)stride_bytes, (void)rows, (void)bytes;
#endif
}

// Starts fetching the line that holds p, hinted for L2 (some cores fill L1 too): data a later
// phase reads, fetched while the current one works (a KV cache streamed faster than the hardware
// prefetcher alone brings it in). Other hints: docs/performance-notes.md, "Decode prefetch:
// locality hint".
GATED_ATTENTION_ALWAYS_INLINE void prefetch_line_l2(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 2);
#else
  (void)p;
#endif
}

// Rows [0, rows) of `bytes` bytes to be fetched: row i at first + i * stride_bytes, or where
// `table` is set, at table[i] + shift_bytes (rows anywhere: small pages); by_rows: LineCursor walks
// them row by row rather than column by column. Default-constructed: none.
struct RowPrefetch {
  const void* first = nullptr;
  std::int64_t stride_bytes = 0, rows = 0, bytes = 0;
  const void* const* table = nullptr;
  std::int64_t shift_bytes = 0;
  bool by_rows = false;

  GATED_ATTENTION_ALWAYS_INLINE const char* row(std::int64_t i) const {
    return table != nullptr ? static_cast<const char*>(table[i]) + shift_bytes
                            : static_cast<const char*>(first) + i * stride_bytes;
  }
  // Rows [from, from + count) of these (fewer at the end).
  RowPrefetch part(std::int64_t from, std::int64_t count) const {
    RowPrefetch p = *this;
    from = from < rows ? from : rows;
    p.rows = from + count < rows ? count : rows - from;
    if (p.rows <= 0) return RowPrefetch{};
    p.first = row(from);
    if (table != nullptr) p.table = table + from;
    return p;
  }
  // Rows [from, from + count), whole.
  GATED_ATTENTION_ALWAYS_INLINE void fetch(std::int64_t from, std::int64_t count) const {
    const RowPrefetch p = part(from, count);
    if (p.table == nullptr) {
      prefetch_rows(p.first, p.stride_bytes, p.rows, p.bytes);
    } else {
      for (std::int64_t i = 0; i < p.rows; ++i) prefetch_rows(p.row(i), 0, 1, p.bytes);
    }
  }
  std::int64_t lines_per_row() const { return (bytes + kCacheLineBytes - 1) / kCacheLineBytes; }
};

// Walks the lines of a RowPrefetch a few at a time, column by column (line j of every row, then
// line j + 1), or row by row where rows.by_rows: a phase's tiles fetch what the next phase reads in
// even shares, so that the fetches spread over the phase. The orders and forms tried, and where
// each is faster, are in docs/performance-notes.md, "Decode prefetch: line cursor order" and
// "Decode prefetch: 8- and 16-bit rows in address order". A function that fetches through a
// cursor it was passed by reference copies it and writes the copy back at its end: the copy's
// fields stay in registers, where the reference's are loaded and stored for every line
// (docs/performance-notes.md, "Decode: line cursors in registers").
struct LineCursor {
  RowPrefetch rows;
  std::int64_t row = 0, offset = 0;
  const char* line = rows.rows > 0 ? rows.row(0) : nullptr;  // line `offset` of row `row`
  std::int64_t left = lines();                               // lines not fetched yet

  std::int64_t lines() const { return rows.rows * rows.lines_per_row(); }
  // The next `count` lines (fewer at the end).
  GATED_ATTENTION_ALWAYS_INLINE void fetch(std::int64_t count) {
    for (count = count < left ? count : left, left -= count > 0 ? count : 0; count > 0; --count) {
      prefetch_line_l2(line);
      if (rows.by_rows) {
        offset += kCacheLineBytes;
        if (offset < rows.bytes) {
          line += kCacheLineBytes;
          continue;
        }
        offset = 0;
        if (++row < rows.rows) line = rows.row(row);
        continue;
      }
      if (++row == rows.rows) {
        row = 0;
        offset += kCacheLineBytes;
      }
      line = rows.table == nullptr && row > 0 ? line + rows.stride_bytes : rows.row(row) + offset;
    }
  }
  // Every line not fetched yet.
  void fetch_rest() { fetch(left); }
};

}  // namespace gated_attention::kernels
