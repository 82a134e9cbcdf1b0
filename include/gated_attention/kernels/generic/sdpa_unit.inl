// One task's work: a unit's rows (or one key split of them), the keys they see, and the running
// softmax state they carry from block to block. Shared by the prefill and decode drivers.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

// Keys [n0, n0 + nb) of K or V for a unit's heads: strided rows where they lie (contiguous views,
// or one page) or gathered into the worker's scratch, or a table of rows where they lie (small
// pages, decode).
template <class Rows>
struct KvRows {
  Rows rows;  // from key n0 of the unit's first head
  std::int64_t head_stride = 0;
  const float* scales = nullptr;  // its row scale (int8), else null
  std::int64_t scale_key_stride = 0, scale_head_stride = 0;

  Rows head(std::int64_t h) const { return rows.shifted(h * head_stride); }
  RowScales head_scales(std::int64_t h) const {
    return {scales != nullptr ? scales + h * scale_head_stride : nullptr, scale_key_stride};
  }
};

template <class T, class KT, class VT>
struct UnitWork {
  const SdpaArgs<T, KT, VT>& args;
  const SdpaPlan& plan;
  const UnitGeometry& geometry;  // the unit's regime's
  const SdpaWorkerScratch& w;
  float scale_log2;
  SdpaUnit unit;
  std::int64_t dk, dv;        // the head dims (drivers read them through head_dim<kDk>, <kDv>)
  std::int64_t i0;            // the unit's first query position
  std::int64_t rows, rows_v;  // rows (positions x group), and rounded up to whole vectors
  std::int64_t heads;         // KV heads of the unit (every one in decode, one in prefill)
  std::int64_t begin, end;    // the keys this task reads: [begin, end)
  bool track_sink;            // the sink-share statistic is requested

  std::int64_t row_stride() const { return geometry.row_stride; }
  std::int64_t dk_padded() const { return round_up(dk, kRowPadding); }
  std::int64_t q_size() const { return dk_padded() * row_stride(); }       // per head
  std::int64_t out_size() const { return row_stride() * plan.dv_padded; }  // per head
  // Row r's query (head r % group of position i0 + r / group) of head h; null past the rows.
  const T* query(std::int64_t h, std::int64_t r) const {
    const std::int64_t g = plan.group;
    if (r >= rows) return nullptr;
    const QueryAt at = args.query_at(unit.batch, i0 + r / g);
    return &args.q(at.index, at.row, unit.kv_head + h, r % g, 0);
  }
  // Row r of head h's query times `factor` (scale_log2: log2 units) (and, under
  // DotPrecision::storage where `round`, rounded to K's type) into row[0, depth); zeros past the
  // rows.
  void scaled_query(std::int64_t h, std::int64_t r, std::int64_t depth, float* row, float factor,
                    bool round = true) const {
    const T* q = query(h, r);
    for (std::int64_t d = 0; d < depth; ++d) row[d] = q != nullptr ? to_float(q[d]) * factor : 0.0f;
    if (rounds_query_v<T, KT> && round && q != nullptr &&
        args.dot_precision == DotPrecision::storage) {
      round_query_row<KT>(row, depth);
    }
  }
  // Whether the int8 K and V row scales of keys [n0, n1) of the unit's heads are finite and >= 0
  // (true for other types).
  bool key_scales_good(std::int64_t n0, std::int64_t n1) const {
    if constexpr (std::is_same_v<KT, std::int8_t> || std::is_same_v<VT, std::int8_t>) {
      return ::gated_attention::detail::key_scales_good(args, unit.batch, n0, n1, unit.kv_head,
                                                        heads);
    } else {
      return true;
    }
  }
  // The end of the run of keys from n0 to at most n1 that lies in n0's page (for pages read in
  // place; n1 otherwise).
  std::int64_t segment_end(std::int64_t n0, std::int64_t n1) const {
    const std::int64_t page = plan.page_size;
    return page > 0 && !geometry.gathers ? std::min(n1, (n0 / page + 1) * page) : n1;
  }

