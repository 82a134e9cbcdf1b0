// Dot instructions on the stored 16- and 8-bit elements (AVX512-BF16 vdpbf16ps, AVX512-VNNI
// vpdpbusd), for DotPrecision::storage: the StorageDot contract of
// kernels/generic/storage_dot.inl, for bf16 and int8 (scores and values). Included inside
// kernels::avx512_bf16 and its target region.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

inline __m512bh as_bf16_pairs(__m512i x) {
  return (__m512bh)x;
}

// acc + the sums of 4 products of unsigned bytes u and signed bytes s per 32-bit lane (vpdpbusd).
// GCC 12 copies the accumulator of the intrinsic into a new register and back at each use, which
// with 16 accumulators in a loop spills some of them; the instruction by its own statement keeps
// each in one register (docs/performance-notes.md, "int8 decode scores: rows side by side").
GATED_ATTENTION_ALWAYS_INLINE __m512i dot_bytes(__m512i acc, __m512i u, __m512i s) {
#if defined(__clang__)
  return _mm512_dpbusd_epi32(acc, u, s);
#else
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
#endif
}

// Lanes of 32-bit sums (int32 or f32): their sum, and as f32.
GATED_ATTENTION_ALWAYS_INLINE __m512i add_lanes(__m512i a, __m512i b) {
  return _mm512_add_epi32(a, b);
}
GATED_ATTENTION_ALWAYS_INLINE __m512 add_lanes(__m512 a, __m512 b) {
  return _mm512_add_ps(a, b);
}
GATED_ATTENTION_ALWAYS_INLINE __m512 as_floats(__m512i sums) {
  return _mm512_cvtepi32_ps(sums);
}
GATED_ATTENTION_ALWAYS_INLINE __m512 as_floats(__m512 sums) {
  return sums;
}

// Decode scores by row lanes (StorageDot::kRowLanes), for a Dot on elements E: the 4 rows of a
// group side by side, 16 bytes of d each per 128-bit lane, and 16 bytes of a key broadcast to all
// four lanes; a key's accumulator then holds 4 partial sums per row, reduced with three other
// keys' in 6 in-lane shuffles (see docs/performance-notes.md, "int8 decode scores: rows side by
// side"). Dot supplies Lane (its accumulator), kStep (elements in 64 bytes), load and
// load_partial (64 bytes of a key as lane_dot reads them), lane_dot, lane_start, kGroupSlots, and
// where kLaneScales (int8) the scales: lane_extras, key_lane_scales, kScaleSlot.
template <class Dot, class E>
struct RowLanes {
  static constexpr bool kRowLanes = true;
  static constexpr int kLaneKeys = 8;  // keys of a tile
  // Slots (of `padded` floats) a group's interleaved rows take: 4 rows of padded elements.
  static constexpr std::int64_t kRowSlots = sizeof(E);

  // The 4 rows [4 g, 4 g + 4) of the packed rows at q (`padded` floats apart; rows past `rows`
  // zero) into the group's slots at `slots`: 16-byte chunk c of row l at bytes 64 c + 16 l.
  static void interleave_rows(const float* q, std::int64_t rows, std::int64_t padded,
                              std::int64_t g, float* slots) {
    auto* bytes = reinterpret_cast<char*>(slots);
    const auto row_bytes = padded * static_cast<std::int64_t>(sizeof(E));
    for (std::int64_t l = 0; l < 4; ++l) {
      const std::int64_t r = 4 * g + l;
      const auto* row = reinterpret_cast<const char*>(q + r * padded);
      for (std::int64_t c = 0; c < row_bytes; c += 16) {
        if (r < rows) {
          std::memcpy(bytes + 4 * c + 16 * l, row + c, 16);
        } else {
          std::memset(bytes + 4 * c + 16 * l, 0, 16);
        }
      }
    }
    if constexpr (Dot::kLaneScales) Dot::lane_extras(q, rows, padded, g, slots);
  }

