// AMX-BF16 tiles (kernels/amx_tiles.hpp) against a double reference over the same bf16 values.
// They run only where the CPU, the OS and the process allow tiles (amx_bf16_ready()); ASan does
// not see tile loads and stores, so these comparisons (with tails of rows, keys and dims) are
// their bounds check.
//
// Tolerance: products of two bf16 values are exact in f32; only the f32 accumulation order differs
// from the double sum: |error| <= 1e-5 * sum |a b| for these lengths (at most 256 terms, unit
// roundoff 2^-24 per addition).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gated_attention/core/dtypes.hpp"
#include "gated_attention/dispatch/amx.hpp"
#include "gated_attention/kernels/amx_tiles.hpp"

namespace {

namespace ga = gated_attention;

#if defined(__x86_64__)

float bf16_value(std::uint16_t bits) {
  return ga::to_float(ga::bf16::from_bits(bits));
}

std::uint16_t random_bf16(std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  return ga::bf16(u(rng)).bits;
}

std::uint32_t pair_word(std::uint16_t low, std::uint16_t high) {
  return low | static_cast<std::uint32_t>(high) << 16;
}

#endif

}  // namespace

TEST_CASE("amx: tiles are ready exactly where the CPU and OS allow them", "[amx][dispatch]") {
  const ga::CpuFeatures& f = ga::cpu_features();
  const bool features = ga::detail::has_avx512_bf16_region_features(f) && f.amx_tile && f.amx_bf16;
  if (!features) CHECK_FALSE(ga::amx_bf16_ready());
#if defined(__linux__) && defined(__x86_64__)
  // Linux grants the permission to any process without a small sigaltstack (tests install none).
  if (features) CHECK(ga::amx_bf16_ready());
#endif
  CHECK(ga::amx_bf16_ready() == ga::amx_bf16_ready());
}

#if defined(__x86_64__)
TEST_CASE("amx: K Q^T tiles match the double reference", "[amx]") {
  if (!ga::amx_bf16_ready()) {
    WARN("no AMX-BF16 tiles on this host: not run");
    return;
  }
  std::mt19937 rng(7);
  // 48 keys and 48 rows: a pair of tiles and a single one in each direction; dk 96: three steps.
  const std::int64_t keys = 48, rows = 48, dk = 96, key_stride = 104, s_stride = 56;
  std::vector<std::uint16_t> k(static_cast<std::size_t>(keys * key_stride));
  for (auto& x : k) x = random_bf16(rng);
  std::vector<std::uint16_t> q(static_cast<std::size_t>(rows * dk));
  for (auto& x : q) x = random_bf16(rng);
  std::vector<std::uint32_t> panel(static_cast<std::size_t>(dk / 2 * rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < dk / 2; ++i) {
      panel[static_cast<std::size_t>(i * rows + r)] =
          pair_word(q[static_cast<std::size_t>(r * dk + 2 * i)],
                    q[static_cast<std::size_t>(r * dk + 2 * i + 1)]);
    }
  }
  std::vector<float> s(static_cast<std::size_t>(keys * s_stride), -7.0f);
  ga::kernels::amx::configure_tiles();
  ga::kernels::amx::key_query_tiles(k.data(), key_stride, keys, panel.data(), rows, dk, s.data(),
                                    s_stride);
  ga::kernels::amx::release_tiles();
  int wrong = 0;
  for (std::int64_t n = 0; n < keys; ++n) {
    for (std::int64_t r = 0; r < s_stride; ++r) {
      const float got = s[static_cast<std::size_t>(n * s_stride + r)];
      if (r >= rows) {  // the stride's padding is not written
        wrong += got != -7.0f;
        continue;
      }
      double sum = 0.0, magnitude = 0.0;
      for (std::int64_t d = 0; d < dk; ++d) {
        const double x = bf16_value(k[static_cast<std::size_t>(n * key_stride + d)]) *
                         bf16_value(q[static_cast<std::size_t>(r * dk + d)]);
        sum += x;
        magnitude += std::fabs(x);
      }
      wrong += !(std::fabs(got - sum) <= 1e-5 * magnitude);
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("amx: P V tiles match the double reference", "[amx]") {
  if (!ga::amx_bf16_ready()) {
    WARN("no AMX-BF16 tiles on this host: not run");
    return;
  }
  std::mt19937 rng(11);
  // 42 keys (21 pairs: a whole step and a partial one), 48 rows, dv 48 (a pair of dim tiles and a
  // single one); the pair words past 21 hold NaN, which the tiles must not read.
  const std::int64_t keys = 42, pairs = 21, rows = 48, dv = 48, p_stride = 52, out_stride = 64;
  const std::int64_t steps = 2, column = steps * 16 * 16 + 16;
  std::vector<std::uint16_t> p(static_cast<std::size_t>(rows * keys));
  for (auto& x : p) x = random_bf16(rng);
  std::vector<std::uint16_t> v(static_cast<std::size_t>(keys * dv));
  for (auto& x : v) x = random_bf16(rng);
  const std::uint16_t nan_bits = 0x7fc0;
  std::vector<std::uint32_t> p_pairs(static_cast<std::size_t>(steps * 16 * p_stride),
                                     pair_word(nan_bits, nan_bits));
  for (std::int64_t m = 0; m < pairs; ++m) {
    for (std::int64_t r = 0; r < rows; ++r) {
      p_pairs[static_cast<std::size_t>(m * p_stride + r)] =
          pair_word(p[static_cast<std::size_t>(r * keys + 2 * m)],
                    p[static_cast<std::size_t>(r * keys + 2 * m + 1)]);
    }
  }
  std::vector<std::uint32_t> v_pairs(static_cast<std::size_t>(dv / 16 * column), 0u);
  for (std::int64_t m = 0; m < pairs; ++m) {
    for (std::int64_t j = 0; j < dv; ++j) {
      v_pairs[static_cast<std::size_t>(j / 16 * column + m * 16 + j % 16)] =
          pair_word(v[static_cast<std::size_t>(2 * m * dv + j)],
                    v[static_cast<std::size_t>((2 * m + 1) * dv + j)]);
    }
  }
  std::vector<float> out(static_cast<std::size_t>(rows * out_stride));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : out) x = u(rng);
  const std::vector<float> before = out;
  ga::kernels::amx::configure_tiles();
  ga::kernels::amx::weight_value_tiles(p_pairs.data(), p_stride, pairs, v_pairs.data(), column,
                                       rows, dv, out.data(), out_stride);
  ga::kernels::amx::release_tiles();
  int wrong = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < out_stride; ++j) {
      const auto e = static_cast<std::size_t>(r * out_stride + j);
      if (j >= dv) {  // the stride's padding is not written
        wrong += out[e] != before[e];
        continue;
      }
      double sum = before[e], magnitude = std::fabs(before[e]);
      for (std::int64_t n = 0; n < keys; ++n) {
        const double x = bf16_value(p[static_cast<std::size_t>(r * keys + n)]) *
                         bf16_value(v[static_cast<std::size_t>(n * dv + j)]);
        sum += x;
        magnitude += std::fabs(x);
      }
      wrong += !(std::fabs(out[e] - sum) <= 1e-5 * magnitude);
    }
  }
  CHECK(wrong == 0);
}
#endif