  // Keys [n0, n0 + nb) of `t` (K or V) and its row scales for the unit's heads: in place where
  // they lie in one page (or the views are not paged), else gathered into `rows` and
  // `row_scales`, [nb, heads, d] and [nb, heads], each key copied fetching the one
  // Tuning::kGatherFetchKeys later.
  template <class E>
  KvRows<StridedRows<E>> kv_rows(const TensorView<const E, 4>& t,
                                 const TensorView<const float, 3>& scales, std::int64_t n0,
                                 std::int64_t nb, void* rows, float* row_scales) const {
    const KeyAt at = args.key_at(unit.batch, n0);
    if (!geometry.gathers) {
      const float* s = scales.data != nullptr ? &scales(at.index, at.row, unit.kv_head) : nullptr;
      return {{&t(at.index, at.row, unit.kv_head, 0), t.strides[1]},
              t.strides[2],
              s,
              scales.strides[1],
              scales.strides[2]};
    }
    const std::int64_t d = t.extents[3], ahead = Tuning::kGatherFetchKeys;
    const auto row_bytes = d * static_cast<std::int64_t>(sizeof(E));
    E* to = static_cast<E*>(rows);
    KeyCursor fetch = key_cursor(std::min(n0 + ahead, end - 1));  // stepped within the entry only
    for_each_key(n0, nb, [&](std::int64_t n, const KeyAt& key) {
      if (n0 + n + ahead < end) {  // fetch one key `ahead` per key copied
        for (std::int64_t h = 0; h < heads; ++h) {
          const char* row = reinterpret_cast<const char*>(
              &t(fetch.key.index, fetch.key.row, unit.kv_head + h, 0));
          for (std::int64_t at = 0; at < row_bytes; at += kCacheLineBytes)
            prefetch_line_l2(row + at);
        }
        if (n0 + n + ahead + 1 < end) fetch.next();
      }
      for (std::int64_t h = 0; h < heads; ++h) {
        const E* from = &t(key.index, key.row, unit.kv_head + h, 0);
        std::copy(from, from + d, to + (n * heads + h) * d);
      }
      gather_row_scales(scales, key, n, row_scales);
    });
    return {{to, heads * d}, d, scales.data != nullptr ? row_scales : nullptr, heads, 1};
  }
  KvRows<StridedRows<KT>> key_rows(std::int64_t n0, std::int64_t nb) const {
    return kv_rows(args.k, args.maybe_k_scales, n0, nb, w.k_rows, w.k_row_scales);
  }
  KvRows<StridedRows<VT>> value_rows(std::int64_t n0, std::int64_t nb) const {
    return kv_rows(args.v, args.maybe_v_scales, n0, nb, w.v_rows, w.v_row_scales);
  }

  // The keys of the unit's entry in order from one key, walking its pages: one division for the
  // walk rather than one per key. next() must not step past the entry's last key.
  struct KeyCursor {
    const SdpaArgs<T, KT, VT>& args;
    std::int64_t batch, page, slot;
    KeyAt key;
    void next() {
      if (++key.row == page) {
        key.row = 0;
        key.index = args.maybe_page_table(batch, ++slot);
      }
    }
  };
  KeyCursor key_cursor(std::int64_t n0) const {
    const std::int64_t page = args.paged() ? args.k.extents[1] : 0;
    return {args, unit.batch, page, page > 0 ? n0 / page : 0, args.key_at(unit.batch, n0)};
  }

  // f(n, key) for keys n0 + n of the unit's entry, n in [0, count), in order.
  template <class F>
  void for_each_key(std::int64_t n0, std::int64_t count, F&& f) const {
    if (count <= 0) return;
    KeyCursor cursor = key_cursor(n0);
    for (std::int64_t n = 0;; cursor.next()) {
      f(n, cursor.key);
      if (++n == count) return;
    }
  }

  // Key `key`'s row scales of the unit's heads (if any) into row_scales[n * heads, + heads).
  void gather_row_scales(const TensorView<const float, 3>& scales, const KeyAt& key, std::int64_t n,
                         float* row_scales) const {
    if (scales.data == nullptr) return;
    for (std::int64_t h = 0; h < heads; ++h) {
      row_scales[n * heads + h] = scales(key.index, key.row, unit.kv_head + h);
    }
  }

  // Keys [n0, n0 + nb) of `t` for the unit's heads read where they lie, through `table` (nb
  // entries: each key's row of the first head); their row scales gathered into `row_scales`.
  template <class E>
  KvRows<TableRows<E>> kv_table(const TensorView<const E, 4>& t,
                                const TensorView<const float, 3>& scales, std::int64_t n0,
                                std::int64_t nb, const void** table, float* row_scales) const {
    for_each_key(n0, nb, [&](std::int64_t n, const KeyAt& key) {
      table[n] = &t(key.index, key.row, unit.kv_head, 0);
      gather_row_scales(scales, key, n, row_scales);
    });
    return {{table, 0}, t.strides[2], scales.data != nullptr ? row_scales : nullptr, heads, 1};
  }

  // The rows of keys [n0, n0 + nb) of `t` (`dims` elements of each head), none past the task's
  // keys, through `table`, for a phase's tiles to fetch: each key's heads as one run where they
  // lie within its stride, else its first head's row.
  template <class E>
  RowPrefetch table_fetch(const TensorView<const E, 4>& t, std::int64_t n0, std::int64_t nb,
                          std::int64_t dims, const void** table) const {
    constexpr auto kBytes = static_cast<std::int64_t>(sizeof(E));
    const std::int64_t keys = std::max<std::int64_t>(0, std::min(end, n0 + nb) - n0);
    for_each_key(n0, keys, [&](std::int64_t n, const KeyAt& key) {
      table[n] = &t(key.index, key.row, unit.kv_head, 0);
    });
    const std::int64_t key_span = (heads - 1) * t.strides[2] + dims;
    return TableRows<E>{table, 0}.fetch_rows(0, keys,
                                             (key_span <= t.strides[1] ? key_span : dims) * kBytes);
  }

