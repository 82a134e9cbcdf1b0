// SDPA with K/V stored in bf16, f16 or int8 (per-row scales) and f32 activations, in exact dot
// precision (K/V widened to f32) and, with the -storage suffix, DotPrecision::storage:
//   sdpa/<none|elementwise>/f32-kv<t>[-storage]/<shape>/threads:<n>  counters flops and, for
//       decode shapes, bytes_per_second (the bytes of K, V and the int8 scales read per second)
//   dtype_speedup/f32-kv<t>[-storage]/<shape>/threads:<n>  counter speedup: the median over
//       back-to-back pairs of (f32 call time / f32-kv<t> call time), ungated, on the same workers
// (decode_read_share/f32-kv<t>[-storage]/... are in peak.cpp, next to the read they pair with)
// with t in bf16, f16, i8 (-storage: bf16, i8).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "sdpa_case.hpp"
#include "shapes.hpp"

namespace ga = gated_attention;
using ga::bench::AttentionShape;
using ga::bench::Gate;
using ga::bench::StoredKv;

namespace {

template <class E>
void run_kv_sdpa(benchmark::State& state, AttentionShape s, Gate gate, int threads,
                 ga::DotPrecision precision) {
  const ga::bench::SdpaCase c(s);
  const StoredKv<E> stored(c);
  ga::bench::SdpaRunner call(threads, {c.args});
  auto args = stored.args(c.gated(gate));
  args.dot_precision = precision;
  ga::bench::time_calls(state, s, StoredKv<E>::bytes(s), call, args);
  state.SetLabel(ga::sdpa_path(args));
}

template <class E>
void run_dtype_speedup(benchmark::State& state, AttentionShape s, int threads,
                       ga::DotPrecision precision) {
  const ga::bench::SdpaCase c(s);
  const StoredKv<E> stored(c);
  auto args = stored.args(c.args);
  args.dot_precision = precision;
  ga::bench::SdpaRunner call(threads, {c.args});
  ga::bench::time_pairs(
      state, "speedup", [&] { call(state, args); }, [&] { call(state, c.args); });
  state.SetLabel(ga::sdpa_path(args));
}

template <class E>
void register_type(const char* t, ga::DotPrecision precision = ga::DotPrecision::exact) {
  const std::string dtype =
      std::string("f32-kv") + t + (precision == ga::DotPrecision::storage ? "-storage" : "");
  for (const AttentionShape& s : ga::bench::kShapes) {
    for (int threads : {1, 2}) {
      const std::string rest = dtype + "/" + s.name + "/threads:" + std::to_string(threads);
      for (Gate gate : {Gate::none, Gate::elementwise}) {
        benchmark::RegisterBenchmark(
            (std::string("sdpa/") + ga::bench::gate_name(gate) + "/" + rest).c_str(),
            run_kv_sdpa<E>, s, gate, threads, precision)
            ->Unit(benchmark::kMillisecond);
      }
      benchmark::RegisterBenchmark(("dtype_speedup/" + rest).c_str(), run_dtype_speedup<E>, s,
                                   threads, precision)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

int register_kv_types() {
  register_type<ga::bf16>("bf16");
  register_type<ga::f16>("f16");
  register_type<std::int8_t>("i8");
  register_type<ga::bf16>("bf16", ga::DotPrecision::storage);
  register_type<std::int8_t>("i8", ga::DotPrecision::storage);
  return 0;
}
const int registered = register_kv_types();

}  // namespace
