// sdpa/<gate>/f32/<shape>/threads:<n>: the fused SDPA op on the named shapes, causal, with no gate,
// a headwise gate or an elementwise gate. Counters: flops (useful FLOP/s) and, for decode shapes,
// bytes_per_second (K/V bytes read per second). sdpa_stats/elementwise/...: the same with every
// AttentionStats output on. gate_overhead/<headwise|elementwise>/...: counter ratio, the median
// of paired gated / ungated call times (sdpa_case.hpp); stats_overhead/elementwise/...: the same
// for the elementwise-gated call with / without every AttentionStats output.
// denormal_overhead/f32/<shape>/threads:1 (gpt2_prefill_1k, llama8b_decode_8k): counter ratio, the
// median of paired call times with every q, k and v element denormal / with the same values in
// normal range. The kernels flush denormals (kernels/denormals.hpp), so it stays near 1; losing the
// flush shows as a large factor (a microcode assist per operation).
#include <benchmark/benchmark.h>

#include <cmath>
#include <string>

#include "sdpa_case.hpp"
#include "shapes.hpp"

namespace ga = gated_attention;
using ga::bench::AttentionShape;
using ga::bench::Gate;
using ga::bench::gate_name;
using ga::bench::run_sdpa;

namespace {

void run_denormal_overhead(benchmark::State& state, AttentionShape s, int threads) {
  ga::bench::SdpaCase normal(s), denormal(s);
  for (auto* buffer : {&denormal.q, &denormal.k, &denormal.v}) {
    for (float& x : *buffer) x = std::ldexp(x, -130);  // |x| < 2^-126: denormal (or 0)
  }
  ga::bench::SdpaRunner call(threads, {normal.args, denormal.args});
  ga::bench::time_pairs(
      state, "ratio", [&] { call(state, normal.args); }, [&] { call(state, denormal.args); });
  state.SetLabel(ga::sdpa_path());
}

int register_sdpa() {
  for (Gate gate : ga::bench::kGates) {
    for (const AttentionShape& s : ga::bench::kShapes) {
      for (int threads : {1, 2}) {
        const std::string name = std::string("sdpa/") + gate_name(gate) + "/f32/" + s.name +
                                 "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), run_sdpa, s, gate, threads, false)
            ->Unit(benchmark::kMillisecond);
        if (gate != Gate::none) {
          const std::string pair_name = std::string("gate_overhead/") + gate_name(gate) + "/f32/" +
                                        s.name + "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(pair_name.c_str(), ga::bench::run_paired_overhead, s, gate,
                                       threads, false)
              ->Unit(benchmark::kMillisecond);
        }
        if (gate == Gate::elementwise) {  // the statistics' cost: compare with sdpa/elementwise
          const std::string stats_name = std::string("sdpa_stats/elementwise/f32/") + s.name +
                                         "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(stats_name.c_str(), run_sdpa, s, gate, threads, true)
              ->Unit(benchmark::kMillisecond);
          const std::string pair_name = std::string("stats_overhead/elementwise/f32/") + s.name +
                                        "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(pair_name.c_str(), ga::bench::run_paired_overhead, s, gate,
                                       threads, true)
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
  for (const AttentionShape& s : ga::bench::kShapes) {
    const std::string shape = s.name;
    if (shape != "gpt2_prefill_1k" && shape != "llama8b_decode_8k") continue;
    const std::string name = "denormal_overhead/f32/" + shape + "/threads:1";
    benchmark::RegisterBenchmark(name.c_str(), run_denormal_overhead, s, 1)
        ->Unit(benchmark::kMillisecond);
  }
  return 0;
}
const int registered = register_sdpa();

}  // namespace
