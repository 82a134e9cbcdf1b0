// Reference linear layer y = x W^T + bias, in double.
#pragma once

#include "gated_attention/ops/linear_args.hpp"
#include "gated_attention/reference/common.hpp"

namespace gated_attention::reference {

template <class T>
Status linear(const LinearArgs<T>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(args));
  const std::int64_t rows = args.x.extents[0], in = args.x.extents[1], out = args.y.extents[1];
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out; ++o) {
      double sum = args.maybe_bias ? as_double(args.maybe_bias[o]) : 0.0;
      for (std::int64_t i = 0; i < in; ++i)
        sum += as_double(args.x(r, i)) * as_double(args.weight(o, i));
      args.y(r, o) = from_double<T>(sum);
    }
  }
  return Status::ok();
}

}  // namespace gated_attention::reference
