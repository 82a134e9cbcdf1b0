// One SDPA task: a unit's rows, or one key split of them (kernels/sdpa_plan.hpp). It finds the
// keys its rows see, runs the blocks of its regime, and finishes: the epilogue of every row, or,
// for a split, the partial result that sdpa_merge combines.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

template <class T, class KT, class VT, int kDk, int kDv, bool kRoundWeights>
struct SdpaKernel {
  // The task's rows, keys and scratch, with the running softmax state reset.
  static UnitWork<T, KT, VT> start(const SdpaContext<T, KT, VT>& ctx, const SdpaTask& task,
                                   int worker) {
    const SdpaArgs<T, KT, VT>& a = *ctx.args;
    const SdpaPlan& p = *ctx.plan;
    const SdpaWorkerScratch& w = ctx.layout->workers[worker];
    const SdpaUnit unit = ctx.unit_at(task.unit);
    const UnitGeometry& g = *unit.geometry;
    UnitWork<T, KT, VT> u{a,
                          p,
                          g,
                          w,
                          ctx.scale_log2,
                          unit,
                          head_dim<kDk>(p.dk),
                          head_dim<kDv>(p.dv),
                          unit.i0,
                          unit.nq * p.group,
                          round_up(unit.nq * p.group, Simd::kLanes),
                          g.heads,
                          0,
                          0,
                          a.stats.sink_share.data != nullptr};
    visible_keys(a, unit, p.group, w, a.kv_len(unit.batch), u.rows_v, &u.begin, &u.end);
    if (task.split_unit) {  // this split's share, in whole blocks
      const std::int64_t chunk = round_up((u.end - u.begin + p.splits - 1) / p.splits, kKvBlock);
      const std::int64_t split_begin = std::min(u.end, u.begin + task.split * chunk);
      u.end = std::min(u.end, split_begin + chunk);
      u.begin = split_begin;
    }
    const std::int64_t slots = g.head_slots();
    std::fill(w.max, w.max + slots, -std::numeric_limits<float>::infinity());
    std::fill(w.sum, w.sum + slots, 0.0f);
    std::fill(w.out, w.out + u.heads * u.out_size(), 0.0f);
    if (u.track_sink) std::fill(w.sink, w.sink + slots, 0.0f);
    return u;
  }

  // Every row through the epilogue.
  static void finish_rows(const UnitWork<T, KT, VT>& u) {
    using Finish = Epilogue<T, KT, VT, kDv>;
    const std::int64_t g = u.plan.group, rs = u.row_stride(), dvp = u.plan.dv_padded;
    for (std::int64_t h = 0; h < u.heads; ++h) {
      const HeadRows<T, KT, VT> head_rows{u.args, u.unit, u.unit.kv_head + h, g};
      const float* out = u.w.out + h * u.out_size();
      for (std::int64_t r = 0; r < u.rows; ++r) {
        Finish::prefetch(head_rows, u.rows, r, u.dv);
        const std::int64_t at = h * rs + r;
        Finish::finalize_row(head_rows, r, out + r * dvp, u.w.max[at], u.w.sum[at],
                             u.track_sink ? u.w.sink[at] : 0.0f, u.dv);
      }
    }
  }

  // The split's partial result (O, max, sum, sink mass) for the merge phase.
  static void store_partial(const UnitWork<T, KT, VT>& u, const SdpaLayout& l,
                            std::int64_t split_index) {
    const std::int64_t rs = u.row_stride(), size = u.out_size();
    const std::int64_t first = split_index * u.plan.max_head_slots();
    for (std::int64_t h = 0; h < u.heads; ++h) {
      const std::int64_t at = first + h * rs;
      const float* out = u.w.out + h * size;
      std::copy(out, out + u.rows * u.plan.dv_padded, l.partial_out + at * u.plan.dv_padded);
      std::copy(u.w.max + h * rs, u.w.max + h * rs + u.rows, l.partial_max + at);
      std::copy(u.w.sum + h * rs, u.w.sum + h * rs + u.rows, l.partial_sum + at);
      if (u.track_sink) {
        std::copy(u.w.sink + h * rs, u.w.sink + h * rs + u.rows, l.partial_sink + at);
      }
    }
  }

  // The task's blocks by its regime; false where a K or V row scale it reads is bad (decode checks
  // them block by block, prefill all of them first: each block reads every key).
  static bool run_blocks(const UnitWork<T, KT, VT>& u) {
    if (u.begin >= u.end) return true;
    if (u.geometry.regime == SdpaRegime::decode) {
      return DecodeBlocks<T, KT, VT, kDk, kDv, kRoundWeights>::run(u);
    }
    if (!u.key_scales_good(u.begin, u.end)) return false;
    PrefillBlocks<T, KT, VT, kDk, kDv, kRoundWeights>::run(u);
    return true;
  }

  static void task(void* context, std::int64_t task_index, int worker) {
    const DenormalsAsZero flush;  // for this task (kernels/denormals.hpp)
    const auto& ctx = *static_cast<const SdpaContext<T, KT, VT>*>(context);
    const SdpaTask task = task_at(*ctx.plan, task_index);
    const UnitWork<T, KT, VT> u = start(ctx, task, worker);
    if (!run_blocks(u)) {  // a bad int8 row scale: nothing written
      ctx.bad_row_scales.store(true, std::memory_order_relaxed);
      return;
    }
    if (task.split_unit) {
      store_partial(u, *ctx.layout, task.split_index);
    } else {
      finish_rows(u);
    }
  }
};

// The task function for a head-dim pair: compile-time dims for the common sizes (unless
// GATED_ATTENTION_COMPILE_TIME_HEAD_DIMS is 0).
template <class T, class KT, class VT, bool kRoundWeights>
TaskFn sdpa_task_fn_of_dims(std::int64_t dk, std::int64_t dv) {
  if constexpr (GATED_ATTENTION_COMPILE_TIME_HEAD_DIMS != 0) {
    switch (dk == dv ? dk : 0) {
      case 64:
        return &SdpaKernel<T, KT, VT, 64, 64, kRoundWeights>::task;
      case 80:
        return &SdpaKernel<T, KT, VT, 80, 80, kRoundWeights>::task;
      case 96:
        return &SdpaKernel<T, KT, VT, 96, 96, kRoundWeights>::task;
      case 128:
        return &SdpaKernel<T, KT, VT, 128, 128, kRoundWeights>::task;
      case 256:
        return &SdpaKernel<T, KT, VT, 256, 256, kRoundWeights>::task;
      default:
        break;
    }
  }
  return &SdpaKernel<T, KT, VT, 0, 0, kRoundWeights>::task;
}

// The task function for a call: DotPrecision::exact keeps P in f32 where the storage dot would
// round it; only where an exact call comes here (q of K's type, kExactQueryDot) is that variant
// compiled.
template <class T, class KT, class VT>
TaskFn sdpa_task_fn(std::int64_t dk, std::int64_t dv, [[maybe_unused]] DotPrecision precision) {
  constexpr bool kRoundsWeights = StorageDot<VT>::kPanels || StorageDot<VT>::kWeights;
  if constexpr (kRoundsWeights && kExactQueryDot<T, KT>) {
    if (precision == DotPrecision::exact) return sdpa_task_fn_of_dims<T, KT, VT, false>(dk, dv);
  }
  return sdpa_task_fn_of_dims<T, KT, VT, true>(dk, dv);
}
