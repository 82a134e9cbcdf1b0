// Shape and stride checks shared by every op's can_implement() and the references.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"

namespace gated_attention {

enum class InnerStride : std::uint8_t {
  unit,               // the last dimension is dense (stride 1)
  unit_or_broadcast,  // stride 1 or 0 (one value broadcast over the last dimension)
  any,                // any stride (views of scalars per row, read one element at a time)
};

// Checks a view against the extents an op expects (a negative expected extent accepts any extent
// >= 0). Reports the tensor, the dimension, what was expected and what was found.
template <class T, int Rank>
Status check_view(const char* tensor, const TensorView<T, Rank>& view,
                  const typename TensorView<T, Rank>::Index& expected,
                  const typename TensorView<T, Rank>::DimNames& dim_names,
                  InnerStride inner = InnerStride::unit) {
  for (int i = 0; i < Rank; ++i) {
    if (view.extents[i] < 0) {
      return Status::error(StatusCode::invalid_argument, "%s: dim %d (%s): negative extent %lld",
                           tensor, i, dim_names[i], static_cast<long long>(view.extents[i]));
    }
    if (expected[i] >= 0 && view.extents[i] != expected[i]) {
      return Status::shape_mismatch(tensor, i, dim_names[i], expected[i], view.extents[i]);
    }
    if (view.strides[i] < 0) {
      return Status::error(StatusCode::invalid_argument, "%s: dim %d (%s): negative stride %lld",
                           tensor, i, dim_names[i], static_cast<long long>(view.strides[i]));
    }
  }
  for (int i = 0; i < Rank; ++i) {
    if (view.extents[i] == 0) return Status::ok();  // empty: no element is addressed
  }
  // The element count and the addressed span (in bytes) must fit std::int64_t: every offset the
  // ops compute is then exact.
  const std::int64_t limit =
      std::numeric_limits<std::int64_t>::max() / static_cast<std::int64_t>(sizeof(T));
  std::int64_t count = 1, last = 0;
  for (int i = 0; i < Rank; ++i) {
    const std::int64_t reach = view.extents[i] - 1;
    const bool too_many = view.extents[i] > limit / count;
    const bool too_far = view.strides[i] != 0 && reach > (limit - 1 - last) / view.strides[i];
    if (too_many || too_far) {
      return Status::error(StatusCode::invalid_argument,
                           "%s: dim %d (%s): extent %lld with stride %lld: the view does not fit "
                           "64-bit offsets",
                           tensor, i, dim_names[i], static_cast<long long>(view.extents[i]),
                           static_cast<long long>(view.strides[i]));
    }
    count *= view.extents[i];
    last += reach * view.strides[i];
  }
  if (view.data == nullptr) {
    return Status::error(StatusCode::invalid_argument, "%s: null data pointer", tensor);
  }
  const std::int64_t s = view.strides[Rank - 1];
  const bool inner_ok = inner == InnerStride::any || s == 1 || view.extents[Rank - 1] == 1 ||
                        (inner == InnerStride::unit_or_broadcast && s == 0);
  if (!inner_ok) {
    return Status::error(StatusCode::invalid_argument,
                         "%s: dim %d (%s): innermost stride must be %s, got %lld", tensor, Rank - 1,
                         dim_names[Rank - 1], inner == InnerStride::unit ? "1" : "1 or 0",
                         static_cast<long long>(s));
  }
  return Status::ok();
}

// A written view must address each element once (threads write its rows concurrently): with the
// dimensions of extent > 1 ordered by stride, each stride must step past everything the smaller
// ones reach. Sufficient, not necessary: interleavings that happen not to collide are refused too.
// Call after check_view() passed (the offsets then fit std::int64_t).
template <class T, int Rank>
Status check_distinct_elements(const char* tensor, const TensorView<T, Rank>& view,
                               const typename TensorView<T, Rank>::DimNames& dim_names) {
  if (view.empty() || view.data == nullptr) return Status::ok();
  std::array<int, Rank> order{};
  for (int i = 0; i < Rank; ++i) order[i] = i;
  for (int i = 1; i < Rank; ++i) {  // insertion sort by stride, innermost first among equals
    for (int j = i; j > 0; --j) {
      const int a = order[j - 1], b = order[j];
      if (view.strides[b] < view.strides[a] || (view.strides[b] == view.strides[a] && b > a)) {
        order[j - 1] = b;
        order[j] = a;
      }
    }
  }
  std::int64_t reach = 0;  // largest offset the smaller dimensions address
  for (int k : order) {
    if (view.extents[k] == 1) continue;
    if (view.strides[k] <= reach) {
      return Status::error(StatusCode::invalid_argument,
                           "%s: dim %d (%s): stride %lld writes elements more than once (the "
                           "smaller strides reach offset %lld)",
                           tensor, k, dim_names[k], static_cast<long long>(view.strides[k]),
                           static_cast<long long>(reach));
    }
    reach += (view.extents[k] - 1) * view.strides[k];
  }
  return Status::ok();
}

template <class T, int RankT, class U, int RankU>
Status check_no_overlap(const char* written, const TensorView<T, RankT>& out, const char* read,
                        const TensorView<U, RankU>& in) {
  if (may_overlap(out, in)) {
    return Status::error(StatusCode::invalid_argument, "%s: overlaps %s", written, read);
  }
  return Status::ok();
}

// For ops that may run in place: `out` is either exactly `in` (same pointer, extents and strides)
// or disjoint from it.
template <class T, class U, int Rank>
Status check_in_place_or_disjoint(const char* written, const TensorView<T, Rank>& out,
                                  const char* read, const TensorView<U, Rank>& in) {
  const bool in_place = static_cast<const void*>(out.data) == static_cast<const void*>(in.data) &&
                        out.extents == in.extents && out.strides == in.strides;
  if (in_place) return Status::ok();
  return check_no_overlap(written, out, read, in);
}

}  // namespace gated_attention
