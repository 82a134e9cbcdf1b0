// Stores rows of f32 keys or values into a K/V cache of any cache type (see store_kv_args.hpp).
//
//   Status s = run(args, executor);  // needs no workspace; a refused call writes nothing
//
// Plain C++ that the compiler vectorises for the includer's target: it runs once per new token,
// beside attention over the whole cache.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "gated_attention/core/executor.hpp"
#include "gated_attention/ops/store_kv_args.hpp"

namespace gated_attention {

// Rows per task of run().
inline constexpr std::int64_t kStoreKvRowsPerTask = 64;

template <class KvT>
Status can_implement(const StoreKvArgs<KvT>& args) {
  return validate(args);
}

namespace detail {

// One row of d values into a cache row; returns its scale (int8: max|x| / 127, NaN when the row
// holds NaN or Inf; 1 for the other types).
template <class KvT>
float store_kv_elements(const float* x, std::int64_t d, KvT* out) {
  if constexpr (std::is_same_v<KvT, std::int8_t>) {
    const float max_abs = row_max_abs(x, d);
    const float inverse_scale = int8_inverse_scale(max_abs);
    for (std::int64_t i = 0; i < d; ++i) out[i] = quantize_int8(x[i], inverse_scale);
    return int8_scale(max_abs);
  } else if constexpr (std::is_same_v<KvT, float>) {
    std::copy(x, x + d, out);
  } else {
    for (std::int64_t i = 0; i < d; ++i) out[i] = KvT(x[i]);
  }
  return 1.0f;
}

// Row r of the flattened [b, len, kv_heads] rows of args.
template <class KvT>
void store_kv_row(const StoreKvArgs<KvT>& args, std::int64_t r) {
  const auto index = row_index(args.src, r);
  const float scale = store_kv_elements(&args.src[index], args.src.extents[3], &args.dst[index]);
  if (args.maybe_scales.data) args.maybe_scales(index[0], index[1], index[2]) = scale;
}

// The first row that cannot be quantised (NaN or Inf), or -1.
inline std::int64_t first_non_finite_row(const TensorView<const float, 4>& src) {
  const std::int64_t rows = num_rows(src);
  for (std::int64_t r = 0; r < rows; ++r) {
    if (std::isnan(row_max_abs(&src[row_index(src, r)], src.extents[3]))) return r;
  }
  return -1;
}

}  // namespace detail

template <class KvT>
Status run(const StoreKvArgs<KvT>& args, const Executor& executor = {}) {
  GATED_ATTENTION_RETURN_IF_ERROR(can_implement(args));
  if (args.src.empty()) return Status::ok();
  if constexpr (std::is_same_v<KvT, std::int8_t>) {
    const std::int64_t bad = detail::first_non_finite_row(args.src);
    if (bad >= 0) {
      const auto i = row_index(args.src, bad);
      return Status::error(StatusCode::invalid_argument,
                           "src: row (batch %lld, position %lld, kv head %lld) holds NaN or Inf: "
                           "an int8 cache cannot store it",
                           static_cast<long long>(i[0]), static_cast<long long>(i[1]),
                           static_cast<long long>(i[2]));
    }
  }
  const std::int64_t rows = num_rows(args.src);
  parallel_for(executor, (rows + kStoreKvRowsPerTask - 1) / kStoreKvRowsPerTask,
               [&](std::int64_t task, int) {
                 const std::int64_t begin = task * kStoreKvRowsPerTask;
                 const std::int64_t end = std::min(rows, begin + kStoreKvRowsPerTask);
                 for (std::int64_t r = begin; r < end; ++r) detail::store_kv_row(args, r);
               });
  return Status::ok();
}

}  // namespace gated_attention
