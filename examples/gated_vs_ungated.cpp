// Gated vs ungated attention block on the double-precision references: prefill, then decode steps
// through a KV cache, for each gate mode of the same weights. Prints time per token and how much
// the gate changes the block's output.
//
//   gated_vs_ungated [--tokens N] [--decode N]
#include <gated_attention/gated_attention.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace ga = gated_attention;

namespace {

struct Run {
  double prefill_ms = 0, decode_ms_per_token = 0;
  std::vector<float> outputs;  // every output row, prefill then decode
};

std::vector<float> random_values(std::mt19937& rng, std::int64_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

Run run_block(ga::BlockConfig config, std::int64_t prefill, std::int64_t decode) {
  std::mt19937 rng(42);  // the same weights for every gate mode: the gate rows come last
  const std::int64_t hidden = config.hidden_size;
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(hidden));
  const auto q_rows = random_values(rng, config.q_width() * hidden, w_scale);
  const auto gate_rows = random_values(rng, config.num_q_heads * config.head_dim * hidden, w_scale);
  const auto k_proj = random_values(rng, config.kv_width() * hidden, w_scale);
  const auto v_proj = random_values(rng, config.kv_width() * hidden, w_scale);
  const auto o_proj = random_values(rng, hidden * config.q_width(), w_scale);
  const auto norms = random_values(rng, config.head_dim, 0.1f);
  const auto x = random_values(rng, (prefill + decode) * hidden, 1.0f);

  // Separate layout: q_proj holds the q rows, gate_proj the gate rows (headwise: one per head).
  config.q_gate_layout = ga::QGateLayout::separate;
  std::vector<float> gate_proj(static_cast<std::size_t>(config.gate_width() * hidden));
  for (std::int64_t r = 0; r < config.gate_width(); ++r) {
    const std::int64_t source =
        config.gate_mode == ga::GateMode::headwise ? r * config.head_dim : r;
    std::copy_n(gate_rows.begin() + source * hidden, hidden, gate_proj.begin() + r * hidden);
  }
  ga::BlockWeights<float> w;
  w.q_proj = ga::TensorView<const float, 2>::contiguous(q_rows.data(), {config.q_width(), hidden});
  w.maybe_gate_proj =
      ga::TensorView<const float, 2>::contiguous(gate_proj.data(), {config.gate_width(), hidden});
  w.k_proj = ga::TensorView<const float, 2>::contiguous(k_proj.data(), {config.kv_width(), hidden});
  w.v_proj = ga::TensorView<const float, 2>::contiguous(v_proj.data(), {config.kv_width(), hidden});
  w.o_proj = ga::TensorView<const float, 2>::contiguous(o_proj.data(), {hidden, config.q_width()});
  w.maybe_q_norm = norms.data();
  w.maybe_k_norm = norms.data();

  const std::int64_t capacity = prefill + decode;
  std::vector<float> k_cache(static_cast<std::size_t>(capacity * config.kv_width()));
  std::vector<float> v_cache(k_cache.size());
  std::int64_t length = 0;
  ga::KvCacheView<float> cache{
      ga::TensorView<float, 4>::contiguous(k_cache.data(),
                                           {1, capacity, config.num_kv_heads, config.head_dim}),
      ga::TensorView<float, 4>::contiguous(v_cache.data(),
                                           {1, capacity, config.num_kv_heads, config.head_dim}),
      &length};

  Run run;
  run.outputs.resize(static_cast<std::size_t>(capacity * hidden));
  auto step = [&](std::int64_t first, std::int64_t count) {
    std::vector<std::int64_t> positions(static_cast<std::size_t>(count));
    for (std::int64_t t = 0; t < count; ++t) positions[t] = first + t;
    const auto begin = std::chrono::steady_clock::now();
    const ga::Status s = ga::reference::block_forward(
        config, w,
        ga::TensorView<const float, 3>::contiguous(x.data() + first * hidden, {1, count, hidden}),
        ga::TensorView<const std::int64_t, 2>::contiguous(positions.data(), {1, count}), cache,
        ga::TensorView<float, 3>::contiguous(run.outputs.data() + first * hidden,
                                             {1, count, hidden}));
    if (!s.is_ok()) {
      std::fprintf(stderr, "block_forward: %s\n", s.message());
      std::exit(1);
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
        .count();
  };
  run.prefill_ms = step(0, prefill);
  double decode_ms = 0;
  for (std::int64_t t = 0; t < decode; ++t) decode_ms += step(prefill + t, 1);
  run.decode_ms_per_token = decode > 0 ? decode_ms / static_cast<double>(decode) : 0.0;
  return run;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t prefill = 64, decode = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tokens") == 0) prefill = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--decode") == 0) decode = std::atoll(argv[i + 1]);
  }
  if (prefill < 1 || decode < 0) {
    std::fprintf(stderr, "usage: gated_vs_ungated [--tokens N>=1] [--decode N>=0]\n");
    return 2;
  }

  // A scaled-down Qwen3-Next attention layer: GQA 4:2, head dim 64, partial rotary 0.25,
  // zero-centred q/k norms.
  ga::BlockConfig config;
  config.hidden_size = 256;
  config.num_q_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 64;
  config.rotary_dim = ga::rotary_dim_for(64, 0.25);
  config.qk_norm = ga::QkNorm::zero_centered_rms;

  std::printf("gated vs ungated attention block, reference path (double accumulation)\n");
  std::printf(
      "hidden %lld, heads %lld/%lld, head dim %lld, rotary %lld, prefill %lld + decode %lld\n\n",
      static_cast<long long>(config.hidden_size), static_cast<long long>(config.num_q_heads),
      static_cast<long long>(config.num_kv_heads), static_cast<long long>(config.head_dim),
      static_cast<long long>(config.rotary_dim), static_cast<long long>(prefill),
      static_cast<long long>(decode));
  std::printf("%-12s %12s %14s %12s %16s\n", "gate", "prefill ms", "decode ms/tok", "output rms",
              "rms change vs none");
  Run ungated;
  for (ga::GateMode mode :
       {ga::GateMode::none, ga::GateMode::headwise, ga::GateMode::elementwise}) {
    config.gate_mode = mode;
    const Run r = run_block(config, prefill, decode);
    if (mode == ga::GateMode::none) ungated = r;
    std::vector<float> diff(r.outputs.size());
    for (std::size_t i = 0; i < diff.size(); ++i) diff[i] = r.outputs[i] - ungated.outputs[i];
    const char* name = mode == ga::GateMode::none       ? "none"
                       : mode == ga::GateMode::headwise ? "headwise"
                                                        : "elementwise";
    std::printf("%-12s %12.2f %14.3f %12.4f %16.4f\n", name, r.prefill_ms, r.decode_ms_per_token,
                rms(r.outputs), rms(diff));
  }
  return 0;
}
