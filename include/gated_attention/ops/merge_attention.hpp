// The merge of attention parts computed over disjoint key sets (merge_attention_args.hpp): the
// result one SDPA call over all the keys gives, sinks and gate included. Context-parallel decode
// computes a part per rank and merges after an exchange of outputs and log-sum-exps.
//
//   Status s = run(args, Workspace(nullptr, 0), executor);  // needs no workspace
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

template <class T>
Status run(const MergeAttentionArgs<T>& args, Workspace /*workspace*/,
           const Executor& executor = {}) {
  GATED_ATTENTION_RETURN_IF_ERROR(can_implement(args));
  const auto& e = args.out.extents;
  kernels::MergeAttentionContext<T> ctx{&args, e[0] * e[1] * e[2] * e[3]};
  if (ctx.rows == 0) return Status::ok();
  TaskFn task = &kernels::scalar::merge_attention_task<T>;
  switch (active_isa()) {
#if GATED_ATTENTION_X86
    case Isa::avx512:
      task = &kernels::avx512::merge_attention_task<T>;
      break;
    case Isa::avx2:
      task = &kernels::avx2::merge_attention_task<T>;
      break;
#endif
#if GATED_ATTENTION_AARCH64
    case Isa::neon:
      task = &kernels::neon::merge_attention_task<T>;
      break;
#endif
    default:
      break;
  }
  executor.run((ctx.rows + kernels::kMergeRowsPerTask - 1) / kernels::kMergeRowsPerTask, task,
               &ctx);
  return Status::ok();
}

}  // namespace gated_attention
