// Linear layer y = x W^T + bias with PyTorch's [out, in] weight layout; activations T, weights
// and bias W (f32 activations take f32 or bf16 weights, widened to f32 as they load).
#pragma once

#include <cstdint>

#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"
#include "gated_attention/core/validate.hpp"

namespace gated_attention {

template <class T, class W = T>
struct LinearArgs {
  TensorView<const T, 2> x;       // [rows, in]
  TensorView<const W, 2> weight;  // [out, in], stride 1 over in (PyTorch's row-major weight)
  const W* maybe_bias = nullptr;  // [out]; null: no bias
  TensorView<T, 2> y;             // [rows, out]
};

template <class T, class W>
Status validate(const LinearArgs<T, W>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("x", args.x, {-1, -1}, {"rows", "in features"}));
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_view("weight", args.weight, {-1, args.x.extents[1]}, {"out features", "in features"}));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view(
      "y", args.y, {args.x.extents[0], args.weight.extents[0]}, {"rows", "out features"}));
  GATED_ATTENTION_RETURN_IF_ERROR(check_distinct_elements("y", args.y, {"rows", "out features"}));
  GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap("y", args.y, "x", args.x));
  const TensorView<const W, 1> bias(args.maybe_bias, {args.weight.extents[0]}, {1});
  GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap("y", args.y, "bias", bias));
  return check_no_overlap("y", args.y, "weight", args.weight);
}

}  // namespace gated_attention
