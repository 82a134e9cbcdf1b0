// Phase 2 of split units: merges the splits' partial results (O, max, sum over disjoint key
// ranges) by log-sum-exp, then finishes each row with the epilogue.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

// Merges the splits of row r of head h of a unit into o [dv_padded]; returns the merged max, sum
// and sink mass.
struct MergedRow {
  float max, sum, sink;
};

inline MergedRow merge_splits(const SdpaPlan& p, const SdpaLayout& l, std::int64_t unit_index,
                              std::int64_t h, std::int64_t r, bool track_sink, float* o) {
  using S = Simd;
  const std::int64_t rs = p.row_stride, dvp = p.dv_padded, heads = p.unit_heads;
  MergedRow m{-std::numeric_limits<float>::infinity(), 0.0f, 0.0f};
  for (std::int64_t s = 0; s < p.splits; ++s) {
    m.max = std::max(m.max, l.partial_max[((unit_index * p.splits + s) * heads + h) * rs + r]);
  }
  std::fill(o, o + dvp, 0.0f);
  if (m.max == -std::numeric_limits<float>::infinity()) return m;
  for (std::int64_t s = 0; s < p.splits; ++s) {
    const std::int64_t t = (unit_index * p.splits + s) * heads + h;  // split s, head h
    const float weight = std::exp2(l.partial_max[t * rs + r] - m.max);
    if (weight == 0.0f) continue;
    m.sum += weight * l.partial_sum[t * rs + r];
    if (track_sink) m.sink += weight * l.partial_sink[t * rs + r];
    const float* po = l.partial_out + (t * rs + r) * dvp;
    const S::V wv = S::set1(weight);
    for (std::int64_t c = 0; c < dvp; c += S::kLanes) {
      S::store(o + c, S::fma(wv, S::load(po + c), S::load(o + c)));
    }
  }
  return m;
}

template <class T, class KT, class VT>
void sdpa_merge(void* context, std::int64_t unit_index, int worker) {
  using Finish = Epilogue<T, KT, VT, 0>;
  const DenormalsAsZero flush;
  const auto& ctx = *static_cast<const SdpaContext<T, KT, VT>*>(context);
  const SdpaArgs<T, KT, VT>& a = *ctx.args;
  const SdpaPlan& p = *ctx.plan;
  const SdpaLayout& l = *ctx.layout;
  float* o = l.workers[worker].out;
  const SdpaUnit u = unit_at(p, unit_index);
  const std::int64_t g = p.group;
  const std::int64_t i0 = u.q_block * p.q_block;
  const std::int64_t rows = std::min(p.q_block, p.q_len - i0) * g;
  const bool track_sink = a.stats.sink_share.data != nullptr;
  for (std::int64_t h = 0; h < p.unit_heads; ++h) {
    const SdpaUnit head_unit{u.batch, u.kv_head + h, u.q_block};
    for (std::int64_t r = 0; r < rows; ++r) {
      Finish::prefetch(a, head_unit, i0, g, rows, r, p.dv);
      const MergedRow m = merge_splits(p, l, unit_index, h, r, track_sink, o);
      Finish::finalize_row(a, head_unit, i0 + r / g, r % g, o, m.max, m.sum, m.sink, p.dv);
    }
  }
}
