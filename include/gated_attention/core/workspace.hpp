// Workspace: a caller-owned scratch buffer handed out by a bump allocator. Kernels never allocate
// heap memory; they take scratch from a Workspace.
//
// The same allocation code serves two purposes: in counting mode (no buffer) every allocate()
// returns nullptr and only records the bytes that would be needed, which is how every op's
// workspace_size() is computed, so the size can never disagree with what run() takes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gated_attention/core/config.hpp"

namespace gated_attention {

class Workspace {
 public:
  // Counting mode: reports bytes_needed() without a buffer.
  static Workspace counting() { return Workspace(); }

  Workspace(void* buffer, std::size_t capacity_bytes)
      : buffer_(static_cast<std::byte*>(buffer)), capacity_(buffer ? capacity_bytes : 0) {}

  bool is_counting() const { return buffer_ == nullptr; }

  // `count` objects of T, aligned to `alignment` bytes (a power of two, at least alignof(T)).
  // Returns nullptr in counting mode, and when the buffer is too small (see exhausted()).
  template <class T>
  T* allocate(std::size_t count,
              std::size_t alignment = static_cast<std::size_t>(kCacheLineBytes)) {
    if (alignment < alignof(T)) alignment = alignof(T);
    const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(buffer_);
    // In counting mode assume the worst misalignment of the (unknown) buffer start.
    const std::size_t pad =
        is_counting()
            ? alignment - 1
            : static_cast<std::size_t>((alignment - (base + used_) % alignment) % alignment);
    const std::size_t bytes = count * sizeof(T);
    const std::size_t begin = used_ + pad;
    used_ = begin + bytes;
    if (used_ > peak_) peak_ = used_;
    if (is_counting()) return nullptr;
    if (used_ > capacity_) {
      exhausted_ = true;
      return nullptr;
    }
    return reinterpret_cast<T*>(buffer_ + begin);
  }

  // Bytes handed out so far, including alignment padding. In counting mode: what the buffer must
  // hold for every allocation made so far to succeed from any start address.
  std::size_t bytes_needed() const { return peak_; }
  std::size_t capacity() const { return capacity_; }
  // True once an allocation did not fit.
  bool exhausted() const { return exhausted_; }

  // Marks the current position; release(mark) frees everything allocated after it.
  std::size_t mark() const { return used_; }
  void release(std::size_t mark) {
    if (mark <= used_) used_ = mark;
  }

 private:
  Workspace() = default;

  std::byte* buffer_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  std::size_t peak_ = 0;
  bool exhausted_ = false;
};

}  // namespace gated_attention
