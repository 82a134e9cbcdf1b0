// The online softmax of one block of scores, in log2 units: mask the keys a row does not see,
// raise each row's running max, exponentiate with exp2, add to the running sums, and give the
// factor by which each row's output so far is rescaled (1 where the max did not rise).
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

struct Softmax {
  using S = Simd;
  using V = S::V;
  static constexpr int L = S::kLanes;

  // Lanes of v folded across groups of `width` lanes (width a power of two, at most L): each lane
  // holds the max (or sum) of the lanes at its position in every group.
  static V fold_max(V v, std::int64_t width) {
    for (std::int64_t w = width; w < L; w *= 2)
      v = S::max(v, S::swap_groups(v, static_cast<int>(w)));
    return v;
  }
  static V fold_add(V v, std::int64_t width) {
    for (std::int64_t w = width; w < L; w *= 2)
      v = S::add(v, S::swap_groups(v, static_cast<int>(w)));
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

  // The probability mass on keys [0, n_sink) of this block (from key first), added to each row's
  // running mass after rescaling it like the sums.
  static void add_sink_mass(const float* p, std::int64_t row_stride, std::int64_t rows,
                            std::int64_t first, std::int64_t num_keys, std::int64_t n_sink,
                            const float* alpha, float* sink) {
    const std::int64_t sink_keys = std::min(num_keys, n_sink - first);
    for (std::int64_t r = 0; r < rows; ++r) {
      float mass = sink[r] * alpha[r];
      for (std::int64_t n = 0; n < sink_keys; ++n) mass += p[n * row_stride + r];
      sink[r] = mass;
    }
  }
};
