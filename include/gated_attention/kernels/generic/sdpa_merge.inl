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

// Split unit `split_unit` (its index among the split units), head h of row_stride rs, row r.
inline MergedRow merge_splits(const SdpaPlan& p, const SdpaLayout& l, std::int64_t split_unit,
                              std::int64_t rs, std::int64_t h, std::int64_t r, bool track_sink,
                              float* o) {
  using S = Simd;
  const std::int64_t dvp = p.dv_padded, slots = p.max_head_slots();
  // Split s's entry of the row.
  const auto at = [&](std::int64_t s) { return (split_unit * p.splits + s) * slots + h * rs + r; };
  MergedRow m{-std::numeric_limits<float>::infinity(), 0.0f, 0.0f};
  for (std::int64_t s = 0; s < p.splits; ++s) m.max = std::max(m.max, l.partial_max[at(s)]);
  std::fill(o, o + dvp, 0.0f);
  if (m.max == -std::numeric_limits<float>::infinity()) return m;
  for (std::int64_t s = 0; s < p.splits; ++s) {
    const float weight = std::exp2(l.partial_max[at(s)] - m.max);
    if (weight == 0.0f) continue;
    m.sum += weight * l.partial_sum[at(s)];
    if (track_sink) m.sink += weight * l.partial_sink[at(s)];
    const float* po = l.partial_out + at(s) * dvp;
    const S::V wv = S::set1(weight);
    for (std::int64_t c = 0; c < dvp; c += S::kLanes) {
      S::store(o + c, S::fma(wv, S::load(po + c), S::load(o + c)));
    }
  }
  return m;
}

// Merge task `split_unit`: the split_unit-th split unit's rows.
template <class T, class KT, class VT>
void sdpa_merge(void* context, std::int64_t split_unit, int worker) {
  using Finish = Epilogue<T, KT, VT, 0>;
  const DenormalsAsZero flush;
  const auto& ctx = *static_cast<const SdpaContext<T, KT, VT>*>(context);
  const SdpaArgs<T, KT, VT>& a = *ctx.args;
  const SdpaPlan& p = *ctx.plan;
  const SdpaLayout& l = *ctx.layout;
  float* o = l.workers[worker].out;
  const SdpaUnit u = ctx.unit_at(p.unsplit_units + split_unit);
  const std::int64_t g = p.group, rs = u.geometry->row_stride, rows = u.nq * g;
  const bool track_sink = a.stats.sink_share.data != nullptr;
  for (std::int64_t h = 0; h < u.geometry->heads; ++h) {
    const HeadRows<T, KT, VT> head_rows{a, u, u.kv_head + h, g};
    for (std::int64_t r = 0; r < rows; ++r) {
      Finish::prefetch(head_rows, rows, r, p.dv);
      const MergedRow m = merge_splits(p, l, split_unit, rs, h, r, track_sink, o);
      Finish::finalize_row(head_rows, r, o, m.max, m.sum, m.sink, p.dv);
    }
  }
}
