// reference::sdpa against closed forms, invariances and a hand-checked example.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "support.hpp"

namespace ga = gated_attention;
using ga::testing::Tensor;

namespace {

// Owned q/k/v/out for one attention problem, with the standard [b, len, heads, d] layout.
struct Problem {
  std::int64_t batch, q_len, kv_len, hq, hkv, dk, dv;
  Tensor<double, 4> q, k, v, out;
  Tensor<float, 4> lse;

  Problem(std::int64_t b, std::int64_t ql, std::int64_t kl, std::int64_t hq_, std::int64_t hkv_,
          std::int64_t dk_, std::int64_t dv_, std::uint64_t salt)
      : batch(b),
        q_len(ql),
        kv_len(kl),
        hq(hq_),
        hkv(hkv_),
        dk(dk_),
        dv(dv_),
        q({b, ql, hq_, dk_}),
        k({b, kl, hkv_, dk_}),
        v({b, kl, hkv_, dv_}),
        out({b, ql, hq_, dv_}),
        lse({b, ql, hkv_, hq_ / hkv_}) {
    auto rng = ga::testing::make_rng(salt);
    q = Tensor<double, 4>({b, ql, hq_, dk_}, rng, -2.0, 2.0);
    k = Tensor<double, 4>({b, kl, hkv_, dk_}, rng, -2.0, 2.0);
    v = Tensor<double, 4>({b, kl, hkv_, dv_}, rng);
  }

  ga::SdpaArgs<double> args() {
    ga::SdpaArgs<double> a;
    a.q = ga::split_heads(q.cview(), hkv);
    a.k = k.cview();
    a.v = v.cview();
    a.out = ga::split_heads(out.view(), hkv);
    a.maybe_lse = lse.view();
    return a;
  }
};

void run(const ga::SdpaArgs<double>& args) {
  const ga::Status s = ga::reference::sdpa(args);
  INFO(s.message());
  REQUIRE(s.is_ok());
}

}  // namespace

TEST_CASE("Hand-checked example: two keys, scale 1", "[reference][sdpa]") {
  // q = [1, 0]; k0 = [1, 0], k1 = [0, 1] -> logits 1 and 0.
  // p0 = e / (e + 1) = 0.7310585786300049, p1 = 0.2689414213699951.
  // out = p0 * [1, 2] + p1 * [3, 4] = [1.5378828427399902, 2.5378828427399902].
  // lse = log(e + 1) = 1.3132616875182228.
  Problem p(1, 1, 2, 1, 1, 2, 2, 0);
  p.q.data = {1, 0};
  p.k.data = {1, 0, 0, 1};
  p.v.data = {1, 2, 3, 4};
  auto a = p.args();
  a.scale = 1.0f;
  run(a);
  CHECK(p.out.data[0] == Approx(1.5378828427399902).epsilon(1e-14));
  CHECK(p.out.data[1] == Approx(2.5378828427399902).epsilon(1e-14));
  CHECK(p.lse.data[0] == Approx(1.3132616875182228).epsilon(1e-7));

  // Default scale is 1/sqrt(dk): logits 1/sqrt(2) and 0.
  a.scale = 0.0f;
  run(a);
  const double p0 = 1.0 / (1.0 + std::exp(-1.0 / std::sqrt(2.0)));
  CHECK(p.out.data[0] == Approx(p0 * 1 + (1 - p0) * 3).epsilon(1e-7));
}

TEST_CASE("Identical keys give the mean of the values", "[reference][sdpa]") {
  Problem p(2, 5, 9, 4, 2, 16, 8, 1);
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t j = 0; j < 9; ++j) {
      for (std::int64_t h = 0; h < 2; ++h) {
        for (std::int64_t d = 0; d < 16; ++d) p.k.view()(b, j, h, d) = p.k.view()(b, 0, h, d);
      }
    }
  }
  run(p.args());
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t i = 0; i < 5; ++i) {
      for (std::int64_t h = 0; h < 4; ++h) {
        for (std::int64_t d = 0; d < 8; ++d) {
          double mean = 0;
          for (std::int64_t j = 0; j < 9; ++j) mean += p.v.view()(b, j, h / 2, d) / 9.0;
          CHECK(p.out.view()(b, i, h, d) == Approx(mean).epsilon(1e-12));
        }
      }
    }
  }
}

