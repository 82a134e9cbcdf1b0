// Where the decode tiles find rows of K or V: row k at row(k), evenly strided or through a table
// of row addresses. Tiles take either as a template parameter (`Rows`); prefill reads strided
// rows only. fetch_rows: rows [from, from + count), `bytes` of each, for a tile to fetch along the
// way.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

// Rows `stride` elements apart from `first`: contiguous views, one page, or a gathered block.
template <class E>
struct StridedRows {
  const E* first = nullptr;
  std::int64_t stride = 0;

  const E* row(std::int64_t k) const { return first + k * stride; }
  StridedRows advanced(std::int64_t n) const { return {first + n * stride, stride}; }
  StridedRows shifted(std::int64_t elements) const { return {first + elements, stride}; }
  RowPrefetch fetch_rows(std::int64_t from, std::int64_t count, std::int64_t bytes) const {
    return RowPrefetch{row(from), stride * static_cast<std::int64_t>(sizeof(E)), count, bytes};
  }
};

// Row k at table[k] + shift: pages too small to read as strided runs (down to one key a page),
// read where they lie rather than copied.
template <class E>
struct TableRows {
  const void* const* table = nullptr;  // each entry an E row
  std::int64_t shift = 0;              // elements past each entry (a head's or a column's offset)

  const E* row(std::int64_t k) const { return static_cast<const E*>(table[k]) + shift; }
  TableRows advanced(std::int64_t n) const { return {table + n, shift}; }
  TableRows shifted(std::int64_t elements) const { return {table, shift + elements}; }
  RowPrefetch fetch_rows(std::int64_t from, std::int64_t count, std::int64_t bytes) const {
    if (count <= 0) return RowPrefetch{};
    RowPrefetch p;
    p.rows = count;
    p.bytes = bytes;
    p.table = table + from;
    p.shift_bytes = shift * static_cast<std::int64_t>(sizeof(E));
    return p;
  }
};
