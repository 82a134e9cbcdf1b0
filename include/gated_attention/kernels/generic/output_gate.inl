// The standalone output gate, out = combine(attn, act(gate)), over the enclosing ISA's `Simd`.
// A task gates kGateRowsPerTask rows of d elements; a gate with stride 0 over d is broadcast.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

template <class T>
void output_gate_task(void* context, std::int64_t task, int /*worker*/) {
  using S = Simd;
  const DenormalsAsZero flush;  // for this task (kernels/denormals.hpp)
  const auto& ctx = *static_cast<const OutputGateContext<T>*>(context);
  const OutputGateArgs<T>& a = *ctx.args;
  const auto& e = a.attn.extents;
  const std::int64_t d = e[4];
  const bool broadcast = a.gate.values.strides[4] == 0;
  const std::int64_t first = task * kGateRowsPerTask;
  const std::int64_t last = std::min(ctx.rows, first + kGateRowsPerTask);
  for (std::int64_t row = first; row < last; ++row) {
    const std::int64_t j = row % e[3], kv = row / e[3] % e[2];
    const std::int64_t l = row / (e[3] * e[2]) % e[1], b = row / (e[3] * e[2] * e[1]);
    const T* attn = &a.attn(b, l, kv, j, 0);
    const T* gate = &a.gate.values(b, l, kv, j, 0);
    T* out = &a.out(b, l, kv, j, 0);
    for (std::int64_t c = 0; c < d; c += S::kLanes) {
      const int n = d - c < S::kLanes ? static_cast<int>(d - c) : S::kLanes;
      const S::V x = load_row_part(attn + c, n);
      const S::V g = broadcast ? S::set1(to_float(*gate)) : load_row_part(gate + c, n);
      store_row_part(out + c, gate_lanes(x, g, a.gate.activation, a.gate.combine), n);
    }
  }
}