TEST_CASE("One-hot scores pick one value row", "[reference][sdpa]") {
  // Keys are basis vectors; q = 60 * e_3: logit 60 against 0 elsewhere, weight of the other keys
  // e^-60 ~ 1e-26.
  Problem p(1, 1, 6, 1, 1, 6, 4, 2);
  std::fill(p.k.data.begin(), p.k.data.end(), 0.0);
  for (int j = 0; j < 6; ++j) p.k.data[j * 6 + j] = 1.0;
  std::fill(p.q.data.begin(), p.q.data.end(), 0.0);
  p.q.data[3] = 60.0;
  auto a = p.args();
  a.scale = 1.0f;
  run(a);
  for (int d = 0; d < 4; ++d) CHECK(p.out.data[d] == Approx(p.v.view()(0, 3, 0, d)).epsilon(1e-15));
}

TEST_CASE("Causal row 0 equals v0 and q_len > kv_len rows before the keys are 0",
          "[reference][sdpa]") {
  SECTION("square") {
    Problem p(1, 4, 4, 2, 2, 8, 8, 3);
    auto a = p.args();
    a.mask = ga::Mask::causal();
    run(a);
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 8; ++d) CHECK(p.out.view()(0, 0, h, d) == p.v.view()(0, 0, h, d));
    }
  }
  SECTION("more queries than keys: bottom-right alignment leaves the first rows without keys") {
    Problem p(1, 5, 3, 1, 1, 4, 4, 4);
    auto a = p.args();
    a.mask = ga::Mask::causal();
    run(a);
    // Query i sits at position i + 3 - 5 = i - 2: rows 0 and 1 see no key.
    for (int i = 0; i < 2; ++i) {
      for (int d = 0; d < 4; ++d) CHECK(p.out.view()(0, i, 0, d) == 0.0);
      CHECK(p.lse.view()(0, i, 0, 0) == -std::numeric_limits<float>::infinity());
    }
    for (int d = 0; d < 4; ++d) CHECK(p.out.view()(0, 2, 0, d) == p.v.view()(0, 0, 0, d));
  }
}

TEST_CASE("Fully masked rows give 0, never NaN", "[reference][sdpa]") {
  Problem p(2, 3, 5, 2, 1, 4, 4, 5);
  std::vector<std::int64_t> lens = {0, 5};
  auto a = p.args();
  a.maybe_kv_lens = lens.data();
  run(a);
  for (std::int64_t i = 0; i < 3; ++i) {
    for (std::int64_t h = 0; h < 2; ++h) {
      for (std::int64_t d = 0; d < 4; ++d) CHECK(p.out.view()(0, i, h, d) == 0.0);
      CHECK(std::isinf(p.lse.view()(0, i, 0, h)));
      CHECK(std::isfinite(p.lse.view()(1, i, 0, h)));
    }
  }
  // A causal window of 2 with more queries than keys: query 0 sits at position -2 and sees keys
  // [-3, -2], none of which exist; query 5 (position 3) sees keys 2 and 3.
  Problem w(1, 6, 4, 1, 1, 4, 4, 6);
  auto aw = w.args();
  aw.mask = ga::Mask::causal_window(2);
  run(aw);
  for (int d = 0; d < 4; ++d) CHECK(w.out.view()(0, 0, 0, d) == 0.0);
  for (double x : w.out.data) CHECK_FALSE(std::isnan(x));
  // Query 2 (position 0) sees key 0 only.
  for (int d = 0; d < 4; ++d) CHECK(w.out.view()(0, 2, 0, d) == w.v.view()(0, 0, 0, d));
}

TEST_CASE("softmax+1 with very negative logits tends to 0; a -inf sink equals no sink",
          "[reference][sdpa]") {
  Problem p(1, 2, 6, 2, 2, 4, 4, 7);
  std::fill(p.q.data.begin(), p.q.data.end(), 10.0);
  std::fill(p.k.data.begin(), p.k.data.end(), -10.0);  // logits -200 * scale = -100
  auto a = p.args();
  a.softmax_plus_one = true;
  run(a);
  for (double x : p.out.data) CHECK(std::fabs(x) < 1e-40);

  // Same inputs with a moderate logit: softmax+1 equals a zero sink logit.
  Problem r(1, 3, 7, 2, 1, 8, 8, 8);
  auto plus_one = r.args();
  plus_one.softmax_plus_one = true;
  run(plus_one);
  const std::vector<double> with_plus_one = r.out.data;
  const float zero_sinks[2] = {0.0f, 0.0f};
  auto sinks = r.args();
  sinks.maybe_sink_logits = zero_sinks;
  run(sinks);
  CHECK(ga::testing::max_tolerance_ratio(r.out.data, with_plus_one, 1e-15, 1e-14) <= 1.0);

  const float minus_inf[2] = {-INFINITY, -INFINITY};
  sinks.maybe_sink_logits = minus_inf;
  run(sinks);
  const std::vector<double> with_inf_sink = r.out.data;
  run(r.args());
  CHECK(with_inf_sink == r.out.data);
}

