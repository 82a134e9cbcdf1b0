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
  static constexpr std::int64_t kDecodeBlock = 16;       // keys per decode block
  static constexpr std::int64_t kDecodeFetchBlocks = 0;  // the next phase's rows only
};
