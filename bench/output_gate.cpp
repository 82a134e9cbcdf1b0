// gate/<variant>/f32/<shape>/threads:<n>: the standalone output gate over the attention output of
// the prefill shapes, in place. Counter bytes_per_second: bytes read (attn, gate) and written (out)
// per second, to set against peak/read_bw.
#include <benchmark/benchmark.h>
#include <gated_attention/gated_attention.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "aligned_buffer.hpp"
#include "shapes.hpp"

namespace ga = gated_attention;
using ga::bench::AttentionShape;

namespace {

void run_gate(benchmark::State& state, AttentionShape s, bool headwise, int threads) {
  const std::int64_t b = s.batch, l = s.q_len, h = s.q_heads, d = s.head_dim;
  ga::bench::AlignedVector<float> attn(static_cast<std::size_t>(b * l * h * d), 0.5f);
  ga::bench::AlignedVector<float> gate(attn.size());
  for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = static_cast<float>(i % 97) * 0.1f - 5.0f;
  const auto out_view =
      ga::split_heads(ga::TensorView<float, 4>::contiguous(attn.data(), {b, l, h, d}), s.kv_heads);
  ga::OutputGateArgs<float> args;
  args.attn = out_view;
  args.out = out_view;
  args.gate.values =
      ga::split_heads(ga::TensorView<const float, 4>(gate.data(), {b, l, h, d},
                                                     {l * h * d, h * d, d, headwise ? 0 : 1}),
                      s.kv_heads);
  ga::ThreadPool pool(threads);
  const ga::Executor executor = threads > 1 ? pool.executor() : ga::Executor{};
  std::int64_t calls = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const ga::Status status = ga::run(args, ga::Workspace(nullptr, 0), executor);
    if (!status) state.SkipWithError(status.message());
    benchmark::DoNotOptimize(attn.data());
    ++calls;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double elements = static_cast<double>(b * l * h * d);
  const double gate_elements = headwise ? elements / static_cast<double>(d) : elements;
  state.counters["bytes_per_second"] =
      (2.0 * elements + gate_elements) * 4.0 * static_cast<double>(calls) / seconds;
  state.SetLabel(ga::to_string(ga::active_isa()));
}

int register_gate() {
  for (bool headwise : {false, true}) {
    for (const AttentionShape& s : ga::bench::kShapes) {
      if (s.decode) continue;
      for (int threads : {1, 2}) {
        const std::string name = std::string("gate/") + (headwise ? "headwise" : "elementwise") +
                                 "/f32/" + s.name + "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), run_gate, s, headwise, threads)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  return 0;
}
const int registered = register_gate();

}  // namespace
