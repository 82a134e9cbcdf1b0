// Benchmark buffers aligned to a cache line, as inference engines allocate tensors (PyTorch's CPU
// allocator, OpenVINO and ggml align them to 32 or 64 bytes). glibc's malloc serves a large block
// 16 bytes past a page boundary: every row of a [.., d] tensor would then straddle one more cache
// line and most vector loads and stores would split across two.
//
// With GATED_ATTENTION_BENCH_HUGE_PAGES=1 in the environment (Linux), buffers of 2 MiB or more are
// 2 MiB-aligned and advised onto transparent huge pages (madvise; THP "madvise" or "always"), as
// an engine may place its KV cache. Both a decode call and the plain read of peak/read_bw then read
// huge pages; the binary's context line "huge_pages" says which kind a run used.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gated_attention::bench {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// Whether the environment asks for huge pages (read once; Linux only).
inline bool huge_pages_requested() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  static const bool requested = [] {
    const char* value = std::getenv("GATED_ATTENTION_BENCH_HUGE_PAGES");
    return value != nullptr && value[0] != '\0' && value[0] != '0';
  }();
  return requested;
#else
  return false;
#endif
}

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};

  CacheLineAllocator() = default;
  template <class U>
  explicit CacheLineAllocator(const CacheLineAllocator<U>&) {}

  T* allocate(std::size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (on_huge_pages(n)) {
      void* p = std::aligned_alloc(kHugePageBytes, huge_bytes(n));
      if (p == nullptr) throw std::bad_alloc();
      madvise(p, huge_bytes(n), MADV_HUGEPAGE);  // advice only: small pages if THP is off
      return static_cast<T*>(p);
    }
#endif
    return static_cast<T*>(::operator new(n * sizeof(T), kAlignment));
  }
  void deallocate(T* p, std::size_t n) {
    if (on_huge_pages(n)) {
      std::free(p);
    } else {
      ::operator delete(p, kAlignment);
    }
  }
  static bool on_huge_pages(std::size_t n) {
    return n * sizeof(T) >= kHugePageBytes && huge_pages_requested();
  }
  static std::size_t huge_bytes(std::size_t n) {
    return (n * sizeof(T) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  }
  bool operator==(const CacheLineAllocator&) const {
    return true;
  }
  bool operator!=(const CacheLineAllocator&) const {
    return false;
  }
};

template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace gated_attention::bench
