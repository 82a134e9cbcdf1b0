// The output gate: out[b, l, kv, j, d] = combine(attn[...], act(gate[...])).
// Gate variants are strides of the gate view (all over [b, len, kv_heads, group, d]):
//   elementwise            one value per (token, head, dim)
//   headwise               stride 0 over d
//   head-shared            stride 0 over kv_heads and group
//   query-independent      stride 0 over b and len (a learned constant per head and dim)
#pragma once

#include <cstdint>

#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"
#include "gated_attention/core/validate.hpp"

namespace gated_attention {

enum class GateActivation : std::uint8_t {
  sigmoid,  // 1 / (1 + exp(-g)): the paper's choice
  silu,     // g * sigmoid(g)
};

enum class GateCombine : std::uint8_t {
  multiply,  // attn * act(g): the paper's choice
  add,       // attn + act(g)
};

template <class T>
struct GateSpec {
  TensorView<const T, 5> values;  // [b, len, kv_heads, group, d] pre-activation; null: no gate
  GateActivation activation = GateActivation::sigmoid;
  GateCombine combine = GateCombine::multiply;

  bool enabled() const { return values.data != nullptr; }
};

template <class T>
struct OutputGateArgs {
  TensorView<const T, 5> attn;  // [b, len, kv_heads, group, d]
  GateSpec<T> gate;             // must be enabled
  TensorView<T, 5> out;         // [b, len, kv_heads, group, d]; may be attn itself (in place)
};

inline constexpr std::array<const char*, 5> kQueryHeadDims = {"batch", "length", "kv heads",
                                                              "query heads per kv head", "dim"};

template <class T>
Status check_gate(const GateSpec<T>& gate, const std::array<std::int64_t, 5>& extents) {
  if (!gate.enabled()) return Status::ok();
  return check_view("gate", gate.values, extents, kQueryHeadDims, InnerStride::unit_or_broadcast);
}

template <class T>
Status validate(const OutputGateArgs<T>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_view("attn", args.attn, {-1, -1, -1, -1, -1}, kQueryHeadDims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("out", args.out, args.attn.extents, kQueryHeadDims));
  if (!args.gate.enabled() && !args.attn.empty()) {
    return Status::error(StatusCode::invalid_argument, "gate: null data pointer");
  }
  GATED_ATTENTION_RETURN_IF_ERROR(check_gate(args.gate, args.attn.extents));
  GATED_ATTENTION_RETURN_IF_ERROR(check_distinct_elements("out", args.out, kQueryHeadDims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_in_place_or_disjoint("out", args.out, "attn", args.attn));
  return check_no_overlap("out", args.out, "gate", args.gate.values);
}

}  // namespace gated_attention
