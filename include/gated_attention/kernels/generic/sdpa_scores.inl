// Score tiles: S^T [keys, rows] = K q^T for one block of keys, in log2 units (q is pre-scaled by
// scale * log2(e)). They depend on the K element type and dk only: a new K type is a new tile.
// 16- and 8-bit K rows are widened to f32 (int8 rows without their scale, which the caller
// applies to the scores).
//
// Prefill (rows along vector lanes): the queries are packed transposed in panels, and each key is
// broadcast from its K row in place, so the softmax after it is vertical. Decode (few rows): dot
// products along d, reduced at the end of each tile; every head of the unit in one phase, which
// fetches what the next phase reads.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

// The row scales of an int8 K's (or V's) keys, `stride` floats apart from `first`; none for the
// other types (first null).
struct RowScales {
  const float* first = nullptr;
  std::int64_t stride = 0;

  RowScales advanced(std::int64_t keys) const {
    return {first != nullptr ? first + keys * stride : nullptr, stride};
  }
};

template <class KT, int kDk>
struct ScoreTiles {
  using S = Simd;
  using V = S::V;
  static constexpr int L = S::kLanes;

  using Dot = StorageDot<KT>;

  // ---- Prefill: rows along lanes ----

  // Queries are packed in panels of kPanelRows rows (then of L rows for the rest): the panel
  // starting at row r0 with width w holds (d, r) at q_t[r0 * dk + d * w + r - r0], so a row
  // group's queries are contiguous and stay in L1 while the keys stream past.
  static constexpr std::int64_t kPanelRows = Tuning::kScoreTileRowVectors * L;
  static std::int64_t whole_panel_rows(std::int64_t rows_v) {
    return rows_v / kPanelRows * kPanelRows;
  }
  // Storage dot panels (StorageDot<KT>::kPanels): the panels hold 32-bit words of q pairs
  // (d, d + 1) as K's type, in the layout above with dk / 2 (rounded up) words per row, and keys
  // are broadcast a pair at a time.
  static constexpr bool kPairPanels = Dot::kPanels;
  using PanelWord = std::conditional_t<kPairPanels, std::uint32_t, float>;
  static std::int64_t panel_depth(std::int64_t dk) { return kPairPanels ? (dk + 1) / 2 : dk; }
  template <class Word>
  static Word* q_panel_element(Word* q_t, std::int64_t rows_v, std::int64_t depth, std::int64_t r,
                               std::int64_t d) {
    const std::int64_t w = r < whole_panel_rows(rows_v) ? kPanelRows : L;
    const std::int64_t r0 = r / w * w;
    return q_t + r0 * depth + d * w + (r - r0);
  }
  // Row r's scaled query (dk floats) into the panels at q_t.
  static void pack_query_row(float* q_t, std::int64_t rows_v, std::int64_t dk, std::int64_t r,
                             const float* row) {
    if constexpr (kPairPanels) {
      auto* words = reinterpret_cast<std::uint32_t*>(q_t);
      for (std::int64_t d = 0; d < dk; d += 2) {
        *q_panel_element(words, rows_v, panel_depth(dk), r, d / 2) =
            Dot::pair_bits(row[d], d + 1 < dk ? row[d + 1] : 0.0f);
      }
    } else {
      for (std::int64_t d = 0; d < dk; ++d) *q_panel_element(q_t, rows_v, dk, r, d) = row[d];
    }
  }

