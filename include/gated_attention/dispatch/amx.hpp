// AMX-BF16 (Sapphire Rapids and later): whether this process may run tile instructions.
//
// The CPU must report AMX-TILE and AMX-BF16 with the OS saving tile state (XCR0 bits 17 and 18,
// CpuFeatures), and on Linux (5.16 or later) the process must ask for the tile data state once
// (arch_prctl ARCH_REQ_XCOMP_PERM); without the permission the first tile instruction raises
// SIGILL. docs/amx-bf16.md has the details.
#pragma once

#include <cstdint>

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

}  // namespace gated_attention
