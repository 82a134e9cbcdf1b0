// One SDPA benchmark case, shared by sdpa/... and gate_overhead/... (named shapes) and sweep/...
// (sequence lengths): causal, bottom-right aligned, f32, no gate / headwise gate / elementwise
// gate. Counters: flops (useful FLOP/s) and, for decode shapes, bytes_per_second (K/V bytes read
// per second). Label: the ISA path that ran (ga::sdpa_path()).
#pragma once

#include <benchmark/benchmark.h>
#include <gated_attention/gated_attention.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "aligned_buffer.hpp"
#include "shapes.hpp"

namespace gated_attention::bench {

enum class Gate { none, headwise, elementwise };
inline const char* gate_name(Gate g) {
  return g == Gate::none ? "none" : g == Gate::headwise ? "headwise" : "elementwise";
}
inline constexpr Gate kGates[] = {Gate::none, Gate::headwise, Gate::elementwise};

// n values uniform in [-1, 1): splitmix64 indexed by position rather than a sequential engine, so
// that filling the 512 MiB of K/V of a 128K-token decode costs a fraction of a second per call.
inline AlignedVector<float> random_buffer(std::size_t n, std::uint32_t seed) {
  AlignedVector<float> v(n);
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

// The buffers and arguments of one case: q, k, v, out, a gate buffer and the statistics' buffer;
// no gate set.
struct SdpaCase {
  AttentionShape shape;
  AlignedVector<float> q, k, v, g, out;
  AlignedVector<float> stats_buffers;  // [5, b, q_len, kv_heads, group]: each AttentionStats output
  SdpaArgs<float> args;

  explicit SdpaCase(const AttentionShape& s)
      : shape(s),
        q(random_buffer(static_cast<std::size_t>(s.batch * s.q_len * s.q_heads * s.head_dim), 1)),
        k(random_buffer(static_cast<std::size_t>(s.batch * s.kv_len * s.kv_heads * s.head_dim), 2)),
        v(random_buffer(static_cast<std::size_t>(s.batch * s.kv_len * s.kv_heads * s.head_dim), 3)),
        g(random_buffer(static_cast<std::size_t>(s.batch * s.q_len * s.q_heads * s.head_dim), 4)),
        out(static_cast<std::size_t>(s.batch * s.q_len * s.q_heads * s.head_dim)),
        stats_buffers(5 * static_cast<std::size_t>(s.batch * s.q_len * s.q_heads)) {
    const std::int64_t b = s.batch, hq = s.q_heads, hkv = s.kv_heads, d = s.head_dim;
    args.q =
        split_heads(TensorView<const float, 4>::contiguous(q.data(), {b, s.q_len, hq, d}), hkv);
    args.k = TensorView<const float, 4>::contiguous(k.data(), {b, s.kv_len, hkv, d});
    args.v = TensorView<const float, 4>::contiguous(v.data(), {b, s.kv_len, hkv, d});
    args.out = split_heads(TensorView<float, 4>::contiguous(out.data(), {b, s.q_len, hq, d}), hkv);
    args.mask = Mask::causal();
  }

  // a with every AttentionStats output written to stats_buffers.
  SdpaArgs<float> with_stats(SdpaArgs<float> a) {
    const AttentionShape& s = shape;
    const std::int64_t b = s.batch, hq = s.q_heads, hkv = s.kv_heads;
    TensorView<float, 4>* views[] = {&a.stats.sink_share, &a.stats.gate_mean,
                                     &a.stats.gate_below_0_1, &a.stats.max_abs_before,
                                     &a.stats.max_abs_after};
    for (int i = 0; i < 5; ++i) {
      *views[i] = TensorView<float, 4>::contiguous(stats_buffers.data() + i * b * s.q_len * hq,
                                                   {b, s.q_len, hkv, hq / hkv});
    }
    return a;
  }

  // The arguments with `gate` read from g. Headwise: one value per head, broadcast over d (stride
  // 0).
  SdpaArgs<float> gated(Gate gate) const {
    SdpaArgs<float> a = args;
    if (gate != Gate::none) {
      const AttentionShape& s = shape;
      const std::int64_t b = s.batch, hq = s.q_heads, d = s.head_dim;
      const std::int64_t dim_stride = gate == Gate::headwise ? 0 : 1;
      a.gate.values =
          split_heads(TensorView<const float, 4>(g.data(), {b, s.q_len, hq, d},
                                                 {s.q_len * hq * d, hq * d, d, dim_stride}),
                      s.kv_heads);
    }
    return a;
  }
};

// src stored as E by ops/store_kv into dst (same extents and strides): rounded to nearest even
// (bf16, f16) or quantised per row (int8, with the row scales [b, len, heads] into `scales`).
template <class E>
void store_rows(const TensorView<const float, 4>& src, AlignedVector<E>& dst,
                AlignedVector<float>& scales) {
  StoreKvArgs<E> a;
  a.src = src;
  a.dst = TensorView<E, 4>(dst.data(), src.extents, src.strides);
  if constexpr (std::is_same_v<E, std::int8_t>) {
    scales.resize(static_cast<std::size_t>(src.extents[0] * src.extents[1] * src.extents[2]));
    a.maybe_scales = TensorView<float, 3>::contiguous(
        scales.data(), {src.extents[0], src.extents[1], src.extents[2]});
  }
  const Status status = run(a);
  if (!status) std::abort();  // finite random inputs: cannot fail
}

// The bytes of K, V and their int8 scales for `rows` rows of d elements each.
template <class E>
double kv_bytes_of(double rows, std::int64_t d) {
  return 2.0 * rows *
         (static_cast<double>(d) * sizeof(E) + (std::is_same_v<E, std::int8_t> ? 4.0 : 0.0));
}

// A case's K and V stored as E (store_rows). args(): the case's arguments reading them.
template <class E>
struct StoredKv {
  static constexpr bool kQuantised = std::is_same_v<E, std::int8_t>;
  AlignedVector<E> k, v;
  AlignedVector<float> k_scales, v_scales;  // [b, kv_len, kv_heads]: int8 only

  explicit StoredKv(const SdpaCase& c) : k(c.k.size()), v(c.v.size()) {
    store_rows(c.args.k, k, k_scales);
    store_rows(c.args.v, v, v_scales);
  }

  SdpaArgs<float, E, E> args(const SdpaArgs<float>& f) const {
    const TensorView<const E, 4> k_view(k.data(), f.k.extents, f.k.strides);
    const TensorView<const E, 4> v_view(v.data(), f.v.extents, f.v.strides);
    if constexpr (!kQuantised) return with_kv(f, k_view, v_view);
    return with_kv(f, k_view, v_view, scale_view(f.k, k_scales), scale_view(f.v, v_scales));
  }

  // The bytes a call reads from K, V and their scales.
  static double bytes(const AttentionShape& s) {
    return kv_bytes_of<E>(static_cast<double>(s.batch * s.kv_len * s.kv_heads), s.head_dim);
  }

 private:
  static TensorView<const float, 3> scale_view(const TensorView<const float, 4>& t,
                                               const AlignedVector<float>& scales) {
    return TensorView<const float, 3>::contiguous(scales.data(),
                                                  {t.extents[0], t.extents[1], t.extents[2]});
  }
};

// A case's q, gate and out as T (bf16 or f16, rounded to nearest even). args(): arguments of any
// K/V types with the activations read from and written to them.
template <class T>
struct StoredActivations {
  AlignedVector<T> q, g;
  mutable AlignedVector<T> out;  // written by the calls

  explicit StoredActivations(const SdpaCase& c)
      : q(narrow(c.q)), g(narrow(c.g)), out(c.out.size()) {}

  template <class KT, class VT>
  SdpaArgs<T, KT, VT> args(const SdpaArgs<float, KT, VT>& f) const {
    const auto in = [](const T* data, const TensorView<const float, 5>& view) {
      return TensorView<const T, 5>(data, view.extents, view.strides);
    };
    const TensorView<T, 5> written(out.data(), f.out.extents, f.out.strides);
    const TensorView<const T, 5> gate_values =
        f.gate.enabled() ? in(g.data(), f.gate.values) : TensorView<const T, 5>{};
    return with_activations(f, in(q.data(), f.q), written, gate_values);
  }

 private:
  static AlignedVector<T> narrow(const AlignedVector<float>& x) {
    AlignedVector<T> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = from_float<T>(x[i]);
    return y;
  }
};

// Runs SDPA calls on `threads` workers (the calling thread alone for 1), with one workspace large
// enough for every call it was sized for.
struct SdpaRunner {
  ThreadPool pool;
  Executor executor;
  std::vector<unsigned char> workspace;

  // The workspace depends on the sizes alone: f32 arguments size it for every K/V type.
  SdpaRunner(int threads, std::initializer_list<SdpaArgs<float>> sized_for)
      : pool(threads), executor(threads > 1 ? pool.executor() : Executor{}) {
    std::size_t bytes = 0;
    for (const SdpaArgs<float>& a : sized_for) bytes = std::max(bytes, workspace_size(a, executor));
    workspace.resize(bytes);
  }
  // One call; a failed one ends the row with its message.
  template <class T, class KT, class VT>
  void operator()(benchmark::State& state, const SdpaArgs<T, KT, VT>& args) {
    const Status status = run(args, Workspace(workspace.data(), workspace.size()), executor);
    if (!status) state.SkipWithError(status.message());
    benchmark::DoNotOptimize(args.out.data);
  }
};

// The median of values (not empty), which it sorts.
inline double median(std::vector<double>& values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

inline double seconds_between(std::chrono::steady_clock::time_point a,
                              std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Times calls of `args` on `call`'s workers; counters flops and, for decode shapes,
// bytes_per_second (kv_bytes: the K/V bytes one call reads).
template <class T, class KT, class VT>
void time_calls(benchmark::State& state, const AttentionShape& s, double kv_bytes, SdpaRunner& call,
                const SdpaArgs<T, KT, VT>& args) {
  const Status status = can_implement(args);
  if (!status) {
    state.SkipWithError(status.message());
    return;
  }
  std::int64_t calls = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    call(state, args);
    ++calls;
  }
  const double seconds = seconds_between(start, std::chrono::steady_clock::now());
  state.counters["flops"] = s.useful_flops() * static_cast<double>(calls) / seconds;
  if (s.decode)
    state.counters["bytes_per_second"] = kv_bytes * static_cast<double>(calls) / seconds;
  state.SetLabel(sdpa_path());
}

// stats: also write every AttentionStats output (the sdpa_stats/... rows).
inline void run_sdpa(benchmark::State& state, AttentionShape s, Gate gate, int threads,
                     bool stats) {
  SdpaCase c(s);
  const SdpaArgs<float> args = stats ? c.with_stats(c.gated(gate)) : c.gated(gate);
  SdpaRunner call(threads, {args});
  time_calls(state, s, s.kv_bytes(), call, args);
}

// Each iteration runs `base` and `other` back to back (their order alternating); counter `name`:
// the median of the paired other / base times, counter `pairs`: how many. Drift of the machine's
// speed, which moves separately timed rows by several percent, cancels within a pair. Returns the
// median time of `base` (seconds; 0 without pairs).
template <class Base, class Other>
double time_pairs(benchmark::State& state, const char* name, Base base, Other other) {
  std::vector<double> ratios, base_seconds;
  for (auto _ : state) {
    double seconds[2] = {0.0, 0.0};  // base, other
    const int first = static_cast<int>(ratios.size() % 2);
    for (int i = 0; i < 2; ++i) {
      const int which = (first + i) % 2;
      const auto t0 = std::chrono::steady_clock::now();
      if (which == 0) {
        base();
      } else {
        other();
      }
      seconds[which] = seconds_between(t0, std::chrono::steady_clock::now());
    }
    ratios.push_back(seconds[1] / seconds[0]);
    base_seconds.push_back(seconds[0]);
  }
  if (ratios.empty()) return 0.0;
  state.counters[name] = median(ratios);
  state.counters["pairs"] = static_cast<double>(ratios.size());
  return median(base_seconds);
}

// gate_overhead/... and stats_overhead/...: time_pairs of a call without and a call with the
// feature on the same buffers; counter `ratio`: with / without. The feature: `gate` (stats false,
// the pair is ungated / gated), or every AttentionStats output (stats true, the pair is gated /
// gated with the statistics).
inline void run_paired_overhead(benchmark::State& state, AttentionShape s, Gate gate, int threads,
                                bool stats) {
  SdpaCase c(s);
  const SdpaArgs<float> args[2] = {stats ? c.gated(gate) : c.gated(Gate::none),
                                   stats ? c.with_stats(c.gated(gate)) : c.gated(gate)};
  SdpaRunner call(threads, {args[0], args[1]});
  time_pairs(
      state, "ratio", [&] { call(state, args[0]); }, [&] { call(state, args[1]); });
  state.SetLabel(sdpa_path());
}

}  // namespace gated_attention::bench
