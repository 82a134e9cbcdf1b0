// The decode regime: at most kDecodeMaxRows rows for every KV head of a batch entry. Per block of
// Tuning::kDecodeBlock keys: the scores of every head as dot products along d, then each head's
// softmax and O += P V with V read in place. K/V stream from memory, each phase fetching what a
// later one reads Tuning::kDecodeFetchBlocks blocks ahead, spread evenly over its tiles: the
// scores fetch the V rows, each head's P.V a share of the next K rows (see
// docs/performance-notes.md, "Decode prefetch: software against the hardware prefetcher" and
// "Decode prefetch: spread over each tile's steps").
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

template <class T, class KT, class VT, int kDk, int kDv, bool kRoundWeights>
struct DecodeBlocks {
  using Scores = ScoreTiles<KT, kDk>;
  using Values = ValueTiles<VT, kDv, kRoundWeights>;
  // q of K's type read unscaled by the storage dot tiles, the scores scaled after.
  static constexpr bool kScaleScores = kExactQueryDot<T, KT>;
  // Keys per block: the storage dot's own (StorageDot::kDecodeBlock) where it reads K or V.
  static constexpr std::int64_t decode_block() {
    if constexpr (Scores::kStorage) {
      return Scores::Dot::kDecodeBlock;
    } else if constexpr (Values::kStorage) {
      return Values::Dot::kDecodeBlock;
    } else {
      return Tuning::kDecodeBlock;
    }
  }
  static constexpr std::int64_t kBlock = decode_block();
  static_assert(kBlock <= kKvBlock, "the scores scratch holds kKvBlock keys per head");

  // S^T's row stride: the rows packed 4 or 8 to a key, L / stride keys per vector where that is
  // below L (see Softmax::ScoreVectors and docs/performance-notes.md, "Decode softmax: packed score
  // rows").
  static std::int64_t score_stride(std::int64_t rows) { return rows <= 4 ? 4 : 8; }

  // Each head's rows of queries, scaled by scale * log2(e) (or not: kScaleScores), zero-padded to
  // dk_padded and in the form the dot tiles read (Scores::finish_query); and the padded rows of
  // S^T, which the dot tiles do not write, zeroed. The tiles read the unit's rows alone, so the
  // rows past them (up to rows_v) are not packed: each task of a split unit packs its queries.
  static void pack_queries(const UnitWork<T, KT, VT>& u, std::int64_t stride) {
    const std::int64_t dkp = u.dk_padded(), depth = head_dim<kDk>(u.dk);
    for (std::int64_t h = 0; h < u.heads; ++h) {
      for (std::int64_t r = 0; r < u.rows; ++r) {
        float* row = u.w.q_t + h * u.q_size() + r * dkp;
        u.scaled_query(h, r, depth, row, kScaleScores ? 1.0f : u.scale_log2, !Scores::kStorage);
        std::fill(row + depth, row + dkp, 0.0f);
        Scores::finish_query(row, depth, dkp);
      }
      Scores::finish_queries(u.w.q_t + h * u.q_size(), u.rows, dkp);
    }
    for (std::int64_t n = 0; n < u.heads * kBlock; ++n) {
      for (std::int64_t r = u.rows; r < stride; ++r) u.w.scores[n * stride + r] = 0.0f;
    }
  }

  // The rows [n, n + keys) of every head of K or V (`t`; dims: a row's length), none past the
  // task's keys or n's page, as one strided run of spans: one span per key where a key's heads lie
  // within its stride (as in [b, s, h, d]), else one per head. None for pages below the in-place
  // minimum (table_block fetches through tables). Spans of 8- and 16-bit elements are fetched row
  // by row, f32 ones column by column (docs/performance-notes.md, "Decode prefetch: 8- and 16-bit
  // rows in address order").
  template <class E>
  static RowPrefetch block_rows(const UnitWork<T, KT, VT>& u, const TensorView<const E, 4>& t,
                                std::int64_t n, std::int64_t keys, std::int64_t dims) {
    constexpr auto kBytes = static_cast<std::int64_t>(sizeof(E));
    if (n >= u.end || u.geometry.gathers) return RowPrefetch{};
    keys = u.segment_end(n, std::min(u.end, n + keys)) - n;
    const std::int64_t key_stride = t.strides[1], head_stride = t.strides[2];
    const KeyAt at = u.args.key_at(u.unit.batch, n);
    const E* first = &t(at.index, at.row, u.unit.kv_head, 0);
    const std::int64_t key_span = (u.heads - 1) * head_stride + dims;
    RowPrefetch rows{first, head_stride * kBytes, u.heads,
                     ((keys - 1) * key_stride + dims) * kBytes};
    if (key_span <= key_stride) rows = {first, key_stride * kBytes, keys, key_span * kBytes};
    rows.by_rows = kBytes < 4;
    return rows;
  }

