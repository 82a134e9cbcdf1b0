// The merge of attention parts over disjoint key sets (ops/merge_attention.hpp): each row's parts
// weighted by exp(lse_p - max) into an f32 row, then finished by the SDPA epilogue (sinks, lse,
// gate).
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

template <class T>
void merge_attention_task(void* context, std::int64_t task, int /*worker*/) {
  using S = Simd;
  using Finish = Epilogue<T, T, T, 0>;
  const DenormalsAsZero flush;  // for this task (kernels/denormals.hpp)
  const auto& ctx = *static_cast<const MergeAttentionContext<T>*>(context);
  const MergeAttentionArgs<T>& a = *ctx.args;
  const auto& e = a.out.extents;
  const std::int64_t dv = e[4];
  alignas(64) float o[kMaxHeadDim + S::kLanes];
  const std::int64_t last = std::min(ctx.rows, (task + 1) * kMergeRowsPerTask);
  for (std::int64_t row = task * kMergeRowsPerTask; row < last; ++row) {
    const std::int64_t j = row % e[3], kv = row / e[3] % e[2];
    const std::int64_t l = row / (e[3] * e[2]) % e[1], b = row / (e[3] * e[2] * e[1]);
    float max = -std::numeric_limits<float>::infinity();  // natural log
    for (std::int64_t p = 0; p < a.num_parts; ++p) max = std::max(max, a.parts[p].lse(b, l, kv, j));
    std::fill(o, o + dv + S::kLanes, 0.0f);
    float sum = 0.0f;
    for (std::int64_t p = 0; p < a.num_parts && max != -std::numeric_limits<float>::infinity();
         ++p) {
      const float weight = std::exp(a.parts[p].lse(b, l, kv, j) - max);
      if (weight == 0.0f) continue;
      sum += weight;
      const T* part = &a.parts[p].out(b, l, kv, j, 0);
      const S::V w = S::set1(weight);
      for (std::int64_t c = 0; c < dv; c += S::kLanes) {
        const int n = dv - c < S::kLanes ? static_cast<int>(dv - c) : S::kLanes;
        S::store(o + c, S::fma(w, load_row_part(part + c, n), S::load(o + c)));
      }
    }
    // The epilogue keeps the running max in log2 units.
    const auto norm = Finish::normalise(a.maybe_sink_logits, a.softmax_plus_one, kv * e[3] + j,
                                        max * kLog2e, sum);
    if (a.maybe_lse.data != nullptr) a.maybe_lse(b, l, kv, j) = norm.lse();
    const T* gate = a.gate.enabled() ? &a.gate.values(b, l, kv, j, 0) : nullptr;
    Finish::store_row(&a.out(b, l, kv, j, 0), a.gate, gate, o, norm.inv, dv, nullptr);
  }
}
