// SDPA with K/V stored in bf16, f16 or int8 (per-row scales) and f32 activations, or with every
// tensor in bf16 or f16, in exact dot precision (K/V widened to f32) and, with the -storage
// suffix, DotPrecision::storage:
//   sdpa/<none|elementwise>/<dtype>[-storage]/<shape>/threads:<n>  counters flops and, for
//       decode shapes, bytes_per_second (the bytes of K, V and the int8 scales read per second)
//   dtype_speedup/<dtype>[-storage]/<shape>/threads:<n>  counter speedup: the median over
//       back-to-back pairs of (f32 call time / <dtype> call time), ungated, on the same workers
//   dot_instructions_speedup/<dtype>[-storage]/<shape>/threads:<n>  counter speedup: the median
//       over back-to-back pairs of (call time widening K/V to f32 / call time with the dot
//       instructions), ungated: DotInstructions::never against ::always, where the CPU has them
//   amx_tiles_speedup/<dtype>[-storage]/<shape>/threads:<n>  counter speedup: (call time on the
//       AVX-512 panels / call time on AMX tiles) under the dot instructions, prefill shapes, bf16
//       K/V, where amx_bf16_ready()
// (decode_read_share/<dtype>[-storage]/... are in peak.cpp, next to the read they pair with)
// with dtype in f32-kv<t> (t in bf16, f16, i8), bf16, f16 (-storage: f32-kvbf16, f32-kvi8, bf16).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "sdpa_case.hpp"
#include "shapes.hpp"

namespace ga = gated_attention;
using ga::bench::AttentionShape;
using ga::bench::Gate;
using ga::bench::StoredKv;

namespace {

// The case's arguments with K/V stored as E and, unless T is float, q, gate and out as T.
template <class T, class E>
struct TypedCase {
  ga::bench::SdpaCase c;
  StoredKv<E> stored;
  ga::bench::StoredActivations<T> activations;

  explicit TypedCase(const AttentionShape& s) : c(s), stored(c), activations(c) {}
  auto args(const ga::SdpaArgs<float>& f, ga::DotPrecision precision) const {
    auto kv = stored.args(f);
    kv.dot_precision = precision;
    if constexpr (std::is_same_v<T, float>) {
      return kv;
    } else {
      return activations.args(kv);
    }
  }
};

template <class T, class E>
void run_typed_sdpa(benchmark::State& state, AttentionShape s, Gate gate, int threads,
                    ga::DotPrecision precision) {
  const TypedCase<T, E> t(s);
  ga::bench::SdpaRunner call(threads, {t.c.args});
  const auto args = t.args(t.c.gated(gate), precision);
  ga::bench::time_calls(state, s, StoredKv<E>::bytes(s), call, args);
  state.SetLabel(ga::sdpa_path(args));
}

template <class T, class E>
void run_dtype_speedup(benchmark::State& state, AttentionShape s, int threads,
                       ga::DotPrecision precision) {
  const TypedCase<T, E> t(s);
  const auto args = t.args(t.c.args, precision);
  ga::bench::SdpaRunner call(threads, {t.c.args});
  ga::bench::time_pairs(
      state, "speedup", [&] { call(state, args); }, [&] { call(state, t.c.args); });
  state.SetLabel(ga::sdpa_path(args));
}

// time_pairs of the same ungated call with set(true) (the base) and with set(false).
template <class T, class E, class Set>
void run_setting_pairs(benchmark::State& state, AttentionShape s, int threads,
                       ga::DotPrecision precision, Set set, const char* label) {
  const TypedCase<T, E> t(s);
  const auto args = t.args(t.c.args, precision);
  ga::bench::SdpaRunner call(threads, {t.c.args});
  const auto with = [&](bool on) {
    set(on);
    call(state, args);
  };
  ga::bench::time_pairs(
      state, "speedup", [&] { with(true); }, [&] { with(false); });
  set(true);
  state.SetLabel(label);
}

template <class T, class E>
void run_dot_instructions_speedup(benchmark::State& state, AttentionShape s, int threads,
                                  ga::DotPrecision precision) {
  const auto set = [](bool on) {
    ga::set_dot_instructions(on ? ga::DotInstructions::always : ga::DotInstructions::never);
  };
  run_setting_pairs<T, E>(state, s, threads, precision, set, "dot instructions / widened");
  ga::clear_dot_instructions();
}

template <class T, class E>
void run_amx_tiles_speedup(benchmark::State& state, AttentionShape s, int threads,
                           ga::DotPrecision precision) {
  ga::set_dot_instructions(ga::DotInstructions::always);
  run_setting_pairs<T, E>(state, s, threads, precision, ga::set_amx_tiles, "amx tiles / panels");
  ga::clear_dot_instructions();
}

// Whether the CPU and this build can run the storage dot (the avx512_bf16 region).
bool has_dot_instructions() {
#if defined(__x86_64__)
  return ga::isa_available(ga::Isa::avx512) &&
         ga::detail::has_avx512_bf16_region_features(ga::cpu_features());
#else
  return false;
#endif
}

// Rows of `dtype` (activations T, K/V E); dot_instructions_speedup rows for the types the storage
// dot reads, under the precisions that run it.
template <class T, class E>
void register_type(const std::string& name, ga::DotPrecision precision = ga::DotPrecision::exact) {
  const std::string dtype = name + (precision == ga::DotPrecision::storage ? "-storage" : "");
  const bool reads_dot = !std::is_same_v<E, ga::f16> &&
                         (precision == ga::DotPrecision::storage || std::is_same_v<T, E>);
  for (const AttentionShape& s : ga::bench::kShapes) {
    for (int threads : {1, 2}) {
      const std::string rest = dtype + "/" + s.name + "/threads:" + std::to_string(threads);
      if (reads_dot && has_dot_instructions()) {
        benchmark::RegisterBenchmark(("dot_instructions_speedup/" + rest).c_str(),
                                     run_dot_instructions_speedup<T, E>, s, threads, precision)
            ->Unit(benchmark::kMillisecond);
      }
      if (reads_dot && std::is_same_v<E, ga::bf16> && !s.decode && ga::amx_bf16_ready()) {
        benchmark::RegisterBenchmark(("amx_tiles_speedup/" + rest).c_str(),
                                     run_amx_tiles_speedup<T, E>, s, threads, precision)
            ->Unit(benchmark::kMillisecond);
      }
      for (Gate gate : {Gate::none, Gate::elementwise}) {
        benchmark::RegisterBenchmark(
            (std::string("sdpa/") + ga::bench::gate_name(gate) + "/" + rest).c_str(),
            run_typed_sdpa<T, E>, s, gate, threads, precision)
            ->Unit(benchmark::kMillisecond);
      }
      benchmark::RegisterBenchmark(("dtype_speedup/" + rest).c_str(), run_dtype_speedup<T, E>, s,
                                   threads, precision)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

int register_kv_types() {
  constexpr auto kStorage = ga::DotPrecision::storage;
  register_type<float, ga::bf16>("f32-kvbf16");
  register_type<float, ga::f16>("f32-kvf16");
  register_type<float, std::int8_t>("f32-kvi8");
  register_type<float, ga::bf16>("f32-kvbf16", kStorage);
  register_type<float, std::int8_t>("f32-kvi8", kStorage);
  register_type<ga::bf16, ga::bf16>("bf16");
  register_type<ga::f16, ga::f16>("f16");
  register_type<ga::bf16, ga::bf16>("bf16", kStorage);
  return 0;
}
const int registered = register_kv_types();

}  // namespace