  // S^T rows [g * 4, g * 4 + 4) for kLaneKeys keys of `count` (the rest computed on key 0 and not
  // stored) and G groups, their slots `group_stride` floats apart from `slots`; scores at
  // s[k * row_stride + 4 g + l] (row_stride 4 G); ahead: `lines` lines, spread over the steps.
  template <int G, class Rows>
  GATED_ATTENTION_ALWAYS_INLINE static void lane_tile(const Rows& keys, int count,
                                                      const float* slots, std::int64_t padded,
                                                      std::int64_t group_stride, std::int64_t depth,
                                                      const float* key_scales,
                                                      std::int64_t key_scale_stride, float* s,
                                                      LineCursor& ahead, std::int64_t lines) {
    constexpr int KB = kLaneKeys / G;
    constexpr int kStep = Dot::kStep;
    const E* rows[KB];
    GATED_ATTENTION_UNROLL
    for (int k = 0; k < KB; ++k) rows[k] = keys.row(k < count ? k : 0);
    typename Dot::Lane acc[G][KB][2];
    GATED_ATTENTION_UNROLL
    for (int g = 0; g < G; ++g) {
      const typename Dot::Lane start = Dot::lane_start(slots + g * group_stride, padded);
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) {
        acc[g][k][0] = start;
        acc[g][k][1] = typename Dot::Lane{};
      }
    }
    const std::int64_t steps = (depth + kStep - 1) / kStep;
    const std::int64_t per_step = steps > 0 ? (lines + steps - 1) / steps : 0;
    alignas(64) std::uint8_t buffer[KB][64];
    for (std::int64_t d = 0; d < depth; d += kStep) {
      ahead.fetch(per_step);
      const int n = static_cast<int>(std::min<std::int64_t>(kStep, depth - d));
      GATED_ATTENTION_UNROLL
      for (int k = 0; k < KB; ++k) {
        _mm512_store_si512(buffer[k],
                           n == kStep ? Dot::load(rows[k] + d) : Dot::load_partial(rows[k] + d, n));
      }
      // The broadcasts below load from the buffer: kept as loads (a compiler would otherwise
      // forward the stores as shuffles, on the port the dot instructions share).
      __asm__ volatile("" ::: "memory");
      const int chunks = (n * static_cast<int>(sizeof(E)) + 15) / 16;
      GATED_ATTENTION_UNROLL
      for (int c = 0; c < 4; ++c) {
        if (c >= chunks) break;
        __m512i q[G];
        GATED_ATTENTION_UNROLL
        for (int g = 0; g < G; ++g) {
          q[g] = _mm512_load_si512(reinterpret_cast<const char*>(slots + g * group_stride) +
                                   4 * d * static_cast<std::int64_t>(sizeof(E)) + 64 * c);
        }
        GATED_ATTENTION_UNROLL
        for (int k = 0; k < KB; ++k) {
          const __m512i key = _mm512_broadcast_i32x4(
              _mm_load_si128(reinterpret_cast<const __m128i*>(buffer[k] + 16 * c)));
          GATED_ATTENTION_UNROLL
          for (int g = 0; g < G; ++g) {
            acc[g][k][c % 2] = Dot::lane_dot(acc[g][k][c % 2], key, q[g]);
          }
        }
      }
    }
    ahead.fetch(lines - per_step * steps);
    store_lane_sums<G>(acc, count, slots, padded, group_stride, key_scales, key_scale_stride, s);
  }

  // The sums of a key's accumulator per row: lane 4 l + e of the result is key e's row l, for the
  // 4 keys at a.
  template <class Lane>
  GATED_ATTENTION_ALWAYS_INLINE static Lane row_sums(const Lane (&a)[4]) {
    const __m512i a0 = (__m512i)a[0], a1 = (__m512i)a[1], a2 = (__m512i)a[2], a3 = (__m512i)a[3];
    const auto t0 = (__m512i)add_lanes((Lane)_mm512_unpacklo_epi32(a0, a1),
                                       (Lane)_mm512_unpackhi_epi32(a0, a1));
    const auto t1 = (__m512i)add_lanes((Lane)_mm512_unpacklo_epi32(a2, a3),
                                       (Lane)_mm512_unpackhi_epi32(a2, a3));
    return add_lanes((Lane)_mm512_unpacklo_epi64(t0, t1), (Lane)_mm512_unpackhi_epi64(t0, t1));
  }

  // Lane j of a stored vector of scores: key j / (4 G), row j % (4 G), taken from lane
  // 4 (row % 4) + key of group row / 4's sums (16 lanes a group).
  template <int G>
  struct LaneOrder {
    alignas(64) std::int32_t source[16] = {};
    constexpr LaneOrder() {
      for (int j = 0; j < 16; ++j) source[j] = j % (4 * G) / 4 * 16 + j % 4 * 4 + j / (4 * G);
    }
  };

  template <int G, class Lane>
  GATED_ATTENTION_ALWAYS_INLINE static void store_lane_sums(
      const Lane (&acc)[G][kLaneKeys / G][2], int count, const float* slots, std::int64_t padded,
      std::int64_t group_stride, const float* key_scales, std::int64_t key_scale_stride, float* s) {
    constexpr int KB = kLaneKeys / G;
    static constexpr LaneOrder<G> kOrder{};
    const __m512i index = _mm512_load_si512(kOrder.source);
    const __m512i upper = _mm512_add_epi32(index, _mm512_set1_epi32(16 / (4 * G)));
    GATED_ATTENTION_UNROLL
    for (int k0 = 0; k0 < KB; k0 += 4) {
      const int left = std::max(0, std::min(4, count - k0));
      __m512 keys = _mm512_set1_ps(1.0f);
      if constexpr (Dot::kLaneScales) {
        keys = Dot::key_lane_scales(key_scales + (left > 0 ? k0 : 0) * key_scale_stride,
                                    key_scale_stride, left);
      }
      __m512 sums[G];
      GATED_ATTENTION_UNROLL
      for (int g = 0; g < G; ++g) {
        const Lane a[4] = {add_lanes(acc[g][k0][0], acc[g][k0][1]),
                           add_lanes(acc[g][k0 + 1][0], acc[g][k0 + 1][1]),
                           add_lanes(acc[g][k0 + 2][0], acc[g][k0 + 2][1]),
                           add_lanes(acc[g][k0 + 3][0], acc[g][k0 + 3][1])};
        sums[g] = as_floats(row_sums(a));
        if constexpr (Dot::kLaneScales) {
          const __m512 rows = _mm512_loadu_ps(slots + g * group_stride + Dot::kScaleSlot * padded);
          sums[g] = _mm512_mul_ps(sums[g], _mm512_mul_ps(keys, rows));
        }
      }
      GATED_ATTENTION_UNROLL
      for (int v = 0; v < G; ++v) {  // 16 scores: 16 / (4 G) keys each
        const int keys_in = std::max(0, std::min(4 / G, left - v * (4 / G)));
        const __m512 out =
            G == 1 ? _mm512_permutexvar_ps(index, sums[0])
                   : _mm512_permutex2var_ps(sums[0], v == 0 ? index : upper, sums[G - 1]);
        _mm512_mask_storeu_ps(s + (k0 + v * (4 / G)) * 4 * G,
                              static_cast<__mmask16>((1u << (keys_in * 4 * G)) - 1u), out);
      }
    }
  }
};

