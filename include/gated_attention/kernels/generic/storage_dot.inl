// StorageDot<E>: dot instructions on stored elements of type E for DotPrecision::storage, where a
// path has them (kernels/avx512/storage_dot.inl). Elsewhere none: the tiles widen to f32.
//   kAvailable: decode scores on K in place; pack_query(row, d, padded) stores a scaled query row
//     in the form they read, and kRowLanes: lane_tile over groups of 4 query rows that
//     interleave_rows laid side by side (kernels/avx512/storage_dot.inl, RowLanes).
//   kWeights: decode P.V with the weights rounded (pack_weights, value_rows).
//   kDecodeBlock (where kAvailable or kWeights): keys per decode block.
//   kPanels: prefill S^T and P.V tiles by pairs in 32-bit words: q panels of pair_bits, K pairs
//     by broadcast_pair, V blocks by pack_value_pairs, P^T by pair_weights (load_panel,
//     broadcast_word, dot).
//   kTiles (where kPanels): prefill S^T and P.V by AMX tiles where amx_tiles() (key_query_tiles,
//     weight_value_tiles between configure_tiles and release_tiles: kernels/amx_tiles.hpp).
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

template <class E>
struct StorageDot {
  static constexpr bool kAvailable = false;
  static constexpr bool kWeights = false;
  static constexpr bool kRowLanes = false;
  static constexpr bool kPanels = false;
  static constexpr bool kTiles = false;
};