  // Head h's share of `rows` of `heads`, in order: what its P.V phase fetches.
  static RowPrefetch head_share(const RowPrefetch& rows, std::int64_t heads, std::int64_t h) {
    const std::int64_t per = (rows.rows + heads - 1) / heads;
    return rows.part(h * per, per);
  }

  // A block's keys in runs that each lie in one page (or all of them: not paged, or read through
  // a table of rows).
  static constexpr std::int64_t kMaxSegments = kBlock / kDecodeMinPageInPlace + 2;
  template <class Rows>
  struct Segment {
    std::int64_t first, keys;  // keys [first, first + keys), first relative to the block
    KvRows<Rows> values;
    RowPrefetch keys_ahead;  // the K rows its P.V tiles fetch, shared by the heads
  };
  // Whether small pages are read through tables of rows rather than gathered: where V's tiles read
  // rows in place (the packed tiles of a runtime dv read a gathered block).
  static constexpr bool kTableReads = Values::kStorage || Values::kInPlace;

  // Head h's O += P V for one segment (`scores`: its first key's row of P^T); next_keys: the K rows
  // its tiles fetch.
  template <class Rows>
  static void segment_values(const UnitWork<T, KT, VT>& u, std::int64_t h, const Segment<Rows>& seg,
                             float* scores, std::int64_t stride, bool all_visible,
                             const RowPrefetch& next_keys) {
    const SdpaWorkerScratch& w = u.w;
    const std::int64_t dvp = u.plan.dv_padded, nb = seg.keys;
    const Rows values = seg.values.head(h);
    float* out = w.out + h * u.out_size();
    if constexpr (std::is_same_v<VT, std::int8_t> && !Values::kStorage) {
      u.scale_by_rows(seg.values.head_scales(h), scores, nb, stride, stride);
    }
    if (!all_visible && Values::template accumulate_if_not_finite<Values::kValuePairs>(
                            scores, stride, u.rows, values, nb, head_dim<kDv>(u.dv), out, dvp)) {
      return;
    }
    constexpr bool kWidenOnce =
        Values::kInPlace && !std::is_same_v<VT, float> && Tuning::kWidenOncePerUnit;
    if constexpr (Values::kStorage) {
      if constexpr (std::is_same_v<Rows, TableRows<VT>>) {
        // The storage tiles walk each column chunk down every row of the block: L1 fetches for
        // table rows, which the hardware prefetcher does not follow as it does strided ones.
        values.fetch_rows(0, nb, head_dim<kDv>(u.dv) * static_cast<std::int64_t>(sizeof(VT)))
            .fetch(0, nb);
      }
      Values::accumulate_storage(scores, stride, u.rows, values, seg.values.head_scales(h), nb,
                                 head_dim<kDv>(u.dv), out, dvp, w.kv_block, next_keys);
    } else if (kWidenOnce && u.rows > Values::kInPlaceTileRows) {
      // More than one row group: V widened once into L1 for all of them.
      for (std::int64_t n = 0; n < nb; ++n) {
        if constexpr (Values::kValuePairs) {
          widen_pairs(values.row(n), kDv, w.kv_block + n * kDv);
        } else {
          widen_rows(values.row(n), 0, 1, kDv, w.kv_block + n * kDv);
        }
      }
      ValueTiles<float, kDv>::accumulate_in_place(
          scores, stride, u.rows, StridedRows<float>{w.kv_block, kDv}, nb, out, dvp, next_keys);
    } else if constexpr (Values::kInPlace) {
      Values::accumulate_in_place(scores, stride, u.rows, values, nb, out, dvp, next_keys);
    } else {
      next_keys.fetch(0, next_keys.rows);
      Values::pack(values.first, values.stride, nb, head_dim<kDv>(u.dv), dvp, w.kv_block);
      Values::accumulate_packed(scores, stride, u.rows, w.kv_block, nb, dvp, out);
    }
  }

  // Each head's softmax and P.V for keys [n0, n0 + nb), each segment fetching head h's share of
  // its K rows ahead.
  template <class Rows>
  static void head_blocks(const UnitWork<T, KT, VT>& u, const Segment<Rows>* segs,
                          std::int64_t num_segs, std::int64_t n0, std::int64_t nb,
                          std::int64_t stride, bool all_visible) {
    for (std::int64_t h = 0; h < u.heads; ++h) {
      float* scores = u.w.scores + h * kBlock * stride;  // one block per head
      if constexpr (kScaleScores) scale_scores(scores, nb, u.rows, stride, u.scale_log2);
      update_softmax(u, h, scores, n0, nb, std::min(u.rows_v, stride), stride, all_visible);
      for (std::int64_t i = 0; i < num_segs; ++i) {
        segment_values(u, h, segs[i], scores + segs[i].first * stride, stride, all_visible,
                       head_share(segs[i].keys_ahead, u.heads, h));
      }
    }
  }