TEST_CASE("A sink logit scales the output by Z / (Z + e^sink)", "[reference][sdpa]") {
  Problem p(1, 2, 5, 1, 1, 4, 4, 9);
  auto a = p.args();
  run(a);
  const std::vector<double> plain = p.out.data;
  const std::vector<float> lse = p.lse.data;
  const float sink[1] = {0.7f};
  a.maybe_sink_logits = sink;
  run(a);
  for (int i = 0; i < 2; ++i) {
    const double z = std::exp(static_cast<double>(lse[i]));
    const double factor = z / (z + std::exp(0.7));
    for (int d = 0; d < 4; ++d)
      CHECK(p.out.data[i * 4 + d] == Approx(plain[i * 4 + d] * factor).epsilon(1e-6));
    CHECK(p.lse.data[i] == Approx(std::log(z + std::exp(0.7))).epsilon(1e-6));
  }
}

TEST_CASE("Permuting keys with their values leaves non-causal attention unchanged",
          "[reference][sdpa]") {
  Problem p(1, 4, 11, 4, 2, 8, 6, 10);
  run(p.args());
  const std::vector<double> before = p.out.data;
  std::vector<int> perm(11);
  std::iota(perm.begin(), perm.end(), 0);
  auto rng = ga::testing::make_rng(11);
  std::shuffle(perm.begin(), perm.end(), rng);
  Tensor<double, 4> k2 = p.k, v2 = p.v;
  for (int j = 0; j < 11; ++j) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 8; ++d) k2.view()(0, j, h, d) = p.k.view()(0, perm[j], h, d);
      for (int d = 0; d < 6; ++d) v2.view()(0, j, h, d) = p.v.view()(0, perm[j], h, d);
    }
  }
  p.k = k2;
  p.v = v2;
  run(p.args());
  CHECK(ga::testing::max_tolerance_ratio(p.out.data, before, 1e-15, 1e-12) <= 1.0);
}

TEST_CASE("GQA: query head h reads KV head h / g", "[reference][sdpa]") {
  // Grouped (4 query heads, 2 KV heads) equals multi-head with each KV head repeated g times.
  Problem gqa(2, 3, 7, 4, 2, 8, 8, 12);
  run(gqa.args());
  Problem mha(2, 3, 7, 4, 4, 8, 8, 12);
  mha.q = gqa.q;
  for (int b = 0; b < 2; ++b) {
    for (int j = 0; j < 7; ++j) {
      for (int h = 0; h < 4; ++h) {
        for (int d = 0; d < 8; ++d) {
          mha.k.view()(b, j, h, d) = gqa.k.view()(b, j, h / 2, d);
          mha.v.view()(b, j, h, d) = gqa.v.view()(b, j, h / 2, d);
        }
      }
    }
  }
  run(mha.args());
  CHECK(gqa.out.data == mha.out.data);
}

TEST_CASE("Causal chunk of the last queries equals the last rows of the full attention",
          "[reference][sdpa]") {
  // Bottom-right alignment: 3 new queries against 10 keys are rows 7..9 of a 10x10 causal problem.
  Problem full(1, 10, 10, 2, 1, 8, 8, 13);
  auto af = full.args();
  af.mask = ga::Mask::causal();
  run(af);
  Problem chunk(1, 3, 10, 2, 1, 8, 8, 13);
  chunk.k = full.k;
  chunk.v = full.v;
  for (int i = 0; i < 3; ++i) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 8; ++d) chunk.q.view()(0, i, h, d) = full.q.view()(0, 7 + i, h, d);
    }
  }
  auto ac = chunk.args();
  ac.mask = ga::Mask::causal();
  run(ac);
  for (int i = 0; i < 3; ++i) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 8; ++d)
        CHECK(chunk.out.view()(0, i, h, d) == full.out.view()(0, 7 + i, h, d));
    }
  }
}

