// Target regions: code between GATED_ATTENTION_TARGET_BEGIN("avx2,fma") and
// GATED_ATTENTION_TARGET_END is compiled for that ISA without any -march flag, so one binary
// carries every path. Each region's code lives in its own namespace (kernels::avx2, ...), so no
// inline function is ever shared between two ISAs.
#pragma once

#if defined(__clang__)
#define GATED_ATTENTION_PRAGMA(x) _Pragma(#x)
#define GATED_ATTENTION_TARGET_BEGIN(isa) \
  GATED_ATTENTION_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define GATED_ATTENTION_TARGET_END _Pragma("clang attribute pop")
#elif defined(__GNUC__)
// GCC 12's AVX-512 intrinsics start from an "undefined" register that -Wmaybe-uninitialized
// reports (GCC bug 105593, fixed in 13): silenced inside the regions so consumers' -Werror holds.
#define GATED_ATTENTION_PRAGMA(x) _Pragma(#x)
#define GATED_ATTENTION_TARGET_BEGIN(isa)                                                  \
  _Pragma("GCC push_options") GATED_ATTENTION_PRAGMA(GCC target(isa))                      \
      _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
          _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define GATED_ATTENTION_TARGET_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#else
#define GATED_ATTENTION_TARGET_BEGIN(isa)
#define GATED_ATTENTION_TARGET_END
#endif

#define GATED_ATTENTION_AVX2_TARGET "avx,avx2,fma,f16c,bmi,bmi2"
#define GATED_ATTENTION_AVX512_TARGET \
  "avx,avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl"
// The avx512 set plus the dot instructions of DotPrecision::storage.
#define GATED_ATTENTION_AVX512_BF16_TARGET \
  "avx,avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni"
