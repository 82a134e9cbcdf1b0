// TensorView<T, Rank>: a non-owning pointer + extents + strides (in elements, not bytes).
// A stride of 0 broadcasts along that dimension (a headwise gate is an elementwise gate with
// stride 0 over the head dimension). Strides are non-negative; ops document which dimension must
// have stride 1.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "gated_attention/core/config.hpp"

namespace gated_attention {

template <class T, int Rank>
struct TensorView {
  static_assert(Rank >= 1, "TensorView needs at least one dimension");
  using Element = T;
  using Index = std::array<std::int64_t, Rank>;
  using DimNames = std::array<const char*, Rank>;
  static constexpr int kRank = Rank;

  T* data = nullptr;
  Index extents{};
  Index strides{};

  constexpr TensorView() = default;
  constexpr TensorView(T* data_, const Index& extents_, const Index& strides_)
      : data(data_), extents(extents_), strides(strides_) {}

  // A view of const T from a view of T.
  template <class U,
            class = std::enable_if_t<std::is_convertible_v<U*, T*> && !std::is_same_v<U, T>>>
  constexpr TensorView(const TensorView<U, Rank>& other)  // NOLINT: implicit by design
      : data(other.data), extents(other.extents), strides(other.strides) {}

  // Row-major (last dimension fastest) view of a dense buffer.
  static constexpr TensorView contiguous(T* data_, const Index& extents_) {
    Index s{};
    std::int64_t step = 1;
    for (int i = Rank - 1; i >= 0; --i) {
      s[i] = step;
      step *= extents_[i];
    }
    return TensorView(data_, extents_, s);
  }

  constexpr std::int64_t extent(int i) const { return extents[i]; }
  constexpr std::int64_t stride(int i) const { return strides[i]; }

  // Number of logical elements (broadcast elements counted once per index).
  constexpr std::int64_t num_elements() const {
    std::int64_t n = 1;
    for (int i = 0; i < Rank; ++i) n *= extents[i];
    return n;
  }
  constexpr bool empty() const { return num_elements() == 0; }

  template <class... I>
  constexpr std::int64_t offset(I... index) const {
    static_assert(sizeof...(I) == Rank, "one index per dimension");
    const std::int64_t idx[] = {static_cast<std::int64_t>(index)...};
    const std::int64_t* step = strides.data();
    std::int64_t off = 0;
    GATED_ATTENTION_UNROLL
    for (int i = 0; i < Rank; ++i) off += idx[i] * step[i];
    return off;
  }

  template <class... I>
  constexpr T& operator()(I... index) const {
    return data[offset(index...)];
  }

  // Through raw pointers: unoptimised (sanitizer) builds would call std::array's operator[] at
  // every use.
  constexpr T& operator[](const Index& index) const {
    const std::int64_t* at = index.data();
    const std::int64_t* step = strides.data();
    std::int64_t off = 0;
    GATED_ATTENTION_UNROLL
    for (int i = 0; i < Rank; ++i) off += at[i] * step[i];
    return data[off];
  }

  // Offset (elements) one past the last addressed element; 0 for an empty view.
  constexpr std::int64_t span() const {
    if (empty()) return 0;
    std::int64_t last = 0;
    for (int i = 0; i < Rank; ++i) last += (extents[i] - 1) * strides[i];
    return last + 1;
  }
};

// Number of rows (all dimensions but the last) of a view.
template <class T, int Rank>
constexpr std::int64_t num_rows(const TensorView<T, Rank>& view) {
  std::int64_t n = 1;
  for (int i = 0; i + 1 < Rank; ++i) n *= view.extents[i];
  return n;
}

// The index of the first element of row `row` (row-major over all dimensions but the last).
template <class T, int Rank>
constexpr typename TensorView<T, Rank>::Index row_index(const TensorView<T, Rank>& view,
                                                        std::int64_t row) {
  typename TensorView<T, Rank>::Index index{};
  for (int i = Rank - 2; i >= 0; --i) {
    index[i] = view.extents[i] > 0 ? row % view.extents[i] : 0;
    row = view.extents[i] > 0 ? row / view.extents[i] : 0;
  }
  return index;
}

// Whether two views may address a common byte. Conservative: compares the address ranges the views
// span, not the individual elements.
template <class T, int RankT, class U, int RankU>
bool may_overlap(const TensorView<T, RankT>& a, const TensorView<U, RankU>& b) {
  if (a.empty() || b.empty() || a.data == nullptr || b.data == nullptr) return false;
  const auto a_begin = reinterpret_cast<std::uintptr_t>(a.data);
  const auto b_begin = reinterpret_cast<std::uintptr_t>(b.data);
  const auto a_end = a_begin + static_cast<std::uintptr_t>(a.span()) * sizeof(T);
  const auto b_end = b_begin + static_cast<std::uintptr_t>(b.span()) * sizeof(U);
  return a_begin < b_end && b_begin < a_end;
}

}  // namespace gated_attention
