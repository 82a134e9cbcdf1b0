// CPU feature detection and the ISA paths the kernels can take.
//
// The path is chosen once per op call: the best path this CPU supports, capped by
// set_isa_limit() and by the environment variable GATED_ATTENTION_ISA (scalar, avx2, avx512,
// neon; read once, at the first call). On x86 the OS must also enable the registers (XCR0).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "gated_attention/core/config.hpp"

#if defined(__x86_64__)
#define GATED_ATTENTION_X86 1
#include <cpuid.h>
#elif defined(__aarch64__)
#define GATED_ATTENTION_AARCH64 1
#endif

namespace gated_attention {

// Ordered by capability within an architecture; a limit caps at that level.
enum class Isa : std::uint8_t {
  scalar = 0,
  neon = 1,    // aarch64 Advanced SIMD
  avx2 = 2,    // AVX2 + FMA + F16C + BMI1 + BMI2
  avx512 = 3,  // the avx2 set + AVX-512 F/BW/DQ/VL
};

inline const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return "scalar";
    case Isa::neon:
      return "neon";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
  }
  return "unknown";
}

inline bool parse_isa(const char* name, Isa* isa) {
  for (Isa candidate : {Isa::scalar, Isa::neon, Isa::avx2, Isa::avx512}) {
    if (name != nullptr && std::strcmp(name, to_string(candidate)) == 0) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

// The CPU's maker, where a choice between paths rests on how a family runs an instruction.
enum class CpuVendor : std::uint8_t { other, intel, amd };

struct CpuFeatures {
  CpuVendor vendor = CpuVendor::other;
  bool avx2 = false, fma = false, f16c = false, bmi1 = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512_bf16 = false, avx512_vnni = false, amx_tile = false, amx_bf16 = false;
  bool neon = false;
};

namespace detail {

#if GATED_ATTENTION_X86
inline void cpuid(unsigned leaf, unsigned subleaf, unsigned regs[4]) {
  __cpuid_count(leaf, subleaf, regs[0], regs[1], regs[2], regs[3]);
}

inline std::uint64_t xgetbv0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}
#endif

inline CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if GATED_ATTENTION_X86
  unsigned r[4] = {};
  cpuid(0, 0, r);
  const unsigned max_leaf = r[0];
  char maker[13] = {};  // ebx, edx, ecx: "GenuineIntel", "AuthenticAMD", "HygonGenuine"
  std::memcpy(maker, &r[1], 4);
  std::memcpy(maker + 4, &r[3], 4);
  std::memcpy(maker + 8, &r[2], 4);
  if (std::strcmp(maker, "GenuineIntel") == 0) f.vendor = CpuVendor::intel;
  if (std::strcmp(maker, "AuthenticAMD") == 0 || std::strcmp(maker, "HygonGenuine") == 0) {
    f.vendor = CpuVendor::amd;
  }
  if (max_leaf < 1) return f;
  cpuid(1, 0, r);
  const bool osxsave = (r[2] >> 27) & 1;
  const bool avx = (r[2] >> 28) & 1;
  f.fma = (r[2] >> 12) & 1;
  f.f16c = (r[2] >> 29) & 1;
  if (!osxsave || !avx) return CpuFeatures{f.vendor};
  const std::uint64_t xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;          // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;        // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool amx_state = (xcr0 & 0x60000) == 0x60000;  // XTILECFG + XTILEDATA
  if (!ymm_state) return CpuFeatures{f.vendor};
  if (max_leaf >= 7) {
    cpuid(7, 0, r);
    f.bmi1 = (r[1] >> 3) & 1;
    f.avx2 = (r[1] >> 5) & 1;
    f.bmi2 = (r[1] >> 8) & 1;
    if (zmm_state) {
      f.avx512f = (r[1] >> 16) & 1;
      f.avx512dq = (r[1] >> 17) & 1;
      f.avx512bw = (r[1] >> 30) & 1;
      f.avx512vl = (r[1] >> 31) & 1;
      f.avx512_vnni = (r[2] >> 11) & 1;
    }
    f.amx_bf16 = amx_state && ((r[3] >> 22) & 1);
    f.amx_tile = amx_state && ((r[3] >> 24) & 1);
    unsigned r1[4] = {};
    cpuid(7, 1, r1);
    f.avx512_bf16 = zmm_state && ((r1[0] >> 5) & 1);
  }
#elif GATED_ATTENTION_AARCH64
  f.neon = true;  // Advanced SIMD is mandatory on aarch64
#endif
  return f;
}

// A path is taken only where the CPU has every feature its target region compiles with
// (kernels/target.hpp): the avx2 region's set, and the avx512 region's, which includes it.
inline bool has_avx2_region_features(const CpuFeatures& f) {
  return f.avx2 && f.fma && f.f16c && f.bmi1 && f.bmi2;
}
inline bool has_avx512_region_features(const CpuFeatures& f) {
  return has_avx2_region_features(f) && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl;
}

// The avx512 path's dot instructions for DotPrecision::storage (the avx512_bf16 region).
inline bool has_avx512_bf16_region_features(const CpuFeatures& f) {
  return has_avx512_region_features(f) && f.avx512_bf16 && f.avx512_vnni;
}

inline Isa best_isa(const CpuFeatures& f) {
  if (has_avx512_region_features(f)) return Isa::avx512;
  if (has_avx2_region_features(f)) return Isa::avx2;
  if (f.neon) return Isa::neon;
  return Isa::scalar;
}

// 0xff: no limit.
inline std::atomic<std::uint8_t>& isa_limit_storage() {
  static std::atomic<std::uint8_t> limit{0xff};
  return limit;
}

inline std::uint8_t environment_isa_limit() {
  static const std::uint8_t limit = [] {
    Isa isa;
    return parse_isa(std::getenv("GATED_ATTENTION_ISA"), &isa) ? static_cast<std::uint8_t>(isa)
                                                               : std::uint8_t{0xff};
  }();
  return limit;
}

}  // namespace detail