// bf16 K: acc (f32 lanes) += the products of 32 bf16 pairs, q rounded to bf16.
template <>
struct StorageDot<bf16> : RowLanes<StorageDot<bf16>, bf16> {
  static constexpr bool kAvailable = true;
  static constexpr bool kWeights = true;
  // Keys per decode block (docs/performance-notes.md, "Storage dot: decode blocks of 64 keys").
  static constexpr std::int64_t kDecodeBlock = 64;
  static constexpr int kStep = 32;  // elements of one raw vector
  using Raw = __m512i;
  using Acc = __m512;

  static Raw load(const bf16* p) { return _mm512_loadu_si512(p); }
  static Raw load_partial(const bf16* p, int n) { return _mm512_maskz_loadu_epi16(first(n), p); }
  static Acc dot(Acc acc, Raw k, Raw q) {
    return _mm512_dpbf16_ps(acc, as_bf16_pairs(k), as_bf16_pairs(q));
  }

  // Row lanes (RowLanes): a group's slots hold its 4 interleaved rows alone.
  static constexpr bool kLaneScales = false;
  static constexpr std::int64_t kGroupSlots = kRowSlots;
  using Lane = __m512;
  static Lane lane_start(const float*, std::int64_t) { return _mm512_setzero_ps(); }
  static Lane lane_dot(Lane acc, Raw k, Raw q) { return dot(acc, k, q); }

  // The row's scaled query (f32, d values) as bf16 at its start (RNE), zeros up to `padded`.
  static void pack_query(float* row, std::int64_t d, std::int64_t padded) {
    std::uint16_t bits[kMaxHeadDim];
    for (std::int64_t i = 0; i < padded; ++i) {
      bits[i] = i < d ? gated_attention::detail::float_to_bf16_bits(row[i]) : 0;
    }
    std::memcpy(row, bits, static_cast<std::size_t>(padded) * sizeof(bits[0]));
  }

  // ---- P.V: P rounded to bf16, vdpbf16ps over pairs of keys: V rows 2m and 2m + 1 interleaved
  // element by element within 128-bit lanes (unpacks), P as (P[2m], P[2m + 1]) pairs per row ----

