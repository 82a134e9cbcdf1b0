// ops/output_gate (the standalone gate kernel, every ISA path the host supports) against
// reference::output_gate, and the vectorised sigmoid's error and saturation.
//
// Tolerance: |got - ref| <= 1e-6 + 2e-6 * |ref|. The kernel's sigmoid has absolute error <= 1e-7
// (measured below); multiply/add and SiLU add at most a few float roundings.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "support.hpp"

namespace ga = gated_attention;
using ga::testing::Tensor;

namespace {

using ga::testing::available_isas;

enum class Variant { elementwise, headwise, head_shared, query_independent };

const char* name(Variant v) {
  switch (v) {
    case Variant::elementwise:
      return "elementwise";
    case Variant::headwise:
      return "headwise";
    case Variant::head_shared:
      return "head-shared";
    case Variant::query_independent:
      return "query-independent";
  }
  return "?";
}

// A gate view over `g` (dense [b, l, kv, j, d]) with the variant's broadcast strides.
ga::TensorView<const float, 5> gate_view(const std::vector<float>& g,
                                         const std::array<std::int64_t, 5>& e, Variant v,
                                         std::int64_t offset) {
  auto dense = ga::TensorView<const float, 5>::contiguous(g.data() + offset, e);
  auto s = dense.strides;
  if (v == Variant::headwise) s[4] = 0;
  if (v == Variant::head_shared) s[2] = s[3] = 0;
  if (v == Variant::query_independent) s[0] = s[1] = 0;
  return ga::TensorView<const float, 5>(dense.data, e, s);
}

void check_gate(const std::array<std::int64_t, 5>& e, Variant variant,
                ga::GateActivation activation, ga::GateCombine combine, bool in_place,
                std::int64_t offset, int threads, std::uint64_t salt) {
  auto rng = ga::testing::make_rng(salt);
  std::int64_t n = 1;
  for (auto x : e) n *= x;
  const auto attn = ga::testing::random_vector<float>(rng, n + offset, -3.0, 3.0);
  const auto g = ga::testing::random_vector<float>(rng, n + offset, -8.0, 8.0);
  std::vector<float> expected(static_cast<std::size_t>(n + offset));
  ga::OutputGateArgs<float> ref;
  ref.attn = ga::TensorView<const float, 5>::contiguous(attn.data() + offset, e);
  ref.gate.values = gate_view(g, e, variant, offset);
  ref.gate.activation = activation;
  ref.gate.combine = combine;
  ref.out = ga::TensorView<float, 5>::contiguous(expected.data() + offset, e);
  REQUIRE(ga::reference::output_gate(ref).is_ok());

  ga::ThreadPool pool(threads);
  const ga::Executor executor = threads > 1 ? pool.executor() : ga::Executor{};
  for (ga::Isa isa : available_isas()) {
    ga::set_isa_limit(isa);
    INFO("path " << ga::to_string(isa) << ", variant " << name(variant) << ", d " << e[4]
                 << (in_place ? ", in place" : "") << ", offset " << offset << ", threads "
                 << threads << ", seed " << ga::testing::test_seed());
    std::vector<float> buffer = attn;
    std::vector<float> out(buffer.size(), -7.0f);
    ga::OutputGateArgs<float> args = ref;
    if (in_place) {
      args.attn = ga::TensorView<const float, 5>::contiguous(buffer.data() + offset, e);
      args.out = ga::TensorView<float, 5>::contiguous(buffer.data() + offset, e);
    } else {
      args.out = ga::TensorView<float, 5>::contiguous(out.data() + offset, e);
    }
    const ga::Status s = ga::run(args, ga::Workspace(nullptr, 0), executor);
    INFO(s.message());
    REQUIRE(s.is_ok());
    const std::vector<float>& got = in_place ? buffer : out;
    double worst = 0.0;
    for (std::int64_t i = offset; i < n + offset; ++i) {
      const double ref_value = expected[static_cast<std::size_t>(i)];
      worst = std::max(
          worst, std::fabs(got[static_cast<std::size_t>(i)] - ref_value) /
                     (ga::testing::kGateAtol + ga::testing::kGateRtol * std::fabs(ref_value)));
    }
    CHECK(worst <= 1.0);
    if (!in_place && offset > 0) CHECK(out[0] == -7.0f);  // nothing written before the view
  }
  ga::clear_isa_limit();
}

// The same with attn, gate and out in T (bf16 or f16): the reference reads the rounded attn and
// gate; the kernel's f32 result rounded to T is within T's unit roundoff u of it (relative to the
// stored value), so the tolerance adds u |got| (and, for f16, half its smallest step).
template <class T>
void check_gate_as(const std::array<std::int64_t, 5>& e, Variant variant, bool in_place,
                   std::int64_t offset, std::uint64_t salt) {
  constexpr bool is_bf16 = std::is_same_v<T, ga::bf16>;
  const double unit_roundoff = is_bf16 ? 0x1p-8 : 0x1p-11, step = is_bf16 ? 0.0 : 0x1p-25;
  auto rng = ga::testing::make_rng(salt);
  std::int64_t n = 1;
  for (auto x : e) n *= x;
  const auto size = static_cast<std::size_t>(n + offset);
  std::vector<float> attn = ga::testing::random_vector<float>(rng, n + offset, -3.0, 3.0);
  std::vector<float> g = ga::testing::random_vector<float>(rng, n + offset, -8.0, 8.0);
  std::vector<T> attn_t(size), g_t(size);
  for (std::size_t i = 0; i < size; ++i) {
    attn_t[i] = T(attn[i]);
    g_t[i] = T(g[i]);
    attn[i] = ga::to_float(attn_t[i]);
    g[i] = ga::to_float(g_t[i]);
  }
  std::vector<float> expected(size);
  ga::OutputGateArgs<float> ref;
  ref.attn = ga::TensorView<const float, 5>::contiguous(attn.data() + offset, e);
  ref.gate.values = gate_view(g, e, variant, offset);
  ref.out = ga::TensorView<float, 5>::contiguous(expected.data() + offset, e);
  REQUIRE(ga::reference::output_gate(ref).is_ok());
  const auto& gs = ref.gate.values.strides;
  for (ga::Isa isa : available_isas()) {
    ga::set_isa_limit(isa);
    INFO("path " << ga::to_string(isa) << ", " << (is_bf16 ? "bf16" : "f16") << ", variant "
                 << name(variant) << ", d " << e[4] << (in_place ? ", in place" : ""));
    std::vector<T> buffer = attn_t, out(size, T(-7.0f));
    ga::OutputGateArgs<T> args;
    args.attn = ga::TensorView<const T, 5>::contiguous(buffer.data() + offset, e);
    args.gate.values = ga::TensorView<const T, 5>(g_t.data() + offset, e, gs);
    T* out_data = (in_place ? buffer : out).data() + offset;
    args.out = ga::TensorView<T, 5>::contiguous(out_data, e);
    REQUIRE(ga::run(args, ga::Workspace(nullptr, 0)).is_ok());
    double worst = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double got = ga::to_float(out_data[i]), want = expected[offset + i];
      const double tol = ga::testing::kGateAtol + ga::testing::kGateRtol * std::fabs(want) +
                         unit_roundoff * std::fabs(got) + step;
      worst = std::max(worst, std::fabs(got - want) / tol);
    }
    CHECK(worst <= 1.0);
    if (!in_place && offset > 0) CHECK(ga::to_float(out[0]) == -7.0f);
  }
  ga::clear_isa_limit();
}

}  // namespace