  // Keys [n0, n0 + nb) of every head of the unit, in runs that lie in one page each.
  static void block(const UnitWork<T, KT, VT>& u, std::int64_t n0, std::int64_t nb,
                    std::int64_t stride, bool all_visible) {
    if constexpr (kTableReads) {
      if (u.geometry.gathers) return table_block(u, n0, nb, stride, all_visible);
    }
    const SdpaArgs<T, KT, VT>& a = u.args;
    // Each segment's tiles fetch the same keys of a later block: V Tuning::kDecodeFetchBlocks
    // blocks ahead, K at least the next block's (the scores have read this one's).
    const std::int64_t values_ahead = Tuning::kDecodeFetchBlocks * kBlock;
    const std::int64_t keys_ahead = std::max<std::int64_t>(Tuning::kDecodeFetchBlocks, 1) * kBlock;
    Segment<StridedRows<VT>> segs[kMaxSegments];
    std::int64_t num_segs = 0;
    for (std::int64_t s0 = n0, s1 = 0; s0 < n0 + nb; s0 = s1, ++num_segs) {
      s1 = u.segment_end(s0, n0 + nb);
      const auto keys = u.key_rows(s0, s1 - s0);
      segs[num_segs] = {s0 - n0, s1 - s0, u.value_rows(s0, s1 - s0),
                        block_rows(u, a.k, s0 + keys_ahead, s1 - s0, head_dim<kDk>(u.dk))};
      Scores::decode_scores(u.heads, u.rows, keys.rows, keys.head_stride, s1 - s0, u.w.q_t,
                            u.q_size(), u.dk_padded(), head_dim<kDk>(u.dk),
                            u.w.scores + (s0 - n0) * stride, kBlock * stride, stride,
                            keys.head_scales(0), keys.scale_head_stride,
                            block_rows(u, a.v, s0 + values_ahead, s1 - s0, head_dim<kDv>(u.dv)));
    }
    head_blocks(u, segs, num_segs, n0, nb, stride, all_visible);
  }

  // block() for small pages: K and V read where they lie through tables of rows; the tiles fetch
  // the rows of the block Tuning::kDecodeFetchBlocks ahead (K at least the next block's) as in
  // block().
  static void table_block(const UnitWork<T, KT, VT>& u, std::int64_t n0, std::int64_t nb,
                          std::int64_t stride, bool all_visible) {
    const SdpaArgs<T, KT, VT>& a = u.args;
    const std::int64_t values_ahead = Tuning::kDecodeFetchBlocks * kBlock;
    const std::int64_t keys_ahead = std::max<std::int64_t>(Tuning::kDecodeFetchBlocks, 1) * kBlock;
    const void* key_table[kBlock];
    const void* value_table[kBlock];
    const void* keys_ahead_table[kBlock];
    const void* values_ahead_table[kBlock];
    const auto keys = u.kv_table(a.k, a.maybe_k_scales, n0, nb, key_table, u.w.k_row_scales);
    const Segment<TableRows<VT>> seg{
        0, nb, u.kv_table(a.v, a.maybe_v_scales, n0, nb, value_table, u.w.v_row_scales),
        u.table_fetch(a.k, n0 + keys_ahead, nb, head_dim<kDk>(u.dk), keys_ahead_table)};
    Scores::decode_scores(
        u.heads, u.rows, keys.rows, keys.head_stride, nb, u.w.q_t, u.q_size(), u.dk_padded(),
        head_dim<kDk>(u.dk), u.w.scores, kBlock * stride, stride, keys.head_scales(0),
        keys.scale_head_stride,
        u.table_fetch(a.v, n0 + values_ahead, nb, head_dim<kDv>(u.dv), values_ahead_table));
    head_blocks(u, &seg, 1, n0, nb, stride, all_visible);
  }

  // The task's blocks; false where a block's int8 row scales are not all finite and >= 0 (checked
  // block by block, so that the tiles find them in L1), the blocks from there on skipped.
  static bool run(const UnitWork<T, KT, VT>& u) {
    const std::int64_t stride = score_stride(u.rows);
    pack_queries(u, stride);
    for (std::int64_t n0 = u.begin; n0 < u.end; n0 += kBlock) {
      const std::int64_t nb = std::min(kBlock, u.end - n0);
      const BlockVisibility seen = block_visibility(u.w, u.rows, u.plan.group, n0, n0 + nb - 1);
      if (!seen.any) continue;
      if (!u.key_scales_good(n0, n0 + nb)) return false;
      block(u, n0, nb, stride, seen.all);
    }
    if constexpr (Values::kValuePairs) {
      for (std::int64_t h = 0; h < u.heads; ++h) {
        float* out = u.w.out + h * u.out_size();
        for (std::int64_t r = 0; r < u.rows; ++r) from_pair_order(out + r * u.plan.dv_padded, kDv);
      }
    }
    return true;
  }
};
