// Version and compiler macros shared by every header of the library.
#pragma once

#include <cstddef>
#include <cstdint>

#define GATED_ATTENTION_VERSION_MAJOR 0
#define GATED_ATTENTION_VERSION_MINOR 1
#define GATED_ATTENTION_VERSION_PATCH 0

// Supported compilers: GCC and Clang (target pragmas, __builtin_prefetch, inline asm, cpuid.h).
#if !defined(__GNUC__) && !defined(__clang__)
#error "gated_attention supports GCC and Clang"
#endif

#define GATED_ATTENTION_ALWAYS_INLINE inline __attribute__((always_inline))

// Before a loop whose trip count is a template constant (a microkernel's register tile): unrolled
// completely at any optimisation level. GCC at -O2 keeps such loops, and with them the tile's
// accumulators in memory (see docs/performance-notes.md, "Register tiles unrolled at -O2").
#if defined(__clang__)
#define GATED_ATTENTION_UNROLL _Pragma("unroll")
#else
#define GATED_ATTENTION_UNROLL _Pragma("GCC unroll 16")
#endif

// Before a microkernel's long loop (over d, say): unrolled 4 times, the loop overhead spread over
// 4 steps without the code of a complete unroll.
#if defined(__clang__)
#define GATED_ATTENTION_UNROLL_PARTLY _Pragma("unroll 4")
#else
#define GATED_ATTENTION_UNROLL_PARTLY _Pragma("GCC unroll 4")
#endif

// 1 (default): sdpa kernels compiled for the common head dims (64, 80, 96, 128, 256) beside the
// run-time one. 0: the run-time one alone, for every head dim: much less code to compile, slower
// calls. The same value in every unit of a program (docs/design.md, "Compile-time head dims").
#ifndef GATED_ATTENTION_COMPILE_TIME_HEAD_DIMS
#define GATED_ATTENTION_COMPILE_TIME_HEAD_DIMS 1
#endif

namespace gated_attention {

// One cache line (bytes): the alignment of every workspace allocation and of per-worker scratch,
// so that workers never share a line, and the unit of software prefetch.
inline constexpr std::int64_t kCacheLineBytes = 64;

}  // namespace gated_attention
