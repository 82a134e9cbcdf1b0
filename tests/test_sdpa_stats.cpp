// In-kernel statistics (AttentionStats): sink share, gate mean and sparsity, output magnitudes,
// on every path against reference::sdpa, which computes them from its full attention rows.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "support.hpp"

namespace ga = gated_attention;

namespace {

struct StatsBuffers {
  std::vector<float> share, mean, below, before, after;
  explicit StatsBuffers(std::size_t n)
      : share(n, NAN), mean(n, NAN), below(n, NAN), before(n, NAN), after(n, NAN) {}
  void attach(ga::AttentionStats& st, const std::array<std::int64_t, 4>& e) {
    st.sink_share = ga::TensorView<float, 4>::contiguous(share.data(), e);
    st.gate_mean = ga::TensorView<float, 4>::contiguous(mean.data(), e);
    st.gate_below_0_1 = ga::TensorView<float, 4>::contiguous(below.data(), e);
    st.max_abs_before = ga::TensorView<float, 4>::contiguous(before.data(), e);
    st.max_abs_after = ga::TensorView<float, 4>::contiguous(after.data(), e);
  }
};

struct StatsCase {
  std::int64_t batch, q_len, kv_len, hq, hkv, d, n_sink;
  bool gated, headwise, sinks;
  int threads;
};

void check_stats(const StatsCase& c, std::uint64_t salt) {
  auto rng = ga::testing::make_rng(salt);
  const std::int64_t g = c.hq / c.hkv;
  const auto q = ga::testing::random_vector<float>(rng, c.batch * c.q_len * c.hq * c.d, -2, 2);
  const auto k = ga::testing::random_vector<float>(rng, c.batch * c.kv_len * c.hkv * c.d, -2, 2);
  const auto v = ga::testing::random_vector<float>(rng, c.batch * c.kv_len * c.hkv * c.d);
  const auto gate = ga::testing::random_vector<float>(rng, c.batch * c.q_len * c.hq * c.d, -4, 4);
  std::vector<float> sinks(static_cast<std::size_t>(c.hq), 0.7f);
  const std::array<std::int64_t, 4> se = {c.batch, c.q_len, c.hkv, g};
  const std::size_t rows = static_cast<std::size_t>(c.batch * c.q_len * c.hq);

  ga::SdpaArgs<float> args;
  args.q = ga::split_heads(
      ga::TensorView<const float, 4>::contiguous(q.data(), {c.batch, c.q_len, c.hq, c.d}), c.hkv);
  args.k = ga::TensorView<const float, 4>::contiguous(k.data(), {c.batch, c.kv_len, c.hkv, c.d});
  args.v = ga::TensorView<const float, 4>::contiguous(v.data(), {c.batch, c.kv_len, c.hkv, c.d});
  args.mask = ga::Mask::causal();
  args.stats.n_sink = c.n_sink;
  if (c.sinks) args.maybe_sink_logits = sinks.data();
  if (c.gated) {
    args.gate.values = ga::split_heads(
        ga::TensorView<const float, 4>(gate.data(), {c.batch, c.q_len, c.hq, c.d},
                                       {c.q_len * c.hq * c.d, c.hq * c.d, c.d, c.headwise ? 0 : 1}),
        c.hkv);
  }
  std::vector<float> ref_out(rows * static_cast<std::size_t>(c.d));
  StatsBuffers ref(rows);
  args.out = ga::split_heads(
      ga::TensorView<float, 4>::contiguous(ref_out.data(), {c.batch, c.q_len, c.hq, c.d}), c.hkv);
  ref.attach(args.stats, se);
  REQUIRE(ga::reference::sdpa(args).is_ok());

  ga::ThreadPool pool(c.threads);
  const ga::Executor ex = c.threads > 1 ? pool.executor() : ga::Executor{};
  for (ga::Isa isa : ga::testing::available_isas()) {
    ga::set_isa_limit(isa);
    INFO("path " << ga::to_string(isa) << " q_len " << c.q_len << " kv_len " << c.kv_len << " hq "
                 << c.hq << " hkv " << c.hkv << " d " << c.d << " n_sink " << c.n_sink << " gated "
                 << c.gated << " headwise " << c.headwise << " sinks " << c.sinks << " threads "
                 << c.threads << " splits " << ga::kernels::make_sdpa_plan(args, c.threads).splits
                 << " seed " << ga::testing::test_seed());
    std::vector<float> out(ref_out.size());
    StatsBuffers got(rows);
    args.out = ga::split_heads(
        ga::TensorView<float, 4>::contiguous(out.data(), {c.batch, c.q_len, c.hq, c.d}), c.hkv);
    got.attach(args.stats, se);
    std::vector<unsigned char> ws(ga::workspace_size(args, ex));
    REQUIRE(ga::run(args, ga::Workspace(ws.data(), ws.size()), ex).is_ok());
    CHECK(ga::testing::max_tolerance_ratio(out, ref_out, ga::testing::kSdpaAtol,
                                           ga::testing::kSdpaRtol) <= 1.0);
    CHECK(ga::testing::max_tolerance_ratio(got.share, ref.share, ga::testing::kStatsShareAtol,
                                           ga::testing::kStatsShareRtol) <= 1.0);
    CHECK(ga::testing::max_tolerance_ratio(got.mean, ref.mean, ga::testing::kStatsGateMeanAtol,
                                           ga::testing::kStatsGateMeanRtol) <= 1.0);
    CHECK(ga::testing::max_tolerance_ratio(got.before, ref.before, 1e-6, 1e-4) <= 1.0);
    CHECK(ga::testing::max_tolerance_ratio(got.after, ref.after, 1e-6, 1e-4) <= 1.0);
    // A gate value within float error of 0.1 may land on either side: one element of slack.
    CHECK(ga::testing::max_tolerance_ratio(got.below, ref.below, 1.01 / c.d, 0.0) <= 1.0);
  }
  ga::clear_isa_limit();
}

}  // namespace

