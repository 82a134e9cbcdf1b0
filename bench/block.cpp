// block/<gate>/<dtype>/<shape>/threads:<n>: GatedMultiHeadAttention::forward on the named shapes
// with the model's hidden size: Qwen3-Next's layout (q and the gate packed per head in q_proj,
// zero-centred QK RMSNorm, RoPE on a quarter of each head), projections through the build's default
// backend (OpenBLAS where found, Eigen otherwise; the label names it). Prefill
// shapes start from an empty cache; the chunk and decode shapes append q_len tokens after
// kv_len - q_len cached ones (the cache is reset to that length before every call).
// Counters: flops (projection FLOPs + useful attention FLOPs per second) and bytes_per_second
// (weight bytes + K/V bytes read per second, the decode bound). The gated/ungated difference minus
// the sdpa/<gate> - sdpa/none difference is the cost of the extra gate projection.
// dtype: f32 (every shape and gate), or f32-kv<t>[-storage] (f32 activations and weights, the
// cache in t = bf16, f16 or i8 by ops/store_kv; the elementwise gate on the decode shapes).
// projection_backend_speedup/elementwise/f32/<shape>/threads:<n> (where the default backend is
// not Eigen): counter speedup, Eigen's block time over the default backend's, paired. Built with
// -march=native it is what a consumer without -march gains over the best Eigen build.
// block/elementwise/f32-bf16w/<shape>/threads:<n>: f32 activations and cache, the projection
// weights in bf16 (the same weights rounded); weight_speedup/elementwise/bf16w/<shape>/threads:<n>:
// counter speedup, the f32-weight block's time over the bf16-weight block's, paired. The
// -storage variants (prefill shapes) take projection_precision storage: x rounded to bf16 in the
// prefill products, on AMX tiles where the host has them.
#include <benchmark/benchmark.h>
#include <gated_attention/gated_attention.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "sdpa_case.hpp"
#include "shapes.hpp"

namespace ga = gated_attention;
using ga::bench::AttentionShape;
using ga::bench::Gate;

namespace {

ga::BlockConfig block_config(const AttentionShape& s, Gate gate) {
  ga::BlockConfig c;
  c.hidden_size = s.hidden;
  c.num_q_heads = s.q_heads;
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.gate_mode = gate == Gate::none       ? ga::GateMode::none
                : gate == Gate::headwise ? ga::GateMode::headwise
                                         : ga::GateMode::elementwise;
  c.q_gate_layout = ga::QGateLayout::qwen3_next;
  c.qk_norm = ga::QkNorm::zero_centered_rms;
  c.rotary_dim = ga::rotary_dim_for(s.head_dim, 0.25);
  return c;
}

// One shape's weights, cache, inputs and workers; forward() runs a block over them from the same
// cached length every time. Holds views of its own buffers: neither copied nor moved.
template <class KvT>
struct BlockCase {
  AttentionShape s;
  ga::BlockConfig c;
  std::int64_t prefix;
  ga::bench::AlignedVector<float> wq, wk, wv, wo, norm, x, y;
  ga::BlockWeights<float> w;
  ga::bench::AlignedVector<ga::bf16> wq16, wk16, wv16, wo16;
  ga::BlockWeights<float, ga::bf16> w16;  // w rounded to bf16
  ga::bench::AlignedVector<KvT> k_cache, v_cache;
  ga::bench::AlignedVector<float> k_scales, v_scales;
  std::vector<std::int64_t> lengths, positions;
  ga::BlockForwardArgs<float, KvT> args;
  ga::ThreadPool pool;
  ga::Executor executor;
  std::vector<std::byte> workspace;