// Whether the avx512 path reads 16- and 8-bit K/V with the CPU's dot instructions (vdpbf16ps,
// vpdpbusd: the avx512_bf16 region) where the dot precision allows them, or widens them to f32.
// Set by set_dot_instructions() or the environment variable GATED_ATTENTION_DOT_INSTRUCTIONS
// (where_faster, always, never; read once), the call's setting first.
enum class DotInstructions : std::uint8_t {
  // For int8 operands on every CPU; for bf16 ones except on Intel, whose vdpbf16ps does fewer
  // products per cycle than its f32 FMAs, unless the call's prefill blocks run on AMX tiles
  // (docs/performance-notes.md, "Dot instructions by CPU family", "AMX tiles for prefill").
  where_faster,
  always,
  never,
};

inline const char* to_string(DotInstructions d) {
  switch (d) {
    case DotInstructions::where_faster:
      return "where_faster";
    case DotInstructions::always:
      return "always";
    case DotInstructions::never:
      return "never";
  }
  return "unknown";
}

namespace detail {

// 0xff: not set; the environment's, else where_faster.
inline std::atomic<std::uint8_t>& dot_instructions_storage() {
  static std::atomic<std::uint8_t> setting{0xff};
  return setting;
}

inline DotInstructions environment_dot_instructions() {
  static const DotInstructions setting = [] {
    const char* name = std::getenv("GATED_ATTENTION_DOT_INSTRUCTIONS");
    for (DotInstructions d : {DotInstructions::always, DotInstructions::never}) {
      if (name != nullptr && std::strcmp(name, to_string(d)) == 0) return d;
    }
    return DotInstructions::where_faster;
  }();
  return setting;
}

// Whether `d` asks for the dot instructions on a CPU like `f`, for K/V with an int8 operand or
// with bf16 ones only, and for a call whose prefill blocks would run on AMX tiles or not (the
// region's features are checked apart).
inline bool wants_dot_instructions(DotInstructions d, const CpuFeatures& f, bool int8_operand,
                                   bool prefill_on_tiles) {
  if (d != DotInstructions::where_faster) return d == DotInstructions::always;
  return int8_operand || prefill_on_tiles || f.vendor != CpuVendor::intel;
}

}  // namespace detail

inline void set_dot_instructions(DotInstructions d) {
  detail::dot_instructions_storage().store(static_cast<std::uint8_t>(d), std::memory_order_relaxed);
}
inline void clear_dot_instructions() {
  detail::dot_instructions_storage().store(0xff, std::memory_order_relaxed);
}
inline DotInstructions dot_instructions() {
  const std::uint8_t set = detail::dot_instructions_storage().load(std::memory_order_relaxed);
  return set == 0xff ? detail::environment_dot_instructions() : static_cast<DotInstructions>(set);
}

inline const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detail::detect_cpu_features();
  return features;
}

// The best path this CPU supports, ignoring every limit.
inline Isa supported_isa() {
  return detail::best_isa(cpu_features());
}

// Caps the path for the whole process (tests use it to force each path). A level the CPU lacks
// falls back to the best supported one below it.
inline void set_isa_limit(Isa limit) {
  detail::isa_limit_storage().store(static_cast<std::uint8_t>(limit), std::memory_order_relaxed);
}
inline void clear_isa_limit() {
  detail::isa_limit_storage().store(0xff, std::memory_order_relaxed);
}

// Whether the kernels of `isa` can run here (the CPU and this build support them).
inline bool isa_available(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return true;
    case Isa::neon:
      return supported_isa() == Isa::neon;
    case Isa::avx2:
      return supported_isa() == Isa::avx2 || supported_isa() == Isa::avx512;
    case Isa::avx512:
      return supported_isa() == Isa::avx512;
  }
  return false;
}

// The path op calls take now.
inline Isa active_isa() {
  const std::uint8_t cap = static_cast<std::uint8_t>(
      std::min<unsigned>(detail::isa_limit_storage().load(std::memory_order_relaxed),
                         detail::environment_isa_limit()));
  for (int level = std::min<int>(cap, static_cast<int>(Isa::avx512)); level > 0; --level) {
    if (isa_available(static_cast<Isa>(level))) return static_cast<Isa>(level);
  }
  return Isa::scalar;
}

}  // namespace gated_attention