TEST_CASE("Sliding window equals attention over the window's keys only", "[reference][sdpa]") {
  const std::int64_t n = 12, window = 4;
  Problem p(1, n, n, 1, 1, 8, 8, 14);
  auto a = p.args();
  a.mask = ga::Mask::causal_window(window);
  run(a);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t first = std::max<std::int64_t>(0, i - window + 1);
    const std::int64_t count = i - first + 1;
    Problem s(1, 1, count, 1, 1, 8, 8, 99);
    for (int d = 0; d < 8; ++d) s.q.data[d] = p.q.view()(0, i, 0, d);
    for (std::int64_t j = 0; j < count; ++j) {
      for (int d = 0; d < 8; ++d) {
        s.k.view()(0, j, 0, d) = p.k.view()(0, first + j, 0, d);
        s.v.view()(0, j, 0, d) = p.v.view()(0, first + j, 0, d);
      }
    }
    run(s.args());
    for (int d = 0; d < 8; ++d)
      CHECK(p.out.view()(0, i, 0, d) == Approx(s.out.data[d]).epsilon(1e-13));
  }
  // Window right of the query (non-causal band): with left = right = 1 row 0 sees keys 0 and 1.
  auto band = p.args();
  band.mask = ga::Mask::window(1, 1);
  run(band);
  Problem s(1, 1, 2, 1, 1, 8, 8, 98);
  for (int d = 0; d < 8; ++d) s.q.data[d] = p.q.view()(0, 0, 0, d);
  std::copy(p.k.data.begin(), p.k.data.begin() + 16, s.k.data.begin());
  std::copy(p.v.data.begin(), p.v.data.begin() + 16, s.v.data.begin());
  run(s.args());
  for (int d = 0; d < 8; ++d)
    CHECK(p.out.view()(0, 0, 0, d) == Approx(s.out.data[d]).epsilon(1e-13));
}

TEST_CASE("Per-batch kv lengths equal running each entry on its valid keys", "[reference][sdpa]") {
  Problem p(3, 2, 8, 2, 2, 4, 6, 15);
  const std::int64_t lens[3] = {8, 3, 1};
  auto a = p.args();
  a.maybe_kv_lens = lens;
  a.mask = ga::Mask::causal();
  run(a);
  for (int b = 0; b < 3; ++b) {
    Problem s(1, 2, lens[b], 2, 2, 4, 6, 97);
    for (int i = 0; i < 2; ++i) {
      for (int h = 0; h < 2; ++h) {
        for (int d = 0; d < 4; ++d) s.q.view()(0, i, h, d) = p.q.view()(b, i, h, d);
      }
    }
    for (std::int64_t j = 0; j < lens[b]; ++j) {
      for (int h = 0; h < 2; ++h) {
        for (int d = 0; d < 4; ++d) s.k.view()(0, j, h, d) = p.k.view()(b, j, h, d);
        for (int d = 0; d < 6; ++d) s.v.view()(0, j, h, d) = p.v.view()(b, j, h, d);
      }
    }
    auto as = s.args();
    as.mask = ga::Mask::causal();
    run(as);
    for (int i = 0; i < 2; ++i) {
      for (int h = 0; h < 2; ++h) {
        for (int d = 0; d < 6; ++d) CHECK(p.out.view()(b, i, h, d) == s.out.view()(0, i, h, d));
      }
    }
  }
}

TEST_CASE("Log-sum-exp merges partial results over disjoint key sets", "[reference][sdpa]") {
  // Split 13 keys into 6 + 7; o = (e^l1 o1 + e^l2 o2) / (e^l1 + e^l2) must equal the full result.
  // lse is stored as float (relative precision 6e-8 on values of a few units), hence 1e-5.
  Problem full(1, 3, 13, 2, 1, 8, 5, 16);
  run(full.args());
  Problem part1(1, 3, 6, 2, 1, 8, 5, 0), part2(1, 3, 7, 2, 1, 8, 5, 0);
  part1.q = part2.q = full.q;
  for (int j = 0; j < 13; ++j) {
    Problem& dst = j < 6 ? part1 : part2;
    const int jj = j < 6 ? j : j - 6;
    for (int d = 0; d < 8; ++d) dst.k.view()(0, jj, 0, d) = full.k.view()(0, j, 0, d);
    for (int d = 0; d < 5; ++d) dst.v.view()(0, jj, 0, d) = full.v.view()(0, j, 0, d);
  }
  run(part1.args());
  run(part2.args());
  for (int i = 0; i < 3; ++i) {
    for (int h = 0; h < 2; ++h) {
      const double l1 = part1.lse.view()(0, i, 0, h), l2 = part2.lse.view()(0, i, 0, h);
      const double m = std::max(l1, l2);
      const double w1 = std::exp(l1 - m), w2 = std::exp(l2 - m);
      for (int d = 0; d < 5; ++d) {
        const double merged =
            (w1 * part1.out.view()(0, i, h, d) + w2 * part2.out.view()(0, i, h, d)) / (w1 + w2);
        CHECK(merged == Approx(full.out.view()(0, i, h, d)).epsilon(1e-5));
      }
      CHECK(full.lse.view()(0, i, 0, h) == Approx(m + std::log(w1 + w2)).epsilon(1e-5));
    }
  }
}