  // pairs[m * stride + r] = (bf16(P^T[2m, r]), bf16(P^T[2m + 1, r])) for the num_keys rows of
  // P^T (stride 4 or 8 floats), the missing key of an odd count 0.
  static void pack_weights(const float* p, std::int64_t stride, std::int64_t num_keys,
                           std::uint32_t* pairs) {
    alignas(64) std::int32_t order[16];
    for (int e = 0; e < 16; ++e) {
      const std::int64_t pair = e / (2 * stride), r = e % (2 * stride) / 2;
      order[e] = static_cast<std::int32_t>((2 * pair + e % 2) * stride + r);
    }
    const __m512i index = _mm512_load_si512(order);
    const std::int64_t floats = num_keys * stride;
    for (std::int64_t i = 0; i < floats; i += 16) {
      const int n = static_cast<int>(std::min<std::int64_t>(16, floats - i));
      const __m512 x = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p + i);
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_permutexvar_ps(index, x));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pairs + i / 2), (__m256i)b);
    }
  }

  // Output dims [c, c + 32) of RB rows (stride out_stride) over num_keys V rows: V chunks of 32
  // bf16 (count valid) interleaved per key pair within 128-bit lanes, so that lane l of acc[r][h]
  // holds dims 8 l + 4 h .. 8 l + 4 h + 3; put in order once, at the end (add_pairs).
  template <int RB, class Rows>
  GATED_ATTENTION_ALWAYS_INLINE static void chunk(const std::uint32_t* pairs, std::int64_t stride,
                                                  const Rows& values, std::int64_t num_keys,
                                                  int count, float* out, std::int64_t out_stride,
                                                  LineCursor& ahead, std::int64_t lines_per_pair) {
    const __mmask32 loads = first(count);
    __m512 acc[RB][2];
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (std::int64_t n = 0; n < num_keys; n += 2) {
      ahead.fetch(lines_per_pair);
      const __m512i a = _mm512_maskz_loadu_epi16(loads, values.row(n));
      const __m512i b = n + 1 < num_keys ? _mm512_maskz_loadu_epi16(loads, values.row(n + 1))
                                         : _mm512_setzero_si512();
      const __m512bh lo = as_bf16_pairs(_mm512_unpacklo_epi16(a, b));
      const __m512bh hi = as_bf16_pairs(_mm512_unpackhi_epi16(a, b));
      const std::uint32_t* w = pairs + n / 2 * stride;
      GATED_ATTENTION_UNROLL
      for (int r = 0; r < RB; ++r) {
        const __m512bh weight = as_bf16_pairs(_mm512_set1_epi32(static_cast<std::int32_t>(w[r])));
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], lo, weight);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], hi, weight);
      }
    }
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) add_pairs(acc[r], count, out + r * out_stride);
  }

  // out[0, count) += the dims of acc, in chunk's lane order.
  GATED_ATTENTION_ALWAYS_INLINE static void add_pairs(const __m512 (&acc)[2], int count,
                                                      float* out) {
    // Dims 8 j .. 8 j + 7: 128-bit lane j of acc[0], then of acc[1].
    const __m512i low = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i high = _mm512_add_epi32(low, _mm512_set1_epi32(8));
    const __mmask16 lo_mask = static_cast<__mmask16>((1u << std::min(count, 16)) - 1u);
    const __mmask16 hi_mask = static_cast<__mmask16>((1u << std::max(count - 16, 0)) - 1u);
    const __m512 dims_lo = _mm512_permutex2var_ps(acc[0], low, acc[1]);
    const __m512 dims_hi = _mm512_permutex2var_ps(acc[0], high, acc[1]);
    _mm512_mask_storeu_ps(out, lo_mask,
                          _mm512_add_ps(_mm512_maskz_loadu_ps(lo_mask, out), dims_lo));
    _mm512_mask_storeu_ps(out + 16, hi_mask,
                          _mm512_add_ps(_mm512_maskz_loadu_ps(hi_mask, out + 16), dims_hi));
  }

  // RB rows, every chunk of dv; ahead: its lines fetched in even shares over the key pairs (see
  // docs/performance-notes.md, "Storage dot precision: vdpbf16ps and VNNI on the decode tiles").
  template <int RB, class Rows>
  static void rows_chunks(const std::uint32_t* pairs, std::int64_t stride, const Rows& values,
                          std::int64_t num_keys, std::int64_t dv, float* out,
                          std::int64_t out_stride, const RowPrefetch& ahead) {
    LineCursor cursor{ahead};
    const std::int64_t steps = (dv + 31) / 32 * ((num_keys + 1) / 2);
    const std::int64_t lines_per_pair = steps > 0 ? (cursor.lines() + steps - 1) / steps : 0;
    for (std::int64_t c = 0; c < dv; c += 32) {
      const int count = static_cast<int>(std::min<std::int64_t>(32, dv - c));
      chunk<RB>(pairs, stride, values.shifted(c), num_keys, count, out + c, out_stride, cursor,
                lines_per_pair);
    }
    cursor.fetch_rest();
  }

  // `rows` <= RB rows, by their compile-time count.
  template <class Rows, int RB = 8>
  static void value_rows(std::int64_t count, const std::uint32_t* pairs, std::int64_t stride,
                         const Rows& values, std::int64_t num_keys, std::int64_t dv, float* out,
                         std::int64_t out_stride, const RowPrefetch& ahead) {
    if constexpr (RB > 0) {
      if (count == RB) {
        rows_chunks<RB>(pairs, stride, values, num_keys, dv, out, out_stride, ahead);
      } else {
        value_rows<Rows, RB - 1>(count, pairs, stride, values, num_keys, dv, out, out_stride,
                                 ahead);
      }
    }
  }

  // ---- Prefill panels: q panels and V blocks as pairs of bf16 (d, d + 1) or keys (2m, 2m + 1) in
  // 32-bit words, each vdpbf16ps taking two dims (S^T) or two keys (P.V) ----

  static constexpr bool kPanels = true;
  static std::uint32_t pair_bits(float x, float y) {
    return gated_attention::detail::float_to_bf16_bits(x) |
           static_cast<std::uint32_t>(gated_attention::detail::float_to_bf16_bits(y)) << 16;
  }
  static Raw load_panel(const std::uint32_t* p) { return _mm512_loadu_si512(p); }
  static Raw broadcast_word(std::uint32_t w) {
    return _mm512_set1_epi32(static_cast<std::int32_t>(w));
  }
  // K elements (d, d + 1) of a row to every lane; single: element d and 0.
  static Raw broadcast_pair(const bf16* p, bool single) {
    std::uint32_t w = p->bits;
    if (!single) std::memcpy(&w, p, sizeof(w));
    return broadcast_word(w);
  }

  // P^T [num_keys, stride] into pairs in place: row m's first `rows` floats become the words
  // (bf16(P^T[2m, r]), bf16(P^T[2m + 1, r])) (RNE; the missing key of an odd count 0). Row m is
  // written after rows 2m and 2m + 1 are read, and no later pair reads it.
  static void pair_weights(float* p, std::int64_t stride, std::int64_t rows,
                           std::int64_t num_keys) {
    for (std::int64_t m = 0; m < (num_keys + 1) / 2; ++m) {
      const float* a = p + 2 * m * stride;
      const bool has_b = 2 * m + 1 < num_keys;
      for (std::int64_t r = 0; r < rows; r += 16) {
        const auto mask = static_cast<__mmask16>((1u << std::min<std::int64_t>(16, rows - r)) - 1u);
        const __m512i lo =
            _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, a + r)));
        const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(
            has_b ? _mm512_maskz_loadu_ps(mask, a + stride + r) : _mm512_setzero_ps()));
        _mm512_mask_storeu_epi32(p + m * stride + r, mask,
                                 _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
    }
  }

  // vpermt2w indices interleaving two rows a and b element by element: elements 0..15 of each
  // (low) or 16..31 (high) as a0 b0 a1 b1 ...
  static __m512i interleave_low() {
    return _mm512_setr_epi32(0x00200000, 0x00210001, 0x00220002, 0x00230003, 0x00240004, 0x00250005,
                             0x00260006, 0x00270007, 0x00280008, 0x00290009, 0x002a000a, 0x002b000b,
                             0x002c000c, 0x002d000d, 0x002e000e, 0x002f000f);
  }
  static __m512i interleave_high() {
    return _mm512_add_epi16(interleave_low(), _mm512_set1_epi16(16));
  }

  // A V block [num_keys, dv] by pairs of keys: column j (dims 16j..16j+16) of pair m at
  // packed[j * column + m * 16], V rows 2m and 2m + 1 interleaved element by element; zero past
  // dv (up to dv_padded) and for the missing key of an odd count.
  static void pack_value_pairs(const bf16* values, std::int64_t value_stride, std::int64_t num_keys,
                               std::int64_t dv, std::int64_t dv_padded, std::uint32_t* packed,
                               std::int64_t column) {
    const __m512i low = interleave_low(), high = interleave_high();
    for (std::int64_t m = 0; m < (num_keys + 1) / 2; ++m) {
      const bf16* a_row = values + 2 * m * value_stride;
      const bool has_b = 2 * m + 1 < num_keys;
      for (std::int64_t c = 0; c < dv_padded; c += 32) {
        const __mmask32 loads = first(static_cast<int>(std::max<std::int64_t>(0, dv - c)));
        const __m512i a = _mm512_maskz_loadu_epi16(loads, a_row + c);
        const __m512i b = has_b ? _mm512_maskz_loadu_epi16(loads, a_row + value_stride + c)
                                : _mm512_setzero_si512();
        std::uint32_t* out = packed + c / 16 * column + m * 16;
        _mm512_storeu_si512(out, _mm512_permutex2var_epi16(a, low, b));
        if (c + 16 < dv_padded) {
          _mm512_storeu_si512(out + column, _mm512_permutex2var_epi16(a, high, b));
        }
      }
    }
  }

  static __mmask32 first(int n) { return n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1; }

  // AMX tiles over the same layouts (kernels/amx_tiles.hpp has the contracts).
  static constexpr bool kTiles = true;
  static void configure_tiles() { amx::configure_tiles(); }
  static void release_tiles() { amx::release_tiles(); }
  static void key_query_tiles(const bf16* keys, std::int64_t key_stride, std::int64_t num_keys,
                              const std::uint32_t* q_pairs, std::int64_t rows, std::int64_t dk,
                              float* s, std::int64_t s_stride) {
    amx::key_query_tiles(reinterpret_cast<const std::uint16_t*>(keys), key_stride, num_keys,
                         q_pairs, rows, dk, s, s_stride);
  }
  static void weight_value_tiles(const float* p, std::int64_t p_stride, std::int64_t num_keys,
                                 const std::uint32_t* packed, std::int64_t column,
                                 std::int64_t rows, std::int64_t dv, float* out,
                                 std::int64_t out_stride) {
    amx::weight_value_tiles(reinterpret_cast<const std::uint32_t*>(p), p_stride, (num_keys + 1) / 2,
                            packed, column, rows, dv, out, out_stride);
  }
};

