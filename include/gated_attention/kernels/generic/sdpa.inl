// The SDPA kernels, written once over the `Simd` vector type of the enclosing ISA namespace
// (Highway-style: this file is included inside kernels::scalar, kernels::avx2, ... and their
// target regions).
//
// Per task (a unit of rows, or one key split of it):
//   1. pack the rows' queries transposed, pre-scaled by scale * log2(e): q_t [dk, rows]
//   2. for each block of kKvBlock visible keys:
//        S^T [keys, rows] = K_block q_t   keys broadcast from the K rows in place (no K packing);
//                                          rows lie along vector lanes, so the softmax below is
//                                          vertical: no horizontal reductions
//        mask only blocks that straddle a row's visible range (diagonal blocks)
//        online softmax in log2 units; rescale a row's output only when its max rose
//        O [rows, dv] += P V_block          values read in place
//   3. normalise, add sinks, write log-sum-exp, apply the output gate, store; or, for a split
//      unit, store the partial (O, max, sum) for the merge phase.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

template <class T, class KvT, int kDk, int kDv>
struct SdpaKernel {
  static_assert(std::is_same_v<T, float> && std::is_same_v<KvT, float>,
                "f32 kernels; other element types convert in the packing steps");
  using S = Simd;
  using V = S::V;
  static constexpr int L = S::kLanes;
  static constexpr int kLineFloats = static_cast<int>(kCacheLine / sizeof(KvT));
  static constexpr auto kKvBytes = static_cast<std::int64_t>(sizeof(KvT));
  // Rows up to this count take the dot-product score kernel: 8 on x86, where rows along the lanes
  // of an AVX2 vector would need a broadcast load per FMA and were measured 1.1x slower at 8 rows
  // (the load ports are the limit), half the lanes on NEON.
  static constexpr int kMaxDotRows = L >= 8 ? 8 : L / 2;
  static bool use_dot_scores(std::int64_t rows) { return rows <= kMaxDotRows; }

  // Queries of many rows are packed in panels of kPanelRows rows (then of L rows for the rest):
  // the panel starting at row r0 with width w holds (d, r) at q_t[r0 * dk + d * w + r - r0], so a
  // row group's queries are contiguous and stay in L1 while the keys stream past.
  static constexpr std::int64_t kPanelRows = S::kRowVectors * L;
  static std::int64_t full_panel_rows(std::int64_t rows_v) {
    return rows_v / kPanelRows * kPanelRows;
  }
  static float* q_panel_element(float* q_t, std::int64_t rows_v, std::int64_t dk, std::int64_t r,
                                std::int64_t d) {
    const bool full = r < full_panel_rows(rows_v);
    const std::int64_t w = full ? kPanelRows : L;
    const std::int64_t r0 = r / w * w;
    return q_t + r0 * dk + d * w + (r - r0);
  }

