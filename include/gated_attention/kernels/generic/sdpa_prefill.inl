// The prefill regime: many rows of one KV head, along vector lanes. Per block of kKvBlock keys:
// S^T = K q^T from the query panels, the online softmax, and O += P V from the packed V block.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

template <class T, class KT, class VT, int kDk, int kDv, bool kRoundWeights>
struct PrefillBlocks {
  using Scores = ScoreTiles<KT, kDk>;
  using Values = ValueTiles<VT, kDv, kRoundWeights>;
  // q of K's type read unscaled by the storage dot panels, the scores scaled after.
  static constexpr bool kScaleScores = kExactQueryDot<T, KT>;

  // The unit's queries, scaled by scale * log2(e) (or not: kScaleScores), into the panels of
  // Scores::q_panel_element.
  static void pack_queries(const UnitWork<T, KT, VT>& u) {
    const std::int64_t depth = head_dim<kDk>(u.dk);
    float row[kMaxHeadDim];
    for (std::int64_t r = 0; r < u.rows_v; ++r) {
      u.scaled_query(0, r, depth, row, kScaleScores ? 1.0f : u.scale_log2);
      Scores::pack_query_row(u.w.q_t, u.rows_v, depth, r, row);
    }
  }

  // AMX tiles for S^T (a bf16 K on a path with them) and for P.V (a bf16 V whose weights are
  // rounded), where amx_tiles() and dk is a multiple of 32 (kernels/amx_tiles.hpp).
  static constexpr bool kTileScores = Scores::Dot::kTiles;
  static constexpr bool kTileValues = kTileScores && Values::kPairPanels && Values::Dot::kTiles;
  static bool uses_tiles(const UnitWork<T, KT, VT>& u) {
    if constexpr (kTileScores) return head_dim<kDk>(u.dk) % 32 == 0 && amx_tiles();
    return false;
  }

  // Keys [n0, n0 + nb) of the unit's one head.
  static void block(const UnitWork<T, KT, VT>& u, std::int64_t n0, std::int64_t nb,
                    bool all_visible, bool tiles) {
    const SdpaWorkerScratch& w = u.w;
    const std::int64_t rs = u.row_stride(), dvp = u.plan.dv_padded;
    const KvRows<StridedRows<KT>> key_rows = u.key_rows(n0, nb);
    const KvRows<StridedRows<VT>> value_rows = u.value_rows(n0, nb);
    const KT* keys = key_rows.rows.first;
    const VT* values = value_rows.rows.first;
    const std::int64_t k_stride = key_rows.rows.stride, v_stride = value_rows.rows.stride;
    if constexpr (kTileScores) {
      if (tiles) {
        Scores::tile_prefill_scores(keys, k_stride, nb, w.q_t, u.rows_v, head_dim<kDk>(u.dk),
                                    w.scores, rs);
      }
    }
    if (!kTileScores || !tiles) {
      Scores::prefill_scores(keys, k_stride, nb, w.q_t, u.rows_v, head_dim<kDk>(u.dk), w.scores, rs,
                             w.kv_block);
    }
    if constexpr (kScaleScores) scale_scores(w.scores, nb, u.rows_v, rs, u.scale_log2);
    if constexpr (std::is_same_v<KT, std::int8_t>) {
      u.scale_by_rows(key_rows.head_scales(0), w.scores, nb, u.rows_v, rs);
    }
    update_softmax(u, 0, w.scores, n0, nb, u.rows_v, rs, all_visible);
    if constexpr (std::is_same_v<VT, std::int8_t>) {
      u.scale_by_rows(value_rows.head_scales(0), w.scores, nb, u.rows_v, rs);
    }
    if (!all_visible && Values::accumulate_if_not_finite(w.scores, rs, u.rows, value_rows.rows, nb,
                                                         head_dim<kDv>(u.dv), w.out, dvp)) {
      return;
    }
    Values::pack(values, v_stride, nb, head_dim<kDv>(u.dv), dvp, w.kv_block);
    if constexpr (kTileValues) {
      if (tiles)
        return Values::tile_accumulate_packed(w.scores, rs, u.rows_v, w.kv_block, nb, dvp, w.out);
    }
    Values::accumulate_packed(w.scores, rs, u.rows, w.kv_block, nb, dvp, w.out);
  }

  static void run(const UnitWork<T, KT, VT>& u) {
    pack_queries(u);
    const bool tiles = uses_tiles(u);
    if constexpr (kTileScores) {
      if (tiles) Scores::Dot::configure_tiles();
    }
    for (std::int64_t n0 = u.begin, n1 = 0; n0 < u.end; n0 = n1) {
      n1 = u.segment_end(n0, std::min(u.end, n0 + kKvBlock));
      const BlockVisibility seen = block_visibility(u.w, u.rows, u.plan.group, n0, n1 - 1);
      if (seen.any) block(u, n0, n1 - n0, seen.all, tiles);
    }
    if constexpr (kTileScores) {
      if (tiles) Scores::Dot::release_tiles();
    }
  }
};
