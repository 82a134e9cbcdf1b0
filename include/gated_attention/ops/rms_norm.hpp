// RMSNorm over the last dimension (see rms_norm_args.hpp), in place or out of place.
//
//   Status s = run(args, executor);  // needs no workspace
//
// Plain C++ that the compiler vectorises for the includer's target: a small share of the block's
// time next to the projections and attention.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "gated_attention/core/executor.hpp"
#include "gated_attention/core/status.hpp"
#include "gated_attention/ops/rms_norm_args.hpp"

namespace gated_attention {

// Rows per task of run().
inline constexpr std::int64_t kRmsNormRowsPerTask = 64;

template <class T, int Rank>
Status can_implement(const RmsNormArgs<T, Rank>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(args));
  if (!std::is_floating_point_v<T>) {
    return Status::error(StatusCode::not_supported,
                         "rms_norm: element type: expected float/double");
  }
  return Status::ok();
}

// One row of d values; out may equal x.
template <class T>
void rms_norm_row(const T* x, T* out, std::int64_t d, const T* maybe_weight, float eps,
                  RmsNormWeight weighting) {
  double sum_squares = 0.0;
  for (std::int64_t i = 0; i < d; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
  const T inv_rms = static_cast<T>(
      1.0 / std::sqrt(sum_squares / static_cast<double>(d) + static_cast<double>(eps)));
  if (maybe_weight == nullptr) {
    for (std::int64_t i = 0; i < d; ++i) out[i] = x[i] * inv_rms;
  } else if (weighting == RmsNormWeight::zero_centered) {
    for (std::int64_t i = 0; i < d; ++i) out[i] = x[i] * inv_rms * (T(1) + maybe_weight[i]);
  } else {
    for (std::int64_t i = 0; i < d; ++i) out[i] = x[i] * inv_rms * maybe_weight[i];
  }
}

// Rows [begin, end) of the flattened rows of args.
template <class T, int Rank>
void rms_norm_rows(const RmsNormArgs<T, Rank>& args, std::int64_t begin, std::int64_t end) {
  const std::int64_t d = args.x.extents[Rank - 1];
  for (std::int64_t r = begin; r < end; ++r) {
    const auto index = row_index(args.x, r);
    rms_norm_row(&args.x[index], &args.out[index], d, args.maybe_weight, args.eps, args.weighting);
  }
}

template <class T, int Rank>
Status run(const RmsNormArgs<T, Rank>& args, const Executor& executor = {}) {
  GATED_ATTENTION_RETURN_IF_ERROR(can_implement(args));
  if (args.x.empty()) return Status::ok();
  const std::int64_t rows = num_rows(args.x);
  parallel_for(executor, (rows + kRmsNormRowsPerTask - 1) / kRmsNormRowsPerTask,
               [&](std::int64_t task, int) {
                 const std::int64_t begin = task * kRmsNormRowsPerTask;
                 rms_norm_rows(args, begin, std::min(rows, begin + kRmsNormRowsPerTask));
               });
  return Status::ok();
}

}  // namespace gated_attention
