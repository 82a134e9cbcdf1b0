// Element conversion and iteration used by the references. References compute in double.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "gated_attention/core/dtypes.hpp"

namespace gated_attention::reference {

template <class T>
double as_double(T x) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<double>(x);
  } else {
    return static_cast<double>(to_float(x));
  }
}

// Rounds to T (bf16/f16 go through float first: double rounding, harmless for a reference).
template <class T>
T from_double(double x) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<T>(x);
  } else {
    return from_float<T>(static_cast<float>(x));
  }
}

// Calls f(index) for every index of `extents` whose last component is 0: once per row.
template <std::size_t Rank, class F>
void for_each_row(const std::array<std::int64_t, Rank>& extents, F&& f) {
  for (std::size_t i = 0; i < Rank; ++i) {
    if (extents[i] == 0) return;
  }
  std::array<std::int64_t, Rank> index{};
  for (;;) {
    f(index);
    int d = static_cast<int>(Rank) - 2;
    while (d >= 0 && ++index[d] == extents[d]) index[d--] = 0;
    if (d < 0) return;
  }
}

}  // namespace gated_attention::reference
