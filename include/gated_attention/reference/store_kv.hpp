// Reference of ops/store_kv: each row converted in double, one element at a time.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "gated_attention/ops/store_kv_args.hpp"
#include "gated_attention/reference/common.hpp"

namespace gated_attention::reference {

namespace detail {

// The largest |x| of row (b, t, h) in double; NaN where the row holds NaN or Inf.
inline double row_max_abs(const TensorView<const float, 4>& src, std::int64_t b, std::int64_t t,
                          std::int64_t h) {
  double max_abs = 0.0;
  for (std::int64_t i = 0; i < src.extents[3]; ++i) {
    const double x = src(b, t, h, i);
    if (!std::isfinite(x)) return std::nan("");
    max_abs = std::max(max_abs, std::fabs(x));
  }
  return max_abs;
}

}  // namespace detail

template <class KvT>
Status store_kv(const StoreKvArgs<KvT>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(args));
  const auto& e = args.src.extents;
  constexpr bool quantised = std::is_same_v<KvT, std::int8_t>;
  for (std::int64_t b = 0; quantised && b < e[0]; ++b) {
    for (std::int64_t t = 0; t < e[1]; ++t) {
      for (std::int64_t h = 0; h < e[2]; ++h) {
        if (std::isnan(detail::row_max_abs(args.src, b, t, h))) {
          return Status::error(StatusCode::invalid_argument, "src: a row holds NaN or Inf");
        }
      }
    }
  }
  for_each_row(e, [&](std::array<std::int64_t, 4> i) {
    const double max_abs = quantised ? detail::row_max_abs(args.src, i[0], i[1], i[2]) : 0.0;
    for (i[3] = 0; i[3] < e[3]; ++i[3]) {
      const double x = args.src[i];
      if constexpr (quantised) {
        args.dst[i] =
            static_cast<std::int8_t>(max_abs > 0.0 ? std::nearbyint(x * 127.0 / max_abs) : 0.0);
      } else {
        args.dst[i] = from_double<KvT>(x);
      }
    }
    if constexpr (quantised) {
      args.maybe_scales(i[0], i[1], i[2]) = static_cast<float>(max_abs / 127.0);
    }
  });
  return Status::ok();
}

}  // namespace gated_attention::reference
