// Scaled dot-product attention with the output gate, sinks and log-sum-exp fused in the epilogue.
//
//   Status s = can_implement(args);                     // shapes, strides, types, values
//   std::vector<std::byte> ws(workspace_size(args, executor));
//   s = run(args, Workspace(ws.data(), ws.size()), executor);
//
// Engines that call kernels from each of their nth workers (ggml style) instead call, for every
// phase < num_phases(args, nth), run_phase(args, workspace, phase, ith, nth) on every worker, with
// a barrier between phases; the workspace is sized with workspace_size(args, nth).
//
// The path (scalar, avx2, avx512, neon) is chosen at each call from the CPU and the ISA limit
// (dispatch/cpu.hpp); sdpa_path() tells which one runs. run() allocates no memory.
//
// run() checks the int8 row scales of the keys it reads in the tasks that read them, in
// parallel: on a NaN, infinite or negative one it returns the first bad scale's error (as
// can_implement() does) and leaves out unspecified. A run_phase() call returns it where its own
// tasks read one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gated_attention/core/executor.hpp"
#include "gated_attention/core/status.hpp"
#include "gated_attention/core/workspace.hpp"
#include "gated_attention/dispatch/amx.hpp"
#include "gated_attention/dispatch/cpu.hpp"
#include "gated_attention/kernels/isa_kernels.hpp"
#include "gated_attention/kernels/sdpa_plan.hpp"
#include "gated_attention/ops/sdpa_args.hpp"

