// Gated vs ungated attention block: prefill, then decode steps through a KV cache, for each gate
// mode of the same weights, on the library's kernels (GatedMultiHeadAttention with a caller-owned
// workspace). Prints time per token, how much the gate changes the block's output, and the largest
// difference from the double-precision reference, run once per mode over all the tokens in one
// call.
//
//   gated_vs_ungated [--tokens N] [--decode N] [--threads N]
#include <gated_attention/gated_attention.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace ga = gated_attention;

namespace {

std::vector<float> random_values(std::mt19937& rng, std::int64_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// The block's weights for one gate mode, in the separate layout: q_proj holds the q rows,
// gate_proj the gate rows (headwise: one per head). Every mode draws the same values.
struct Weights {
  std::vector<float> q_proj, gate_proj, k_proj, v_proj, o_proj, norms;
  ga::BlockWeights<float> views;

  explicit Weights(const ga::BlockConfig& c) {
    std::mt19937 rng(42);
    const std::int64_t hidden = c.hidden_size;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hidden));
    q_proj = random_values(rng, c.q_width() * hidden, scale);
    const auto gate_rows = random_values(rng, c.q_width() * hidden, scale);
    k_proj = random_values(rng, c.kv_width() * hidden, scale);
    v_proj = random_values(rng, c.kv_width() * hidden, scale);
    o_proj = random_values(rng, hidden * c.q_width(), scale);
    norms = random_values(rng, c.head_dim, 0.1f);
    gate_proj.resize(static_cast<std::size_t>(c.gate_width() * hidden));
    for (std::int64_t r = 0; r < c.gate_width(); ++r) {
      const std::int64_t source = c.gate_mode == ga::GateMode::headwise ? r * c.head_dim : r;
      std::copy_n(gate_rows.begin() + source * hidden, hidden, gate_proj.begin() + r * hidden);
    }
    using View = ga::TensorView<const float, 2>;
    views.q_proj = View::contiguous(q_proj.data(), {c.q_width(), hidden});
    views.maybe_gate_proj = View::contiguous(gate_proj.data(), {c.gate_width(), hidden});
    views.k_proj = View::contiguous(k_proj.data(), {c.kv_width(), hidden});
    views.v_proj = View::contiguous(v_proj.data(), {c.kv_width(), hidden});
    views.o_proj = View::contiguous(o_proj.data(), {hidden, c.q_width()});
    views.maybe_q_norm = norms.data();
    views.maybe_k_norm = norms.data();
  }
  Weights(const Weights&) = delete;  // the views point into this object
  Weights& operator=(const Weights&) = delete;
};

// A KV cache for one sequence of up to `capacity` tokens.
struct Cache {
  std::vector<float> k, v;
  std::int64_t length = 0;
  ga::KvCacheView<float> view;

  Cache(const ga::BlockConfig& c, std::int64_t capacity)
      : k(static_cast<std::size_t>(capacity * c.kv_width())), v(k.size()) {
    const ga::TensorView<float, 4>::Index extents = {1, capacity, c.num_kv_heads, c.head_dim};
    view = {ga::TensorView<float, 4>::contiguous(k.data(), extents),
            ga::TensorView<float, 4>::contiguous(v.data(), extents), &length};
  }
  Cache(const Cache&) = delete;  // the view points into this object
  Cache& operator=(const Cache&) = delete;
};

// Tokens [first, first + count) of x (and y), with their positions.
struct Step {
  std::vector<std::int64_t> positions;
  ga::BlockForwardArgs<float> args;

  Step(const std::vector<float>& x, std::vector<float>& y, std::int64_t hidden, Cache& cache,
       std::int64_t first, std::int64_t count)
      : positions(static_cast<std::size_t>(count)) {
    for (std::int64_t t = 0; t < count; ++t) positions[t] = first + t;
    args.x =
        ga::TensorView<const float, 3>::contiguous(x.data() + first * hidden, {1, count, hidden});
    args.positions =
        ga::TensorView<const std::int64_t, 2>::contiguous(positions.data(), {1, count});
    args.cache = cache.view;
    args.y = ga::TensorView<float, 3>::contiguous(y.data() + first * hidden, {1, count, hidden});
  }
  Step(const Step&) = delete;  // args.positions points into this object
  Step& operator=(const Step&) = delete;
};

void check(const ga::Status& s, const char* what) {
  if (!s.is_ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.message());
    std::exit(1);
  }
}

struct Run {
  double prefill_ms = 0, decode_ms_per_token = 0;
  std::vector<float> outputs;  // every output row, prefill then decode
};