  // S^T[k, r] for KB keys and RV row vectors of one panel: sum_d K[k, d] * q[d, r].
  template <int KB, int RV>
  GATED_ATTENTION_ALWAYS_INLINE static void score_tile(const KvT* keys, std::int64_t key_stride,
                                                       const float* panel, std::int64_t dk,
                                                       float* scores, std::int64_t row_stride) {
    V acc[KB][RV];
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < KB; ++k) {
      GATED_ATTENTION_UNROLL
      for (int v = 0; v < RV; ++v) acc[k][v] = S::zero();
    }
    for (std::int64_t d = 0; d < dk; ++d) {
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

  // The last count < KB keys of a block in one tile of count keys: a tile per key would leave one
  // accumulator chain per row vector, bound by the FMA latency.
  template <int RV, int KB>
  static void score_keys_remainder(std::int64_t count, const KvT* keys, std::int64_t key_stride,
                                   const float* panel, std::int64_t dk, float* s,
                                   std::int64_t row_stride) {
    if constexpr (KB > 0) {
      if (count == KB) {
        score_tile<KB, RV>(keys, key_stride, panel, dk, s, row_stride);
      } else {
        score_keys_remainder<RV, KB - 1>(count, keys, key_stride, panel, dk, s, row_stride);
      }
    }
  }

  template <int KB, int RV>
  static void score_panel(const KvT* keys, std::int64_t key_stride, std::int64_t num_keys,
                          const float* panel, std::int64_t dk, float* s, std::int64_t row_stride) {
    std::int64_t n = 0;
    for (; n + KB <= num_keys; n += KB) {
      score_tile<KB, RV>(keys + n * key_stride, key_stride, panel, dk, s + n * row_stride,
                         row_stride);
    }
    if (n < num_keys) {
      score_keys_remainder<RV, KB - 1>(num_keys - n, keys + n * key_stride, key_stride, panel, dk,
                                       s + n * row_stride, row_stride);
    }
  }

  // S^T [num_keys, rows_v] from the query panels.
  static void scores(const KvT* keys, std::int64_t key_stride, std::int64_t num_keys,
                     const float* q_t, std::int64_t rows_v, std::int64_t dk, float* s,
                     std::int64_t row_stride) {
    const std::int64_t full = full_panel_rows(rows_v);
    for (std::int64_t r = 0; r < full; r += kPanelRows) {
      score_panel<S::kKeyBlock, S::kRowVectors>(keys, key_stride, num_keys, q_t + r * dk, dk, s + r,
                                                row_stride);
    }
    for (std::int64_t r = full; r < rows_v; r += L) {
      score_panel<S::kKeyBlock * S::kRowVectors, 1>(keys, key_stride, num_keys, q_t + r * dk, dk,
                                                    s + r, row_stride);
    }
  }

  // S^T[k, r] for KB keys and RB rows as dot products along d: for few rows (decode), where
  // rows along lanes would leave most lanes idle. q_rows is [rows, q_stride], zero-padded.
  template <int KB, int RB>
  GATED_ATTENTION_ALWAYS_INLINE static void score_dot_tile(const KvT* keys, std::int64_t key_stride,
                                                           const float* q_rows,
                                                           std::int64_t q_stride, std::int64_t dk,
                                                           float* scores, std::int64_t row_stride,
                                                           LineCursor& ahead, std::int64_t lines) {
    V acc[KB][RB];
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < KB; ++k) {
      GATED_ATTENTION_UNROLL
      for (int r = 0; r < RB; ++r) acc[k][r] = S::zero();
    }
    // A compile-time dk gives the loop a constant trip count, which the compiler unrolls.
    const std::int64_t depth = kDk > 0 ? kDk : dk;
    const std::int64_t full = depth / L * L;
    const std::int64_t steps = full / L;
    const std::int64_t per_step = steps > 0 ? (lines + steps - 1) / steps : 0;
    GATED_ATTENTION_UNROLL_PARTLY
    for (std::int64_t d = 0; d < full; d += L) {
      ahead.fetch(per_step);  // spread over the tile
      V kv[KB];
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) kv[k] = S::load_pinned(keys + k * key_stride + d);
      GATED_ATTENTION_UNROLL
      for (int r = 0; r < RB; ++r) {
        const V q = S::load_pinned(q_rows + r * q_stride + d);
        GATED_ATTENTION_UNROLL
        for (int k = 0; k < KB; ++k) acc[k][r] = S::fma(kv[k], q, acc[k][r]);
      }
    }
    if (full < depth) {
      const int tail = static_cast<int>(depth - full);
      V kv[KB];
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) kv[k] = S::load_partial(keys + k * key_stride + full, tail);
      GATED_ATTENTION_UNROLL
      for (int r = 0; r < RB; ++r) {
        const V q = S::load_pinned(q_rows + r * q_stride + full);
        GATED_ATTENTION_UNROLL
        for (int k = 0; k < KB; ++k) acc[k][r] = S::fma(kv[k], q, acc[k][r]);
      }
    }
    ahead.fetch(lines - per_step * steps);
    store_dot_sums<KB, RB>(acc, scores, row_stride);
  }

  template <int KB, int RB, class Vectors = S>
  GATED_ATTENTION_ALWAYS_INLINE static void store_dot_sums(const V (&acc)[KB][RB], float* scores,
                                                           std::int64_t row_stride) {
    if constexpr (KB == 4 && RB == 4 && Vectors::kHasReduceAdd4x4) {
      Vectors::reduce_add_4x4(acc, scores, row_stride);
    } else if constexpr (RB == 4) {
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) Vectors::reduce_add_4(acc[k], scores + k * row_stride);
    } else {
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) {
        GATED_ATTENTION_UNROLL
        for (int r = 0; r < RB; ++r) scores[k * row_stride + r] = S::reduce_add(acc[k][r]);
      }
    }
  }

  // Tiles of up to 4 keys x kDotRowBlock rows (8 loads per 16 FMAs), as many keys as the register
  // budget holds; each row group streams the block's keys (L1-resident).
  static constexpr int kDotRowBlock = 4;
  static constexpr int kDotKeyBlock = std::min(4, (S::kRowBlock * S::kDimVectors) / kDotRowBlock);

  // ahead: lines_per_tile lines fetched by each tile, in even shares over its steps along d.
  template <int RB>
  GATED_ATTENTION_ALWAYS_INLINE static void score_dot_rows(
      const KvT* keys, std::int64_t key_stride, std::int64_t num_keys, const float* q_rows,
      std::int64_t q_stride, std::int64_t dk, float* s, std::int64_t row_stride, LineCursor& ahead,
      std::int64_t lines_per_tile) {
    constexpr int KB = kDotKeyBlock;
    std::int64_t n = 0;
    for (; n + KB <= num_keys; n += KB) {
      score_dot_tile<KB, RB>(keys + n * key_stride, key_stride, q_rows, q_stride, dk,
                             s + n * row_stride, row_stride, ahead, lines_per_tile);
    }
    if (n < num_keys) {
      score_dot_remainder<RB, KB - 1>(num_keys - n, keys + n * key_stride, key_stride, q_rows,
                                      q_stride, dk, s + n * row_stride, row_stride, ahead,
                                      lines_per_tile);
    }
  }

  // The last count < KB keys in one tile of count keys (a tile per key would leave RB
  // accumulator chains, bound by the FMA latency).
  template <int RB, int KB>
  GATED_ATTENTION_ALWAYS_INLINE static void score_dot_remainder(
      std::int64_t count, const KvT* keys, std::int64_t key_stride, const float* q_rows,
      std::int64_t q_stride, std::int64_t dk, float* s, std::int64_t row_stride, LineCursor& ahead,
      std::int64_t lines) {
    if constexpr (KB > 0) {
      if (count == KB) {
        score_dot_tile<KB, RB>(keys, key_stride, q_rows, q_stride, dk, s, row_stride, ahead, lines);
      } else {
        score_dot_remainder<RB, KB - 1>(count, keys, key_stride, q_rows, q_stride, dk, s,
                                        row_stride, ahead, lines);
      }
    }
  }

  template <int RB = kDotRowBlock>
  static void score_dot_group(std::int64_t rows, const KvT* keys, std::int64_t key_stride,
                              std::int64_t num_keys, const float* q_rows, std::int64_t q_stride,
                              std::int64_t dk, float* s, std::int64_t row_stride, LineCursor& ahead,
                              std::int64_t lines_per_tile) {
    if constexpr (RB > 0) {
      if (rows == RB) {
        score_dot_rows<RB>(keys, key_stride, num_keys, q_rows, q_stride, dk, s, row_stride, ahead,
                           lines_per_tile);
      } else {
        score_dot_group<RB - 1>(rows, keys, key_stride, num_keys, q_rows, q_stride, dk, s,
                                row_stride, ahead, lines_per_tile);
      }
    }
  }

  // S^T of every head of the unit for one block (head h at s + h * s_head_stride): groups of
  // kDotKeyBlock keys outer and heads inner, so that K is read in address order where a key's
  // heads lie together. Against head by head, Zen 4, decode_read_share in alternating rounds:
  // qwen3next_decode_32k 1 thread 0.86-0.93 against 0.77-0.89; on huge pages, 1 thread
  // llama8b_decode_8k 0.59-0.73 against 0.55-0.60. q_rows: head h at q_rows + h * q_head_stride.
  // ahead: rows (the V rows the next phase reads) fetched by the tiles in even shares, spread over
  // each tile's steps along d, and all of them by the end.
  static void score_dot(std::int64_t heads, std::int64_t rows, const KvT* keys,
                        std::int64_t key_stride, std::int64_t key_head_stride,
                        std::int64_t num_keys, const float* q_rows, std::int64_t q_head_stride,
                        std::int64_t q_stride, std::int64_t dk, float* s,
                        std::int64_t s_head_stride, std::int64_t row_stride,
                        const RowPrefetch& ahead) {
    const std::int64_t groups = (rows + kDotRowBlock - 1) / kDotRowBlock;
    const std::int64_t tiles = heads * groups * ((num_keys + kDotKeyBlock - 1) / kDotKeyBlock);
    LineCursor cursor{ahead};
    const std::int64_t lines_per_tile = tiles > 0 ? (cursor.lines() + tiles - 1) / tiles : 0;
    for (std::int64_t n = 0; n < num_keys; n += kDotKeyBlock) {
      const std::int64_t count = std::min<std::int64_t>(kDotKeyBlock, num_keys - n);
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t r = 0; r < rows; r += kDotRowBlock) {
          score_dot_group(std::min<std::int64_t>(kDotRowBlock, rows - r),
                          keys + h * key_head_stride + n * key_stride, key_stride, count,
                          q_rows + h * q_head_stride + r * q_stride, q_stride, dk,
                          s + h * s_head_stride + n * row_stride + r, row_stride, cursor,
                          lines_per_tile);
        }
      }
    }
    cursor.fetch_rest();
  }

  static constexpr std::int64_t kPackedColumn = kKvBlock * L + kPackedColumnPadding;
  // V block packed by vector column: (key n, dims j*L..j*L+L) at packed[j * kPackedColumn + n * L],
  // zero-padded to dv_padded, so each column chunk of the block is contiguous in L1.
  static void pack_values(const KvT* values, std::int64_t value_stride, std::int64_t num_keys,
                          std::int64_t dv, std::int64_t dv_padded, float* packed) {
    for (std::int64_t n = 0; n < num_keys; ++n) {
      const KvT* row = values + n * value_stride;
      for (std::int64_t j = 0; j * L < dv_padded; ++j) {
        const std::int64_t c = j * L;
        const V x = c + L <= dv ? S::load(row + c)
                                : S::load_partial(
                                      row + c, static_cast<int>(std::max<std::int64_t>(0, dv - c)));
        S::store(packed + j * kPackedColumn + n * L, x);
      }
    }
  }

  // Whether every value of num_keys V rows is finite (then a zero weight times any of them is 0,
  // and a block some rows see only in part can take the value tiles).
  static bool values_finite(const KvT* values, std::int64_t value_stride, std::int64_t num_keys,
                            std::int64_t dv) {
    const V zero = S::zero();
    V non_finite = zero;  // x * 0 is 0 for finite x, NaN for NaN and +-Inf
    for (std::int64_t n = 0; n < num_keys; ++n) {
      const KvT* row = values + n * value_stride;
      for (std::int64_t c = 0; c < dv; c += L) {
        const int count = static_cast<int>(std::min<std::int64_t>(L, dv - c));
        const V x = count == L ? S::load(row + c) : S::load_partial(row + c, count);
        non_finite = S::fma(x, zero, non_finite);
      }
    }
    return S::reduce_add(non_finite) == 0.0f;
  }

  // O[r] += sum_n P^T[n, r] V[n] over the keys whose weight is not zero: exact for blocks some
  // rows see only in part whose V holds NaN or Inf (0 * NaN is NaN). Rare; finite blocks take the
  // tiles below.
  static void accumulate_values_skipping_zero_weights(const float* p, std::int64_t row_stride,
                                                      std::int64_t rows, const KvT* values,
                                                      std::int64_t value_stride,
                                                      std::int64_t num_keys, std::int64_t dv,
                                                      float* out, std::int64_t out_stride) {
    for (std::int64_t r = 0; r < rows; ++r) {
      float* o = out + r * out_stride;
      for (std::int64_t n = 0; n < num_keys; ++n) {
        const float weight = p[n * row_stride + r];
        if (weight == 0.0f) continue;
        const V wv = S::set1(weight);
        const KvT* row = values + n * value_stride;
        for (std::int64_t c = 0; c < dv; c += L) {
          const int count = static_cast<int>(std::min<std::int64_t>(L, dv - c));
          if (count == L) {
            S::store(o + c, S::fma(wv, S::load(row + c), S::load(o + c)));
          } else {
            const V sum =
                S::fma(wv, S::load_partial(row + c, count), S::load_partial(o + c, count));
            S::store_partial(o + c, sum, count);
          }
        }
      }
    }
  }

  // O[r, cols] += sum_n P^T[n, r] V[n, cols] for RB rows and CV packed vector columns.
  template <int RB, int CV>
  GATED_ATTENTION_ALWAYS_INLINE static void value_tile(const float* p, std::int64_t row_stride,
                                                       const float* packed, std::int64_t num_keys,
                                                       float* out, std::int64_t out_stride) {
    V acc[RB][CV];
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) acc[r][c] = S::load(out + r * out_stride + c * L);
    }
    for (std::int64_t n = 0; n < num_keys; ++n) {
      V v[CV];
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) v[c] = S::load_shared(packed + c * kPackedColumn + n * L);
      GATED_ATTENTION_UNROLL
      for (int r = 0; r < RB; ++r) {
        const V pb = S::set1(p[n * row_stride + r]);
        GATED_ATTENTION_UNROLL
        for (int c = 0; c < CV; ++c) acc[r][c] = S::fma(pb, v[c], acc[r][c]);
      }
    }
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) S::store(out + r * out_stride + c * L, acc[r][c]);
    }
  }

  template <int CV, int RB = S::kRowBlock>
  static void value_rows_remainder(std::int64_t count, const float* p, std::int64_t row_stride,
                                   const float* packed, std::int64_t num_keys, float* out,
                                   std::int64_t out_stride) {
    if constexpr (RB > 0) {
      if (count == RB) {
        value_tile<RB, CV>(p, row_stride, packed, num_keys, out, out_stride);
      } else {
        value_rows_remainder<CV, RB - 1>(count, p, row_stride, packed, num_keys, out, out_stride);
      }
    }
  }

  template <int CV>
  static void value_rows(std::int64_t rows, const float* p, std::int64_t row_stride,
                         const float* packed, std::int64_t num_keys, float* out,
                         std::int64_t out_stride) {
    constexpr int RB = S::kRowBlock;
    std::int64_t r = 0;
    for (; r + RB <= rows; r += RB) {
      value_tile<RB, CV>(p + r, row_stride, packed, num_keys, out + r * out_stride, out_stride);
    }
    if (r < rows) {
      value_rows_remainder<CV>(rows - r, p + r, row_stride, packed, num_keys, out + r * out_stride,
                               out_stride);
    }
  }

  // O += P V from a packed V block, each column chunk reused by every row block while in L1.
  static void accumulate_packed_values(const float* p, std::int64_t row_stride, std::int64_t rows,
                                       const float* packed, std::int64_t num_keys,
                                       std::int64_t dv_padded, float* out) {
    constexpr int CV = S::kDimVectors;
    const std::int64_t vectors = dv_padded / L;
    std::int64_t j = 0;
    for (; j + CV <= vectors; j += CV) {
      value_rows<CV>(rows, p, row_stride, packed + j * kPackedColumn, num_keys, out + j * L,
                     dv_padded);
    }
    for (; j < vectors; ++j) {
      value_rows<1>(rows, p, row_stride, packed + j * kPackedColumn, num_keys, out + j * L,
                    dv_padded);
    }
  }

  // Few rows (decode): V rows are read in place, a group of kFullRowKeys keys at a time (16 KB
  // at dv = 256, L1-resident while every row and column chunk reads it), in tiles of
  // kFullRowRows rows x kFullRowVectors vectors (AVX-512: 8 loads per 16 FMAs).
  static constexpr std::int64_t kFullRowKeys = 16;
  static constexpr int kFullRowRows = 4;
  // The most whole vectors of a row tile that divide kDv and keep kFullRowRows x that many
  // accumulators within the ISA's register budget (kRowBlock x kDimVectors); 0: dv not fixed or
  // not whole vectors.
  static constexpr int full_row_vectors() {
    if (kDv <= 0 || kDv % L != 0) return 0;
    for (int c = 4; c > 1; --c) {
      if (c * kFullRowRows <= S::kRowBlock * S::kDimVectors && (kDv / L) % c == 0) return c;
    }
    return 1;
  }
  static constexpr int kFullRowVectors = full_row_vectors();
  // Whether V can be read in place (decode with a compile-time dv that is whole vectors).
  static constexpr bool kFullRowValues = kFullRowVectors > 0;

  // acc[r] += p[r] v for one key's weights p and V row v.
  template <int RB, int CV>
  GATED_ATTENTION_ALWAYS_INLINE static void value_key_in_place(V (&acc)[RB][CV], const float* p,
                                                               const KvT* v) {
    V x[CV];
    GATED_ATTENTION_UNROLL
    for (int c = 0; c < CV; ++c) x[c] = S::load_pinned(v + c * L);
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      const V pb = S::set1(p[r]);
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) acc[r][c] = S::fma(pb, x[c], acc[r][c]);
    }
  }

  // O[r, cols] += sum_n P^T[n, r] V[n, cols] for RB rows and CV vectors of V rows read in place.
  // NK > 0 (decode blocks): num_keys is NK and out_stride kPaddedDv, so that the unrolled key loop
  // addresses the output at constant offsets.
  static constexpr std::int64_t kPaddedDv = round_up(kDv, kRowPadding);
  template <int RB, int CV, int NK>
  GATED_ATTENTION_ALWAYS_INLINE static void value_tile_in_place(
      const float* p, std::int64_t row_stride, const KvT* values, std::int64_t value_stride,
      std::int64_t num_keys, float* out, std::int64_t out_stride, LineCursor& ahead,
      std::int64_t lines) {
    if constexpr (NK > 0) out_stride = kPaddedDv;  // constant offsets
    V acc[RB][CV];
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) acc[r][c] = S::load(out + r * out_stride + c * L);
    }
    const KvT* row = values;
    // A runtime division even for NK > 0: dividing by the constant NK measured slower on Zen 4
    // (llama8b_decode_8k, 1 thread: decode_read_share 0.73-0.75 against 0.80-0.85, and 7% slower
    // with K/V in L3), the prefetches' timing being as sensitive as their order (see LineCursor).
    const std::int64_t per_key = num_keys > 0 ? (lines + num_keys - 1) / num_keys : 0;
    if constexpr (NK > 0) {
      GATED_ATTENTION_UNROLL
      for (int n = 0; n < NK; ++n, p += row_stride, row += value_stride) {
        ahead.fetch(per_key);  // spread over the tile
        value_key_in_place(acc, p, row);
      }
    } else {
      for (std::int64_t n = 0; n < num_keys; ++n, p += row_stride, row += value_stride) {
        ahead.fetch(per_key);
        value_key_in_place(acc, p, row);
      }
    }
    ahead.fetch(lines - per_key * num_keys);
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) S::store(out + r * out_stride + c * L, acc[r][c]);
    }
  }

  template <int NK, int RB = kFullRowRows>
  GATED_ATTENTION_ALWAYS_INLINE static void value_in_place_rows(
      std::int64_t rows, const float* p, std::int64_t row_stride, const KvT* values,
      std::int64_t value_stride, std::int64_t num_keys, float* out, std::int64_t out_stride,
      LineCursor& ahead, std::int64_t lines) {
    if constexpr (RB > 0 && kFullRowValues) {
      if (rows == RB) {
        value_tile_in_place<RB, kFullRowVectors, NK>(p, row_stride, values, value_stride, num_keys,
                                                     out, out_stride, ahead, lines);
      } else {
        value_in_place_rows<NK, RB - 1>(rows, p, row_stride, values, value_stride, num_keys, out,
                                        out_stride, ahead, lines);
      }
    }
  }

  // NK > 0: num_keys is NK.
  template <int NK>
  static void accumulate_keys_in_place(const float* p, std::int64_t row_stride, std::int64_t rows,
                                       const KvT* values, std::int64_t value_stride,
                                       std::int64_t num_keys, float* out, std::int64_t out_stride,
                                       LineCursor& ahead, std::int64_t lines_per_tile,
                                       LineCursor& next_values, std::int64_t next_lines_per_tile) {
    constexpr std::int64_t kColumns = kFullRowVectors * L;
    for (std::int64_t c = 0; c < kDv; c += kColumns) {
      for (std::int64_t r = 0; r < rows; r += kFullRowRows) {
        next_values.fetch(next_lines_per_tile);
        value_in_place_rows<NK>(std::min<std::int64_t>(kFullRowRows, rows - r), p + r, row_stride,
                                values + c, value_stride, num_keys, out + r * out_stride + c,
                                out_stride, ahead, lines_per_tile);
      }
    }
  }

  // O += P V with V rows read in place, kFullRowKeys keys at a time, each group's tiles fetching
  // the next group's V rows. ahead: rows (the K rows read next) fetched by the tiles in even
  // shares, spread over each tile's keys, and all of them by the end.
  static void accumulate_full_row_values(const float* p, std::int64_t row_stride, std::int64_t rows,
                                         const KvT* values, std::int64_t value_stride,
                                         std::int64_t num_keys, float* out, std::int64_t out_stride,
                                         const RowPrefetch& ahead) {
    if constexpr (kFullRowValues) {
      const std::int64_t groups = (rows + kFullRowRows - 1) / kFullRowRows;
      const std::int64_t group_tiles = groups * (kDv / (kFullRowVectors * L));
      const std::int64_t tiles = group_tiles * ((num_keys + kFullRowKeys - 1) / kFullRowKeys);
      LineCursor cursor{ahead};
      const std::int64_t lines_per_tile = tiles > 0 ? (cursor.lines() + tiles - 1) / tiles : 0;
      for (std::int64_t n = 0; n < num_keys; n += kFullRowKeys) {
        const std::int64_t keys = std::min(kFullRowKeys, num_keys - n);
        LineCursor next_values{
            RowPrefetch{values + (n + kFullRowKeys) * value_stride,
                        static_cast<std::int64_t>(value_stride * sizeof(KvT)),
                        std::clamp<std::int64_t>(num_keys - n - kFullRowKeys, 0, kFullRowKeys),
                        static_cast<std::int64_t>(kDv * sizeof(KvT))}};
        const std::int64_t next_lines = (next_values.lines() + group_tiles - 1) / group_tiles;
        if (keys == S::kDecodeBlock && out_stride == kPaddedDv) {
          accumulate_keys_in_place<S::kDecodeBlock>(
              p + n * row_stride, row_stride, rows, values + n * value_stride, value_stride, keys,
              out, out_stride, cursor, lines_per_tile, next_values, next_lines);
        } else {
          accumulate_keys_in_place<0>(p + n * row_stride, row_stride, rows,
                                      values + n * value_stride, value_stride, keys, out,
                                      out_stride, cursor, lines_per_tile, next_values, next_lines);
        }
      }
      cursor.fetch_rest();
    }
  }

  // Lanes of v folded across groups of `width` lanes (width a power of two, at most L): each lane
  // holds the max (or sum) of the lanes at its position in every group.
  template <class Vectors = S>
  static V fold_max(V v, std::int64_t width) {
    if constexpr (L > 4) {
      for (std::int64_t w = width; w < L; w *= 2)
        v = S::max(v, Vectors::swap_groups(v, static_cast<int>(w)));
    }
    return v;
  }
  template <class Vectors = S>
  static V fold_add(V v, std::int64_t width) {
    if constexpr (L > 4) {
      for (std::int64_t w = width; w < L; w *= 2)
        v = S::add(v, Vectors::swap_groups(v, static_cast<int>(w)));
    }
    return v;
  }
  // `width` values from p repeated across the lanes.
  static V repeat(const float* p, std::int64_t width) {
    return fold_add(S::load_partial(p, static_cast<int>(width)), width);
  }

  // How a block's S^T [num_keys, row_stride] lies in vectors. row_stride >= L: rows along lanes,
  // row group r's vector for key n at s + n * row_stride + r. row_stride < L (decode's 4 or 8
  // rows, packed): one group of `width` rows, L / width keys per vector, vector i at s + i * L.
  struct ScoreVectors {
    std::int64_t width, keys_per_vector, count, stride;
    ScoreVectors(std::int64_t num_keys, std::int64_t row_stride)
        : width(std::min<std::int64_t>(row_stride, L)),
          keys_per_vector(L / width),
          count((num_keys + keys_per_vector - 1) / keys_per_vector),
          stride(row_stride < L ? L : row_stride) {}
  };

  // w.block_lo and w.block_hi of rows [0, rows) for a block of num_keys keys from key first.
  static void block_bounds(const SdpaWorkerScratch& w, std::int64_t first, std::int64_t num_keys,
                           std::int64_t rows) {
    for (std::int64_t r = 0; r < rows; ++r) {
      w.block_lo[r] =
          static_cast<float>(std::clamp<std::int64_t>(w.key_lo[r] - first, 0, num_keys));
      w.block_hi[r] =
          static_cast<float>(std::clamp<std::int64_t>(w.key_hi[r] - first, -1, num_keys - 1));
    }
  }

  // Sets the scores of keys a row does not see to -inf, in a block of num_keys keys from key
  // first (rows_v <= row_stride, or rows packed; see ScoreVectors): each vector's visibility tested
  // by two vector compares.
  static void mask_block(const SdpaWorkerScratch& w, float* scores, std::int64_t first,
                         std::int64_t num_keys, std::int64_t rows_v, std::int64_t row_stride) {
    const ScoreVectors sv(num_keys, row_stride);
    block_bounds(w, first, num_keys, rows_v);
    alignas(64) float lane_keys[L];  // a lane's key within its vector
    for (std::int64_t l = 0; l < L; ++l) lane_keys[l] = static_cast<float>(l / sv.width);
    const V offsets = S::load(lane_keys);
    const V neg_inf = S::set1(-std::numeric_limits<float>::infinity());
    for (std::int64_t r = 0; r < rows_v; r += L) {
      const V lo = repeat(w.block_lo + r, sv.width), hi = repeat(w.block_hi + r, sv.width);
      for (std::int64_t i = 0; i < sv.count; ++i) {
        const V key = S::add(S::set1(static_cast<float>(i * sv.keys_per_vector)), offsets);
        float* s = scores + i * sv.stride + r;
        V x = S::select_less(key, lo, neg_inf, S::load(s));
        x = S::select_less(hi, key, neg_inf, x);
        S::store(s, x);
      }
    }
  }

  // Online softmax over one block of scores (log2 units), in place: S^T becomes P^T (laid out as
  // in mask_block). Packed rows: the last vector's keys past num_keys are set to -inf first.
  static void softmax_block(float* s, std::int64_t num_keys, std::int64_t rows_v,
                            std::int64_t row_stride, float* max, float* sum, float* alpha) {
    const ScoreVectors sv(num_keys, row_stride);
    const int width = static_cast<int>(sv.width);
    if (row_stride < L) {
      std::fill(s + num_keys * row_stride, s + sv.count * L,
                -std::numeric_limits<float>::infinity());
    }
    const V neg_inf = S::set1(-std::numeric_limits<float>::infinity());
    const V lowest = S::set1(std::numeric_limits<float>::lowest());
    for (std::int64_t r = 0; r < rows_v; r += L) {
      V block_max = neg_inf;
      for (std::int64_t i = 0; i < sv.count; ++i) {
        block_max = S::max(block_max, S::load(s + i * sv.stride + r));
      }
      const V old_max = repeat(max + r, width);
      const V new_max = S::max(old_max, fold_max(block_max, width));
      const V shift = S::max(new_max, lowest);  // rows with no key yet: exp2(-inf - lowest) = 0
      const V a = exp2_lanes(S::sub(old_max, shift));
      S::store_partial(max + r, new_max, width);
      S::store_partial(alpha + r, a, width);
      V block_sum = S::zero();
      for (std::int64_t i = 0; i < sv.count; ++i) {
        float* v = s + i * sv.stride + r;
        const V e = exp2_lanes(S::sub(S::load(v), shift));
        S::store(v, e);
        block_sum = S::add(block_sum, e);
      }
      S::store_partial(sum + r, S::fma(repeat(sum + r, width), a, fold_add(block_sum, width)),
                       width);
    }
  }

  static void scale_row(float* row, std::int64_t n, float factor) {
    const V f = S::set1(factor);
    for (std::int64_t c = 0; c < n; c += L) S::store(row + c, S::mul(S::load(row + c), f));
  }

  // Normalises one row, adds the sink, writes lse and the statistics, applies the gate and stores
  // the output. sink_mass: the row's unnormalised probability mass on keys [0, n_sink).
  static void finalize_row(const SdpaContext<T, KvT>& ctx, const SdpaUnit& u, std::int64_t i,
                           std::int64_t j, float* o, float max, float sum, float sink_mass,
                           std::int64_t dv) {
    const SdpaArgs<T, KvT>& a = *ctx.args;
    const std::int64_t head = u.kv_head * a.q.extents[3] + j;
    float scale = 1.0f;
    if (a.maybe_sink_logits != nullptr || a.softmax_plus_one) {
      const float sink = (a.maybe_sink_logits ? a.maybe_sink_logits[head] : 0.0f) * kLog2e;
      if (sink != -std::numeric_limits<float>::infinity()) {
        const float new_max = std::max(max, sink);
        scale = std::exp2(max - new_max);
        sum = sum * scale + std::exp2(sink - new_max);
        max = new_max;
      }
    }
    const float inv = sum > 0.0f ? scale / sum : 0.0f;
    if (a.maybe_lse.data != nullptr) {
      a.maybe_lse(u.batch, i, u.kv_head, j) =
          sum > 0.0f ? (max + std::log2(sum)) * kLn2 : -std::numeric_limits<float>::infinity();
    }
    T* out = &a.out(u.batch, i, u.kv_head, j, 0);
    const V inv_v = S::set1(inv);
    const bool gated = a.gate.enabled();
    const T* gate = gated ? &a.gate.values(u.batch, i, u.kv_head, j, 0) : nullptr;
    const bool gate_broadcast = gated && a.gate.values.strides[4] == 0;
    const AttentionStats& st = a.stats;
    const bool stats = st.enabled();
    // A headwise gate is one value per row: its activation is computed once.
    const V act_broadcast =
        gate_broadcast ? activation_lanes(S::set1(*gate), a.gate.activation) : S::zero();
    const V zero = S::zero(), one = S::set1(1.0f), tenth = S::set1(0.1f);
    V max_before_v = zero, max_after_v = zero, gate_sum_v = zero, gate_small_v = zero;
    float max_before = 0.0f, max_after = 0.0f, gate_sum = 0.0f, gate_small = 0.0f;
    // A compile-time dv unrolls the loop, so that a row's vectors overlap their activations.
    if constexpr (kDv > 0) dv = kDv;
    GATED_ATTENTION_UNROLL_PARTLY
    for (std::int64_t c = 0; c < dv; c += L) {
      const int n = dv - c < L ? static_cast<int>(dv - c) : L;
      const V x = S::mul(S::load(o + c), inv_v);
      V y = x, act = one;
      if (gated) {
        act = gate_broadcast
                  ? act_broadcast
                  : activation_lanes(n < L ? S::load_partial(gate + c, n) : S::load(gate + c),
                                     a.gate.activation);
        y = combine_lanes(x, act, a.gate.combine);
      }
      if (stats) {
        if (n == L) {
          max_before_v = S::max(max_before_v, S::max(x, S::sub(zero, x)));
          max_after_v = S::max(max_after_v, S::max(y, S::sub(zero, y)));
          gate_sum_v = S::add(gate_sum_v, act);
          gate_small_v = S::add(gate_small_v, S::select_less(act, tenth, one, zero));
        } else {  // the partial last vector, lane by lane
          float xs[L], ys[L], as[L];
          S::store(xs, x);
          S::store(ys, y);
          S::store(as, act);
          for (int k = 0; k < n; ++k) {
            max_before = std::max(max_before, std::fabs(xs[k]));
            max_after = std::max(max_after, std::fabs(ys[k]));
            gate_sum += as[k];
            gate_small += as[k] < 0.1f ? 1.0f : 0.0f;
          }
        }
      }
      if (n < L) {
        S::store_partial(out + c, y, n);
      } else {
        S::store(out + c, y);
      }
    }
    if (stats) {
      max_before = std::max(max_before, S::reduce_max(max_before_v));
      max_after = std::max(max_after, S::reduce_max(max_after_v));
      if (gated) {
        gate_sum += S::reduce_add(gate_sum_v);
        gate_small += S::reduce_add(gate_small_v);
      }
      const float d = static_cast<float>(dv);
      if (st.sink_share.data) st.sink_share(u.batch, i, u.kv_head, j) = sink_mass * inv;
      if (st.gate_mean.data) st.gate_mean(u.batch, i, u.kv_head, j) = gated ? gate_sum / d : 1.0f;
      if (st.gate_below_0_1.data) {
        st.gate_below_0_1(u.batch, i, u.kv_head, j) = gated ? gate_small / d : 0.0f;
      }
      if (st.max_abs_before.data) st.max_abs_before(u.batch, i, u.kv_head, j) = max_before;
      if (st.max_abs_after.data) st.max_abs_after(u.batch, i, u.kv_head, j) = max_after;
    }
  }

  // Rows ahead of the one being finalised whose gate (read) and output (written) lines are
  // fetched: both are strided by the heads, which the hardware prefetcher does not follow.
  static constexpr std::int64_t kEpilogueAhead = 4;

  GATED_ATTENTION_ALWAYS_INLINE static void prefetch_epilogue_row(const SdpaArgs<T, KvT>& a,
                                                                  const SdpaUnit& u, std::int64_t i,
                                                                  std::int64_t j, std::int64_t dv) {
    const auto row_bytes = static_cast<std::int64_t>(dv * sizeof(T));
    if (a.gate.enabled()) {
      prefetch_rows(&a.gate.values(u.batch, i, u.kv_head, j, 0), 0, 1,
                    a.gate.values.strides[4] == 0 ? 1 : row_bytes);
    }
    prefetch_rows<true>(&a.out(u.batch, i, u.kv_head, j, 0), 0, 1, row_bytes);
  }

  // Called before finalising row r of `rows` (query i0 + r / g, head r % g): fetches row
  // r + kEpilogueAhead, and at r = 0 the rows before it too.
  GATED_ATTENTION_ALWAYS_INLINE static void prefetch_epilogue(const SdpaArgs<T, KvT>& a,
                                                              const SdpaUnit& u, std::int64_t i0,
                                                              std::int64_t g, std::int64_t rows,
                                                              std::int64_t r, std::int64_t dv) {
    const std::int64_t last = std::min(rows - 1, r + kEpilogueAhead);
    for (std::int64_t ahead = r == 0 ? 0 : r + kEpilogueAhead; ahead <= last; ++ahead) {
      prefetch_epilogue_row(a, u, i0 + ahead / g, ahead % g, dv);
    }
  }

  static void task(void* context, std::int64_t task_index, int worker) {
    const DenormalsAsZero flush;  // for this task (kernels/denormals.hpp)
    const auto& ctx = *static_cast<const SdpaContext<T, KvT>*>(context);
    const SdpaArgs<T, KvT>& a = *ctx.args;
    const SdpaPlan& p = *ctx.plan;
    const SdpaWorkerScratch& w = ctx.layout->workers[worker];
    const std::int64_t dk = kDk > 0 ? kDk : p.dk;
    const std::int64_t dv = kDv > 0 ? kDv : p.dv;
    const std::int64_t unit_index = task_index / p.splits, split = task_index % p.splits;
    const SdpaUnit u = decode_unit(p, unit_index);
    const std::int64_t g = p.group, rs = p.row_stride, dvp = p.dv_padded;
    const std::int64_t i0 = u.q_block * p.q_block;
    const std::int64_t nq = std::min(p.q_block, p.q_len - i0);
    const std::int64_t rows = nq * g;
    const std::int64_t rows_v = round_up(rows, L);
    const std::int64_t valid = a.maybe_kv_lens ? a.maybe_kv_lens[u.batch] : p.kv_len;

    // Visible keys per row, by index arithmetic, and their union.
    std::int64_t first = std::numeric_limits<std::int64_t>::max(), last = -1;
    for (std::int64_t qi = 0; qi < nq; ++qi) {
      const std::int64_t pos = i0 + qi + valid - p.q_len;
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
    for (std::int64_t r = rows; r < rows_v; ++r) {
      w.key_lo[r] = 1;
      w.key_hi[r] = 0;
    }
    std::int64_t begin = last >= first ? first : 0, end = last >= first ? last + 1 : 0;
    if (p.splits > 1) {
      const std::int64_t chunk = round_up((end - begin + p.splits - 1) / p.splits, kKvBlock);
      const std::int64_t split_begin = std::min(end, begin + split * chunk);
      end = std::min(end, split_begin + chunk);
      begin = split_begin;
    }

    const std::int64_t heads = p.unit_heads;
    const std::int64_t dk_padded = round_up(dk, kRowPadding);
    const std::int64_t q_size = dk_padded * rs, out_size = rs * dvp;
    std::fill(w.max, w.max + heads * rs, -std::numeric_limits<float>::infinity());
    std::fill(w.sum, w.sum + heads * rs, 0.0f);
    std::fill(w.out, w.out + heads * out_size, 0.0f);
    const bool track_sink = a.stats.sink_share.data != nullptr;
    if (track_sink) std::fill(w.sink, w.sink + heads * rs, 0.0f);

    if (begin < end) {
      const bool dot = use_dot_scores(rows);
      // S^T's row stride. Decode keeps its 4 or 8 rows packed, L / score_stride keys per vector
      // for the softmax where that is below L: AVX-512, 1 thread, K/V in cache (min of 7 runs):
      // llama8b_decode 1024 keys 262 us against 283, qwen3next_decode 193 against 201.
      const std::int64_t score_stride = dot ? (rows <= 4 ? 4 : 8) : rs;
      for (std::int64_t h = 0; h < heads; ++h) {
        float* q_t = w.q_t + h * q_size;
        for (std::int64_t r = 0; r < rows_v; ++r) {
          const T* q = r < rows ? &a.q(u.batch, i0 + r / g, u.kv_head + h, r % g, 0) : nullptr;
          if (dot) {
            float* row = q_t + r * dk_padded;
            for (std::int64_t d = 0; d < dk_padded; ++d) {
              row[d] = q != nullptr && d < dk ? q[d] * ctx.scale_log2 : 0.0f;
            }
          } else {
            for (std::int64_t d = 0; d < dk; ++d) {
              *q_panel_element(q_t, rows_v, dk, r, d) = q != nullptr ? q[d] * ctx.scale_log2 : 0.0f;
            }
          }
        }
      }
      if (dot) {  // padded rows of S^T, which the dot kernel does not write
        for (std::int64_t n = 0; n < heads * S::kDecodeBlock; ++n) {
          for (std::int64_t r = rows; r < score_stride; ++r) w.scores[n * score_stride + r] = 0.0f;
        }
      }
      const bool values_in_place = rows <= L && kFullRowValues;
      const KvT* k_base = &a.k(u.batch, 0, u.kv_head, 0);
      const KvT* v_base = &a.v(u.batch, 0, u.kv_head, 0);
      const std::int64_t k_stride = a.k.strides[1], v_stride = a.v.strides[1];
      const std::int64_t k_head_stride = a.k.strides[2], v_head_stride = a.v.strides[2];
      // Few rows: blocks of S::kDecodeBlock keys, whose K rows (then V rows) of every head of the
      // unit lie together in memory and are read as one sequential stream.
      const std::int64_t block = dot ? S::kDecodeBlock : kKvBlock;
      // The rows [n, n + block) of every head of K or V (`base`: head 0's row 0; dims: a row's
      // length), none past the range's end, as one strided run of spans: one span per key where
      // a key's heads lie within its stride (as in [b, s, h, d]), else one per head: what a decode
      // phase fetches for a later one.
      auto block_rows = [&](const KvT* base, std::int64_t key_stride, std::int64_t head_stride,
                            std::int64_t n, std::int64_t dims) {
        if (n >= end) return RowPrefetch{};
        const std::int64_t keys = std::min(block, end - n);
        const std::int64_t key_span = (heads - 1) * head_stride + dims;
        if (key_span <= key_stride) {
          return RowPrefetch{base + n * key_stride, key_stride * kKvBytes, keys,
                             key_span * kKvBytes};
        }
        return RowPrefetch{base + n * key_stride, head_stride * kKvBytes, heads,
                           ((keys - 1) * key_stride + dims) * kKvBytes};
      };
      // Head h's share of `rows`, in order: what its P.V phase fetches.
      auto head_share = [&](const RowPrefetch& rows_ahead, std::int64_t h) {
        const std::int64_t per = (rows_ahead.rows + heads - 1) / heads;
        const std::int64_t from = std::min(rows_ahead.rows, h * per);
        if (from == rows_ahead.rows) return RowPrefetch{};
        return RowPrefetch{
            static_cast<const char*>(rows_ahead.first) + from * rows_ahead.stride_bytes,
            rows_ahead.stride_bytes, std::min(per, rows_ahead.rows - from), rows_ahead.bytes};
      };
      for (std::int64_t n0 = begin; n0 < end; n0 += block) {
        const std::int64_t nb = std::min(block, end - n0);
        const std::int64_t n1 = n0 + nb - 1;
        bool any = false, full = true;
        for (std::int64_t r = 0; r < rows; r += g) {
          if (w.key_lo[r] > w.key_hi[r] || w.key_hi[r] < n0 || w.key_lo[r] > n1) {
            full = false;
            continue;
          }
          any = true;
          if (w.key_lo[r] > n0 || w.key_hi[r] < n1) full = false;
        }
        if (!any) continue;
        // Decode streams K/V from memory, each phase fetching what a later one reads
        // S::kDecodeFetchBlocks blocks ahead, spread evenly over the tiles' steps: the scores of
        // every head fetch the V rows, each head's P.V a share of the K rows. At a distance of 0
        // (the rows read next), the hardware prefetcher alone was 1.45x slower on
        // qwen3next_decode_32k (Zen 3); see each ISA's kDecodeFetchBlocks. A line per step with
        // the rest in a burst at each tile's end left Zen 4 stalled on the bursts
        // (llama8b_decode_8k, 1 thread: decode_read_share 0.75-0.81 against 0.89-0.99).
        RowPrefetch keys_ahead;
        if (dot) {
          const std::int64_t values_from = n0 + S::kDecodeFetchBlocks * block;
          // K: at least the next block's (the scores have read this one's).
          const std::int64_t keys_from =
              n0 + std::max<std::int64_t>(S::kDecodeFetchBlocks, 1) * block;
          keys_ahead = block_rows(k_base, k_stride, k_head_stride, keys_from, dk);
          score_dot(heads, rows, k_base + n0 * k_stride, k_stride, k_head_stride, nb, w.q_t, q_size,
                    dk_padded, dk, w.scores, block * score_stride, score_stride,
                    block_rows(v_base, v_stride, v_head_stride, values_from, dv));
        }
        // Then each head's softmax and P.V.
        for (std::int64_t h = 0; h < heads; ++h) {
          const KvT* k_block = k_base + h * k_head_stride + n0 * k_stride;
          const KvT* v_block = v_base + h * v_head_stride + n0 * v_stride;
          float* out = w.out + h * out_size;
          float* head_scores = w.scores + h * block * score_stride;  // one block per head
          if (!dot) scores(k_block, k_stride, nb, w.q_t + h * q_size, rows_v, dk, head_scores, rs);
          const RowPrefetch next_keys = head_share(keys_ahead, h);
          float* alpha = w.alpha + h * rs;
          const std::int64_t score_rows = std::min(rows_v, score_stride);  // packed: one group
          if (!full) mask_block(w, head_scores, n0, nb, score_rows, score_stride);
          softmax_block(head_scores, nb, score_rows, score_stride, w.max + h * rs, w.sum + h * rs,
                        alpha);
          for (std::int64_t r = 0; r < rows; ++r) {
            if (alpha[r] != 1.0f) scale_row(out + r * dvp, dvp, alpha[r]);
          }
          if (track_sink) {  // probability mass on the sink keys, rescaled like the sums
            float* sink = w.sink + h * rs;
            const std::int64_t sink_keys = std::min(nb, a.stats.n_sink - n0);
            for (std::int64_t r = 0; r < rows; ++r) {
              float mass = sink[r] * alpha[r];
              for (std::int64_t n = 0; n < sink_keys; ++n)
                mass += head_scores[n * score_stride + r];
              sink[r] = mass;
            }
          }
          // In a block some rows see only in part, a zero weight times NaN or Inf in V would
          // reach rows that do not see that key: such blocks with non-finite V skip zero weights.
          if (!full && !values_finite(v_block, v_stride, nb, dv)) {
            accumulate_values_skipping_zero_weights(head_scores, score_stride, rows, v_block,
                                                    v_stride, nb, dv, out, dvp);
          } else if (values_in_place) {
            accumulate_full_row_values(head_scores, score_stride, rows, v_block, v_stride, nb, out,
                                       dvp, next_keys);
          } else {
            next_keys.fetch(0, next_keys.rows);
            pack_values(v_block, v_stride, nb, dv, dvp, w.v_packed);
            accumulate_packed_values(head_scores, score_stride, rows, w.v_packed, nb, dvp, out);
          }
        }
      }
    }

    for (std::int64_t h = 0; h < heads; ++h) {
      float* out = w.out + h * out_size;
      const float* max = w.max + h * rs;
      const float* sum = w.sum + h * rs;
      const float* sink = w.sink + h * rs;
      if (p.splits == 1) {
        const SdpaUnit head_unit{u.batch, u.kv_head + h, u.q_block};
        for (std::int64_t r = 0; r < rows; ++r) {
          prefetch_epilogue(a, head_unit, i0, g, rows, r, dv);
          finalize_row(ctx, head_unit, i0 + r / g, r % g, out + r * dvp, max[r], sum[r],
                       track_sink ? sink[r] : 0.0f, dv);
        }
      } else {
        const SdpaLayout& l = *ctx.layout;
        const std::int64_t partial = task_index * heads + h;
        std::copy(out, out + rows * dvp, l.partial_out + partial * out_size);
        std::copy(max, max + rows, l.partial_max + partial * rs);
        std::copy(sum, sum + rows, l.partial_sum + partial * rs);
        if (track_sink) std::copy(sink, sink + rows, l.partial_sink + partial * rs);
      }
    }
  }
};

