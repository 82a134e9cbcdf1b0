// AMX-BF16 tile products for the prefill blocks (docs/amx-bf16.md, section 7): S^T = K Q^T and
// O += P V on bf16 operands with f32 accumulation, reading the layouts the avx512_bf16 kernels
// already pack (StorageDot<bf16>'s query pair panels, pair weights and value pairs). Compiled in
// their own target region; called only where amx_bf16_ready(), between configure_tiles() and
// release_tiles() on the same thread.
//
// Tiles: C 0-3 (16 x 16 f32), A 4-5 (16 rows x 32 bf16), B 6-7 (16 pairs x 16 words), each 16
// rows of 64 bytes; 2 x 2 blocking, so each loaded A and B tile serves two products. Tile numbers
// are literals: GCC's intrinsics paste them into the assembly.
#pragma once

#include <cstdint>

#include "gated_attention/dispatch/cpu.hpp"
#include "gated_attention/kernels/target.hpp"

#if GATED_ATTENTION_X86
#include <immintrin.h>

// The avx512_bf16 set plus the tile instructions.
#define GATED_ATTENTION_AMX_BF16_TARGET                                                           \
  "avx,avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vnni,amx-tile," \
  "amx-bf16"

GATED_ATTENTION_TARGET_BEGIN(GATED_ATTENTION_AMX_BF16_TARGET)
namespace gated_attention::kernels::amx {

inline constexpr std::int64_t kTileRows = 16;     // rows of every tile (keys, query rows, pairs)
inline constexpr std::int64_t kKeysPerStep = 32;  // bf16 elements in a 64-byte tile row

// Palette 1 with tiles 0-7 at 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// Loads the configuration through ldtilecfg on the whole structure (GCC 12's _tile_loadconfig
// declares an 8-byte read, and its stores are then dropped: docs/amx-bf16.md, section 2).
inline void configure_tiles() {
  static const TileConfig config;
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

// Returns the tiles to their initial state (cheaper context switches; any later use reconfigures).
inline void release_tiles() {
  _tile_release();
}

// S^T [num_keys, rows] (f32, row stride s_stride) = K Q^T: K [num_keys, dk] bf16 rows at a
// stride of key_stride elements; Q^T as one pair panel of `rows` query rows, the word of dims
// (2i, 2i + 1) of row r at q_pairs[i * rows + r]. num_keys and rows multiples of 16, dk of 32.
inline void key_query_tiles(const std::uint16_t* keys, std::int64_t key_stride,
                            std::int64_t num_keys, const std::uint32_t* q_pairs, std::int64_t rows,
                            std::int64_t dk, float* s, std::int64_t s_stride) {
  const std::int64_t k_bytes = key_stride * 2, q_bytes = rows * 4, s_bytes = s_stride * 4;
  for (std::int64_t n = 0; n < num_keys; n += 2 * kTileRows) {
    const bool two_keys = n + kTileRows < num_keys;
    const std::uint16_t* k0 = keys + n * key_stride;
    const std::uint16_t* k1 = k0 + kTileRows * key_stride;
    for (std::int64_t r = 0; r < rows; r += 2 * kTileRows) {
      const bool two_rows = r + kTileRows < rows;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (std::int64_t d = 0; d < dk; d += kKeysPerStep) {
        const std::uint32_t* q = q_pairs + d / 2 * rows + r;
        _tile_loadd(4, k0 + d, k_bytes);
        _tile_loadd(6, q, q_bytes);
        _tile_dpbf16ps(0, 4, 6);
        if (two_rows) {
          _tile_loadd(7, q + kTileRows, q_bytes);
          _tile_dpbf16ps(1, 4, 7);
        }
        if (two_keys) {
          _tile_loadd(5, k1 + d, k_bytes);
          _tile_dpbf16ps(2, 5, 6);
          if (two_rows) _tile_dpbf16ps(3, 5, 7);
        }
      }
      float* c = s + n * s_stride + r;
      _tile_stored(0, c, s_bytes);
      if (two_rows) _tile_stored(1, c + kTileRows, s_bytes);
      if (two_keys) {
        _tile_stored(2, c + kTileRows * s_stride, s_bytes);
        if (two_rows) _tile_stored(3, c + kTileRows * s_stride + kTileRows, s_bytes);
      }
    }
  }
}

// Rows [r, r + 16) of P as A tiles, one per step of 32 keys, into a (steps x 16 x 16 words): the
// pair words of P^T (keys 2m, 2m + 1 of row r at p[m * p_stride + r]) transposed, words of pairs
// at or past `pairs` zero.
inline void gather_weight_rows(const std::uint32_t* p, std::int64_t p_stride, std::int64_t pairs,
                               std::int64_t steps, std::int64_t r, std::uint32_t* a) {
  const __m512i pair_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(p_stride)));
  for (std::int64_t step = 0; step < steps; ++step) {
    const std::int64_t m0 = step * kTileRows;
    const std::int64_t left = pairs - m0;
    const auto present = static_cast<__mmask16>(left >= kTileRows ? 0xffffu
                                                : left <= 0       ? 0u
                                                                  : (1u << left) - 1u);
    for (std::int64_t row = 0; row < kTileRows; ++row) {
      const std::uint32_t* column = p + m0 * p_stride + r + row;
      const __m512i words =
          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), present, pair_offsets, column, 4);
      _mm512_storeu_si512(a + (step * kTileRows + row) * kTileRows, words);
    }
  }
}