  // S^T[k, r] for KB keys and RV row vectors of one panel: sum_d K[k, d] * q[d, r].
  template <int KB, int RV>
  GATED_ATTENTION_ALWAYS_INLINE static void panel_tile(const float* keys, std::int64_t key_stride,
                                                       const float* panel, std::int64_t dk,
                                                       float* scores, std::int64_t row_stride) {
    V acc[KB][RV];
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < KB; ++k) {
      GATED_ATTENTION_UNROLL
      for (int v = 0; v < RV; ++v) acc[k][v] = S::zero();
    }
    const std::int64_t depth = head_dim<kDk>(dk);
    for (std::int64_t d = 0; d < depth; ++d) {
      V q[RV];
      GATED_ATTENTION_UNROLL
      for (int v = 0; v < RV; ++v) q[v] = S::load_shared(panel + d * (RV * L) + v * L);
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) {
        const V kb = S::set1(keys[k * key_stride + d]);
        GATED_ATTENTION_UNROLL
        for (int v = 0; v < RV; ++v) acc[k][v] = S::fma(kb, q[v], acc[k][v]);
      }
    }
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < KB; ++k) {
      GATED_ATTENTION_UNROLL
      for (int v = 0; v < RV; ++v) S::store(scores + k * row_stride + v * L, acc[k][v]);
    }
  }

  // One pair of dims: acc[k][v] += K[k, d..d+1] . q[d..d+1, v] (single: dim d alone).
  template <int KB, int RV, class Acc>
  GATED_ATTENTION_ALWAYS_INLINE static void pair_panel_step(Acc (&acc)[KB][RV], const KT* keys,
                                                            std::int64_t key_stride,
                                                            const std::uint32_t* panel,
                                                            bool single) {
    typename Dot::Raw q[RV];
    GATED_ATTENTION_UNROLL
    for (int v = 0; v < RV; ++v) q[v] = Dot::load_panel(panel + v * L);
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < KB; ++k) {
      const typename Dot::Raw kb = Dot::broadcast_pair(keys + k * key_stride, single);
      GATED_ATTENTION_UNROLL
      for (int v = 0; v < RV; ++v) acc[k][v] = Dot::dot(acc[k][v], kb, q[v]);
    }
  }

  // panel_tile by the storage dot: K rows of KT read in place a pair of elements at a time.
  template <int KB, int RV>
  GATED_ATTENTION_ALWAYS_INLINE static void pair_panel_tile(const KT* keys, std::int64_t key_stride,
                                                            const std::uint32_t* panel,
                                                            std::int64_t dk, float* scores,
                                                            std::int64_t row_stride) {
    typename Dot::Acc acc[KB][RV];
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < KB; ++k) {
      GATED_ATTENTION_UNROLL
      for (int v = 0; v < RV; ++v) acc[k][v] = S::zero();
    }
    const std::int64_t depth = head_dim<kDk>(dk);
    const std::int64_t whole = depth / 2 * 2;
    for (std::int64_t d = 0; d < whole; d += 2) {
      pair_panel_step<KB, RV>(acc, keys + d, key_stride, panel + d / 2 * (RV * L), false);
    }
    if (whole < depth) {
      pair_panel_step<KB, RV>(acc, keys + whole, key_stride, panel + whole / 2 * (RV * L), true);
    }
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < KB; ++k) {
      GATED_ATTENTION_UNROLL
      for (int v = 0; v < RV; ++v) S::store(scores + k * row_stride + v * L, acc[k][v]);
    }
  }

  // A tile of either kind: keys of KT read by pairs, f32 keys (in place or widened) by elements.
  template <int KB, int RV, class E>
  GATED_ATTENTION_ALWAYS_INLINE static void any_panel_tile(const E* keys, std::int64_t key_stride,
                                                           const PanelWord* panel, std::int64_t dk,
                                                           float* scores, std::int64_t row_stride) {
    if constexpr (std::is_same_v<E, float>) {
      panel_tile<KB, RV>(keys, key_stride, panel, dk, scores, row_stride);
    } else {
      pair_panel_tile<KB, RV>(keys, key_stride, panel, dk, scores, row_stride);
    }
  }

  // The last count < KB keys of a block in one tile of count keys: a tile per key would leave one
  // accumulator chain per row vector, bound by the FMA latency.
  template <int RV, int KB, class E>
  static void panel_remainder(std::int64_t count, const E* keys, std::int64_t key_stride,
                              const PanelWord* panel, std::int64_t dk, float* s,
                              std::int64_t row_stride) {
    if constexpr (KB > 0) {
      if (count == KB) {
        any_panel_tile<KB, RV>(keys, key_stride, panel, dk, s, row_stride);
      } else {
        panel_remainder<RV, KB - 1>(count, keys, key_stride, panel, dk, s, row_stride);
      }
    }
  }

  template <int KB, int RV, class E>
  GATED_ATTENTION_ALWAYS_INLINE static void panel_scores(const E* keys, std::int64_t key_stride,
                                                         std::int64_t num_keys,
                                                         const PanelWord* panel, std::int64_t dk,
                                                         float* s, std::int64_t row_stride) {
    std::int64_t n = 0;
    for (; n + KB <= num_keys; n += KB) {
      any_panel_tile<KB, RV>(keys + n * key_stride, key_stride, panel, dk, s + n * row_stride,
                             row_stride);
    }
    if (n < num_keys) {
      panel_remainder<RV, KB - 1>(num_keys - n, keys + n * key_stride, key_stride, panel, dk,
                                  s + n * row_stride, row_stride);
    }
  }

  // S^T [num_keys, rows_v] from the query panels; K rows of another type than f32 are read in
  // place by the storage dot's pairs, or else first widened into `staging` ([num_keys, dk]
  // floats), once for every panel.
  static void prefill_scores(const KT* keys, std::int64_t key_stride, std::int64_t num_keys,
                             const float* q_t, std::int64_t rows_v, std::int64_t dk, float* s,
                             std::int64_t row_stride, float* staging) {
    if constexpr (std::is_same_v<KT, float> || kPairPanels) {
      panels(keys, key_stride, num_keys, q_t, rows_v, dk, s, row_stride);
    } else {
      const std::int64_t depth = head_dim<kDk>(dk);
      widen_rows(keys, key_stride, num_keys, depth, staging);
      panels(staging, depth, num_keys, q_t, rows_v, dk, s, row_stride);
    }
  }

  // prefill_scores on AMX tiles (Dot::kTiles, where amx_tiles() and dk is a multiple of 32): the
  // block's whole groups of 16 keys by tiles over each query panel, the rest by the panels.
  static void tile_prefill_scores(const KT* keys, std::int64_t key_stride, std::int64_t num_keys,
                                  const float* q_t, std::int64_t rows_v, std::int64_t dk, float* s,
                                  std::int64_t row_stride) {
    const auto* q = reinterpret_cast<const std::uint32_t*>(q_t);
    const std::int64_t tiled = num_keys / 16 * 16, whole = whole_panel_rows(rows_v);
    const std::int64_t depth = panel_depth(dk);
    for (std::int64_t r = 0; tiled > 0 && r < rows_v;) {
      const std::int64_t width = r < whole ? kPanelRows : L;
      Dot::key_query_tiles(keys, key_stride, tiled, q + r * depth, width, dk, s + r, row_stride);
      r += width;
    }
    if (tiled < num_keys) {
      panels(keys + tiled * key_stride, key_stride, num_keys - tiled, q_t, rows_v, dk,
             s + tiled * row_stride, row_stride);
    }
  }

  template <class E>
  static void panels(const E* keys, std::int64_t key_stride, std::int64_t num_keys,
                     const float* q_t, std::int64_t rows_v, std::int64_t dk, float* s,
                     std::int64_t row_stride) {
    constexpr int KB = Tuning::kScoreTileKeys, RV = Tuning::kScoreTileRowVectors;
    const auto* q = reinterpret_cast<const PanelWord*>(q_t);
    const std::int64_t whole = whole_panel_rows(rows_v), depth = panel_depth(dk);
    for (std::int64_t r = 0; r < whole; r += kPanelRows) {
      panel_scores<KB, RV>(keys, key_stride, num_keys, q + r * depth, dk, s + r, row_stride);
    }
    for (std::int64_t r = whole; r < rows_v; r += L) {
      panel_scores<KB * RV, 1>(keys, key_stride, num_keys, q + r * depth, dk, s + r, row_stride);
    }
  }

  // ---- Decode: dot products along d ----

  // Tiles of up to 4 keys x kDotTileRows rows (8 loads per 16 FMAs), as many keys as the
  // accumulator budget holds. f32 K: row groups of 4, each streaming the block's keys
  // (L1-resident); other K types: every row of a decode unit in one tile, so that each K vector
  // is widened once (see docs/performance-notes.md, "K/V types: one tile for every row").
  // The storage dot (StorageDot<KT>, DotPrecision::storage) reads its row lanes instead.
  static constexpr bool kStorage = Dot::kAvailable;
  static_assert(!kStorage || Dot::kRowLanes, "the storage dot's decode scores: row lanes");
  static constexpr int kDotTileRows = std::is_same_v<KT, float> || !Tuning::kWidenOncePerUnit
                                          ? 4
                                          : static_cast<int>(kDecodeMaxRows);
  // Keys of a tile of `rows` rows (f32: those of a 4-row tile, whatever its rows).
  static constexpr int keys_per_tile(int rows) {
    const int tile_rows = kDotTileRows == 4 ? 4 : rows;
    return std::max(1, std::min(4, Tuning::kTileAccumulators / tile_rows));
  }

  // bf16 K rows are read a pair of vectors at a time (Simd::load_pairs: even and odd elements),
  // so packed q rows are in pair order (to_pair_order) up to a tail shorter than kStep.
  static constexpr bool kPairs = std::is_same_v<KT, bf16> && !kStorage;
  static constexpr int kStep = kPairs ? 2 * L : L;
  static std::int64_t whole_steps(std::int64_t depth) { return depth / kStep * kStep; }
  // A packed query row of `padded` floats (scaled, zero past depth) as the dot tiles read it:
  // in order_query's order, or stored for the storage dot (unrounded: it rounds it itself).
  static void finish_query(float* row, std::int64_t depth, std::int64_t padded) {
    if constexpr (kStorage) {
      Dot::pack_query(row, depth, padded);
    } else {
      order_query(row, depth);
    }
  }
  static void order_query(float* row, std::int64_t depth) {
    if constexpr (kPairs) to_pair_order(row, whole_steps(depth));
  }

  // S^T[k, r] for KB keys and RB rows; q_rows is [rows, q_stride], zero-padded to whole vectors
  // and in order_query's order. ahead: `lines` lines fetched, spread over the tile's steps along d.
  template <int KB, int RB, class Rows>
  GATED_ATTENTION_ALWAYS_INLINE static void dot_tile(const Rows& keys, const float* q_rows,
                                                     std::int64_t q_stride, std::int64_t dk,
                                                     float* scores, std::int64_t row_stride,
                                                     RowScales scales, LineCursor& ahead,
                                                     std::int64_t lines) {
    V acc[KB][RB];
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < KB; ++k) {
      GATED_ATTENTION_UNROLL
      for (int r = 0; r < RB; ++r) acc[k][r] = S::zero();
    }
    const std::int64_t depth = head_dim<kDk>(dk);
    const std::int64_t whole = whole_steps(depth);
    const std::int64_t steps = whole / kStep;
    const std::int64_t per_step = steps > 0 ? (lines + steps - 1) / steps : 0;
    GATED_ATTENTION_UNROLL_PARTLY
    for (std::int64_t d = 0; d < whole; d += kStep) {
      ahead.fetch(per_step);
      V kv[KB];
      if constexpr (kPairs) {
        V odd[KB];
        GATED_ATTENTION_UNROLL
        for (int k = 0; k < KB; ++k) S::load_pairs(keys.row(k) + d, kv[k], odd[k]);
        dot_step<KB, RB>(acc, kv, q_rows + d, q_stride);
        dot_step<KB, RB>(acc, odd, q_rows + d + L, q_stride);
      } else {
        GATED_ATTENTION_UNROLL
        for (int k = 0; k < KB; ++k) kv[k] = load_row_vector(keys.row(k) + d);
        dot_step<KB, RB>(acc, kv, q_rows + d, q_stride);
      }
    }
    for (std::int64_t d = whole; d < depth; d += L) {
      const int count = static_cast<int>(std::min<std::int64_t>(L, depth - d));
      V kv[KB];
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) kv[k] = S::load_partial(keys.row(k) + d, count);
      dot_step<KB, RB>(acc, kv, q_rows + d, q_stride);
    }
    ahead.fetch(lines - per_step * steps);
    scale_by_keys<KB, RB>(acc, scales);
    store_dot_sums<KB, RB>(acc, scores, row_stride);
  }

  // acc[k][r] times key k's scale (int8 K), before the reduction: the S^T rows the tile writes
  // are final.
  template <int KB, int RB>
  GATED_ATTENTION_ALWAYS_INLINE static void scale_by_keys(V (&acc)[KB][RB], RowScales scales) {
    if constexpr (std::is_same_v<KT, std::int8_t>) {
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) {
        const V factor = S::set1(scales.first[k * scales.stride]);
        GATED_ATTENTION_UNROLL
        for (int r = 0; r < RB; ++r) acc[k][r] = S::mul(acc[k][r], factor);
      }
    }
  }

  // acc[k][r] += kv[k] * q[r] for one vector of d.
  template <int KB, int RB>
  GATED_ATTENTION_ALWAYS_INLINE static void dot_step(V (&acc)[KB][RB], const V (&kv)[KB],
                                                     const float* q, std::int64_t q_stride) {
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      const V qr = S::load_pinned(q + r * q_stride);
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) acc[k][r] = S::fma(kv[k], qr, acc[k][r]);
    }
  }

  template <int KB, int RB>
  GATED_ATTENTION_ALWAYS_INLINE static void store_dot_sums(const V (&acc)[KB][RB], float* scores,
                                                           std::int64_t row_stride) {
    if constexpr (KB == 4 && RB == 4) {
      S::reduce_add_4x4(acc, scores, row_stride);
    } else if (KB == 2 && RB == 8 && row_stride == 8) {
      // 2 keys of 8 rows, 8 apart (as decode lays them out): the 16 sums as 4 x 4 sums 4 apart.
      S::reduce_add_4x4(reinterpret_cast<const V(&)[4][4]>(acc), scores, 4);
    } else if constexpr (RB == 8) {
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) {
        S::reduce_add_4(reinterpret_cast<const V(&)[4]>(acc[k][0]), scores + k * row_stride);
        S::reduce_add_4(reinterpret_cast<const V(&)[4]>(acc[k][4]), scores + k * row_stride + 4);
      }
    } else if constexpr (RB == 4) {
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) S::reduce_add_4(acc[k], scores + k * row_stride);
    } else {
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) {
        GATED_ATTENTION_UNROLL
        for (int r = 0; r < RB; ++r) scores[k * row_stride + r] = S::reduce_add(acc[k][r]);
      }
    }
  }

  // The block's keys for RB rows, keys_per_tile(RB) at a time.
  template <int RB, class Rows>
  GATED_ATTENTION_ALWAYS_INLINE static void dot_rows(const Rows& keys, std::int64_t num_keys,
                                                     const float* q_rows, std::int64_t q_stride,
                                                     std::int64_t dk, float* s,
                                                     std::int64_t row_stride, RowScales scales,
                                                     LineCursor& ahead,
                                                     std::int64_t lines_per_tile) {
    constexpr int KB = keys_per_tile(RB);
    std::int64_t n = 0;
    for (; n + KB <= num_keys; n += KB) {
      dot_tile<KB, RB>(keys.advanced(n), q_rows, q_stride, dk, s + n * row_stride, row_stride,
                       scales.advanced(n), ahead, lines_per_tile);
    }
    if (n < num_keys) {
      dot_remainder<RB, KB - 1>(num_keys - n, keys.advanced(n), q_rows, q_stride, dk,
                                s + n * row_stride, row_stride, scales.advanced(n), ahead,
                                lines_per_tile);
    }
  }

  // The last count < KB keys in one tile of count keys (a tile per key would leave RB
  // accumulator chains, bound by the FMA latency).
  template <int RB, int KB, class Rows>
  GATED_ATTENTION_ALWAYS_INLINE static void dot_remainder(std::int64_t count, const Rows& keys,
                                                          const float* q_rows,
                                                          std::int64_t q_stride, std::int64_t dk,
                                                          float* s, std::int64_t row_stride,
                                                          RowScales scales, LineCursor& ahead,
                                                          std::int64_t lines) {
    if constexpr (KB > 0) {
      if (count == KB) {
        dot_tile<KB, RB>(keys, q_rows, q_stride, dk, s, row_stride, scales, ahead, lines);
      } else {
        dot_remainder<RB, KB - 1>(count, keys, q_rows, q_stride, dk, s, row_stride, scales, ahead,
                                  lines);
      }
    }
  }

  // Where head h's operands of a decode block lie: its keys, query rows, S^T and K scales at h
  // times these strides from head 0's.
  struct HeadStrides {
    std::int64_t heads, keys, queries, scores, key_scales;
  };

  // One tile step of keys (num_keys <= its keys) for every head, a group of `rows` <= RB rows
  // (by its compile-time row count), head 0's operands at keys, q_rows, s, scales.
  template <class Rows, int RB = kDotTileRows>
  static void dot_group(std::int64_t rows, const HeadStrides& hs, const Rows& keys,
                        std::int64_t num_keys, const float* q_rows, std::int64_t q_stride,
                        std::int64_t dk, float* s, std::int64_t row_stride, RowScales scales,
                        LineCursor& ahead, std::int64_t lines_per_tile) {
    if constexpr (RB > 0) {
      if (rows != RB) {
        return dot_group<Rows, RB - 1>(rows, hs, keys, num_keys, q_rows, q_stride, dk, s,
                                       row_stride, scales, ahead, lines_per_tile);
      }
      LineCursor cursor = ahead;  // see LineCursor: a local copy, in registers
      for (std::int64_t h = 0; h < hs.heads; ++h) {
        RowScales head_scales = scales;
        if (head_scales.first != nullptr) head_scales.first += h * hs.key_scales;
        dot_rows<RB>(keys.shifted(h * hs.keys), num_keys, q_rows + h * hs.queries, q_stride, dk,
                     s + h * hs.scores, row_stride, head_scales, cursor, lines_per_tile);
      }
      ahead = cursor;
    }
  }

  // The packed query rows of a head (`rows` of `padded` floats at q_head) in the form the
  // storage dot's row lanes read: each group of 4 in the slots past
  // kDecodeMaxRows rows (the head's rows hold at least kRowPadding).
  static void finish_queries(float* q_head, std::int64_t rows, std::int64_t padded) {
    if constexpr (kStorage) {
      static_assert(kDecodeMaxRows + 2 * Dot::kGroupSlots <= kRowPadding, "slots past the rows");
      for (std::int64_t g = 0; 4 * g < rows; ++g) {
        Dot::interleave_rows(q_head, rows, padded, g,
                             q_head + (kDecodeMaxRows + g * Dot::kGroupSlots) * padded);
      }
    }
  }

  // decode_scores by the row lanes: tiles of Dot::kLaneKeys keys of G groups of 4 rows (G = 2
  // above 4 rows), keys outer and heads inner as there.
  template <int G, class Rows>
  static void lane_scores(std::int64_t heads, const Rows& keys, std::int64_t key_head_stride,
                          std::int64_t num_keys, const float* q_rows, std::int64_t q_head_stride,
                          std::int64_t q_stride, std::int64_t dk, float* s,
                          std::int64_t s_head_stride, RowScales key_scales,
                          std::int64_t key_scale_head_stride, const RowPrefetch& ahead) {
    constexpr int KB = Dot::kLaneKeys / G;
    if constexpr (kDk > 0) q_stride = round_up(kDk, kRowPadding);  // constant offsets
    const std::int64_t tiles = heads * ((num_keys + KB - 1) / KB);
    LineCursor cursor{ahead};
    const std::int64_t lines_per_tile = tiles > 0 ? (cursor.lines() + tiles - 1) / tiles : 0;
    const float* slots = q_rows + kDecodeMaxRows * q_stride;
    for (std::int64_t n = 0; n < num_keys; n += KB) {
      const int count = static_cast<int>(std::min<std::int64_t>(KB, num_keys - n));
      const float* scales = key_scales.advanced(n).first;  // int8 K only
      for (std::int64_t h = 0; h < heads; ++h) {
        Dot::template lane_tile<G>(
            keys.shifted(h * key_head_stride).advanced(n), count, slots + h * q_head_stride,
            q_stride, Dot::kGroupSlots * q_stride, head_dim<kDk>(dk),
            scales != nullptr ? scales + h * key_scale_head_stride : nullptr, key_scales.stride,
            s + h * s_head_stride + n * 4 * G, cursor, lines_per_tile);
      }
    }
    cursor.fetch_rest();
  }

  // S^T of every head of the unit for one block (head h at s + h * s_head_stride): groups of a
  // tile's keys outer and heads inner, so that K is read in address order where a key's
  // heads lie together (see docs/performance-notes.md, "Decode scores: all heads of a unit in
  // one phase"). q_rows: head h at q_rows + h * q_head_stride. key_scales (int8 K): head 0's,
  // head h's key_scale_head_stride floats on. ahead: rows (the V rows the next phase reads)
  // fetched by the tiles in even shares, spread over each tile's steps along d, and all of them
  // by the end.
  template <class Rows>
  static void decode_scores(std::int64_t heads, std::int64_t rows, const Rows& keys,
                            std::int64_t key_head_stride, std::int64_t num_keys,
                            const float* q_rows, std::int64_t q_head_stride, std::int64_t q_stride,
                            std::int64_t dk, float* s, std::int64_t s_head_stride,
                            std::int64_t row_stride, RowScales key_scales,
                            std::int64_t key_scale_head_stride, const RowPrefetch& ahead) {
    if constexpr (kStorage) {
      const auto lanes = rows > 4 ? &lane_scores<2, Rows> : &lane_scores<1, Rows>;
      lanes(heads, keys, key_head_stride, num_keys, q_rows, q_head_stride, q_stride, dk, s,
            s_head_stride, key_scales, key_scale_head_stride, ahead);
    } else {
      dot_scores(heads, rows, keys, key_head_stride, num_keys, q_rows, q_head_stride, q_stride, dk,
                 s, s_head_stride, row_stride, key_scales, key_scale_head_stride, ahead);
    }
  }

  // decode_scores by the dot tiles.
  template <class Rows>
  static void dot_scores(std::int64_t heads, std::int64_t rows, const Rows& keys,
                         std::int64_t key_head_stride, std::int64_t num_keys, const float* q_rows,
                         std::int64_t q_head_stride, std::int64_t q_stride, std::int64_t dk,
                         float* s, std::int64_t s_head_stride, std::int64_t row_stride,
                         RowScales key_scales, std::int64_t key_scale_head_stride,
                         const RowPrefetch& ahead) {
    const std::int64_t groups = (rows + kDotTileRows - 1) / kDotTileRows;
    const std::int64_t step =
        keys_per_tile(static_cast<int>(std::min<std::int64_t>(kDotTileRows, rows)));
    const std::int64_t tiles = heads * groups * ((num_keys + step - 1) / step);
    LineCursor cursor{ahead};
    const std::int64_t lines_per_tile = tiles > 0 ? (cursor.lines() + tiles - 1) / tiles : 0;
    const HeadStrides hs{heads, key_head_stride, q_head_stride, s_head_stride,
                         key_scale_head_stride};
    for (std::int64_t n = 0; n < num_keys; n += step) {
      const std::int64_t count = std::min<std::int64_t>(step, num_keys - n);
      for (std::int64_t r = 0; r < rows; r += kDotTileRows) {
        dot_group(std::min<std::int64_t>(kDotTileRows, rows - r), hs, keys.advanced(n), count,
                  q_rows + r * q_stride, q_stride, dk, s + n * row_stride + r, row_stride,
                  key_scales.advanced(n), cursor, lines_per_tile);
      }
    }
    cursor.fetch_rest();
  }
};
