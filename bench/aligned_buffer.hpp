// Benchmark buffers aligned to a cache line, as inference engines allocate tensors (PyTorch's CPU
// allocator, OpenVINO and ggml align them to 32 or 64 bytes). glibc's malloc serves a large block
// 16 bytes past a page boundary: every row of a [.., d] tensor would then straddle one more cache
// line and most vector loads and stores would split across two.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace gated_attention::bench {

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};

  CacheLineAllocator() = default;
  template <class U>
  explicit CacheLineAllocator(const CacheLineAllocator<U>&) {}

  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, kAlignment); }
  bool operator==(const CacheLineAllocator&) const { return true; }
  bool operator!=(const CacheLineAllocator&) const { return false; }
};

template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace gated_attention::bench
