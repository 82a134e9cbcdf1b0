// The kernels run with denormal numbers flushed to zero, inputs and results alike (x86 MXCSR
// FTZ + DAZ, aarch64 FPCR.FZ), on the calling thread for the duration of one task: an operation
// on a denormal costs a microcode assist on x86 (docs/performance-notes.md, "Denormals flushed per
// task"), and values below 2^-126 are far under every tolerance. The caller's mode is restored.
#pragma once

#include <cstdint>

#include "gated_attention/dispatch/cpu.hpp"

#if GATED_ATTENTION_X86
#include <xmmintrin.h>
#endif

namespace gated_attention::kernels {

class DenormalsAsZero {
 public:
  DenormalsAsZero() {
#if GATED_ATTENTION_X86
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
#elif GATED_ATTENTION_AARCH64
    std::uint64_t fpcr = 0;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    saved_ = fpcr;
    __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr | kFlushToZero));
#endif
  }
  ~DenormalsAsZero() {
#if GATED_ATTENTION_X86
    _mm_setcsr(saved_);
#elif GATED_ATTENTION_AARCH64
    const std::uint64_t fpcr = saved_;
    __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr));
#endif
  }
  DenormalsAsZero(const DenormalsAsZero&) = delete;
  DenormalsAsZero& operator=(const DenormalsAsZero&) = delete;

 private:
#if GATED_ATTENTION_X86
  static constexpr unsigned kFlushToZero = 1u << 15;      // MXCSR.FTZ: denormal results -> 0
  static constexpr unsigned kDenormalsAreZero = 1u << 6;  // MXCSR.DAZ: denormal inputs -> 0
  unsigned saved_ = 0;
#elif GATED_ATTENTION_AARCH64
  static constexpr std::uint64_t kFlushToZero = std::uint64_t{1} << 24;  // FPCR.FZ
  std::uint64_t saved_ = 0;
#endif
};

}  // namespace gated_attention::kernels