TEST_CASE("output gate: bf16 and f16 attn, gate and out on every path", "[output_gate][isa]") {
  std::uint64_t salt = 300;
  for (Variant v : {Variant::elementwise, Variant::headwise, Variant::head_shared}) {
    for (std::int64_t d : {7, 64, 80}) {
      check_gate_as<ga::bf16>({1, 5, 2, 2, d}, v, false, 1, ++salt);
      check_gate_as<ga::f16>({1, 5, 2, 2, d}, v, true, 0, ++salt);
    }
  }
}

TEST_CASE("output gate: every variant, activation and combine on every path",
          "[output_gate][isa]") {
  std::uint64_t salt = 100;
  for (Variant v : {Variant::elementwise, Variant::headwise, Variant::head_shared,
                    Variant::query_independent}) {
    for (auto act : {ga::GateActivation::sigmoid, ga::GateActivation::silu}) {
      for (auto combine : {ga::GateCombine::multiply, ga::GateCombine::add}) {
        check_gate({2, 5, 2, 4, 64}, v, act, combine, false, 0, 1, ++salt);
      }
    }
  }
}

TEST_CASE("output gate: odd head dims, in place, misaligned pointers and threads",
          "[output_gate][isa][threads]") {
  std::uint64_t salt = 200;
  for (std::int64_t d : {1, 7, 16, 17, 33, 80, 256}) {
    check_gate({1, 9, 2, 2, d}, Variant::elementwise, ga::GateActivation::sigmoid,
               ga::GateCombine::multiply, false, 0, 1, ++salt);
    check_gate({1, 9, 2, 2, d}, Variant::headwise, ga::GateActivation::sigmoid,
               ga::GateCombine::multiply, true, 1, 2, ++salt);
  }
  // More rows than one task: several tasks over a thread pool.
  check_gate({3, 300, 1, 2, 24}, Variant::elementwise, ga::GateActivation::silu,
             ga::GateCombine::multiply, true, 1, 3, ++salt);
}

