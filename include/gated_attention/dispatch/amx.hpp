// AMX-BF16 (Sapphire Rapids and later): whether this process may run tile instructions.
//
// The CPU must report AMX-TILE and AMX-BF16 with the OS saving tile state (XCR0 bits 17 and 18,
// CpuFeatures), and on Linux (5.16 or later) the process must ask for the tile data state once
// (arch_prctl ARCH_REQ_XCOMP_PERM); without the permission the first tile instruction raises
// SIGILL. docs/amx-bf16.md has the details.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "gated_attention/dispatch/cpu.hpp"

#if GATED_ATTENTION_X86 && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gated_attention {

namespace detail {

// Asks Linux for the tile data state (XFEATURE 18); true once granted, now or before. Fails where
// the kernel is older than 5.16, a small sigaltstack is installed, or the platform is not Linux.
inline bool request_tile_permission() {
#if GATED_ATTENTION_X86 && defined(__linux__)
  constexpr long kGetPermission = 0x1022, kRequestPermission = 0x1023;
  constexpr unsigned kTileData = 18;
  std::uint64_t granted = 0;
  if (syscall(SYS_arch_prctl, kGetPermission, &granted) != 0) return false;
  if ((granted >> kTileData) & 1u) return true;
  if (syscall(SYS_arch_prctl, kRequestPermission, kTileData) != 0) return false;
  granted = 0;
  return syscall(SYS_arch_prctl, kGetPermission, &granted) == 0 && ((granted >> kTileData) & 1u);
#else
  return false;
#endif
}

}  // namespace detail

// Whether AMX-BF16 tiles can run here: the avx512_bf16 region's features, AMX-TILE and AMX-BF16
// enabled by the OS, and the permission (asked for at the first call, once per process).
inline bool amx_bf16_ready() {
  static const bool ready = [] {
    const CpuFeatures& f = cpu_features();
    return detail::has_avx512_bf16_region_features(f) && f.amx_tile && f.amx_bf16 &&
           detail::request_tile_permission();
  }();
  return ready;
}

namespace detail {

// The setting of set_amx_tiles(); at first the environment's (GATED_ATTENTION_AMX_TILES=0: off).
inline std::atomic<bool>& amx_tiles_setting() {
  static std::atomic<bool> on{[] {
    const char* value = std::getenv("GATED_ATTENTION_AMX_TILES");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }()};
  return on;
}

}  // namespace detail

// Whether the avx512_bf16 kernels run their prefill blocks of a bf16 K (and, under
// DotPrecision::storage, a bf16 V) on AMX tiles: where amx_bf16_ready(), unless turned off here
// or by GATED_ATTENTION_AMX_TILES=0 (then on AVX-512 panels).
inline void set_amx_tiles(bool on) {
  detail::amx_tiles_setting().store(on, std::memory_order_relaxed);
}
inline bool amx_tiles() {
  return detail::amx_tiles_setting().load(std::memory_order_relaxed) && amx_bf16_ready();
}

}  // namespace gated_attention