namespace gated_attention {

namespace detail {

template <class T, class KT, class VT>
constexpr bool sdpa_types() {
  static_assert(is_activation_type_v<T>, "q, gate and out: float, bf16 or f16");
  static_assert(is_kv_type_v<KT> && is_kv_type_v<VT>, "K and V: float, bf16, f16 or std::int8_t");
  return true;
}

}  // namespace detail

// Every check, the int8 row scales below each entry's kv_lens included.
template <class T, class KT, class VT>
Status can_implement(const SdpaArgs<T, KT, VT>& args) {
  static_assert(detail::sdpa_types<T, KT, VT>());
  return validate(args);
}

// Bytes of workspace run() needs with `num_workers` workers (the executor's num_workers); 0 for
// arguments can_implement() rejects other than by a row scale's value (run() then reports why).
template <class T, class KT, class VT>
std::size_t workspace_size(const SdpaArgs<T, KT, VT>& args, int num_workers) {
  if (!detail::validate_sdpa_call(args).is_ok()) return 0;
  return kernels::sdpa_workspace_bytes(kernels::make_sdpa_plan(args, num_workers));
}

template <class T, class KT, class VT>
std::size_t workspace_size(const SdpaArgs<T, KT, VT>& args, const Executor& executor) {
  return workspace_size(args, executor.num_workers);
}

// The same from the call's sizes alone, before its buffers exist; 0 for sizes validate() rejects.
inline std::size_t workspace_size(const SdpaShape& shape, int num_workers) {
  if (!validate(shape).is_ok()) return 0;
  return kernels::sdpa_workspace_bytes(kernels::make_sdpa_plan(shape, num_workers));
}

// Phases of a run_phase() call sequence; 1 for arguments can_implement() rejects other than by a
// row scale's value (run_phase() then reports why).
template <class T, class KT, class VT>
int num_phases(const SdpaArgs<T, KT, VT>& args, int num_workers) {
  if (!detail::validate_sdpa_call(args).is_ok()) return 1;
  return kernels::make_sdpa_plan(args, num_workers).num_phases();
}

inline int num_phases(const SdpaShape& shape, int num_workers) {
  if (!validate(shape).is_ok()) return 1;
  return kernels::make_sdpa_plan(shape, num_workers).num_phases();
}

// The path the next call takes.
inline const char* sdpa_path() {
  return to_string(active_isa());
}

namespace detail {

// Whether a call with these arguments runs the storage dot (kernels::avx512_bf16): 16- or 8-bit
// K/V it reads, DotPrecision::storage (or exact, where q has K's type and the dot reads it
// unscaled: kExactQueryDot), on the avx512 path of a CPU with AVX512-BF16 and VNNI, where
// dot_instructions() asks for them.
#if GATED_ATTENTION_X86
template <class KT, class VT>
inline constexpr bool reads_storage_dot_v = kernels::avx512_bf16::StorageDot<KT>::kAvailable ||
                                            kernels::avx512_bf16::StorageDot<VT>::kWeights;
template <class T, class KT, class VT>
inline constexpr bool exact_query_dot_v = kernels::avx512_bf16::kExactQueryDot<T, KT>;
#else
template <class KT, class VT>
inline constexpr bool reads_storage_dot_v = false;
template <class T, class KT, class VT>
inline constexpr bool exact_query_dot_v = false;
#endif

// Whether a call with `args` runs the storage dot kernels; `has_prefill`: whether its plan has
// prefill units (bf16 K/V on Intel take them only where those run on AMX tiles).
template <class T, class KT, class VT>
bool runs_storage_dot(const SdpaArgs<T, KT, VT>& args, Isa isa, bool has_prefill) {
  constexpr bool kExactToo = exact_query_dot_v<T, KT, VT>;
  constexpr bool kInt8 = std::is_same_v<KT, std::int8_t> || std::is_same_v<VT, std::int8_t>;
  if (!reads_storage_dot_v<KT, VT> || !(args.dot_precision == DotPrecision::storage || kExactToo) ||
      isa != Isa::avx512 || !has_avx512_bf16_region_features(cpu_features())) {
    return false;
  }
  const bool tiles = has_prefill && std::is_same_v<KT, bf16> && amx_tiles();
  return wants_dot_instructions(dot_instructions(), cpu_features(), kInt8, tiles);
}

}  // namespace detail

// The path the next call with `args` takes: sdpa_path(), or "avx512_bf16" where it runs the
// storage dot, "avx512_bf16+amx" where its prefill blocks also run on AMX tiles (amx_tiles()).
template <class T, class KT, class VT>
const char* sdpa_path(const SdpaArgs<T, KT, VT>& args) {
  const bool has_prefill = can_implement(args).is_ok() &&
                           kernels::make_sdpa_plan(args, 1).uses(kernels::SdpaRegime::prefill);
  if (!detail::runs_storage_dot(args, active_isa(), has_prefill)) return sdpa_path();
  return std::is_same_v<KT, bf16> && amx_tiles() ? "avx512_bf16+amx" : "avx512_bf16";
}

namespace detail {

struct SdpaTaskFns {
  TaskFn task = nullptr;   // phase 0: one task per (unit, key split)
  TaskFn merge = nullptr;  // phase 1: one task per split unit
};

template <class T, class KT, class VT>
SdpaTaskFns sdpa_task_fns([[maybe_unused]] const SdpaArgs<T, KT, VT>& args, Isa isa,
                          const kernels::SdpaPlan& plan) {
  const std::int64_t dk = plan.dk, dv = plan.dv;
#if GATED_ATTENTION_X86
  if constexpr (reads_storage_dot_v<KT, VT>) {
    if (runs_storage_dot(args, isa, plan.uses(kernels::SdpaRegime::prefill))) {
      return {kernels::avx512_bf16::sdpa_task_fn<T, KT, VT>(dk, dv, args.dot_precision),
              &kernels::avx512_bf16::sdpa_merge<T, KT, VT>};
    }
  }
#endif
  switch (isa) {
#if GATED_ATTENTION_X86
    case Isa::avx512:
      return {kernels::avx512::sdpa_task_fn<T, KT, VT>(dk, dv, args.dot_precision),
              &kernels::avx512::sdpa_merge<T, KT, VT>};
    case Isa::avx2:
      return {kernels::avx2::sdpa_task_fn<T, KT, VT>(dk, dv, args.dot_precision),
              &kernels::avx2::sdpa_merge<T, KT, VT>};
#endif
#if GATED_ATTENTION_AARCH64
    case Isa::neon:
      return {kernels::neon::sdpa_task_fn<T, KT, VT>(dk, dv, args.dot_precision),
              &kernels::neon::sdpa_merge<T, KT, VT>};
#endif
    default:
      return {kernels::scalar::sdpa_task_fn<T, KT, VT>(dk, dv, args.dot_precision),
              &kernels::scalar::sdpa_merge<T, KT, VT>};
  }
}

// Validates, plans and carves; then calls body(ctx, plan, fns) and returns its Status, if any.
// Callers that carve one workspace from several workers at once (run_phase()) pass the worker:
// only its entry of the workspace's scratch table is written.
template <class T, class KT, class VT, class Body>
Status with_sdpa_context(const SdpaArgs<T, KT, VT>& args, Workspace workspace, int num_workers,
                         Body&& body, int carving_worker = -1) {
  static_assert(sdpa_types<T, KT, VT>());
  GATED_ATTENTION_RETURN_IF_ERROR(validate_sdpa_call(args));
  kernels::SdpaPlan plan = kernels::make_sdpa_plan(args, num_workers);
  const std::size_t needed = kernels::sdpa_workspace_bytes(plan);
  const kernels::SdpaLayout layout = kernels::carve_sdpa_layout(workspace, plan, carving_worker);
  if (!layout.complete || workspace.capacity() < needed) {
    return Status::error(StatusCode::workspace_too_small,
                         "workspace: expected >= %zu bytes for %d worker(s), got %zu", needed,
                         plan.num_workers, workspace.capacity());
  }
  kernels::SdpaContext<T, KT, VT> ctx;
  if (plan.packed) {  // the units of this batch's lengths, in the planning worker's table
    std::int64_t* offsets = layout.workers[carving_worker < 0 ? 0 : carving_worker].unit_offsets;
    kernels::count_packed_units(plan, args, offsets);
    ctx.unit_offsets = offsets;
  }
  ctx.args = &args;
  ctx.plan = &plan;
  ctx.layout = &layout;
  ctx.scale_log2 = args.scale_log2();
  const SdpaTaskFns fns = sdpa_task_fns(args, active_isa(), plan);
  GATED_ATTENTION_RETURN_IF_ERROR(body(ctx, plan, fns));
  // A task that read a bad row scale computed nothing: the first bad scale named.
  if (ctx.bad_row_scales.load(std::memory_order_relaxed)) return check_all_row_scales(args);
  return Status::ok();
}

}  // namespace detail

template <class T, class KT, class VT>
Status run(const SdpaArgs<T, KT, VT>& args, Workspace workspace, const Executor& executor = {}) {
  return detail::with_sdpa_context(
      args, workspace, executor.num_workers, [&](auto& ctx, const auto& plan, const auto& fns) {
        executor.run(plan.tasks(), fns.task, &ctx);
        if (plan.num_phases() > 1 && !ctx.bad_row_scales.load(std::memory_order_relaxed))
          executor.run(plan.split_units(), fns.merge, &ctx);
        return Status::ok();
      });
}

// Worker ith of nth runs its share of `phase`. Every worker passes the same workspace.
template <class T, class KT, class VT>
Status run_phase(const SdpaArgs<T, KT, VT>& args, Workspace workspace, int phase, int ith,
                 int nth) {
  if (nth < 1 || ith < 0 || ith >= nth) {
    return Status::error(StatusCode::invalid_argument,
                         "ith/nth: expected 0 <= ith < nth, got %d/%d", ith, nth);
  }
  return detail::with_sdpa_context(
      args, workspace, nth,
      [&](auto& ctx, const auto& plan, const auto& fns) {
        if (phase < 0 || phase >= plan.num_phases()) {
          return Status::error(StatusCode::invalid_argument,
                               "phase: expected 0..%d (num_phases() - 1), got %d",
                               plan.num_phases() - 1, phase);
        }
        if (phase == 0) run_worker_share(plan.tasks(), fns.task, &ctx, ith, nth);
        if (phase == 1) run_worker_share(plan.split_units(), fns.merge, &ctx, ith, nth);
        return Status::ok();
      },
      ith);
}

}  // namespace gated_attention
