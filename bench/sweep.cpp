// Sequence-length sweeps over Qwen3-Next's attention heads (B 1, Hq 16, Hkv 2, D 256; causal,
// bottom-right aligned), the same case and counters as the sdpa/... rows:
//   sweep/prefill/<gate>/f32/<len>/threads:<n>     q_len = kv_len = len, 512 .. 16K
//   sweep/decode/<gate>/f32/<kv_len>/threads:<n>   q_len = 1, 1K .. 128K (also bytes_per_second,
//                                                  to set against
//                                                  peak/read_bw/sweep_decode_<kv_len>)
// and the gate's paired cost at each point, as for the named shapes (counter ratio, gated /
// ungated, sdpa_case.hpp):
//   gate_overhead/<headwise|elementwise>/f32/sweep_prefill_<len>/threads:<n>
//   gate_overhead/<headwise|elementwise>/f32/sweep_decode_<kv_len>/threads:<n>
#include <benchmark/benchmark.h>

#include <string>

#include "sdpa_case.hpp"
#include "shapes.hpp"

namespace ga = gated_attention;
using ga::bench::Gate;

namespace {

void register_case(const char* kind, Gate gate, std::int64_t len, int threads,
                   const ga::bench::AttentionShape& s) {
  const std::string suffix = std::to_string(len) + "/threads:" + std::to_string(threads);
  const std::string name =
      std::string("sweep/") + kind + "/" + ga::bench::gate_name(gate) + "/f32/" + suffix;
  benchmark::RegisterBenchmark(name.c_str(), ga::bench::run_sdpa, s, gate, threads, false)
      ->Unit(benchmark::kMillisecond);
  if (gate != Gate::none) {
    const std::string pair_name = std::string("gate_overhead/") + ga::bench::gate_name(gate) +
                                  "/f32/sweep_" + kind + "_" + suffix;
    benchmark::RegisterBenchmark(pair_name.c_str(), ga::bench::run_paired_overhead, s, gate,
                                 threads, false)
        ->Unit(benchmark::kMillisecond);
  }
}

int register_sweeps() {
  for (Gate gate : ga::bench::kGates) {
    for (int threads : {1, 2}) {
      for (std::int64_t len : ga::bench::kSweepPrefillLens)
        register_case("prefill", gate, len, threads, ga::bench::sweep_prefill_shape(len));
      for (std::int64_t kv_len : ga::bench::kSweepDecodeLens)
        register_case("decode", gate, kv_len, threads, ga::bench::sweep_decode_shape(kv_len));
    }
  }
  return 0;
}
const int registered = register_sweeps();

}  // namespace
