// Rotary position embedding, NeoX (rotate-half) style, on the first rotary_dim dims of each head:
// for i < rotary_dim / 2, with angle = position * theta^(-2i / rotary_dim),
//   out[i]              = x[i] * cos(angle) - x[i + rotary_dim / 2] * sin(angle)
//   out[i + rotary/2]   = x[i + rotary_dim / 2] * cos(angle) + x[i] * sin(angle)
// and dims >= rotary_dim pass through (partial rotary: Qwen3-Next rotates 64 of 256).
#pragma once

#include <cmath>
#include <cstdint>

#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"
#include "gated_attention/core/validate.hpp"

namespace gated_attention {

template <class T, int Rank>
struct RopeArgs {
  TensorView<const T, Rank> x;                  // [b, len, heads..., d]
  TensorView<const std::int64_t, 2> positions;  // [b, len] position of each token
  TensorView<T, Rank> out;                      // [b, len, heads..., d]; may be x itself (in place)
  double theta = 10000.0;
  std::int64_t rotary_dim = 0;  // even, <= d
};

// Rotary dims for a partial rotary factor (Qwen3-Next: 0.25 of 256 = 64), rounded down to even.
inline std::int64_t rotary_dim_for(std::int64_t head_dim, double partial_rotary_factor) {
  const auto dims =
      static_cast<std::int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
  return dims - dims % 2;
}

template <class T, int Rank>
Status validate(const RopeArgs<T, Rank>& args) {
  static_assert(Rank >= 3, "rope needs [b, len, ..., d]");
  std::array<std::int64_t, Rank> any{};
  for (auto& e : any) e = -1;
  std::array<const char*, Rank> names{};
  for (auto& n : names) n = "head dim";
  names[0] = "batch";
  names[1] = "length";
  names[Rank - 1] = "dim";
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("x", args.x, any, names));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("out", args.out, args.x.extents, names));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view(
      "positions", args.positions, {args.x.extents[0], args.x.extents[1]}, {"batch", "length"}));
  const std::int64_t d = args.x.extents[Rank - 1];
  if (args.rotary_dim < 0 || args.rotary_dim % 2 != 0 || args.rotary_dim > d) {
    return Status::error(StatusCode::invalid_argument,
                         "rotary_dim: expected even and in 0..%lld (head dim), got %lld",
                         static_cast<long long>(d), static_cast<long long>(args.rotary_dim));
  }
  if (!(args.theta > 0.0) || !std::isfinite(args.theta)) {
    return Status::error(StatusCode::invalid_argument, "theta: expected finite > 0, got %g",
                         args.theta);
  }
  GATED_ATTENTION_RETURN_IF_ERROR(check_distinct_elements("out", args.out, names));
  GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap("out", args.out, "positions", args.positions));
  return check_in_place_or_disjoint("out", args.out, "x", args.x);
}

}  // namespace gated_attention