  BlockCase(AttentionShape shape, Gate gate, int threads, ga::DotPrecision precision)
      : s(shape), c(block_config(shape, gate)), prefix(shape.kv_len - shape.q_len), pool(threads) {
    const std::int64_t hid = c.hidden_size;
    // Weights scaled so that activations stay O(1).
    auto weight = [&](std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
      ga::bench::AlignedVector<float> m =
          ga::bench::random_buffer(static_cast<std::size_t>(rows * cols), seed);
      for (float& e : m) e *= 0.05f;
      return m;
    };
    wq = weight(c.q_proj_rows(), hid, 11);
    wk = weight(c.kv_width(), hid, 12);
    wv = weight(c.kv_width(), hid, 13);
    wo = weight(hid, c.q_width(), 14);
    norm.assign(static_cast<std::size_t>(c.head_dim), 0.1f);
    w.q_proj = ga::TensorView<const float, 2>::contiguous(wq.data(), {c.q_proj_rows(), hid});
    w.k_proj = ga::TensorView<const float, 2>::contiguous(wk.data(), {c.kv_width(), hid});
    w.v_proj = ga::TensorView<const float, 2>::contiguous(wv.data(), {c.kv_width(), hid});
    w.o_proj = ga::TensorView<const float, 2>::contiguous(wo.data(), {hid, c.q_width()});
    w.maybe_q_norm = w.maybe_k_norm = norm.data();
    w16.q_proj = rounded(w.q_proj, wq16);
    w16.k_proj = rounded(w.k_proj, wk16);
    w16.v_proj = rounded(w.v_proj, wv16);
    w16.o_proj = rounded(w.o_proj, wo16);
    w16.maybe_q_norm = w16.maybe_k_norm = norm.data();
    make_cache();
    make_inputs();
    args.dot_precision = precision;
    executor = threads > 1 ? pool.executor() : ga::Executor{};
  }
  BlockCase(const BlockCase&) = delete;
  BlockCase& operator=(const BlockCase&) = delete;

  // m rounded to bf16 into `storage`.
  static ga::TensorView<const ga::bf16, 2> rounded(const ga::TensorView<const float, 2>& m,
                                                   ga::bench::AlignedVector<ga::bf16>& storage) {
    storage.resize(static_cast<std::size_t>(m.num_elements()));
    for (std::size_t i = 0; i < storage.size(); ++i) storage[i] = ga::bf16(m.data[i]);
    return ga::TensorView<const ga::bf16, 2>::contiguous(storage.data(), m.extents);
  }

  void make_cache() {
    const std::int64_t b = s.batch;
    const std::array<std::int64_t, 4> extents = {b, s.kv_len, c.num_kv_heads, c.head_dim};
    const auto elements = static_cast<std::size_t>(b * s.kv_len * c.kv_width());
    k_cache.resize(elements);
    v_cache.resize(elements);
    ga::bench::store_rows(ga::TensorView<const float, 4>::contiguous(
                              ga::bench::random_buffer(elements, 15).data(), extents),
                          k_cache, k_scales);
    ga::bench::store_rows(ga::TensorView<const float, 4>::contiguous(
                              ga::bench::random_buffer(elements, 16).data(), extents),
                          v_cache, v_scales);
    lengths.assign(static_cast<std::size_t>(b), prefix);
    args.cache = {ga::TensorView<KvT, 4>::contiguous(k_cache.data(), extents),
                  ga::TensorView<KvT, 4>::contiguous(v_cache.data(), extents), lengths.data()};
    if constexpr (std::is_same_v<KvT, std::int8_t>) {
      const std::array<std::int64_t, 3> scale_extents = {b, s.kv_len, c.num_kv_heads};
      args.cache.maybe_k_scales =
          ga::TensorView<float, 3>::contiguous(k_scales.data(), scale_extents);
      args.cache.maybe_v_scales =
          ga::TensorView<float, 3>::contiguous(v_scales.data(), scale_extents);
    }
  }

  void make_inputs() {
    const std::int64_t b = s.batch, hid = c.hidden_size;
    x = ga::bench::random_buffer(static_cast<std::size_t>(b * s.q_len * hid), 17);
    y.resize(x.size());
    for (std::int64_t i = 0; i < b; ++i) {
      for (std::int64_t t = 0; t < s.q_len; ++t) positions.push_back(prefix + t);
    }
    args.x = ga::TensorView<const float, 3>::contiguous(x.data(), {b, s.q_len, hid});
    args.positions =
        ga::TensorView<const std::int64_t, 2>::contiguous(positions.data(), {b, s.q_len});
    args.y = ga::TensorView<float, 3>::contiguous(y.data(), {b, s.q_len, hid});
  }

