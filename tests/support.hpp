// Helpers shared by the tests: seeded random data, owned tensors and tolerance checks.
#pragma once

#include <gated_attention/gated_attention.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace gated_attention::testing {

inline std::uint64_t& test_seed_storage() {
  static std::uint64_t seed = 20251130;
  return seed;
}
inline void set_test_seed(std::uint64_t seed) {
  test_seed_storage() = seed;
}
inline std::uint64_t test_seed() {
  return test_seed_storage();
}

// A generator per test case: the global seed mixed with a per-case salt, so cases stay independent.
inline std::mt19937_64 make_rng(std::uint64_t salt) {
  return std::mt19937_64(test_seed() * 0x9e3779b97f4a7c15ull + salt);
}

template <class T>
std::vector<T> random_vector(std::mt19937_64& rng, std::int64_t n, double lo = -1.0,
                             double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = reference::from_double<T>(dist(rng));
  return v;
}

// A dense row-major tensor that owns its storage.
template <class T, int Rank>
struct Tensor {
  std::array<std::int64_t, Rank> extents{};
  std::vector<T> data;

  explicit Tensor(const std::array<std::int64_t, Rank>& e, T fill = T()) : extents(e) {
    std::int64_t n = 1;
    for (auto x : e) n *= x;
    data.assign(static_cast<std::size_t>(n), fill);
  }
  Tensor(const std::array<std::int64_t, Rank>& e, std::mt19937_64& rng, double lo = -1.0,
         double hi = 1.0)
      : extents(e) {
    std::int64_t n = 1;
    for (auto x : e) n *= x;
    data = random_vector<T>(rng, n, lo, hi);
  }
  TensorView<T, Rank> view() { return TensorView<T, Rank>::contiguous(data.data(), extents); }
  TensorView<const T, Rank> cview() const {
    return TensorView<const T, Rank>::contiguous(data.data(), extents);
  }
};

// Largest |a - b| / (atol + rtol * |b|) over two equally long ranges; <= 1 passes.
template <class A, class B>
double max_tolerance_ratio(const A& a, const B& b, double atol, double rtol) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = reference::as_double(a[i]), y = reference::as_double(b[i]);
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    worst = std::max(worst, std::fabs(x - y) / (atol + rtol * std::fabs(y)));
  }
  return worst;
}

}  // namespace gated_attention::testing
