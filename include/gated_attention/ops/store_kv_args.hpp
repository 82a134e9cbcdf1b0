// Rows of f32 keys or values stored into a K/V cache of element type KvT:
//   float               copied;
//   bf16, f16           rounded to nearest, ties to even (core/dtypes.hpp);
//   std::int8_t         quantised per row, symmetric: x ~= scale * q with scale = max|x| / 127 and
//                       q = round(x * 127 / max|x|) (ties to even), so q is in [-127, 127]; a row
//                       of zeros has scale 0. A row holding NaN or Inf cannot be quantised.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "gated_attention/core/dtypes.hpp"
#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"
#include "gated_attention/core/validate.hpp"

namespace gated_attention {

template <class KvT>
struct StoreKvArgs {
  TensorView<const float, 4> src;     // [b, len, kv_heads, d]
  TensorView<KvT, 4> dst;             // [b, len, kv_heads, d]: the cache rows to write
  TensorView<float, 3> maybe_scales;  // [b, len, kv_heads]: int8 caches only, one scale per row
};

// Shapes, strides and aliasing; the values are checked by run() (int8: every row finite).
template <class KvT>
Status validate(const StoreKvArgs<KvT>& args) {
  static_assert(is_kv_type_v<KvT>, "K/V cache types: float, bf16, f16, std::int8_t");
  constexpr std::array<const char*, 4> dims = {"batch", "length", "kv heads", "dim"};
  constexpr std::array<const char*, 3> row_dims = {"batch", "length", "kv heads"};
  const auto& e = args.src.extents;
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("src", args.src, {-1, -1, -1, -1}, dims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view("dst", args.dst, e, dims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_distinct_elements("dst", args.dst, dims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap("dst", args.dst, "src", args.src));
  const bool quantised = std::is_same_v<KvT, std::int8_t>;
  if (quantised && args.maybe_scales.data == nullptr && !args.src.empty()) {
    return Status::error(StatusCode::invalid_argument,
                         "scales: expected a [b, len, kv_heads] view for an int8 cache, got none");
  }
  if (!quantised && args.maybe_scales.data != nullptr) {
    return Status::error(StatusCode::invalid_argument,
                         "scales: expected none for a float, bf16 or f16 cache, got a view");
  }
  if (args.maybe_scales.data == nullptr) return Status::ok();
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_view("scales", args.maybe_scales, {e[0], e[1], e[2]}, row_dims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_distinct_elements("scales", args.maybe_scales, row_dims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap("scales", args.maybe_scales, "src", args.src));
  return check_no_overlap("scales", args.maybe_scales, "dst", args.dst);
}

}  // namespace gated_attention
