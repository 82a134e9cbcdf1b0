// Reference rotary position embedding (NeoX rotate-half, partial rotary), in double.
#pragma once

#include <cmath>
#include <vector>

#include "gated_attention/ops/rope_args.hpp"
#include "gated_attention/reference/common.hpp"

namespace gated_attention::reference {

template <class T, int Rank>
Status rope(const RopeArgs<T, Rank>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(args));
  const std::int64_t d = args.x.extents[Rank - 1];
  const std::int64_t half = args.rotary_dim / 2;
  std::vector<double> row(static_cast<std::size_t>(d));
  for_each_row(args.x.extents, [&](std::array<std::int64_t, Rank> index) {
    const double pos = static_cast<double>(args.positions(index[0], index[1]));
    for (std::int64_t i = 0; i < d; ++i) {
      index[Rank - 1] = i;
      row[i] = as_double(args.x[index]);
    }
    for (std::int64_t i = 0; i < d; ++i) {
      double value = row[i];
      if (i < args.rotary_dim) {
        const std::int64_t pair = i < half ? i : i - half;
        const double inv_freq = std::pow(
            args.theta, -2.0 * static_cast<double>(pair) / static_cast<double>(args.rotary_dim));
        const double c = std::cos(pos * inv_freq), s = std::sin(pos * inv_freq);
        value = i < half ? row[i] * c - row[i + half] * s : row[i] * c + row[i - half] * s;
      }
      index[Rank - 1] = i;
      args.out[index] = from_double<T>(value);
    }
  });
  return Status::ok();
}

}  // namespace gated_attention::reference