// out [rows, dv] (f32, row stride out_stride) += P V over `pairs` pairs of keys: P as the pair
// words of P^T (StorageDot<bf16>::pair_weights: keys 2m, 2m + 1 of row r at p[m * p_stride + r]),
// V as StorageDot<bf16>::pack_value_pairs lays it out (pair m, dims 16j..16j + 16 at
// v[j * column + m * 16], finite up to pairs rounded up to 16). rows and dv multiples of 16,
// pairs at most kMaxWeightPairs.
inline constexpr std::int64_t kMaxWeightPairs = 32;
inline void weight_value_tiles(const std::uint32_t* p, std::int64_t p_stride, std::int64_t pairs,
                               const std::uint32_t* v, std::int64_t column, std::int64_t rows,
                               std::int64_t dv, float* out, std::int64_t out_stride) {
  constexpr std::int64_t a_step = kTileRows * kTileRows;  // words of one A tile
  alignas(64) std::uint32_t a0[kMaxWeightPairs / kTileRows * a_step];
  alignas(64) std::uint32_t a1[kMaxWeightPairs / kTileRows * a_step];
  const std::int64_t steps = (pairs + kTileRows - 1) / kTileRows, out_bytes = out_stride * 4;
  for (std::int64_t r = 0; r < rows; r += 2 * kTileRows) {
    const bool two_rows = r + kTileRows < rows;
    gather_weight_rows(p, p_stride, pairs, steps, r, a0);
    if (two_rows) gather_weight_rows(p, p_stride, pairs, steps, r + kTileRows, a1);
    for (std::int64_t j = 0; j < dv; j += 2 * kTileRows) {
      const bool two_dims = j + kTileRows < dv;
      float* c = out + r * out_stride + j;
      float* c_below = c + kTileRows * out_stride;
      _tile_loadd(0, c, out_bytes);
      if (two_dims) _tile_loadd(1, c + kTileRows, out_bytes);
      if (two_rows) {
        _tile_loadd(2, c_below, out_bytes);
        if (two_dims) _tile_loadd(3, c_below + kTileRows, out_bytes);
      }
      const std::uint32_t* b = v + j / kTileRows * column;
      for (std::int64_t step = 0; step < steps; ++step) {
        const std::uint32_t* b_step = b + step * a_step;
        _tile_loadd(4, a0 + step * a_step, 64);
        _tile_loadd(6, b_step, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (two_dims) {
          _tile_loadd(7, b_step + column, 64);
          _tile_dpbf16ps(1, 4, 7);
        }
        if (two_rows) {
          _tile_loadd(5, a1 + step * a_step, 64);
          _tile_dpbf16ps(2, 5, 6);
          if (two_dims) _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, c, out_bytes);
      if (two_dims) _tile_stored(1, c + kTileRows, out_bytes);
      if (two_rows) {
        _tile_stored(2, c_below, out_bytes);
        if (two_dims) _tile_stored(3, c_below + kTileRows, out_bytes);
      }
    }
  }
}

}  // namespace gated_attention::kernels::amx
GATED_ATTENTION_TARGET_END
#endif
