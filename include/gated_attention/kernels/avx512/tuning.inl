// Tile shapes and decode fetch distances of the avx512 path (32 vector registers). Each value was
// chosen by measurement: see docs/performance-notes.md before changing one.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

struct Tuning {
  static constexpr int kTileAccumulators = 16;    // accumulator registers a tile may hold
  static constexpr int kScoreTileKeys = 8;        // prefill S^T tile: keys x row vectors
  static constexpr int kScoreTileRowVectors = 2;  //   (8 x 2 accumulators)
  static constexpr int kValueTileRows = 8;        // prefill P.V tile: rows x dv vectors
  static constexpr int kValueTileVectors = 2;     //   (8 x 2 accumulators)
  // Keys per decode block: its P.V tiles load and store their accumulators once per block
  // ("AVX-512 decode block: 16 keys").
  static constexpr std::int64_t kDecodeBlock = 16;
  // Decode units of 8 rows with K/V of another type than f32: every K and V vector widened once
  // for all rows, not once per group of 4 ("K/V types: one tile for every row").
  static constexpr bool kWidenOncePerUnit = false;
  // Blocks further ahead that each decode phase fetches ("AVX-512 decode fetch distance").
  static constexpr std::int64_t kDecodeFetchBlocks = 1;
  // Paged K/V gathered per block: keys ahead of the one copied that the gather fetches.
  static constexpr std::int64_t kGatherFetchKeys = 16;
};
