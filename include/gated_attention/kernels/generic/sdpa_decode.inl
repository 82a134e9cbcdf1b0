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
  // S^T, which the dot tiles do not write, zeroed.
  static void pack_queries(const UnitWork<T, KT, VT>& u, std::int64_t stride) {
    const std::int64_t dkp = u.dk_padded(), depth = head_dim<kDk>(u.dk);
    for (std::int64_t h = 0; h < u.heads; ++h) {
      for (std::int64_t r = 0; r < u.rows_v; ++r) {
        float* row = u.w.q_t + h * u.q_size() + r * dkp;
        u.scaled_query(h, r, depth, row, kScaleScores ? 1.0f : u.scale_log2, !Scores::kStorage);
        std::fill(row + depth, row + dkp, 0.0f);
        Scores::finish_query(row, depth, dkp);
      }
    }
    for (std::int64_t n = 0; n < u.heads * kBlock; ++n) {
      for (std::int64_t r = u.rows; r < stride; ++r) u.w.scores[n * stride + r] = 0.0f;
    }
  }

  // The rows [n, n + kBlock) of every head of K or V (`base`: head 0's row 0; dims: a row's
  // length), none past the task's keys, as one strided run of spans: one span per key where a
  // key's heads lie within its stride (as in [b, s, h, d]), else one per head.
  template <class E>
  static RowPrefetch block_rows(const UnitWork<T, KT, VT>& u, const E* base,
                                std::int64_t key_stride, std::int64_t head_stride, std::int64_t n,
                                std::int64_t dims) {
    constexpr auto kBytes = static_cast<std::int64_t>(sizeof(E));
    if (n >= u.end) return RowPrefetch{};
    const std::int64_t keys = std::min(kBlock, u.end - n);
    const std::int64_t key_span = (u.heads - 1) * head_stride + dims;
    if (key_span <= key_stride) {
      return RowPrefetch{base + n * key_stride, key_stride * kBytes, keys, key_span * kBytes};
    }
    return RowPrefetch{base + n * key_stride, head_stride * kBytes, u.heads,
                       ((keys - 1) * key_stride + dims) * kBytes};
  }

  // The row scales of keys n0.. of the unit's head h (none for a null view).
  static RowScales row_scales(const TensorView<const float, 3>& scales,
                              const UnitWork<T, KT, VT>& u, std::int64_t h, std::int64_t n0) {
    if (scales.data == nullptr) return {};
    return {&scales(u.unit.batch, n0, u.unit.kv_head + h), scales.strides[1]};
  }

  // Head h's share of `rows` of `heads`, in order: what its P.V phase fetches.
  static RowPrefetch head_share(const RowPrefetch& rows, std::int64_t heads, std::int64_t h) {
    const std::int64_t per = (rows.rows + heads - 1) / heads;
    const std::int64_t from = std::min(rows.rows, h * per);
    if (from == rows.rows) return RowPrefetch{};
    return RowPrefetch{static_cast<const char*>(rows.first) + from * rows.stride_bytes,
                       rows.stride_bytes, std::min(per, rows.rows - from), rows.bytes};
  }

  // Head h's softmax and P.V for keys [n0, n0 + nb); next_keys: its share of the K rows to fetch.
  static void head_block(const UnitWork<T, KT, VT>& u, std::int64_t h, std::int64_t n0,
                         std::int64_t nb, std::int64_t stride, bool all_visible,
                         const RowPrefetch& next_keys) {
    const SdpaArgs<T, KT, VT>& a = u.args;
    const SdpaWorkerScratch& w = u.w;
    const std::int64_t dvp = u.plan.dv_padded, v_stride = a.v.strides[1];
    const VT* values = &a.v(u.unit.batch, n0, u.unit.kv_head + h, 0);
    float* out = w.out + h * u.out_size();
    float* scores = w.scores + h * kBlock * stride;  // one block per head
    update_softmax(u, h, scores, n0, nb, std::min(u.rows_v, stride), stride, all_visible);
    if constexpr (std::is_same_v<VT, std::int8_t> && !Values::kStorage) {
      u.scale_by_rows(a.maybe_v_scales, h, scores, n0, nb, stride, stride);
    }
    if (!all_visible && Values::accumulate_if_not_finite(scores, stride, u.rows, values, v_stride,
                                                         nb, head_dim<kDv>(u.dv), out, dvp)) {
      return;
    }
    constexpr bool kWidenOnce =
        Values::kInPlace && !std::is_same_v<VT, float> && Tuning::kWidenOncePerUnit;
    if constexpr (Values::kStorage) {
      Values::accumulate_storage(scores, stride, u.rows, values, v_stride,
                                 row_scales(a.maybe_v_scales, u, h, n0), nb, head_dim<kDv>(u.dv),
                                 out, dvp, w.kv_block, next_keys);
    } else if (kWidenOnce && u.rows > Values::kInPlaceTileRows) {
      // More than one row group: V widened once into L1 for all of them.
      widen_rows(values, v_stride, nb, kDv, w.kv_block);
      ValueTiles<float, kDv>::accumulate_in_place(scores, stride, u.rows, w.kv_block, kDv, nb, out,
                                                  dvp, next_keys);
    } else if constexpr (Values::kInPlace) {
      Values::accumulate_in_place(scores, stride, u.rows, values, v_stride, nb, out, dvp,
                                  next_keys);
    } else {
      next_keys.fetch(0, next_keys.rows);
      Values::pack(values, v_stride, nb, head_dim<kDv>(u.dv), dvp, w.kv_block);
      Values::accumulate_packed(scores, stride, u.rows, w.kv_block, nb, dvp, out);
    }
  }

  // Keys [n0, n0 + nb) of every head of the unit.
  static void block(const UnitWork<T, KT, VT>& u, std::int64_t n0, std::int64_t nb,
                    std::int64_t stride, bool all_visible) {
    const SdpaArgs<T, KT, VT>& a = u.args;
    const KT* k_base = &a.k(u.unit.batch, 0, u.unit.kv_head, 0);
    const VT* v_base = &a.v(u.unit.batch, 0, u.unit.kv_head, 0);
    const std::int64_t k_stride = a.k.strides[1], k_head_stride = a.k.strides[2];
    const std::int64_t values_from = n0 + Tuning::kDecodeFetchBlocks * kBlock;
    // K: at least the next block's (the scores have read this one's).
    const std::int64_t keys_from =
        n0 + std::max<std::int64_t>(Tuning::kDecodeFetchBlocks, 1) * kBlock;
    const RowPrefetch keys_ahead =
        block_rows(u, k_base, k_stride, k_head_stride, keys_from, head_dim<kDk>(u.dk));
    Scores::decode_scores(
        u.heads, u.rows, k_base + n0 * k_stride, k_stride, k_head_stride, nb, u.w.q_t, u.q_size(),
        u.dk_padded(), head_dim<kDk>(u.dk), u.w.scores, kBlock * stride, stride,
        row_scales(a.maybe_k_scales, u, 0, n0), a.maybe_k_scales.strides[2],
        block_rows(u, v_base, a.v.strides[1], a.v.strides[2], values_from, head_dim<kDv>(u.dv)));
    for (std::int64_t h = 0; h < u.heads; ++h) {
      if constexpr (kScaleScores) {
        scale_scores(u.w.scores + h * kBlock * stride, nb, u.rows, stride, u.scale_log2);
      }
      head_block(u, h, n0, nb, stride, all_visible, head_share(keys_ahead, u.heads, h));
    }
  }

  static void run(const UnitWork<T, KT, VT>& u) {
    const std::int64_t stride = score_stride(u.rows);
    pack_queries(u, stride);
    for (std::int64_t n0 = u.begin; n0 < u.end; n0 += kBlock) {
      const std::int64_t nb = std::min(kBlock, u.end - n0);
      const BlockVisibility seen = block_visibility(u.w, u.rows, u.plan.group, n0, n0 + nb - 1);
      if (seen.any) block(u, n0, nb, stride, seen.all);
    }
  }
};
