// Tile shapes and decode fetch distances of the neon path (32 vector registers).
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

struct Tuning {
  static constexpr int kTileAccumulators = 24;    // accumulator registers a tile may hold
  static constexpr int kScoreTileKeys = 6;        // prefill S^T tile: keys x row vectors
  static constexpr int kScoreTileRowVectors = 4;  //   (6 x 4 accumulators + operands)
  static constexpr int kValueTileRows = 6;        // prefill P.V tile: rows x dv vectors
  static constexpr int kValueTileVectors = 4;
  static constexpr std::int64_t kDecodeBlock = 16;  // keys per decode block
  // Decode units of 8 rows with K/V of another type than f32: every K and V vector widened once
  // for all rows, not once per group of 4 ("K/V types: one tile for every row").
  static constexpr bool kWidenOncePerUnit = false;
  static constexpr std::int64_t kDecodeFetchBlocks = 0;  // the next phase's rows only
  // Paged K/V gathered per block: keys ahead of the one copied that the gather fetches.
  static constexpr std::int64_t kGatherFetchKeys = 16;
};
