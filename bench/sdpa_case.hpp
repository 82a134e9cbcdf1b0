// One SDPA benchmark case, shared by sdpa/... (named shapes) and sweep/... (sequence lengths):
// causal, bottom-right aligned, f32, no gate / headwise gate / elementwise gate. Counters: flops
// (useful FLOP/s) and, for decode shapes, bytes_per_second (K/V bytes read per second). Label:
// the ISA path that ran (ga::sdpa_path()).
#pragma once

#include <benchmark/benchmark.h>
#include <gated_attention/gated_attention.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "shapes.hpp"

namespace gated_attention::bench {

enum class Gate { none, headwise, elementwise };
inline const char* gate_name(Gate g) {
  return g == Gate::none ? "none" : g == Gate::headwise ? "headwise" : "elementwise";
}
inline constexpr Gate kGates[] = {Gate::none, Gate::headwise, Gate::elementwise};

// n values uniform in [-1, 1): splitmix64 indexed by position rather than a sequential engine, so
// that filling the 512 MiB of K/V of a 128K-token decode costs a fraction of a second per call.
inline std::vector<float> random_buffer(std::size_t n, std::uint32_t seed) {
  std::vector<float> v(n);
  const std::uint64_t base = static_cast<std::uint64_t>(seed) << 40;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t z = base + (i + 1) * 0x9e3779b97f4a7c15ull;  // splitmix64 state i + 1
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    v[i] = static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;  // top 24 bits
  }
  return v;
}

// stats: also write every AttentionStats output (the sdpa_stats/... rows).
inline void run_sdpa(benchmark::State& state, AttentionShape s, Gate gate, int threads,
                     bool stats) {
  const std::int64_t b = s.batch, hq = s.q_heads, hkv = s.kv_heads, d = s.head_dim;
  const auto q = random_buffer(static_cast<std::size_t>(b * s.q_len * hq * d), 1);
  const auto k = random_buffer(static_cast<std::size_t>(b * s.kv_len * hkv * d), 2);
  const auto v = random_buffer(static_cast<std::size_t>(b * s.kv_len * hkv * d), 3);
  const auto g = random_buffer(static_cast<std::size_t>(b * s.q_len * hq * d), 4);
  std::vector<float> out(static_cast<std::size_t>(b * s.q_len * hq * d));

  SdpaArgs<float> args;
  args.q = split_heads(TensorView<const float, 4>::contiguous(q.data(), {b, s.q_len, hq, d}), hkv);
  args.k = TensorView<const float, 4>::contiguous(k.data(), {b, s.kv_len, hkv, d});
  args.v = TensorView<const float, 4>::contiguous(v.data(), {b, s.kv_len, hkv, d});
  args.out = split_heads(TensorView<float, 4>::contiguous(out.data(), {b, s.q_len, hq, d}), hkv);
  args.mask = Mask::causal();
  if (gate != Gate::none) {
    // Headwise: one value per head, broadcast over d (stride 0).
    const std::int64_t dim_stride = gate == Gate::headwise ? 0 : 1;
    args.gate.values =
        split_heads(TensorView<const float, 4>(g.data(), {b, s.q_len, hq, d},
                                               {s.q_len * hq * d, hq * d, d, dim_stride}),
                    hkv);
  }

  // Statistics: every per-row output of AttentionStats, [b, q_len, kv_heads, group].
  const std::array<std::int64_t, 4> stats_extents = {b, s.q_len, hkv, hq / hkv};
  std::vector<float> stats_buffers(stats ? 5 * static_cast<std::size_t>(b * s.q_len * hq) : 0);
  if (stats) {
    TensorView<float, 4>* views[] = {&args.stats.sink_share, &args.stats.gate_mean,
                                     &args.stats.gate_below_0_1, &args.stats.max_abs_before,
                                     &args.stats.max_abs_after};
    for (int i = 0; i < 5; ++i) {
      *views[i] = TensorView<float, 4>::contiguous(stats_buffers.data() + i * b * s.q_len * hq,
                                                   stats_extents);
    }
  }
  ThreadPool pool(threads);
  const Executor executor = threads > 1 ? pool.executor() : Executor{};
  std::vector<unsigned char> workspace(workspace_size(args, executor));
  const Status status = can_implement(args);
  if (!status) {
    state.SkipWithError(status.message());
    return;
  }
  std::int64_t calls = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const Status s_run = run(args, Workspace(workspace.data(), workspace.size()), executor);
    if (!s_run) state.SkipWithError(s_run.message());
    benchmark::DoNotOptimize(out.data());
    ++calls;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  state.counters["flops"] = s.useful_flops() * static_cast<double>(calls) / seconds;
  if (s.decode)
    state.counters["bytes_per_second"] = s.kv_bytes() * static_cast<double>(calls) / seconds;
  state.SetLabel(sdpa_path());
}

}  // namespace gated_attention::bench
