// y = x W^T + bias on AMX-BF16 tiles, for bf16 weights with x rounded to bf16 (nearest even) and
// f32 sums: the weights packed once per call into pair panels (the B operand), x rounded per
// block of rows (the A operand, row-major bf16), key_query_tiles multiplying each block of rows
// by each panel into an f32 block that is copied out with the bias. Called only where
// amx_bf16_ready(); configures the tiles and releases them on the calling thread. Block sizes and
// the gathered packing: docs/performance-notes.md, "bf16 weights on AMX tiles".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gated_attention/kernels/amx_tiles.hpp"

#if GATED_ATTENTION_X86
#include <immintrin.h>

namespace gated_attention::kernels::amx {

inline constexpr std::int64_t kLinearRows = 128;   // rows of x per block (A operands)
inline constexpr std::int64_t kLinearPanel = 128;  // weight rows per pair panel (B operands)

inline std::int64_t round_up_16(std::int64_t n) {
  return (n + 15) / 16 * 16;
}

// Row stride (elements) of a block of x in bf16: one cache line past `in`, so that the 16 rows
// of an A tile do not share L1 sets when in is a multiple of 2048.
inline std::int64_t rounded_row_stride(std::int64_t in) {
  return in + 32;
}

// Scratch of linear_tiles for weights [out, in], in floats from the start: the pair panels (each
// padded to a multiple of 16 columns), one block of x in bf16, one f32 block of results, and the
// bias widened.
struct LinearTileScratch {
  std::int64_t pairs = 0, x_block = 0, results = 0, bias = 0, floats = 0;

  LinearTileScratch(std::int64_t out, std::int64_t in) {
    const std::int64_t panels = (out + kLinearPanel - 1) / kLinearPanel;
    x_block = (out + panels * 15) * in / 2;
    results = x_block + kLinearRows * rounded_row_stride(in) / 2;
    bias = results + kLinearRows * kLinearPanel;
    floats = bias + out;
  }
};

inline std::size_t linear_tile_floats(std::int64_t out, std::int64_t in) {
  return static_cast<std::size_t>(LinearTileScratch(out, in).floats);
}

}  // namespace gated_attention::kernels::amx

GATED_ATTENTION_TARGET_BEGIN(GATED_ATTENTION_AMX_BF16_TARGET)
namespace gated_attention::kernels::amx {

// x [rows, in] (f32, row stride x_stride) rounded to bf16 into out [padded_rows, in] (row stride
// out_stride); rows from `rows` to padded_rows zero. in a multiple of 32.
inline void round_rows(const float* x, std::int64_t x_stride, std::int64_t rows,
                       std::int64_t padded_rows, std::int64_t in, std::uint16_t* out,
                       std::int64_t out_stride) {
  for (std::int64_t r = 0; r < padded_rows; ++r) {
    std::uint16_t* row = out + r * out_stride;
    if (r >= rows) {
      std::memset(row, 0, static_cast<std::size_t>(in) * 2);
      continue;
    }
    const float* src = x + r * x_stride;
    for (std::int64_t k = 0; k < in; k += 32) {
      const __m512bh h =
          _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + k + 16), _mm512_loadu_ps(src + k));
      _mm512_storeu_si512(row + k, (__m512i)h);
    }
  }
}

// Weight rows [count, in] (bf16 bits, row stride w_stride) as one pair panel of width padded
// (count rounded up to 16): the word of dims (2p, 2p + 1) of row n at pairs[p * padded + n],
// columns from count to padded zero. Gathers 16 rows' words at a time.
inline void pack_weight_pairs(const std::uint16_t* w, std::int64_t w_stride, std::int64_t count,
                              std::int64_t padded, std::int64_t in, std::uint32_t* pairs) {
  const bool gathers = w_stride <= (std::int64_t{1} << 26);  // 16 row offsets fit in 32 bits
  const __m512i rows =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(gathers ? w_stride : 0)));
  for (std::int64_t n0 = 0; n0 < padded; n0 += 16) {
    const std::int64_t left = count - n0;
    const auto present = static_cast<__mmask16>(left >= 16  ? 0xffffu
                                                : left <= 0 ? 0u
                                                            : (1u << left) - 1u);
    const std::uint16_t* base = w + n0 * w_stride;
    for (std::int64_t p = 0; p < in / 2; ++p) {
      std::uint32_t* dst = pairs + p * padded + n0;
      if (gathers) {
        _mm512_storeu_si512(dst, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), present, rows,
                                                             base + 2 * p, 2));
        continue;
      }
      for (std::int64_t n = 0; n < 16; ++n) {
        dst[n] = 0;
        if (n < left) std::memcpy(dst + n, base + n * w_stride + 2 * p, 4);
      }
    }
  }
}