  // Rows [0, nb) of S^T or P^T (`cols` of each, `stride` apart) times the keys' row scales: the
  // tiles read int8 rows without them. S^T takes the K scales before the softmax, P^T the V
  // scales after it (so that the softmax sums stay those of P).
  static void scale_by_rows(RowScales scales, float* t, std::int64_t nb, std::int64_t cols,
                            std::int64_t stride) {
    for (std::int64_t n = 0; n < nb; ++n) {
      const float factor = scales.first[n * scales.stride];
      float* row = t + n * stride;
      for (std::int64_t c = 0; c < cols; ++c) row[c] *= factor;
    }
  }
};

// Whether the storage dot reads K's type and q is of that type: then it reads q unscaled, each
// product exact in f32 as in the widening tiles, and the caller scales the scores after the dot
// (kernels read such q so under DotPrecision::exact too).
template <class T, class KT>
inline constexpr bool kExactQueryDot = (std::is_same_v<T, KT> && StorageDot<KT>::kAvailable);

// Rows [0, keys) of S^T (`cols` each, `stride` apart) times `factor`.
inline void scale_scores(float* s, std::int64_t keys, std::int64_t cols, std::int64_t stride,
                         float factor) {
  for (std::int64_t n = 0; n < keys; ++n) {
    for (std::int64_t c = 0; c < cols; ++c) s[n * stride + c] *= factor;
  }
}

// Writes each row's visible keys [key_lo, key_hi] (by index arithmetic: causal bottom-right,
// windows, kv_lens) and returns their union as [begin, end); padded rows see no key.
template <class T, class KT, class VT>
void visible_keys(const SdpaArgs<T, KT, VT>& a, const SdpaUnit& unit, std::int64_t g,
                  const SdpaWorkerScratch& w, std::int64_t valid, std::int64_t rows_v,
                  std::int64_t* begin, std::int64_t* end) {
  const std::int64_t i0 = unit.i0, nq = unit.nq;
  std::int64_t first = std::numeric_limits<std::int64_t>::max(), last = -1;
  for (std::int64_t qi = 0; qi < nq; ++qi) {
    const std::int64_t pos = i0 + qi + valid - unit.q_len;
    // max(0, pos - left) and min(valid - 1, pos + right) without overflow for any window size
    // (valid - 1 - pos = q_len - 1 - i >= 0).
    const std::int64_t left = a.mask.window_left, right = a.mask.window_right;
    const std::int64_t lo = left < 0 || left >= pos ? 0 : pos - left;
    const std::int64_t hi = right < 0 || right >= valid - 1 - pos ? valid - 1 : pos + right;
    if (lo <= hi) {
      first = std::min(first, lo);
      last = std::max(last, hi);
    }
    for (std::int64_t j = 0; j < g; ++j) {
      w.key_lo[qi * g + j] = lo;
      w.key_hi[qi * g + j] = hi;
    }
  }
  for (std::int64_t r = nq * g; r < rows_v; ++r) {
    w.key_lo[r] = 1;
    w.key_hi[r] = 0;
  }
  *begin = last >= first ? first : 0;
  *end = last >= first ? last + 1 : 0;
}

// Which rows see a block of keys [n0, n1]: some (the block is read), and all of every key (no
// mask needed).
struct BlockVisibility {
  bool any, all;
};

inline BlockVisibility block_visibility(const SdpaWorkerScratch& w, std::int64_t rows,
                                        std::int64_t group, std::int64_t n0, std::int64_t n1) {
  BlockVisibility v{false, true};
  for (std::int64_t r = 0; r < rows; r += group) {
    if (w.key_lo[r] > w.key_hi[r] || w.key_hi[r] < n0 || w.key_lo[r] > n1) {
      v.all = false;
      continue;
    }
    v.any = true;
    if (w.key_lo[r] > n0 || w.key_hi[r] < n1) v.all = false;
  }
  return v;
}

// Head h's softmax over one block of scores (S^T becomes P^T): masked where some row does not
// see every key, the running max, sum and sink mass updated, the output so far rescaled.
template <class T, class KT, class VT>
void update_softmax(const UnitWork<T, KT, VT>& u, std::int64_t h, float* scores, std::int64_t n0,
                    std::int64_t nb, std::int64_t score_rows, std::int64_t score_stride,
                    bool all_visible) {
  const SdpaWorkerScratch& w = u.w;
  const std::int64_t rs = u.row_stride(), dvp = u.plan.dv_padded;
  float* alpha = w.alpha + h * rs;
  if (!all_visible) Softmax::mask_block(w, scores, n0, nb, score_rows, score_stride);
  Softmax::softmax_block(scores, nb, score_rows, score_stride, w.max + h * rs, w.sum + h * rs,
                         alpha);
  float* out = w.out + h * u.out_size();
  for (std::int64_t r = 0; r < u.rows; ++r) {
    if (alpha[r] != 1.0f) Softmax::scale_row(out + r * dvp, dvp, alpha[r]);
  }
  if (u.track_sink) {
    Softmax::add_sink_mass(scores, score_stride, u.rows, n0, nb, u.args.stats.n_sink, alpha,
                           w.sink + h * rs);
  }
}
