// Helpers shared by the tests: seeded random data, owned tensors and tolerance checks.
#pragma once

#include <gated_attention/gated_attention.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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

// worst = max(worst, ratio), a NaN ratio making it infinite rather than being ignored.
inline void track(double& worst, double ratio) {
  worst = std::isnan(ratio) ? std::numeric_limits<double>::infinity() : std::max(worst, ratio);
}

// Whether a Status's message contains `what`.
inline bool contains(const Status& s, const char* what) {
  return std::string(s.message()).find(what) != std::string::npos;
}

// Every ISA path this host (and build) can run.
inline std::vector<Isa> available_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::scalar, Isa::neon, Isa::avx2, Isa::avx512}) {
    if (isa_available(isa)) isas.push_back(isa);
  }
  return isas;
}

// The projection backends this build has: Eigen (the reference path of the block's tests) and
// OpenBLAS where the build found it (ops/linear_openblas.hpp).
struct LinearBackend {
  const char* name;
  LinearHook<float> hook;
};
inline std::vector<LinearBackend> linear_backends() {
  std::vector<LinearBackend> backends = {{"eigen", {&linear_eigen<float>, nullptr}}};
#if GATED_ATTENTION_OPENBLAS
  backends.push_back({"openblas", openblas_linear_hook<float>()});
#endif
  return backends;
}

// The vectorised math of each available path, over arrays (kernels/generic/math.inl).
struct MathPath {
  const char* name;
  void (*exp2)(const float* x, float* y, std::int64_t n);
  void (*sigmoid)(const float* x, float* y, std::int64_t n);
};

inline std::vector<MathPath> math_paths() {
  std::vector<MathPath> paths = {
      {"scalar", &kernels::scalar::exp2_array, &kernels::scalar::sigmoid_array}};
#if GATED_ATTENTION_X86
  if (isa_available(Isa::avx2)) {
    paths.push_back({"avx2", &kernels::avx2::exp2_array, &kernels::avx2::sigmoid_array});
  }
  if (isa_available(Isa::avx512)) {
    paths.push_back({"avx512", &kernels::avx512::exp2_array, &kernels::avx512::sigmoid_array});
  }
#endif
#if GATED_ATTENTION_AARCH64
  paths.push_back({"neon", &kernels::neon::exp2_array, &kernels::neon::sigmoid_array});
#endif
  return paths;
}

// Calls f(index) for every index of `extents`, last dimension fastest.
template <std::size_t Rank, class F>
void for_each_index(const std::array<std::int64_t, Rank>& extents, F&& f) {
  for (auto e : extents) {
    if (e == 0) return;
  }
  std::array<std::int64_t, Rank> index{};
  std::int64_t* at = index.data();  // raw pointers: cheap in unoptimised (sanitizer) builds
  const std::int64_t* end = extents.data();
  for (;;) {
    f(index);
    int d = static_cast<int>(Rank) - 1;
    while (d >= 0 && ++at[d] == end[d]) at[d--] = 0;
    if (d < 0) return;
  }
}

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

// Tolerances of the kernels against the references, shared by the tests that check them.
// ops/sdpa (derivation at the top of test_sdpa.cpp): per element |got - ref| <= atol + rtol |ref|
// for values of magnitude ~1, the whole output's NMSE <= kSdpaMaxNmse, log-sum-exp within
// kSdpaLseAtol. Logits up to about +-80 ("wide logits") widen atol and rtol by
// kSdpaWideLogitsFactor (NMSE by its square).
inline constexpr double kSdpaAtol = 1e-5;
inline constexpr double kSdpaRtol = 1e-4;
inline constexpr double kSdpaMaxNmse = 1e-10;
inline constexpr double kSdpaLseAtol = 1e-4;
inline constexpr double kSdpaWideLogitsFactor = 4.0;
// Logits of +-1e4: the log-sum-exp is within f32 spacing of 1e4 plus the rounding of the sums.
inline constexpr double kSdpaHugeLogitsLseRtol = 1e-5;
// The kernels' sigmoid (kernels/generic/math.inl, README): absolute error <= 1e-7.
inline constexpr double kSigmoidAtol = 1e-7;
// ops/output_gate (test_output_gate.cpp): the sigmoid's absolute error is <= 1e-7.
inline constexpr double kGateAtol = 1e-6;
inline constexpr double kGateRtol = 2e-6;
// AttentionStats (test_sdpa_stats.cpp): sink share, and the gate mean over d.
inline constexpr double kStatsShareAtol = 1e-6;
inline constexpr double kStatsShareRtol = 1e-4;
inline constexpr double kStatsGateMeanAtol = 1e-6;
inline constexpr double kStatsGateMeanRtol = 1e-5;

}  // namespace gated_attention::testing
