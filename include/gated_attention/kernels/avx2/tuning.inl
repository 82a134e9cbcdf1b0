// Tile shapes and decode fetch distances of the avx2 path (16 vector registers). Each value was
// chosen by measurement: see docs/performance-notes.md before changing one.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

struct Tuning {
  static constexpr int kTileAccumulators = 12;    // accumulator registers a tile may hold
  static constexpr int kScoreTileKeys = 6;        // prefill S^T tile: keys x row vectors
  static constexpr int kScoreTileRowVectors = 2;  //   (6 x 2 accumulators + operands)
  static constexpr int kValueTileRows = 6;        // prefill P.V tile: rows x dv vectors
  static constexpr int kValueTileVectors = 2;
  // Keys per decode block: V rows of a power-of-two stride map to few L1 sets, and more of them
  // per column chunk overflow an 8-way L1 ("AVX2 decode block: 8 keys").
  static constexpr std::int64_t kDecodeBlock = 8;
  // Decode units of 8 rows with K/V of another type than f32: every K and V vector widened once
  // for all rows, not once per group of 4 ("K/V types: one tile for every row").
  static constexpr bool kWidenOncePerUnit = true;
  // Blocks further ahead that each decode phase fetches: 0, the next phase's rows only ("AVX2
  // decode fetch distance: 0").
  static constexpr std::int64_t kDecodeFetchBlocks = 0;
  // Paged K/V gathered per block: keys ahead of the one copied that the gather fetches.
  static constexpr std::int64_t kGatherFetchKeys = 16;
};
