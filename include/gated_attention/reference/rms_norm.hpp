// Reference RMSNorm over the last dimension, in double.
#pragma once

#include <cmath>
#include <vector>

#include "gated_attention/ops/rms_norm_args.hpp"
#include "gated_attention/reference/common.hpp"

namespace gated_attention::reference {

template <class T, int Rank>
Status rms_norm(const RmsNormArgs<T, Rank>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(args));
  const std::int64_t d = args.x.extents[Rank - 1];
  std::vector<double> row(static_cast<std::size_t>(d));
  for_each_row(args.x.extents, [&](std::array<std::int64_t, Rank> index) {
    double sum_squares = 0.0;
    for (std::int64_t i = 0; i < d; ++i) {
      index[Rank - 1] = i;
      row[i] = as_double(args.x[index]);
      sum_squares += row[i] * row[i];
    }
    const double inv_rms = 1.0 / std::sqrt(sum_squares / static_cast<double>(d) + args.eps);
    for (std::int64_t i = 0; i < d; ++i) {
      double w = 1.0;
      if (args.maybe_weight != nullptr) {
        w = as_double(args.maybe_weight[i]);
        if (args.weighting == RmsNormWeight::zero_centered) w += 1.0;
      }
      index[Rank - 1] = i;
      args.out[index] = from_double<T>(row[i] * inv_rms * w);
    }
  });
  return Status::ok();
}

}  // namespace gated_attention::reference
