// Software prefetch for the kernels: memory the hardware prefetcher does not follow (rows strided
// by heads) or does not reach in time (the next block of a streamed KV cache).
#pragma once

#include <cstdint>

namespace gated_attention::kernels {

inline constexpr std::int64_t kCacheLine = 64;  // bytes

// Starts fetching `rows` rows of `bytes` bytes into the cache, the first at `first`, each
// `stride_bytes` after the previous one. No effect where the compiler has no prefetch builtin.
inline void prefetch_rows(const void* first, std::int64_t stride_bytes, std::int64_t rows,
                          std::int64_t bytes) {
#if defined(__GNUC__) || defined(__clang__)
  const char* row = static_cast<const char*>(first);
  for (std::int64_t r = 0; r < rows; ++r, row += stride_bytes) {
    for (std::int64_t offset = 0; offset < bytes; offset += kCacheLine)
      __builtin_prefetch(row + offset);
  }
#else
  (void)first, (void)stride_bytes, (void)rows, (void)bytes;
#endif
}

}  // namespace gated_attention::kernels