// Phase 2 of split units: merges the splits' partial results by log-sum-exp, then finalises.
template <class T, class KvT>
void sdpa_merge(void* context, std::int64_t unit_index, int worker) {
  using Kernel = SdpaKernel<T, KvT, 0, 0>;
  using S = Simd;
  const DenormalsAsZero flush;
  const auto& ctx = *static_cast<const SdpaContext<T, KvT>*>(context);
  const SdpaPlan& p = *ctx.plan;
  const SdpaLayout& l = *ctx.layout;
  const SdpaWorkerScratch& w = l.workers[worker];
  const SdpaUnit u = decode_unit(p, unit_index);
  const std::int64_t g = p.group, rs = p.row_stride, dvp = p.dv_padded;
  const std::int64_t heads = p.unit_heads;
  const std::int64_t i0 = u.q_block * p.q_block;
  const std::int64_t rows = std::min(p.q_block, p.q_len - i0) * g;
  for (std::int64_t h = 0; h < heads; ++h) {
    const SdpaUnit head_unit{u.batch, u.kv_head + h, u.q_block};
    for (std::int64_t r = 0; r < rows; ++r) {
      Kernel::prefetch_epilogue(*ctx.args, head_unit, i0, g, rows, r, p.dv);
      float max = -std::numeric_limits<float>::infinity();
      for (std::int64_t s = 0; s < p.splits; ++s) {
        max = std::max(max, l.partial_max[((unit_index * p.splits + s) * heads + h) * rs + r]);
      }
      float sum = 0.0f, sink = 0.0f;
      const bool track_sink = ctx.args->stats.sink_share.data != nullptr;
      float* o = w.out;
      std::fill(o, o + dvp, 0.0f);
      if (max != -std::numeric_limits<float>::infinity()) {
        for (std::int64_t s = 0; s < p.splits; ++s) {
          const std::int64_t t = (unit_index * p.splits + s) * heads + h;  // split s, head h
          const float weight = std::exp2(l.partial_max[t * rs + r] - max);
          if (weight == 0.0f) continue;
          sum += weight * l.partial_sum[t * rs + r];
          if (track_sink) sink += weight * l.partial_sink[t * rs + r];
          const float* po = l.partial_out + (t * rs + r) * dvp;
          const typename S::V wv = S::set1(weight);
          for (std::int64_t c = 0; c < dvp; c += S::kLanes) {
            S::store(o + c, S::fma(wv, S::load(po + c), S::load(o + c)));
          }
        }
      }
      Kernel::finalize_row(ctx, head_unit, i0 + r / g, r % g, o, max, sum, sink, p.dv);
    }
  }
}

// The task function for a head-dim pair: compile-time dims for the common sizes.
template <class T, class KvT>
TaskFn sdpa_task_fn(std::int64_t dk, std::int64_t dv) {
  if (dk == dv) {
    switch (dk) {
      case 64:
        return &SdpaKernel<T, KvT, 64, 64>::task;
      case 80:
        return &SdpaKernel<T, KvT, 80, 80>::task;
      case 96:
        return &SdpaKernel<T, KvT, 96, 96>::task;
      case 128:
        return &SdpaKernel<T, KvT, 128, 128>::task;
      case 256:
        return &SdpaKernel<T, KvT, 256, 256>::task;
      default:
        break;
    }
  }
  return &SdpaKernel<T, KvT, 0, 0>::task;
}
