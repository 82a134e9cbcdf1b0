// Reference output gate: out = combine(attn, act(gate)), in double.
#pragma once

#include <cmath>

#include "gated_attention/core/status.hpp"
#include "gated_attention/ops/output_gate_args.hpp"
#include "gated_attention/reference/common.hpp"

namespace gated_attention::reference {

inline double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

inline double gate_activation(GateActivation activation, double g) {
  return activation == GateActivation::sigmoid ? sigmoid(g) : g * sigmoid(g);
}

inline double gate_combine(GateCombine combine, double attn, double activated) {
  return combine == GateCombine::multiply ? attn * activated : attn + activated;
}

template <class T>
double apply_gate(const GateSpec<T>& gate, const std::array<std::int64_t, 5>& index, double attn) {
  const double g = as_double(gate.values[index]);
  return gate_combine(gate.combine, attn, gate_activation(gate.activation, g));
}

template <class T>
Status output_gate(const OutputGateArgs<T>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(args));
  for_each_row(args.attn.extents, [&](std::array<std::int64_t, 5> index) {
    for (std::int64_t d = 0; d < args.attn.extents[4]; ++d) {
      index[4] = d;
      args.out[index] = from_double<T>(apply_gate(args.gate, index, as_double(args.attn[index])));
    }
  });
  return Status::ok();
}

}  // namespace gated_attention::reference