// The block on the kernels: one forward call for the prefill, then one per decode token.
Run run_block(const ga::BlockConfig& config, const Weights& weights, const std::vector<float>& x,
              std::int64_t prefill, std::int64_t decode, const ga::Executor& executor) {
  const std::int64_t hidden = config.hidden_size;
  Cache cache(config, prefill + decode);
  Run run;
  run.outputs.resize(x.size());
  const ga::GatedMultiHeadAttention<float> block(config, weights.views);
  // The workspace depends on the shapes and the cache's capacity: one buffer for the largest call
  // (the prefill) serves the decode steps too.
  const Step largest(x, run.outputs, hidden, cache, 0, prefill);
  std::vector<std::byte> ws(block.workspace_size(largest.args, executor));
  auto forward = [&](std::int64_t first, std::int64_t count) {
    const Step step(x, run.outputs, hidden, cache, first, count);
    const auto begin = std::chrono::steady_clock::now();
    check(block.forward(step.args, ga::Workspace(ws.data(), ws.size()), executor), "forward");
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
        .count();
  };
  run.prefill_ms = forward(0, prefill);
  double decode_ms = 0;
  for (std::int64_t t = 0; t < decode; ++t) decode_ms += forward(prefill + t, 1);
  run.decode_ms_per_token = decode > 0 ? decode_ms / static_cast<double>(decode) : 0.0;
  return run;
}

// The reference over every token in one call: the same outputs as the prefill and decode steps.
std::vector<float> run_reference(const ga::BlockConfig& config, const Weights& weights,
                                 const std::vector<float>& x) {
  const std::int64_t hidden = config.hidden_size;
  const std::int64_t tokens = static_cast<std::int64_t>(x.size()) / hidden;
  Cache cache(config, tokens);
  std::vector<float> y(x.size());
  const Step all(x, y, hidden, cache, 0, tokens);
  const ga::BlockForwardArgs<float>& a = all.args;
  check(ga::reference::block_forward(config, weights.views, a.x, a.positions, a.cache, a.y),
        "reference::block_forward");
  return y;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t prefill = 64, decode = 8;
  int threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tokens") == 0) prefill = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--decode") == 0) decode = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
  }
  if (prefill < 1 || decode < 0 || threads < 1) {
    std::fprintf(stderr,
                 "usage: gated_vs_ungated [--tokens N>=1] [--decode N>=0] [--threads N>=1]\n");
    return 2;
  }
  ga::ThreadPool pool(threads);
  const ga::Executor executor = threads > 1 ? pool.executor() : ga::Executor{};

  // A scaled-down Qwen3-Next attention layer: GQA 4:2, head dim 64, partial rotary 0.25,
  // zero-centred q/k norms.
  ga::BlockConfig config;
  config.hidden_size = 256;
  config.num_q_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 64;
  config.rotary_dim = ga::rotary_dim_for(64, 0.25);
  config.qk_norm = ga::QkNorm::zero_centered_rms;
  config.q_gate_layout = ga::QGateLayout::separate;

  std::printf("gated vs ungated attention block, %s path, %d thread(s)\n", ga::sdpa_path(),
              threads);
  std::printf(
      "hidden %lld, heads %lld/%lld, head dim %lld, rotary %lld, prefill %lld + decode %lld\n\n",
      static_cast<long long>(config.hidden_size), static_cast<long long>(config.num_q_heads),
      static_cast<long long>(config.num_kv_heads), static_cast<long long>(config.head_dim),
      static_cast<long long>(config.rotary_dim), static_cast<long long>(prefill),
      static_cast<long long>(decode));
  std::printf("%-12s %12s %14s %12s %18s %16s\n", "gate", "prefill ms", "decode ms/tok",
              "output rms", "rms change vs none", "max |ref diff|");
  std::mt19937 rng(7);
  const std::vector<float> x = random_values(rng, (prefill + decode) * config.hidden_size, 1.0f);
  Run ungated;
  double worst = 0;
  for (ga::GateMode mode :
       {ga::GateMode::none, ga::GateMode::headwise, ga::GateMode::elementwise}) {
    config.gate_mode = mode;
    const Weights weights(config);
    const Run r = run_block(config, weights, x, prefill, decode, executor);
    if (mode == ga::GateMode::none) ungated = r;
    std::vector<float> diff(r.outputs.size());
    for (std::size_t i = 0; i < diff.size(); ++i) diff[i] = r.outputs[i] - ungated.outputs[i];
    const double ref_diff = max_abs_difference(r.outputs, run_reference(config, weights, x));
    worst = std::max(worst, ref_diff);
    const char* name = mode == ga::GateMode::none       ? "none"
                       : mode == ga::GateMode::headwise ? "headwise"
                                                        : "elementwise";
    std::printf("%-12s %12.3f %14.4f %12.4f %18.4f %16.2e\n", name, r.prefill_ms,
                r.decode_ms_per_token, rms(r.outputs), rms(diff), ref_diff);
  }
  // f32 kernels against double accumulation on outputs of about unit size.
  if (!(worst <= 1e-3)) {
    std::fprintf(stderr, "the kernels differ from the reference by %.3g\n", worst);
    return 1;
  }
  return 0;
}