  // Checks the call and sizes the workspace; false (the state skipped) on error.
  template <class W>
  bool prepare(benchmark::State& state, const ga::GatedMultiHeadAttention<float, KvT, W>& block) {
    const ga::Status status = block.can_implement(args);
    if (!status) {
      state.SkipWithError(status.message());
      return false;
    }
    workspace.resize(std::max(workspace.size(), block.workspace_size(args, executor)));
    return true;
  }

  template <class W>
  void forward(benchmark::State& state, const ga::GatedMultiHeadAttention<float, KvT, W>& block) {
    for (auto& n : lengths) n = prefix;
    const ga::Status status =
        block.forward(args, ga::Workspace(workspace.data(), workspace.size()), executor);
    if (!status) state.SkipWithError(status.message());
    benchmark::DoNotOptimize(y.data());
  }

  // Projection FLOPs + useful attention FLOPs per call.
  double flops() const {
    const double rows = static_cast<double>(s.batch * s.q_len);
    return 2.0 * rows * weight_elements() + s.useful_flops();
  }
  // Weight bytes (W's) + K/V bytes read per call.
  template <class W>
  double bytes() const {
    const double kv_rows = static_cast<double>(s.batch * s.kv_len * s.kv_heads);
    return sizeof(W) * weight_elements() + ga::bench::kv_bytes_of<KvT>(kv_rows, s.head_dim);
  }
  double weight_elements() const {
    const std::int64_t hid = c.hidden_size;
    return static_cast<double>((c.q_proj_rows() + 2 * c.kv_width()) * hid + hid * c.q_width());
  }
  // The attention path, and the projections' backend.
  template <class W>
  std::string label(const ga::LinearHook<float, W>& gemm) const {
    ga::SdpaArgs<float, KvT, KvT> path_args;
    path_args.dot_precision = args.dot_precision;
    std::string backend = ga::linear_backend(gemm);
    if (std::is_same_v<W, ga::bf16> && gemm.fn == nullptr &&
        s.batch * s.q_len >= ga::kWidenedWeightMinRows) {  // the block's prefill route
      const bool tiles = args.projection_precision == ga::DotPrecision::storage &&
                         ga::linear_tiles_run(c.hidden_size) && ga::linear_tiles_run(c.q_width());
      backend = tiles ? std::string("amx") : std::string("widened+") + ga::linear_backend<float>();
    }
    return std::string(ga::sdpa_path(path_args)) + " proj=" + backend;
  }
};

template <class KvT, class W = float>
void run_block(benchmark::State& state, AttentionShape s, Gate gate, int threads,
               ga::DotPrecision precision, ga::DotPrecision projection_precision) {
  BlockCase<KvT> bc(s, gate, threads, precision);
  bc.args.projection_precision = projection_precision;
  const auto& weights = [&]() -> const ga::BlockWeights<float, W>& {
    if constexpr (std::is_same_v<W, float>) {
      return bc.w;
    } else {
      return bc.w16;
    }
  }();
  const ga::GatedMultiHeadAttention<float, KvT, W> block(bc.c, weights);
  if (!bc.prepare(state, block)) return;
  std::int64_t calls = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    bc.forward(state, block);
    ++calls;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  state.counters["flops"] = bc.flops() * static_cast<double>(calls) / seconds;
  state.counters["bytes_per_second"] =
      bc.template bytes<W>() * static_cast<double>(calls) / seconds;
  state.SetLabel(bc.label(ga::LinearHook<float, W>{}));
}

// projection_backend_speedup/...: counter speedup, the median over back-to-back pairs of (the
// block with Eigen's projections / the block with the build's default backend).
void run_backend_pair(benchmark::State& state, AttentionShape s, Gate gate, int threads) {
  BlockCase<float> bc(s, gate, threads, ga::DotPrecision::exact);
  const ga::GatedMultiHeadAttention<float> eigen(bc.c, bc.w, {&ga::linear_eigen<float>, nullptr});
  const ga::GatedMultiHeadAttention<float> backend(bc.c, bc.w);
  if (!bc.prepare(state, eigen) || !bc.prepare(state, backend)) return;
  ga::bench::time_pairs(
      state, "speedup", [&] { bc.forward(state, backend); }, [&] { bc.forward(state, eigen); });
  state.SetLabel(bc.label(ga::LinearHook<float>{}));
}

// weight_speedup/...: counter speedup, the median over back-to-back pairs of (the block with f32
// weights / the block with the same weights in bf16).
void run_weight_pair(benchmark::State& state, AttentionShape s, Gate gate, int threads,
                     ga::DotPrecision projection_precision) {
  BlockCase<float> bc(s, gate, threads, ga::DotPrecision::exact);
  bc.args.projection_precision = projection_precision;
  const ga::GatedMultiHeadAttention<float> f32_weights(bc.c, bc.w);
  const ga::GatedMultiHeadAttention<float, float, ga::bf16> bf16_weights(bc.c, bc.w16);
  if (!bc.prepare(state, f32_weights) || !bc.prepare(state, bf16_weights)) return;
  ga::bench::time_pairs(
      state, "speedup", [&] { bc.forward(state, bf16_weights); },
      [&] { bc.forward(state, f32_weights); });
  state.SetLabel(bc.label(ga::LinearHook<float, ga::bf16>{}));
}

template <class KvT>
void register_typed_cache(const char* t, ga::DotPrecision precision) {
  const std::string dtype =
      std::string("f32-kv") + t + (precision == ga::DotPrecision::storage ? "-storage" : "");
  for (const AttentionShape& s : ga::bench::kShapes) {
    if (!s.decode) continue;
    for (int threads : {1, 2}) {
      const std::string name = std::string("block/elementwise/") + dtype + "/" + s.name +
                               "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), run_block<KvT>, s, Gate::elementwise, threads,
                                   precision, ga::DotPrecision::exact)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

int register_block() {
  for (Gate gate : ga::bench::kGates) {
    for (const AttentionShape& s : ga::bench::kShapes) {
      for (int threads : {1, 2}) {
        const std::string name = std::string("block/") + ga::bench::gate_name(gate) + "/f32/" +
                                 s.name + "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), run_block<float>, s, gate, threads,
                                     ga::DotPrecision::exact, ga::DotPrecision::exact)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  if (std::string(ga::linear_backend<float>()) != "eigen") {
    for (const AttentionShape& s : ga::bench::kShapes) {
      for (int threads : {1, 2}) {
        const std::string name = std::string("projection_backend_speedup/elementwise/f32/") +
                                 s.name + "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), run_backend_pair, s, Gate::elementwise, threads)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  for (const AttentionShape& s : ga::bench::kShapes) {
    for (int threads : {1, 2}) {
      const std::string suffix = std::string(s.name) + "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(("block/elementwise/f32-bf16w/" + suffix).c_str(),
                                   run_block<float, ga::bf16>, s, Gate::elementwise, threads,
                                   ga::DotPrecision::exact, ga::DotPrecision::exact)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("weight_speedup/elementwise/bf16w/" + suffix).c_str(),
                                   run_weight_pair, s, Gate::elementwise, threads,
                                   ga::DotPrecision::exact)
          ->Unit(benchmark::kMillisecond);
      if (s.decode) continue;  // storage changes only the products of many rows
      benchmark::RegisterBenchmark(("block/elementwise/f32-bf16w-storage/" + suffix).c_str(),
                                   run_block<float, ga::bf16>, s, Gate::elementwise, threads,
                                   ga::DotPrecision::exact, ga::DotPrecision::storage)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("weight_speedup/elementwise/bf16w-storage/" + suffix).c_str(),
                                   run_weight_pair, s, Gate::elementwise, threads,
                                   ga::DotPrecision::storage)
          ->Unit(benchmark::kMillisecond);
    }
  }
  constexpr auto kStorage = ga::DotPrecision::storage;
  register_typed_cache<ga::bf16>("bf16", ga::DotPrecision::exact);
  register_typed_cache<ga::f16>("f16", ga::DotPrecision::exact);
  register_typed_cache<std::int8_t>("i8", ga::DotPrecision::exact);
  register_typed_cache<ga::bf16>("bf16", kStorage);
  register_typed_cache<std::int8_t>("i8", kStorage);
  return 0;
}
const int registered = register_block();

}  // namespace
