// Version and compiler macros shared by every header of the library.
#pragma once

#include <cstddef>

#define GATED_ATTENTION_VERSION_MAJOR 0
#define GATED_ATTENTION_VERSION_MINOR 1
#define GATED_ATTENTION_VERSION_PATCH 0

#if defined(__GNUC__) || defined(__clang__)
#define GATED_ATTENTION_RESTRICT __restrict__
#define GATED_ATTENTION_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define GATED_ATTENTION_RESTRICT
#define GATED_ATTENTION_ALWAYS_INLINE inline
#endif

// Before a loop whose trip count is a template constant (a microkernel's register tile): unrolled
// completely at any optimisation level. GCC at -O2 keeps such loops, and with them the tile's
// accumulators in memory (the AVX2 prefill ran 2.4x slower at -O2 than at -O3).
#if defined(__clang__)
#define GATED_ATTENTION_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define GATED_ATTENTION_UNROLL _Pragma("GCC unroll 16")
#else
#define GATED_ATTENTION_UNROLL
#endif

// Before a microkernel's long loop (over d, say): unrolled 4 times, the loop overhead spread over
// 4 steps without the code of a complete unroll.
#if defined(__clang__)
#define GATED_ATTENTION_UNROLL_PARTLY _Pragma("unroll 4")
#elif defined(__GNUC__)
#define GATED_ATTENTION_UNROLL_PARTLY _Pragma("GCC unroll 4")
#else
#define GATED_ATTENTION_UNROLL_PARTLY
#endif

namespace gated_attention {

// Alignment (bytes) of every workspace allocation and of per-worker scratch: one cache line, so
// that workers never share a line.
inline constexpr std::size_t kCacheLineBytes = 64;

}  // namespace gated_attention