// y rows [rows, count] (row stride y_stride) = c [rows, count] (row stride c_stride) + bias.
inline void add_bias_rows(const float* c, std::int64_t c_stride, std::int64_t rows,
                          std::int64_t count, const float* bias, float* y, std::int64_t y_stride) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t n = 0; n < count; n += 16) {
      const auto mask =
          static_cast<__mmask16>(count - n >= 16 ? 0xffffu : (1u << (count - n)) - 1u);
      const __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, c + r * c_stride + n),
                                       _mm512_maskz_loadu_ps(mask, bias + n));
      _mm512_mask_storeu_ps(y + r * y_stride + n, mask, sum);
    }
  }
}

// y [rows, out] (row stride y_stride) = round_bf16(x) W^T + bias: x f32 [rows, in] (row stride
// x_stride), W bf16 bits [out, in] (row stride w_stride), bias bf16 bits [out] or null. in a
// multiple of 32; scratch of linear_tile_floats(out, in).
inline void linear_tiles(const float* x, std::int64_t x_stride, std::int64_t rows,
                         const std::uint16_t* w, std::int64_t w_stride, std::int64_t out,
                         std::int64_t in, const std::uint16_t* maybe_bias, float* y,
                         std::int64_t y_stride, float* scratch) {
  const LinearTileScratch at(out, in);
  auto* pairs = reinterpret_cast<std::uint32_t*>(scratch + at.pairs);
  auto* x_block = reinterpret_cast<std::uint16_t*>(scratch + at.x_block);
  float* c = scratch + at.results;
  float* bias = scratch + at.bias;
  for (std::int64_t n = 0; n < out; ++n) {
    const std::uint32_t bits = maybe_bias != nullptr ? std::uint32_t{maybe_bias[n]} << 16 : 0u;
    std::memcpy(bias + n, &bits, 4);
  }
  const std::int64_t panels = (out + kLinearPanel - 1) / kLinearPanel;
  for (std::int64_t j = 0, offset = 0; j < panels; ++j) {
    const std::int64_t count = std::min(kLinearPanel, out - j * kLinearPanel);
    pack_weight_pairs(w + j * kLinearPanel * w_stride, w_stride, count, round_up_16(count), in,
                      pairs + offset);
    offset += round_up_16(count) * in / 2;
  }
  const std::int64_t x_block_stride = rounded_row_stride(in);
  configure_tiles();
  for (std::int64_t r0 = 0; r0 < rows; r0 += kLinearRows) {
    const std::int64_t block = std::min(kLinearRows, rows - r0), padded = round_up_16(block);
    round_rows(x + r0 * x_stride, x_stride, block, padded, in, x_block, x_block_stride);
    for (std::int64_t j = 0, offset = 0; j < panels; ++j) {
      const std::int64_t count = std::min(kLinearPanel, out - j * kLinearPanel);
      const std::int64_t width = round_up_16(count);
      key_query_tiles(x_block, x_block_stride, padded, pairs + offset, width, in, c, width);
      offset += width * in / 2;
      add_bias_rows(c, width, block, count, bias + j * kLinearPanel,
                    y + r0 * y_stride + j * kLinearPanel, y_stride);
    }
  }
  release_tiles();
}

}  // namespace gated_attention::kernels::amx
GATED_ATTENTION_TARGET_END
#endif
