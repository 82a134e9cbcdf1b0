// The merge of attention parts computed over disjoint key sets (merge_attention_args.hpp): the
// result one SDPA call over all the keys gives, sinks and gate included. Context-parallel decode
// computes a part per rank and merges after an exchange of outputs and log-sum-exps.
//
//   Status s = run(args, Workspace(nullptr, 0), executor);  // needs no workspace
// or, from each of an engine's nth workers, run_phase(args, Workspace(nullptr, 0), 0, ith, nth).
#pragma once

#include <cstddef>
#include <type_traits>

#include "gated_attention/core/executor.hpp"
#include "gated_attention/core/status.hpp"
#include "gated_attention/core/workspace.hpp"
#include "gated_attention/dispatch/cpu.hpp"
#include "gated_attention/kernels/isa_kernels.hpp"
#include "gated_attention/kernels/merge_attention_plan.hpp"
#include "gated_attention/ops/merge_attention_args.hpp"

namespace gated_attention {

template <class T>
Status can_implement(const MergeAttentionArgs<T>& args) {
  static_assert(is_activation_type_v<T>, "parts, out and gate: float, bf16 or f16");
  return validate(args);
}

template <class T>
std::size_t workspace_size(const MergeAttentionArgs<T>& /*args*/, const Executor& /*executor*/) {
  return 0;
}

namespace detail {

// The merge's task function on the active path.
template <class T>
TaskFn merge_attention_task() {
  switch (active_isa()) {
#if GATED_ATTENTION_X86
    case Isa::avx512:
      return &kernels::avx512::merge_attention_task<T>;
    case Isa::avx2:
      return &kernels::avx2::merge_attention_task<T>;
#endif
#if GATED_ATTENTION_AARCH64
    case Isa::neon:
      return &kernels::neon::merge_attention_task<T>;
#endif
    default:
      return &kernels::scalar::merge_attention_task<T>;
  }
}

// Tasks of blocks of rows.
inline std::int64_t merge_attention_tasks(std::int64_t rows) {
  return (rows + kernels::kMergeRowsPerTask - 1) / kernels::kMergeRowsPerTask;
}

}  // namespace detail

template <class T>
Status run(const MergeAttentionArgs<T>& args, Workspace /*workspace*/,
           const Executor& executor = {}) {
  GATED_ATTENTION_RETURN_IF_ERROR(can_implement(args));
  const auto& e = args.out.extents;
  kernels::MergeAttentionContext<T> ctx{&args, e[0] * e[1] * e[2] * e[3]};
  executor.run(detail::merge_attention_tasks(ctx.rows), detail::merge_attention_task<T>(), &ctx);
  return Status::ok();
}

// The merge has one phase: worker ith of nth runs its share of the rows (engines that call kernels
// from each of their workers; every worker passes the same arguments).
template <class T>
constexpr int num_phases(const MergeAttentionArgs<T>& /*args*/) {
  return 1;
}

template <class T>
Status run_phase(const MergeAttentionArgs<T>& args, Workspace /*workspace*/, int phase, int ith,
                 int nth) {
  if (nth < 1 || ith < 0 || ith >= nth || phase != 0) {
    return Status::error(StatusCode::invalid_argument,
                         "phase, ith/nth: expected phase 0 and 0 <= ith < nth, got %d, %d/%d",
                         phase, ith, nth);
  }
  GATED_ATTENTION_RETURN_IF_ERROR(can_implement(args));
  const auto& e = args.out.extents;
  kernels::MergeAttentionContext<T> ctx{&args, e[0] * e[1] * e[2] * e[3]};
  run_worker_share(detail::merge_attention_tasks(ctx.rows), detail::merge_attention_task<T>(), &ctx,
                   ith, nth);
  return Status::ok();
}

}  // namespace gated_attention