// int8 K: sums of (k + 128) q by vpdpbusd (unsigned x signed), q quantised per row; the 128 q
// offset is subtracted by starting each row's sums at -128 sum(q).
template <>
struct StorageDot<std::int8_t> : RowLanes<StorageDot<std::int8_t>, std::int8_t> {
  static constexpr bool kAvailable = true;
  static constexpr bool kWeights = true;
  static constexpr bool kPanels = false;
  static constexpr bool kTiles = false;
  static constexpr std::int64_t kDecodeBlock = 64;  // as for bf16
  static constexpr int kStep = 64;
  using Raw = __m512i;

  static Raw to_unsigned(Raw k) { return _mm512_xor_si512(k, _mm512_set1_epi8(-128)); }
  static Raw load(const std::int8_t* p) { return to_unsigned(_mm512_loadu_si512(p)); }
  // Lanes past n hold 128 (unsigned), against zero query lanes.
  static Raw load_partial(const std::int8_t* p, int n) {
    return to_unsigned(_mm512_maskz_loadu_epi8(first(n), p));
  }
  // The row's scaled query (f32, d values) quantised as round_query_row does, at its start, zeros
  // up to `padded` bytes; then -128 sum(q) (int32) and the scale in its last two floats. A row
  // with NaN or Inf gets a NaN scale (and q all 0). By vectors, with
  // detail::quantize_query_row's values: the same exact maximum, products and ties-to-even
  // rounding.
  static void pack_query(float* row, std::int64_t d, std::int64_t padded) {
    __m512 max_abs = _mm512_setzero_ps(), non_finite = _mm512_setzero_ps();
    for (std::int64_t i = 0; i < d; i += 16) {
      const __m512 x = _mm512_maskz_loadu_ps(lanes(d - i), row + i);
      max_abs = _mm512_max_ps(max_abs, _mm512_abs_ps(x));
      non_finite = _mm512_add_ps(non_finite, _mm512_mul_ps(x, _mm512_setzero_ps()));
    }
    const float max = _mm512_reduce_max_ps(max_abs) + _mm512_reduce_add_ps(non_finite);
    auto* bytes = reinterpret_cast<std::int8_t*>(row);
    if (!std::isfinite(max)) {
      std::memset(bytes, 0, static_cast<std::size_t>(padded));
      std::memset(row + padded - 2, 0, sizeof(float));
      row[padded - 1] = std::numeric_limits<float>::quiet_NaN();
      return;
    }
    const __m512 inverse = _mm512_set1_ps(gated_attention::int8_inverse_scale(max));
    __m512i sum = _mm512_setzero_si512();
    for (std::int64_t i = 0; i < d; i += 16) {  // bytes [i, i + 16) lie in floats already read
      const __mmask16 m = lanes(d - i);
      const __m512i q =
          _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + i), inverse));
      const __m512i clamped =
          _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
      sum = _mm512_add_epi32(sum, clamped);
      _mm512_mask_cvtepi32_storeu_epi8(bytes + i, m, clamped);
    }
    std::memset(bytes + d, 0, static_cast<std::size_t>(padded - d));
    const std::int32_t offset = -128 * _mm512_reduce_add_epi32(sum);
    std::memcpy(row + padded - 2, &offset, sizeof(offset));
    row[padded - 1] = gated_attention::int8_scale(max);
  }

  // The scale of a row packed by pack_query (`padded` floats).
  static float query_scale(const float* row, std::int64_t padded) { return row[padded - 1]; }

  // ---- Row lanes (RowLanes): a group's slots hold its interleaved rows, then the start
  // accumulator (lane 4 l: row l's -128 sum(q)), then the row scales (lane 4 l + e: row l's) ----

  static constexpr bool kLaneScales = true;
  static constexpr std::int64_t kStartSlot = kRowSlots, kScaleSlot = kRowSlots + 1;
  static constexpr std::int64_t kGroupSlots = kRowSlots + 2;
  using Lane = __m512i;
  static Lane lane_start(const float* slots, std::int64_t padded) {
    return _mm512_loadu_si512(slots + kStartSlot * padded);
  }
  static Lane lane_dot(Lane acc, Raw k, Raw q) { return dot_bytes(acc, k, q); }

  // Group g's start accumulator and row scales from the packed rows at q, into its slots.
  static void lane_extras(const float* q, std::int64_t rows, std::int64_t padded, std::int64_t g,
                          float* slots) {
    alignas(64) std::int32_t starts[16] = {};
    alignas(64) float scales[16] = {};
    for (std::int64_t l = 0; l < 4 && 4 * g + l < rows; ++l) {
      const float* packed = q + (4 * g + l) * padded;
      std::memcpy(&starts[4 * l], packed + padded - 2, sizeof(std::int32_t));
      for (int e = 0; e < 4; ++e) scales[4 * l + e] = query_scale(packed, padded);
    }
    std::memcpy(slots + kStartSlot * padded, starts, sizeof(starts));
    std::memcpy(slots + kScaleSlot * padded, scales, sizeof(scales));
  }

  // Lane 4 l + e: key e's scale, for the 4 keys at key_scales (those past keys_in: key 0's).
  GATED_ATTENTION_ALWAYS_INLINE static __m512 key_lane_scales(const float* key_scales,
                                                              std::int64_t stride, int keys_in) {
    __m512 keys = _mm512_setzero_ps();
    GATED_ATTENTION_UNROLL
    for (int e = 0; e < 4; ++e) {
      keys = _mm512_mask_mov_ps(keys, static_cast<__mmask16>(0x1111u << e),
                                _mm512_set1_ps(key_scales[(e < keys_in ? e : 0) * stride]));
    }
    return keys;
  }

  // ---- P.V: the weights (P times the V scales) as u8 per block and row, vpdpbusd over quads of
  // keys: V rows 4j..4j+3 interleaved byte by byte, the weights as 4 bytes per row ----

  // Where pack_weights leaves the rows' weight scales, in floats past `weights`.
  static constexpr std::int64_t kWeightScales = 128;

  // w[n, r] *= value_scales[n * scale_stride] for the num_keys rows of P^T at w (kStride floats
  // each, 16-float vectors); returns the lanes' maxima (lane i: row i % kStride).
  template <int kStride>
  static __m512 scale_weights(float* w, std::int64_t num_keys, const float* value_scales,
                              std::int64_t scale_stride) {
    constexpr int kKeys = 16 / kStride;
    const std::int64_t floats = num_keys * kStride;
    __m512 max = _mm512_setzero_ps();
    for (std::int64_t i = 0, n = 0; i < floats; i += 16, n += kKeys) {
      __m512 scale = _mm512_set1_ps(value_scales[n * scale_stride]);
      GATED_ATTENTION_UNROLL
      for (int k = 1; k < kKeys; ++k) {  // keys past num_keys: lanes not loaded, any scale
        const std::int64_t key = n + k < num_keys ? n + k : n;
        scale = _mm512_mask_mov_ps(scale, static_cast<__mmask16>(0xFFFFu << (k * kStride)),
                                   _mm512_set1_ps(value_scales[key * scale_stride]));
      }
      const __mmask16 m = lanes(floats - i);
      const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), scale);
      _mm512_mask_storeu_ps(w + i, m, x);
      max = _mm512_max_ps(max, x);
    }
    return max;
  }

  // quads[j * stride + r] = the bytes round(w[4j + i, r] * 255 / max_n w[n, r]), i < 4, of the
  // weights w[n, r] = P^T[n, r] * value_scales[n * scale_stride] of the num_keys rows of P^T at w
  // (stride 4 or 8 floats; missing keys 0), written over P^T at w (16-float vectors, as the
  // softmax wrote them); the scales max / 255 at kWeightScales.
  static void pack_weights(float* w, std::int64_t stride, std::int64_t num_keys,
                           const float* value_scales, std::int64_t scale_stride,
                           std::uint32_t* quads) {
    const std::int64_t floats = num_keys * stride;
    __m512 max = stride == 4 ? scale_weights<4>(w, num_keys, value_scales, scale_stride)
                             : scale_weights<8>(w, num_keys, value_scales, scale_stride);
    max = _mm512_max_ps(max, _mm512_shuffle_f32x4(max, max, 0x4E));  // lane i: row i % stride
    if (stride == 4) max = _mm512_max_ps(max, _mm512_shuffle_f32x4(max, max, 0xB1));
    const __mmask16 positive = _mm512_cmp_ps_mask(max, _mm512_setzero_ps(), _CMP_GT_OQ);
    // 255 / max by the estimate and one Newton step (relative error about 2^-23; a weight of
    // max still rounds to 255), max / 255 as a product.
    const __m512 estimate = _mm512_maskz_rcp14_ps(positive, max);
    const __m512 refined =
        _mm512_mul_ps(estimate, _mm512_fnmadd_ps(max, estimate, _mm512_set1_ps(2.0f)));
    const __m512 inverse = _mm512_mul_ps(refined, _mm512_set1_ps(255.0f));
    _mm512_mask_storeu_ps(reinterpret_cast<float*>(quads) + kWeightScales,
                          static_cast<__mmask16>((1u << stride) - 1u),
                          _mm512_mul_ps(max, _mm512_set1_ps(1.0f / 255.0f)));
    // Element e of a group of 4 keys: row e / 4 (+ 4 in the second half), key e % 4.
    alignas(64) std::int32_t order[16];
    for (int e = 0; e < 16; ++e) {
      const int r = e / 4, k = e % 4;
      order[e] = stride == 8 ? (k >= 2 ? 16 : 0) + (k % 2) * 8 + r : k * 4 + r;
    }
    const __m512i index = _mm512_load_si512(order);
    const __m512i upper = _mm512_add_epi32(index, _mm512_set1_epi32(4));
    for (std::int64_t n = 0; n < num_keys; n += 4) {
      const std::int64_t i = n * stride;
      const __m512i a = _mm512_cvtps_epi32(
          _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(floats - i), w + i), inverse));
      __m128i* out = reinterpret_cast<__m128i*>(quads + n / 4 * stride);
      if (stride == 4) {
        _mm_storeu_si128(out, _mm512_cvtepi32_epi8(_mm512_permutexvar_epi32(index, a)));
      } else {
        const __m512i b = _mm512_cvtps_epi32(
            _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(floats - i - 16), w + i + 16), inverse));
        _mm_storeu_si128(out, _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(a, index, b)));
        _mm_storeu_si128(out + 1, _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(a, upper, b)));
      }
    }
  }

  // Output dims [c, c + 64) (count valid) of RB rows over num_keys V rows, fetching
  // lines_per_quad lines of `ahead` per 4 keys.
  template <int RB, class Rows>
  GATED_ATTENTION_ALWAYS_INLINE static void chunk(const std::uint32_t* quads, std::int64_t stride,
                                                  const Rows& values, std::int64_t num_keys,
                                                  int count, float* out, std::int64_t out_stride,
                                                  LineCursor& ahead, std::int64_t lines_per_quad) {
    __m512i acc[RB][4];
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      GATED_ATTENTION_UNROLL
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_si512();
    }
    const __mmask64 loads = first(count);
    std::int64_t n = 0;
    for (; n + 4 <= num_keys; n += 4) {  // whole quads: no per-row conditions in the loop
      ahead.fetch(lines_per_quad);
      quad_step<RB>(quads + n / 4 * stride, values, n, 4, loads, acc);
    }
    if (n < num_keys) {
      ahead.fetch(lines_per_quad);
      quad_step<RB>(quads + n / 4 * stride, values, n, num_keys - n, loads, acc);
    }
    const float* scales = reinterpret_cast<const float*>(quads) + kWeightScales;
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) add_scaled(acc[r], scales[r], count, out + r * out_stride);
  }

  // acc[r][j] += the weights w[r] (4 keys' bytes) times the V rows n.. n + keys (keys <= 4, the
  // rest zero), their bytes `loads`: lane (l, i) of x[j] holds dim 16 l + 4 j + i's bytes of the 4
  // keys.
  template <int RB, class Rows>
  GATED_ATTENTION_ALWAYS_INLINE static void quad_step(const std::uint32_t* w, const Rows& values,
                                                      std::int64_t n, std::int64_t keys,
                                                      __mmask64 loads, __m512i (&acc)[RB][4]) {
    __m512i v[4];
    GATED_ATTENTION_UNROLL
    for (int i = 0; i < 4; ++i) {
      v[i] = i < keys ? _mm512_maskz_loadu_epi8(loads, values.row(n + i)) : _mm512_setzero_si512();
    }
    const __m512i lo01 = _mm512_unpacklo_epi8(v[0], v[1]), hi01 = _mm512_unpackhi_epi8(v[0], v[1]);
    const __m512i lo23 = _mm512_unpacklo_epi8(v[2], v[3]), hi23 = _mm512_unpackhi_epi8(v[2], v[3]);
    const __m512i x[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                          _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
    GATED_ATTENTION_UNROLL
    for (int r = 0; r < RB; ++r) {
      const __m512i weight = _mm512_set1_epi32(static_cast<std::int32_t>(w[r]));
      GATED_ATTENTION_UNROLL
      for (int j = 0; j < 4; ++j) acc[r][j] = dot_bytes(acc[r][j], weight, x[j]);
    }
  }

  // out[0, count) += scale * the dims of acc (lane (l, i) of acc[j]: dim 16 l + 4 j + i), by a
  // transpose of 128-bit lanes.
  GATED_ATTENTION_ALWAYS_INLINE static void add_scaled(const __m512i (&acc)[4], float scale,
                                                       int count, float* out) {
    const __m512i t0 = _mm512_shuffle_i32x4(acc[0], acc[1], 0x44);
    const __m512i t1 = _mm512_shuffle_i32x4(acc[2], acc[3], 0x44);
    const __m512i t2 = _mm512_shuffle_i32x4(acc[0], acc[1], 0xEE);
    const __m512i t3 = _mm512_shuffle_i32x4(acc[2], acc[3], 0xEE);
    const __m512i dims[4] = {_mm512_shuffle_i32x4(t0, t1, 0x88), _mm512_shuffle_i32x4(t0, t1, 0xDD),
                             _mm512_shuffle_i32x4(t2, t3, 0x88),
                             _mm512_shuffle_i32x4(t2, t3, 0xDD)};
    const __m512 s = _mm512_set1_ps(scale);
    GATED_ATTENTION_UNROLL
    for (int l = 0; l < 4; ++l) {
      const __mmask16 m = lanes(count - 16 * l);
      const __m512 o = _mm512_maskz_loadu_ps(m, out + 16 * l);
      _mm512_mask_storeu_ps(out + 16 * l, m, _mm512_fmadd_ps(_mm512_cvtepi32_ps(dims[l]), s, o));
    }
  }

  // RB <= 4 rows, every chunk of dv; ahead: its lines fetched in even shares over the quads.
  template <int RB, class Rows>
  static void rows_chunks(const std::uint32_t* quads, std::int64_t stride, const Rows& values,
                          std::int64_t num_keys, std::int64_t dv, float* out,
                          std::int64_t out_stride, LineCursor& cursor,
                          std::int64_t lines_per_quad) {
    LineCursor local = cursor;  // see LineCursor: a local copy, in registers
    for (std::int64_t c = 0; c < dv; c += 64) {
      const int count = static_cast<int>(std::min<std::int64_t>(64, dv - c));
      chunk<RB>(quads, stride, values.shifted(c), num_keys, count, out + c, out_stride, local,
                lines_per_quad);
    }
    cursor = local;
  }

  template <class Rows, int RB = 4>
  static void row_group(std::int64_t count, const std::uint32_t* quads, std::int64_t stride,
                        const Rows& values, std::int64_t num_keys, std::int64_t dv, float* out,
                        std::int64_t out_stride, LineCursor& cursor, std::int64_t lines_per_quad) {
    if constexpr (RB > 0) {
      if (count == RB) {
        rows_chunks<RB>(quads, stride, values, num_keys, dv, out, out_stride, cursor,
                        lines_per_quad);
      } else {
        row_group<Rows, RB - 1>(count, quads, stride, values, num_keys, dv, out, out_stride, cursor,
                                lines_per_quad);
      }
    }
  }

  // O [rows, dv] += W V, W packed by pack_weights; ahead fetched along the way.
  template <class Rows>
  static void value_rows(std::int64_t rows, const std::uint32_t* quads, std::int64_t stride,
                         const Rows& values, std::int64_t num_keys, std::int64_t dv, float* out,
                         std::int64_t out_stride, const RowPrefetch& ahead) {
    LineCursor cursor{ahead};
    const std::int64_t groups = (rows + 3) / 4;
    const std::int64_t steps = groups * ((dv + 63) / 64) * ((num_keys + 3) / 4);
    const std::int64_t lines_per_quad = steps > 0 ? (cursor.lines() + steps - 1) / steps : 0;
    for (std::int64_t r = 0; r < rows; r += 4) {  // quads + r: the group's weights and scales
      row_group(std::min<std::int64_t>(4, rows - r), quads + r, stride, values, num_keys, dv,
                out + r * out_stride, out_stride, cursor, lines_per_quad);
    }
    cursor.fetch_rest();
  }

  static __mmask16 lanes(std::int64_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xffff)
                   : static_cast<__mmask16>((1u << std::max<std::int64_t>(n, 0)) - 1u);
  }
  static __mmask64 first(int n) { return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1; }
};