TEST_CASE("output gate: saturated pre-activations give exact 0 and 1, never NaN",
          "[output_gate][isa]") {
  const std::array<std::int64_t, 5> e = {1, 1, 1, 1, 40};
  std::vector<float> attn(40, 2.0f), gate(40), out(40);
  for (int i = 0; i < 40; ++i) gate[i] = (i % 2 ? 1.0f : -1.0f) * (90.0f + 1000.0f * i);
  for (ga::Isa isa : available_isas()) {
    ga::set_isa_limit(isa);
    INFO("path " << ga::to_string(isa));
    ga::OutputGateArgs<float> args;
    args.attn = ga::TensorView<const float, 5>::contiguous(attn.data(), e);
    args.gate.values = ga::TensorView<const float, 5>::contiguous(gate.data(), e);
    args.out = ga::TensorView<float, 5>::contiguous(out.data(), e);
    REQUIRE(ga::run(args, ga::Workspace(nullptr, 0)).is_ok());
    for (int i = 0; i < 40; ++i) {
      if (gate[i] > 0) {
        CHECK(out[i] == 2.0f);
      } else {
        CHECK(std::fabs(out[i]) <= 8.0f * std::numeric_limits<float>::min());  // 2 * 2^-125
      }
      CHECK_FALSE(std::isnan(out[i]));
    }
    args.gate.activation = ga::GateActivation::silu;  // g * sigmoid(g): g for g >> 0, ~0 below
    REQUIRE(ga::run(args, ga::Workspace(nullptr, 0)).is_ok());
    for (int i = 0; i < 40; ++i) {
      CHECK_FALSE(std::isnan(out[i]));
      if (gate[i] > 0) CHECK(out[i] == 2.0f * gate[i]);
      if (gate[i] < 0) CHECK(std::fabs(out[i]) < 1e-30f);
    }
  }
  ga::clear_isa_limit();
}

TEST_CASE("output gate: bad arguments are reported", "[output_gate]") {
  std::vector<float> a(64), g(64), o(64);
  ga::OutputGateArgs<float> args;
  args.attn = ga::TensorView<const float, 5>::contiguous(a.data(), {1, 2, 2, 2, 8});
  args.gate.values = ga::TensorView<const float, 5>::contiguous(g.data(), {1, 2, 2, 2, 4});
  args.out = ga::TensorView<float, 5>::contiguous(o.data(), {1, 2, 2, 2, 8});
  const ga::Status s = ga::run(args, ga::Workspace(nullptr, 0));
  CHECK(std::string(s.message()) == "gate: dim 4 (dim): expected 8, got 4");
  args.gate.values = ga::TensorView<const float, 5>::contiguous(g.data(), {1, 2, 2, 2, 8});
  args.out =
      ga::TensorView<float, 5>::contiguous(const_cast<float*>(a.data()) + 1, {1, 2, 2, 2, 8});
  CHECK(std::string(ga::run(args, ga::Workspace(nullptr, 0)).message()) == "out: overlaps attn");
}

TEST_CASE("output gate: the G2 value gate view", "[output_gate]") {
  // v [b, kv_len, kv_heads, d] gated elementwise in place: v * sigmoid(0) = v / 2.
  std::vector<float> v(2 * 5 * 3 * 8, 4.0f), zeros(v.size(), 0.0f);
  const auto v_view = ga::TensorView<float, 4>::contiguous(v.data(), {2, 5, 3, 8});
  ga::OutputGateArgs<float> args;
  args.attn = ga::value_gate_view(v_view);
  args.out = ga::value_gate_view(v_view);
  args.gate.values =
      ga::value_gate_view(ga::TensorView<const float, 4>::contiguous(zeros.data(), {2, 5, 3, 8}));
  REQUIRE(ga::run(args, ga::Workspace(nullptr, 0)).is_ok());
  for (float x : v) CHECK(x == 2.0f);
}

TEST_CASE("sigmoid: error, saturation and no denormals on every path", "[output_gate][sigmoid]") {
  // Documented in kernels/generic/math.inl: absolute error <= 1e-7, relative error
  // <= 4e-7 + 7e-8 |x| (x * log2 e is rounded to float before exp2); exactly 1 above 87.4; 2^-125
  // (a normal number) instead of a denormal below -86.6.
  std::vector<float> x;
  for (double v = -120.0; v <= 120.0; v += 0.0113) x.push_back(static_cast<float>(v));
  for (float v : {0.0f, -0.0f, 88.0f, -88.0f, 1e4f, -1e4f}) x.push_back(v);
  std::vector<float> y(x.size());
  auto check = [&](const char* path) {
    INFO("path " << path);
    double worst_relative = 0.0, worst_absolute = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK(std::fpclassify(y[i]) == FP_NORMAL);
      const double expected = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
      if (x[i] > 87.4f) CHECK(y[i] == 1.0f);
      worst_absolute = std::max(worst_absolute, std::fabs(y[i] - expected));
      const double floor = std::ldexp(1.0, -125);  // the saturation value below x = -86.6
      if (expected >= floor) {
        const double bound = 4e-7 + 7e-8 * std::fabs(x[i]);
        worst_relative = std::max(worst_relative, std::fabs(y[i] - expected) / expected / bound);
      } else {
        CHECK(std::fabs(y[i] - floor) <= 1e-6 * floor);
      }
    }
    CHECK(worst_relative <= 1.0);
    CHECK(worst_absolute <= 1e-7);
  };
  for (const auto& path : ga::testing::math_paths()) {
    path.sigmoid(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
    check(path.name);
  }
}