TEST_CASE("sdpa stats: sink share, gate sparsity and magnitudes match the reference",
          "[sdpa][stats][threads]") {
  const StatsCase cases[] = {
      {1, 9, 9, 4, 2, 32, 1, true, false, false, 1},       // prefill, elementwise gate
      {2, 5, 40, 8, 2, 64, 4, true, true, false, 2},       // chunk, headwise gate, n_sink 4
      {1, 37, 70, 4, 1, 17, 1, false, false, true, 1},     // no gate, sink logits, odd d
      {1, 1, 1500, 16, 2, 128, 1, true, false, false, 2},  // decode with key splits
      {1, 1, 1500, 16, 2, 128, 3, true, true, true, 3},    // decode, splits, sinks, headwise
      {2, 6, 3, 4, 2, 32, 2, true, false, false, 1},       // q_len > kv_len: rows without keys
      {1, 300, 300, 2, 2, 16, 0, true, false, false, 2},   // n_sink 0: share 0; several blocks
  };
  std::uint64_t salt = 900;
  for (const StatsCase& c : cases) check_stats(c, ++salt);
}

TEST_CASE("sdpa stats: identical keys put n_sink / kv_len of the attention on the sink",
          "[sdpa][stats]") {
  const std::int64_t kv_len = 100, d = 16;
  std::vector<float> q(d, 0.3f), k(kv_len * d, 0.5f), v(kv_len * d, 1.0f), out(d), share(1);
  ga::SdpaArgs<float> args;
  args.q = ga::TensorView<const float, 5>::contiguous(q.data(), {1, 1, 1, 1, d});
  args.k = ga::TensorView<const float, 4>::contiguous(k.data(), {1, kv_len, 1, d});
  args.v = ga::TensorView<const float, 4>::contiguous(v.data(), {1, kv_len, 1, d});
  args.out = ga::TensorView<float, 5>::contiguous(out.data(), {1, 1, 1, 1, d});
  args.stats.n_sink = 5;
  args.stats.sink_share = ga::TensorView<float, 4>::contiguous(share.data(), {1, 1, 1, 1});
  std::vector<unsigned char> ws(ga::workspace_size(args, 1));
  REQUIRE(ga::run(args, ga::Workspace(ws.data(), ws.size())).is_ok());
  CHECK(share[0] == Approx(0.05).margin(1e-6));
}
