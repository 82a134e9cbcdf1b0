// The standalone output gate: out = combine(attn, act(gate)) over [b, len, kv_heads, group, d]
// (see output_gate_args.hpp for the gate variants, all expressed by the gate view's strides).
// In place (out == attn) is allowed. The same gate runs fused in the SDPA epilogue when set in
// SdpaArgs::gate; this op is for attention computed elsewhere and for the G2 value gate
// (value_gate_view() below).
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
#include "gated_attention/kernels/output_gate_plan.hpp"
#include "gated_attention/ops/heads.hpp"
#include "gated_attention/ops/output_gate_args.hpp"

namespace gated_attention {

template <class T>
Status can_implement(const OutputGateArgs<T>& args) {
  static_assert(is_activation_type_v<T>, "attn, gate and out: float, bf16 or f16");
  return validate(args);
}

template <class T>
std::size_t workspace_size(const OutputGateArgs<T>& /*args*/, const Executor& /*executor*/) {
  return 0;
}

template <class T>
Status run(const OutputGateArgs<T>& args, Workspace /*workspace*/, const Executor& executor = {}) {
  GATED_ATTENTION_RETURN_IF_ERROR(can_implement(args));
  const auto& e = args.attn.extents;
  kernels::OutputGateContext<T> ctx{&args, e[0] * e[1] * e[2] * e[3]};
  if (e[4] == 0 || ctx.rows == 0) return Status::ok();
  TaskFn task = &kernels::scalar::output_gate_task<T>;
  switch (active_isa()) {
#if GATED_ATTENTION_X86
    case Isa::avx512:
      task = &kernels::avx512::output_gate_task<T>;
      break;
    case Isa::avx2:
      task = &kernels::avx2::output_gate_task<T>;
      break;
#endif
#if GATED_ATTENTION_AARCH64
    case Isa::neon:
      task = &kernels::neon::output_gate_task<T>;
      break;
#endif
    default:
      break;
  }
  executor.run((ctx.rows + kernels::kGateRowsPerTask - 1) / kernels::kGateRowsPerTask, task, &ctx);
  return Status::ok();
}

// The G2 value gate of the paper (a sigmoid gate on the value projection output, before
// attention) is this op over V: value_gate_view() views v [b, kv_len, kv_heads, d] as a
// query-head tensor with a group of one.
template <class T>
TensorView<T, 5> value_gate_view(const TensorView<T, 4>& v) {
  return split_heads(v, v.extents[2]);
}

}  // namespace gated_attention
