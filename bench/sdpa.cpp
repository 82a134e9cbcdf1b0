// sdpa/<gate>/f32/<shape>/threads:<n>: the fused SDPA op on the named shapes, causal, with no gate,
// a headwise gate or an elementwise gate. Counters: flops (useful FLOP/s) and, for decode shapes,
// bytes_per_second (K/V bytes read per second). sdpa_stats/elementwise/...: the same with every
// AttentionStats output on.
#include <benchmark/benchmark.h>
#include <gated_attention/gated_attention.hpp>

#include <array>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "shapes.hpp"

namespace ga = gated_attention;
using ga::bench::AttentionShape;

namespace {

enum class Gate { none, headwise, elementwise };
const char* gate_name(Gate g) {
  return g == Gate::none ? "none" : g == Gate::headwise ? "headwise" : "elementwise";
}

std::vector<float> random_buffer(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

void run_sdpa(benchmark::State& state, AttentionShape s, Gate gate, int threads, bool stats) {
  const std::int64_t b = s.batch, hq = s.q_heads, hkv = s.kv_heads, d = s.head_dim;
  const auto q = random_buffer(static_cast<std::size_t>(b * s.q_len * hq * d), 1);
  const auto k = random_buffer(static_cast<std::size_t>(b * s.kv_len * hkv * d), 2);
  const auto v = random_buffer(static_cast<std::size_t>(b * s.kv_len * hkv * d), 3);
  const auto g = random_buffer(static_cast<std::size_t>(b * s.q_len * hq * d), 4);
  std::vector<float> out(static_cast<std::size_t>(b * s.q_len * hq * d));

  ga::SdpaArgs<float> args;
  args.q = ga::split_heads(
      ga::TensorView<const float, 4>::contiguous(q.data(), {b, s.q_len, hq, d}), hkv);
  args.k = ga::TensorView<const float, 4>::contiguous(k.data(), {b, s.kv_len, hkv, d});
  args.v = ga::TensorView<const float, 4>::contiguous(v.data(), {b, s.kv_len, hkv, d});
  args.out =
      ga::split_heads(ga::TensorView<float, 4>::contiguous(out.data(), {b, s.q_len, hq, d}), hkv);
  args.mask = ga::Mask::causal();
  if (gate != Gate::none) {
    // Headwise: one value per head, broadcast over d (stride 0).
    const std::int64_t dim_stride = gate == Gate::headwise ? 0 : 1;
    args.gate.values =
        ga::split_heads(ga::TensorView<const float, 4>(g.data(), {b, s.q_len, hq, d},
                                                       {s.q_len * hq * d, hq * d, d, dim_stride}),
                        hkv);
  }

  // Statistics: every per-row output of AttentionStats, [b, q_len, kv_heads, group].
  const std::array<std::int64_t, 4> stats_extents = {b, s.q_len, hkv, hq / hkv};
  std::vector<float> stats_buffers(5 * static_cast<std::size_t>(b * s.q_len * hq));
  if (stats) {
    ga::TensorView<float, 4>* views[] = {&args.stats.sink_share, &args.stats.gate_mean,
                                         &args.stats.gate_below_0_1, &args.stats.max_abs_before,
                                         &args.stats.max_abs_after};
    for (int i = 0; i < 5; ++i) {
      *views[i] = ga::TensorView<float, 4>::contiguous(stats_buffers.data() + i * b * s.q_len * hq,
                                                       stats_extents);
    }
  }
  ga::ThreadPool pool(threads);
  const ga::Executor executor = threads > 1 ? pool.executor() : ga::Executor{};
  std::vector<unsigned char> workspace(ga::workspace_size(args, executor));
  const ga::Status status = ga::can_implement(args);
  if (!status) {
    state.SkipWithError(status.message());
    return;
  }
  std::int64_t calls = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const ga::Status s_run =
        ga::run(args, ga::Workspace(workspace.data(), workspace.size()), executor);
    if (!s_run) state.SkipWithError(s_run.message());
    benchmark::DoNotOptimize(out.data());
    ++calls;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  state.counters["flops"] = s.useful_flops() * static_cast<double>(calls) / seconds;
  if (s.decode)
    state.counters["bytes_per_second"] = s.kv_bytes() * static_cast<double>(calls) / seconds;
  state.SetLabel(ga::sdpa_path());
}

int register_sdpa() {
  for (Gate gate : {Gate::none, Gate::headwise, Gate::elementwise}) {
    for (const AttentionShape& s : ga::bench::kShapes) {
      for (int threads : {1, 2}) {
        const std::string name = std::string("sdpa/") + gate_name(gate) + "/f32/" + s.name +
                                 "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), run_sdpa, s, gate, threads, false)
            ->Unit(benchmark::kMillisecond);
        if (gate == Gate::elementwise) {  // the statistics' cost: compare with sdpa/elementwise
          const std::string stats_name = std::string("sdpa_stats/elementwise/f32/") + s.name +
                                         "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(stats_name.c_str(), run_sdpa, s, gate, threads, true)
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
  return 0;
}
const int registered = register_sdpa();

}  // namespace
