// RMSNorm over the last dimension: out = x * rsqrt(mean(x^2) + eps) * scale, where scale is w
// (standard) or 1 + w (zero-centred, Qwen3-Next), or 1 without weights.
#pragma once

#include <cmath>
#include <cstdint>

#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"
#include "gated_attention/core/validate.hpp"

namespace gated_attention {

enum class RmsNormWeight : std::uint8_t {
  standard,       // x_hat * w
  zero_centered,  // x_hat * (1 + w)
};

template <class T, int Rank>
struct RmsNormArgs {
  TensorView<const T, Rank> x;      // [..., d]
  const T* maybe_weight = nullptr;  // [d]; null: no weight
  TensorView<T, Rank> out;          // [..., d]; may be x itself (in place)
  float eps = 1e-6f;
  RmsNormWeight weighting = RmsNormWeight::standard;
};

template <int Rank>
constexpr std::array<const char*, Rank> generic_dim_names() {
  std::array<const char*, Rank> names{};
  for (int i = 0; i < Rank; ++i) names[i] = i + 1 == Rank ? "normalised dim" : "row dim";
  return names;
}

template <class T, int Rank>
Status validate(const RmsNormArgs<T, Rank>& args) {
  std::array<std::int64_t, Rank> any{};
  for (auto& e : any) e = -1;
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("x", args.x, any, generic_dim_names<Rank>()));
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_view("out", args.out, args.x.extents, generic_dim_names<Rank>()));
  if (!(args.eps >= 0.0f) || !std::isfinite(args.eps)) {
    return Status::error(StatusCode::invalid_argument, "eps: expected finite >= 0, got %g",
                         static_cast<double>(args.eps));
  }
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_distinct_elements("out", args.out, generic_dim_names<Rank>()));
  const TensorView<const T, 1> weight(args.maybe_weight, {args.x.extents[Rank - 1]}, {1});
  GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap("out", args.out, "weight", weight));
  return check_in_place_or_disjoint("out", args.out, "x", args.x);
}

}  // namespace gated_attention