TEST_CASE("The fused gate equals output_gate applied after attention", "[reference][sdpa]") {
  Problem p(2, 3, 5, 4, 2, 8, 8, 17);
  auto rng = ga::testing::make_rng(18);
  Tensor<double, 4> gate({2, 3, 4, 8}, rng, -3.0, 3.0);
  run(p.args());
  Tensor<double, 4> expected({2, 3, 4, 8});
  ga::OutputGateArgs<double> g;
  g.attn = ga::split_heads(p.out.cview(), 2);
  g.gate.values = ga::split_heads(gate.cview(), 2);
  g.gate.activation = ga::GateActivation::silu;
  g.gate.combine = ga::GateCombine::add;
  g.out = ga::split_heads(expected.view(), 2);
  REQUIRE(ga::reference::output_gate(g).is_ok());

  auto a = p.args();
  a.gate = g.gate;
  run(a);
  CHECK(p.out.data == expected.data);
}

TEST_CASE("dk != dv and strided (BHSD) views", "[reference][sdpa]") {
  Problem p(1, 4, 6, 2, 2, 12, 5, 19);
  run(p.args());
  // The same K stored head-major [b, h, s, d]: a non-contiguous [b, s, h, d] view of it.
  std::vector<double> bhsd(p.k.data.size());
  for (int j = 0; j < 6; ++j) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 12; ++d) bhsd[(h * 6 + j) * 12 + d] = p.k.view()(0, j, h, d);
    }
  }
  const std::vector<double> expected = p.out.data;
  auto a = p.args();
  a.k = ga::TensorView<const double, 4>(bhsd.data(), {1, 6, 2, 12}, {144, 12, 72, 1});
  run(a);
  CHECK(p.out.data == expected);
}

TEST_CASE("Low-precision element types run through the same reference", "[reference][sdpa]") {
  auto rng = ga::testing::make_rng(20);
  Tensor<ga::bf16, 4> q({1, 3, 2, 8}, rng), k({1, 5, 1, 8}, rng), v({1, 5, 1, 8}, rng);
  Tensor<ga::bf16, 4> out({1, 3, 2, 8});
  ga::SdpaArgs<ga::bf16> a;
  a.q = ga::split_heads(q.cview(), 1);
  a.k = k.cview();
  a.v = v.cview();
  a.out = ga::split_heads(out.view(), 1);
  REQUIRE(ga::reference::sdpa(a).is_ok());
  // Same values in double: the bf16 result is its rounding.
  Problem p(1, 3, 5, 2, 1, 8, 8, 0);
  for (std::size_t i = 0; i < q.data.size(); ++i) p.q.data[i] = ga::to_float(q.data[i]);
  for (std::size_t i = 0; i < k.data.size(); ++i) p.k.data[i] = ga::to_float(k.data[i]);
  for (std::size_t i = 0; i < v.data.size(); ++i) p.v.data[i] = ga::to_float(v.data[i]);
  run(p.args());
  CHECK(ga::testing::max_tolerance_ratio(out.data, p.out.data, 1e-6, 1.0 / 256) <= 1.0);
}

TEST_CASE("Invalid arguments are reported, naming the tensor", "[reference][sdpa]") {
  Problem p(1, 2, 3, 4, 2, 8, 8, 21);
  auto message = [](const ga::SdpaArgs<double>& a) {
    return std::string(ga::reference::sdpa(a).message());
  };
  auto a = p.args();
  a.k.extents[3] = 7;
  CHECK(message(a) == "k: dim 3 (dim): expected 8, got 7");
  a = p.args();
  a.q = ga::split_heads(p.q.cview(), 3);  // 4 query heads over 3 KV heads
  CHECK(message(a).rfind("q: dim 3 (query heads per kv head)", 0) == 0);
  a = p.args();
  a.out.data = const_cast<double*>(p.q.data.data());
  CHECK(message(a) == "out: overlaps q");
  a = p.args();
  const std::int64_t bad_len[1] = {4};
  a.maybe_kv_lens = bad_len;
  CHECK(message(a) == "kv_lens: entry 0: expected 0..3 (kv length), got 4");
  a = p.args();
  a.softmax_plus_one = true;
  const float sinks[4] = {};
  a.maybe_sink_logits = sinks;
  CHECK(message(a).find("exclusive") != std::string::npos);
  a = p.args();
  a.mask.window_left = -2;
  CHECK(message(a).rfind("mask:", 0) == 0);
  a = p.args();
  a.scale = NAN;
  CHECK(message(a).rfind("scale:", 0) == 0);
}
