// Value tiles: O [rows, dv] += P V for one block of keys, P^T [keys, rows] as the softmax left it.
// They depend on the V element type and dv only: a new V type is a new tile. 16- and 8-bit V
// rows are widened to f32 (int8 rows without their scale, which the caller folds into P).
//
// Prefill packs each V block by vector column once and reuses it for every row block. Decode
// reads V rows in place (with a compile-time dv that is whole vectors), each tile fetching what a
// later phase reads. Blocks that some rows see only in part and whose V holds NaN or Inf take an
// exact, slower accumulation that skips zero weights. kRoundWeights: where the storage dot reads
// V (StorageDot<VT>), P is rounded for it (DotPrecision::storage); false keeps P in f32.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

template <class VT, int kDv, bool kRoundWeights = true>
struct ValueTiles {
  using S = Simd;
  using V = S::V;
  static constexpr int L = S::kLanes;
  // Output rows' stride where dv is compile-time: dv padded as in SdpaPlan::dv_padded.
  static constexpr std::int64_t kDvPadded = round_up(kDv, kRowPadding);

  // ---- Blocks with NaN or Inf in V ----

  // Whether every value of num_keys V rows is finite (then a zero weight times any of them is 0,
  // and a block some rows see only in part can take the tiles below).
  template <class Rows>
  static bool values_finite(const Rows& values, std::int64_t num_keys, std::int64_t dv) {
    if constexpr (std::is_same_v<VT, std::int8_t>) return true;  // and finite scales
    const V zero = S::zero();
    V non_finite = zero;  // x * 0 is 0 for finite x, NaN for NaN and +-Inf
    for (std::int64_t n = 0; n < num_keys; ++n) {
      const VT* row = values.row(n);
      for (std::int64_t c = 0; c < dv; c += L) {
        const int count = static_cast<int>(std::min<std::int64_t>(L, dv - c));
        const V x = load_row_part(row + c, count);
        non_finite = S::fma(x, zero, non_finite);
      }
    }
    return S::reduce_add(non_finite) == 0.0f;
  }

