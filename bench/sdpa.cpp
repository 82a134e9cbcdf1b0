// sdpa/<gate>/f32/<shape>/threads:<n>: the fused SDPA op on the named shapes, causal, with no gate,
// a headwise gate or an elementwise gate. Counters: flops (useful FLOP/s) and, for decode shapes,
// bytes_per_second (K/V bytes read per second). sdpa_stats/elementwise/...: the same with every
// AttentionStats output on. gate_overhead/<headwise|elementwise>/...: counter ratio, the median
// of paired gated / ungated call times (sdpa_case.hpp); stats_overhead/elementwise/...: the same
// for the elementwise-gated call with / without every AttentionStats output.
#include <benchmark/benchmark.h>

#include <string>

#include "sdpa_case.hpp"
#include "shapes.hpp"

namespace ga = gated_attention;
using ga::bench::AttentionShape;
using ga::bench::Gate;
using ga::bench::gate_name;
using ga::bench::run_sdpa;

namespace {

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
  return 0;
}
const int registered = register_sdpa();

}  // namespace
