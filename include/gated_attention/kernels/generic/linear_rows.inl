// y = x W^T + bias with weights of any element type (widened to f32 as they load), f32 sums, over
// the enclosing ISA's `Simd`: register tiles of up to kLinearTileRows rows of x by 4 rows of W (the
// x vectors held, one weight vector at a time). x goes in blocks of kLinearRowBlock rows, so that a
// block stays in L2 while the weight rows pass once per block; a decode step reads W once.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

// Rows of x per tile: 4 accumulators per row within the path's budget (AVX2: 3 rows, whose 12
// accumulators, 3 x vectors and one weight vector fill its 16 registers).
constexpr int kLinearTileRows =
    Tuning::kTileAccumulators / 4 < 4 ? Tuning::kTileAccumulators / 4 : 4;

// One tile: rows [r, r + R) of x against weight rows [o, o + wn), wn <= 4. A short tile repeats its
// last weight row (in bounds) and stores only its own results. first: the first tile of its row
// block on these weight rows, which reads them from memory.
template <int R, class W>
void linear_tile(const LinearArgs<float, W>& a, std::int64_t r, std::int64_t o, int wn,
                 bool first) {
  using S = Simd;
  const std::int64_t in = a.x.extents[1];
  const float* x[R];
  const W* w[4];
  GATED_ATTENTION_UNROLL
  for (int i = 0; i < R; ++i) x[i] = a.x.data + (r + i) * a.x.strides[0];
  GATED_ATTENTION_UNROLL
  for (int j = 0; j < 4; ++j)
    w[j] = a.weight.data + (o + std::min(j, wn - 1)) * a.weight.strides[0];
  S::V acc[4][4];  // rows R..3 stay zero
  GATED_ATTENTION_UNROLL
  for (int i = 0; i < 4; ++i) {
    GATED_ATTENTION_UNROLL
    for (int j = 0; j < 4; ++j) acc[i][j] = S::zero();
  }
  // The first tile fetches the next weight rows into L2 at its pace, a line per step of 64 bytes
  // (none past the panel's last row; docs/performance-notes.md, "Decode projections: the next
  // tile's weight rows fetched").
  const bool fetch_next = first && o + 8 <= a.weight.extents[0];
  const std::int64_t next = 4 * a.weight.strides[0];
  for (std::int64_t c = 0; c < in; c += S::kLanes) {
    const int n = static_cast<int>(std::min<std::int64_t>(S::kLanes, in - c));
    if (fetch_next && c * static_cast<std::int64_t>(sizeof(W)) % kCacheLineBytes == 0) {
      GATED_ATTENTION_UNROLL
      for (int j = 0; j < 4; ++j) prefetch_line_l2(w[j] + next + c);
    }
    S::V xv[R];
    GATED_ATTENTION_UNROLL
    for (int i = 0; i < R; ++i) xv[i] = load_row_part(x[i] + c, n);
    GATED_ATTENTION_UNROLL
    for (int j = 0; j < 4; ++j) {
      const S::V wv = load_row_part(w[j] + c, n);
      GATED_ATTENTION_UNROLL
      for (int i = 0; i < R; ++i) acc[i][j] = S::fma(xv[i], wv, acc[i][j]);
    }
  }
  float sums[16];
  S::reduce_add_4x4(acc, sums, 4);
  for (int i = 0; i < R; ++i) {
    float* y = a.y.data + (r + i) * a.y.strides[0] + o;
    for (int j = 0; j < wn; ++j) {
      y[j] = sums[4 * i + j] + (a.maybe_bias != nullptr ? to_float(a.maybe_bias[o + j]) : 0.0f);
    }
  }
}

// Rows [r, r + rows) of x, rows <= kLinearTileRows, against weight rows [o, o + wn).
template <class W>
void linear_tile_rows(const LinearArgs<float, W>& a, std::int64_t r, std::int64_t rows,
                      std::int64_t o, int wn, bool first) {
  switch (rows) {
    case 1:
      return linear_tile<1>(a, r, o, wn, first);
    case 2:
      return linear_tile<2>(a, r, o, wn, first);
    case 3:
      return linear_tile<3>(a, r, o, wn, first);
    default:
      return linear_tile<kLinearTileRows>(a, r, o, wn, first);
  }
}

template <class W>
void linear_rows(const LinearArgs<float, W>& a) {
  const std::int64_t rows = a.x.extents[0], out = a.weight.extents[0];
  for (std::int64_t r0 = 0; r0 < rows; r0 += kLinearRowBlock) {
    const std::int64_t r1 = std::min(rows, r0 + kLinearRowBlock);
    for (std::int64_t o = 0; o < out; o += 4) {
      const int wn = static_cast<int>(std::min<std::int64_t>(4, out - o));
      for (std::int64_t r = r0; r < r1; r += kLinearTileRows) {
        linear_tile_rows(a, r, std::min<std::int64_t>(kLinearTileRows, r1 - r), o, wn, r == r0);
      }
    }
  }
}