  // O[r] += sum_n P^T[n, r] V[n] over the keys whose weight is not zero: exact where V holds NaN
  // or Inf (0 * NaN is NaN). kPairOrder: O in pair order (kValuePairs).
  template <bool kPairOrder, class Rows>
  static void accumulate_skipping_zero_weights(const float* p, std::int64_t row_stride,
                                               std::int64_t rows, const Rows& values,
                                               std::int64_t num_keys, std::int64_t dv, float* out,
                                               std::int64_t out_stride) {
    for (std::int64_t r = 0; r < rows; ++r) {
      float* o = out + r * out_stride;
      for (std::int64_t n = 0; n < num_keys; ++n) {
        const float weight = p[n * row_stride + r];
        if (weight == 0.0f) continue;
        const V wv = S::set1(weight);
        const VT* row = values.row(n);
        if constexpr (kPairOrder) {
          for (std::int64_t c = 0; c < dv; c += 2 * L) {
            V even, odd;
            S::load_pairs(row + c, even, odd);
            S::store(o + c, S::fma(wv, even, S::load(o + c)));
            S::store(o + c + L, S::fma(wv, odd, S::load(o + c + L)));
          }
          continue;
        }
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

  // For a block that some rows see only in part: accumulates it exactly and returns true when V
  // holds NaN or Inf; returns false (nothing done) when it is finite.
  template <bool kPairOrder = false, class Rows>
  static bool accumulate_if_not_finite(const float* p, std::int64_t row_stride, std::int64_t rows,
                                       const Rows& values, std::int64_t num_keys, std::int64_t dv,
                                       float* out, std::int64_t out_stride) {
    if (values_finite(values, num_keys, dv)) return false;
    accumulate_skipping_zero_weights<kPairOrder>(p, row_stride, rows, values, num_keys, dv, out,
                                                 out_stride);
    return true;
  }

  // ---- Packed V blocks ----

  using Dot = StorageDot<VT>;
  // Storage dot panels (StorageDot<VT>::kPanels): the block packed by pairs of keys, and P^T
  // turned into pairs of weights in place (Dot::pair_weights), each tile step taking two keys.
  static constexpr bool kPairPanels = kRoundWeights && Dot::kPanels;
  static constexpr std::int64_t kPackedColumn =
      (kPairPanels ? kKvBlock / 2 : kKvBlock) * L + kPackedColumnPadding;
  // V block packed by vector column: (key n, dims j*L..j*L+L) at packed[j * kPackedColumn + n * L],
  // zero-padded to dv_padded, so each column chunk of the block is contiguous in L1; with pair
  // panels, as Dot::pack_value_pairs lays it out in 32-bit words.
  static void pack(const VT* values, std::int64_t value_stride, std::int64_t num_keys,
                   std::int64_t dv, std::int64_t dv_padded, float* packed) {
    if constexpr (kPairPanels) {
      auto* words = reinterpret_cast<std::uint32_t*>(packed);
      Dot::pack_value_pairs(values, value_stride, num_keys, dv, dv_padded, words, kPackedColumn);
      // Pairs up to a multiple of 16 zero, for the tiles (which read whole groups of 16 pairs).
      const std::int64_t pairs = (num_keys + 1) / 2,
                         tiled = std::min(round_up(pairs, 16), kKvBlock / 2);
      for (std::int64_t j = 0; j * L < dv_padded; ++j) {
        std::fill(words + j * kPackedColumn + pairs * L, words + j * kPackedColumn + tiled * L, 0u);
      }
      return;
    }
    for (std::int64_t n = 0; n < num_keys; ++n) {
      const VT* row = values + n * value_stride;
      for (std::int64_t j = 0; j * L < dv_padded; ++j) {
        const std::int64_t c = j * L;
        const V x = c + L <= dv ? S::load(row + c)
                                : S::load_partial(
                                      row + c, static_cast<int>(std::max<std::int64_t>(0, dv - c)));
        S::store(packed + j * kPackedColumn + n * L, x);
      }
    }
  }

  // O[r, cols] += sum_n P^T[n, r] V[n, cols] for RB rows and CV packed vector columns; out_stride
  // is dv_padded.
  template <int RB, int CV>
  GATED_ATTENTION_ALWAYS_INLINE static void packed_tile(const float* p, std::int64_t row_stride,
                                                        const float* packed, std::int64_t num_keys,
                                                        float* out, std::int64_t out_stride) {
    if constexpr (kDv > 0) out_stride = kDvPadded;  // constant offsets, as where inlined
    V acc[RB][CV];
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) acc[r][c] = S::load(out + r * out_stride + c * L);
    }
    if constexpr (kPairPanels) {
      pair_steps<RB, CV>(acc, reinterpret_cast<const std::uint32_t*>(p), row_stride,
                         reinterpret_cast<const std::uint32_t*>(packed), num_keys);
    } else {
      key_steps<RB, CV>(acc, p, row_stride, packed, num_keys);
    }
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) S::store(out + r * out_stride + c * L, acc[r][c]);
    }
  }

  template <int RB, int CV>
  GATED_ATTENTION_ALWAYS_INLINE static void key_steps(V (&acc)[RB][CV], const float* p,
                                                      std::int64_t row_stride, const float* packed,
                                                      std::int64_t num_keys) {
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
  }

  // key_steps by the storage dot over pairs of keys: weights[m * row_stride + r] holds row r's
  // weights of keys 2m and 2m + 1.
  template <int RB, int CV>
  GATED_ATTENTION_ALWAYS_INLINE static void pair_steps(V (&acc)[RB][CV],
                                                       const std::uint32_t* weights,
                                                       std::int64_t row_stride,
                                                       const std::uint32_t* packed,
                                                       std::int64_t num_keys) {
    for (std::int64_t m = 0; m < (num_keys + 1) / 2; ++m) {
      typename Dot::Raw v[CV];
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) v[c] = Dot::load_panel(packed + c * kPackedColumn + m * L);
      GATED_ATTENTION_UNROLL
      for (int r = 0; r < RB; ++r) {
        const typename Dot::Raw pb = Dot::broadcast_word(weights[m * row_stride + r]);
        GATED_ATTENTION_UNROLL
        for (int c = 0; c < CV; ++c) acc[r][c] = Dot::dot(acc[r][c], v[c], pb);
      }
    }
  }

  template <int CV, int RB = Tuning::kValueTileRows>
  static void packed_rows_remainder(std::int64_t count, const float* p, std::int64_t row_stride,
                                    const float* packed, std::int64_t num_keys, float* out,
                                    std::int64_t out_stride) {
    if constexpr (RB > 0) {
      if (count == RB) {
        packed_tile<RB, CV>(p, row_stride, packed, num_keys, out, out_stride);
      } else {
        packed_rows_remainder<CV, RB - 1>(count, p, row_stride, packed, num_keys, out, out_stride);
      }
    }
  }

  template <int CV>
  GATED_ATTENTION_ALWAYS_INLINE static void packed_rows(std::int64_t rows, const float* p,
                                                        std::int64_t row_stride,
                                                        const float* packed, std::int64_t num_keys,
                                                        float* out, std::int64_t out_stride) {
    constexpr int RB = Tuning::kValueTileRows;
    std::int64_t r = 0;
    for (; r + RB <= rows; r += RB) {
      packed_tile<RB, CV>(p + r, row_stride, packed, num_keys, out + r * out_stride, out_stride);
    }
    if (r < rows) {
      packed_rows_remainder<CV>(rows - r, p + r, row_stride, packed, num_keys, out + r * out_stride,
                                out_stride);
    }
  }

  // O += P V from a packed V block, each column chunk reused by every row block while in L1. With
  // pair panels P^T becomes pairs of weights in place first.
  static void accumulate_packed(float* p, std::int64_t row_stride, std::int64_t rows,
                                const float* packed, std::int64_t num_keys, std::int64_t dv_padded,
                                float* out) {
    if constexpr (kPairPanels) Dot::pair_weights(p, row_stride, rows, num_keys);
    constexpr int CV = Tuning::kValueTileVectors;
    const std::int64_t vectors = dv_padded / L;
    std::int64_t j = 0;
    for (; j + CV <= vectors; j += CV) {
      packed_rows<CV>(rows, p, row_stride, packed + j * kPackedColumn, num_keys, out + j * L,
                      dv_padded);
    }
    for (; j < vectors; ++j) {
      packed_rows<1>(rows, p, row_stride, packed + j * kPackedColumn, num_keys, out + j * L,
                     dv_padded);
    }
  }

  // accumulate_packed on AMX tiles (Dot::kTiles, where amx_tiles()): P^T into pairs of weights in
  // place for all `rows` (a multiple of 16), then O += P V by tiles.
  static void tile_accumulate_packed(float* p, std::int64_t row_stride, std::int64_t rows,
                                     const float* packed, std::int64_t num_keys,
                                     std::int64_t dv_padded, float* out) {
    Dot::pair_weights(p, row_stride, rows, num_keys);
    Dot::weight_value_tiles(p, row_stride, num_keys, reinterpret_cast<const std::uint32_t*>(packed),
                            kPackedColumn, rows, dv_padded, out, dv_padded);
  }

  // ---- Weights rounded for the storage dot (decode, StorageDot<VT>::kWeights) ----

  static constexpr bool kStorage = kRoundWeights && Dot::kWeights;

  // O [rows, dv] (out_stride apart) += P V for P^T [num_keys, row_stride], P (times the int8 V
  // rows' scales) rounded as the storage dot reads it (into `staging`); ahead: rows fetched in
  // even shares along the way.
  template <class Rows>
  static void accumulate_storage(float* p, std::int64_t row_stride, std::int64_t rows,
                                 const Rows& values, RowScales value_scales, std::int64_t num_keys,
                                 std::int64_t dv, float* out, std::int64_t out_stride,
                                 float* staging, const RowPrefetch& ahead) {
    auto* weights = reinterpret_cast<std::uint32_t*>(staging);
    if constexpr (std::is_same_v<VT, std::int8_t>) {
      Dot::pack_weights(p, row_stride, num_keys, value_scales.first, value_scales.stride, weights);
    } else {
      Dot::pack_weights(p, row_stride, num_keys, weights);
    }
    Dot::value_rows(rows, weights, row_stride, values, num_keys, dv, out, out_stride, ahead);
  }

  // ---- V read in place (decode) ----

  // V rows are read in place a group of kInPlaceKeys keys at a time (L1-resident while every row
  // and column chunk reads it), in tiles of kInPlaceTileRows rows x kInPlaceTileVectors vectors.
  static constexpr std::int64_t kInPlaceKeys = 16;
  static constexpr int kInPlaceTileRows = 4;
  // The most whole vectors of a tile that divide kDv and keep kInPlaceTileRows x that many
  // accumulators within the budget; 0: dv not fixed or not whole vectors.
  static constexpr int in_place_tile_vectors() {
    if (kDv <= 0 || kDv % L != 0) return 0;
    for (int c = 4; c > 1; --c) {
      if (c * kInPlaceTileRows <= Tuning::kTileAccumulators && (kDv / L) % c == 0) return c;
    }
    return 1;
  }
  static constexpr int kInPlaceTileVectors = in_place_tile_vectors();
  // Whether V can be read in place: a compile-time dv that is whole vectors.
  static constexpr bool kInPlace = kInPlaceTileVectors > 0;
  // Whether bf16 V rows read in place (or widened once: widen_pairs) are read a pair of vectors at
  // a time (Simd::load_pairs: a shift and a mask per vector, where widening takes two operations),
  // leaving a decode unit's output rows in pair order until it ends (from_pair_order). An even
  // tile width makes dv whole pairs of vectors.
  static constexpr bool kValuePairs =
      std::is_same_v<VT, bf16> && !kStorage && kInPlace && kInPlaceTileVectors % 2 == 0;

  // acc[r] += p[r] v for one key's weights p and V row v.
  template <int RB, int CV>
  GATED_ATTENTION_ALWAYS_INLINE static void in_place_key(V (&acc)[RB][CV], const float* p,
                                                         const VT* v) {
    static_assert(!kValuePairs || CV % 2 == 0, "pairs of vectors");
    V x[CV];
    if constexpr (kValuePairs) {
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; c += 2) S::load_pairs(v + c * L, x[c], x[c + 1]);
    } else {
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) x[c] = load_row_vector(v + c * L);
    }
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      const V pb = S::set1(p[r]);
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) acc[r][c] = S::fma(pb, x[c], acc[r][c]);
    }
  }

  // O[r, cols] += sum_n P^T[n, r] V[n, cols] for RB rows and CV vectors of V rows read in place.
  // NK > 0 (whole decode blocks): num_keys is NK and out_stride kDvPadded, so that the unrolled
  // key loop addresses the output at constant offsets. ahead: `lines` lines fetched, spread over
  // the keys (divided at run time even for NK > 0: see docs/performance-notes.md, "Decode P.V
  // tile: runtime key-count division").
  template <int RB, int CV, int NK, class Rows>
  GATED_ATTENTION_ALWAYS_INLINE static void in_place_tile(const float* p, std::int64_t row_stride,
                                                          const Rows& values, std::int64_t num_keys,
                                                          float* out, std::int64_t out_stride,
                                                          LineCursor& ahead, std::int64_t lines) {
    if constexpr (NK > 0) out_stride = kDvPadded;  // constant offsets
    V acc[RB][CV];
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) acc[r][c] = S::load(out + r * out_stride + c * L);
    }
    const std::int64_t per_key = num_keys > 0 ? (lines + num_keys - 1) / num_keys : 0;
    if constexpr (NK > 0) {
      GATED_ATTENTION_UNROLL
      for (int n = 0; n < NK; ++n, p += row_stride) {
        ahead.fetch(per_key);
        in_place_key(acc, p, values.row(n));
      }
    } else {
      for (std::int64_t n = 0; n < num_keys; ++n, p += row_stride) {
        ahead.fetch(per_key);
        in_place_key(acc, p, values.row(n));
      }
    }
    ahead.fetch(lines - per_key * num_keys);
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < CV; ++c) S::store(out + r * out_stride + c * L, acc[r][c]);
    }
  }

  // A group of `rows` <= RB rows, by its compile-time row count.
  template <int NK, class Rows, int RB = kInPlaceTileRows>
  GATED_ATTENTION_ALWAYS_INLINE static void in_place_rows(std::int64_t rows, const float* p,
                                                          std::int64_t row_stride,
                                                          const Rows& values, std::int64_t num_keys,
                                                          float* out, std::int64_t out_stride,
                                                          LineCursor& ahead, std::int64_t lines) {
    if constexpr (RB > 0 && kInPlace) {
      if (rows == RB) {
        in_place_tile<RB, kInPlaceTileVectors, NK>(p, row_stride, values, num_keys, out, out_stride,
                                                   ahead, lines);
      } else {
        in_place_rows<NK, Rows, RB - 1>(rows, p, row_stride, values, num_keys, out, out_stride,
                                        ahead, lines);
      }
    }
  }

  // One group of keys for every row and column chunk; NK > 0: num_keys is NK.
  template <int NK, class Rows>
  static void in_place_group(const float* p, std::int64_t row_stride, std::int64_t rows,
                             const Rows& values, std::int64_t num_keys, float* out,
                             std::int64_t out_stride, LineCursor& ahead,
                             std::int64_t lines_per_tile, LineCursor& next_values,
                             std::int64_t next_lines_per_tile) {
    constexpr std::int64_t kColumns = kInPlaceTileVectors * L;
    LineCursor cursor = ahead, next = next_values;  // see LineCursor: local copies, in registers
    for (std::int64_t c = 0; c < kDv; c += kColumns) {
      for (std::int64_t r = 0; r < rows; r += kInPlaceTileRows) {
        next.fetch(next_lines_per_tile);
        in_place_rows<NK>(std::min<std::int64_t>(kInPlaceTileRows, rows - r), p + r, row_stride,
                          values.shifted(c), num_keys, out + r * out_stride + c, out_stride, cursor,
                          lines_per_tile);
      }
    }
    ahead = cursor;
    next_values = next;
  }

  // O += P V with V rows read in place, kInPlaceKeys keys at a time, each group's tiles fetching
  // the next group's V rows. ahead: rows (the K rows read next) fetched by the tiles in even
  // shares, spread over each tile's keys, and all of them by the end. Requires kInPlace.
  template <class Rows>
  static void accumulate_in_place(const float* p, std::int64_t row_stride, std::int64_t rows,
                                  const Rows& values, std::int64_t num_keys, float* out,
                                  std::int64_t out_stride, const RowPrefetch& ahead) {
    if constexpr (kInPlace) {
      const std::int64_t groups = (rows + kInPlaceTileRows - 1) / kInPlaceTileRows;
      const std::int64_t group_tiles = groups * (kDv / (kInPlaceTileVectors * L));
      const std::int64_t tiles = group_tiles * ((num_keys + kInPlaceKeys - 1) / kInPlaceKeys);
      LineCursor cursor{ahead};
      const std::int64_t lines_per_tile = tiles > 0 ? (cursor.lines() + tiles - 1) / tiles : 0;
      for (std::int64_t n = 0; n < num_keys; n += kInPlaceKeys) {
        const std::int64_t keys = std::min(kInPlaceKeys, num_keys - n);
        LineCursor next_values{values.fetch_rows(
            n + kInPlaceKeys,
            std::clamp<std::int64_t>(num_keys - n - kInPlaceKeys, 0, kInPlaceKeys),
            static_cast<std::int64_t>(kDv * sizeof(VT)))};
        const std::int64_t next_lines = (next_values.lines() + group_tiles - 1) / group_tiles;
        if (keys == Tuning::kDecodeBlock && out_stride == kDvPadded) {
          in_place_group<Tuning::kDecodeBlock>(p + n * row_stride, row_stride, rows,
                                               values.advanced(n), keys, out, out_stride, cursor,
                                               lines_per_tile, next_values, next_lines);
        } else {
          in_place_group<0>(p + n * row_stride, row_stride, rows, values.advanced(n), keys, out,
                            out_stride, cursor, lines_per_tile, next_values, next_lines);
        }
      }
      cursor.fetch_rest();
    }
  }
};
