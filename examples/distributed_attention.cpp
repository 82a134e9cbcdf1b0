// Both standard splits of a Qwen3-Next-shaped attention layer over MPI ranks:
//   tensor parallel: each rank runs the block on a range of KV heads (shard_heads); the partial
//     o_proj outputs are summed with MPI_Allreduce. Ranks beyond the KV heads hold none.
//   context parallel: each rank holds a token range of the KV cache and runs the block's decode
//     step on it (ContextParallel): attention of the same query over its keys with its
//     log-sum-exp, the parts exchanged with one MPI_Allgather and merged with the gate applied
//     once, then o_proj; each step's token is appended by the next rank in turn.
// Prints, per split, the agreement with the single-process result and, per decode step, the time
// of compute (the slowest rank's) and of the exchange alone (after a barrier), and the bytes each
// rank sends.
//
//   mpirun -np 2 distributed_attention [--context N] [--steps N]
#include "mpi_context_exchange.hpp"  // includes <mpi.h>, C API only

#include <gated_attention/gated_attention.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace ga = gated_attention;

namespace {

int rank_of() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int size_of() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
double now() {
  return MPI_Wtime();
}

// f32 sums in another order (the shards' o_proj, the merge's weights): a few 2^-24 relative per
// operation, far below this bound on max |diff| / max |result|.
constexpr double kAgreement = 1e-4;

std::vector<float> random_values(std::mt19937& rng, std::int64_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// The largest |a - b| relative to max |b|.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// Times are the slowest rank's (the step waits for it).
double slowest(double seconds) {
  double out = 0.0;
  MPI_Allreduce(&seconds, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

void fail(const ga::Status& s) {
  std::fprintf(stderr, "rank %d: %s\n", rank_of(), s.message());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// Random weights of the layer (no biases), scaled by 1 / sqrt(hidden), and their views.
struct RandomWeights {
  std::vector<float> wq, wk, wv, wo, norms;
  ga::BlockWeights<float> views;

  RandomWeights(const ga::BlockConfig& c, std::mt19937& rng) {
    const std::int64_t hid = c.hidden_size;
    const float s = 1.0f / std::sqrt(static_cast<float>(hid));
    wq = random_values(rng, c.q_proj_rows() * hid, s);
    wk = random_values(rng, c.kv_width() * hid, s);
    wv = random_values(rng, c.kv_width() * hid, s);
    wo = random_values(rng, hid * c.q_width(), s);
    norms = random_values(rng, c.head_dim, 0.1f);
    views.q_proj = ga::TensorView<const float, 2>::contiguous(wq.data(), {c.q_proj_rows(), hid});
    views.k_proj = ga::TensorView<const float, 2>::contiguous(wk.data(), {c.kv_width(), hid});
    views.v_proj = ga::TensorView<const float, 2>::contiguous(wv.data(), {c.kv_width(), hid});
    views.o_proj = ga::TensorView<const float, 2>::contiguous(wo.data(), {hid, c.q_width()});
    views.maybe_q_norm = views.maybe_k_norm = norms.data();
  }
};

// One sequence's layer and its cache (or, context parallel, its part of the cache).
struct Layer {
  ga::BlockConfig config;
  ga::BlockWeights<float> weights;
  std::vector<float> k, v;  // [1, capacity, kv_heads, head_dim]
  std::int64_t length = 0, capacity;

  Layer(const ga::BlockConfig& c, const ga::BlockWeights<float>& w, std::int64_t cap)
      : config(c),
        weights(w),
        k(static_cast<std::size_t>(cap * c.kv_width())),
        v(k.size()),
        capacity(cap) {}

  // Positions from `start` (the layer's length unless its cache holds part of the context).
  std::vector<float> step(const float* x, std::int64_t len, std::int64_t start,
                          const ga::ContextParallel<float>& context = {}) {
    const std::int64_t hid = config.hidden_size;
    std::vector<std::int64_t> positions(static_cast<std::size_t>(len));
    for (std::int64_t t = 0; t < len; ++t) positions[t] = start + t;
    std::vector<float> y(static_cast<std::size_t>(len * hid));
    const std::array<std::int64_t, 4> e = {1, capacity, config.num_kv_heads, config.head_dim};
    ga::BlockForwardArgs<float> a;
    a.x = ga::TensorView<const float, 3>::contiguous(x, {1, len, hid});
    a.positions = ga::TensorView<const std::int64_t, 2>::contiguous(positions.data(), {1, len});
    a.cache = {ga::TensorView<float, 4>::contiguous(k.data(), e),
               ga::TensorView<float, 4>::contiguous(v.data(), e), &length};
    a.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, len, hid});
    a.context_parallel = context;
    const ga::GatedMultiHeadAttention<float> block(config, weights);
    std::vector<std::byte> ws(block.workspace_size(a, 1));
    const ga::Status s = block.forward(a, ga::Workspace(ws.data(), ws.size()));
    if (!s) fail(s);
    return y;
  }
};

// Returns whether the ranks' sum agrees with the whole block.
bool tensor_parallel(const ga::BlockConfig& c, std::int64_t prompt, std::int64_t steps) {
  std::mt19937 rng(11);  // the same weights and tokens on every rank
  const std::int64_t hid = c.hidden_size;
  const RandomWeights weights(c, rng);
  const ga::BlockWeights<float>& w = weights.views;
  const std::vector<float> x = random_values(rng, (prompt + steps) * hid, 1.0f);
  const int r = rank_of(), n = std::min<int>(size_of(), static_cast<int>(c.num_kv_heads));
  const bool holds = r < n;  // ranks past the KV heads add zeros
  ga::BlockConfig sc = c;
  ga::BlockWeights<float> sw = w;
  if (holds) {
    const std::int64_t begin = c.num_kv_heads * r / n, end = c.num_kv_heads * (r + 1) / n;
    const ga::Status st = ga::shard_heads(c, w, {begin, end - begin}, &sc, &sw);
    if (!st) fail(st);
  }
  Layer whole(c, w, prompt + steps), shard(sc, sw, prompt + steps);
  double worst = 0.0, compute = 0.0, exchange = 0.0;
  for (std::int64_t t = 0; t <= steps; ++t) {
    const std::int64_t len = t == 0 ? prompt : 1, at = t == 0 ? 0 : prompt + t - 1;
    const std::vector<float> expected = whole.step(x.data() + at * hid, len, at);
    const double t0 = now();
    std::vector<float> y(static_cast<std::size_t>(len * hid), 0.0f);
    if (holds) y = shard.step(x.data() + at * hid, len, at);
    const double t1 = now();
    MPI_Barrier(MPI_COMM_WORLD);  // the exchange timed alone, not the wait for the slowest rank
    const double t1b = now();
    MPI_Allreduce(MPI_IN_PLACE, y.data(), static_cast<int>(y.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    const double t2 = now();
    worst = std::max(worst, relative_difference(y, expected));
    if (t > 0) compute += slowest(t1 - t0), exchange += slowest(t2 - t1b);
  }
  worst = slowest(worst);
  if (r == 0) {
    std::printf("tensor parallel: %d of %d ranks hold KV heads; max |diff| / max |y| %.2e\n", n,
                size_of(), worst);
    std::printf("  decode step: compute %.3f ms, all-reduce %.3f ms, %lld bytes per rank\n",
                1e3 * compute / double(steps), 1e3 * exchange / double(steps),
                static_cast<long long>(hid * 4));
  }
  return worst <= kAgreement;
}

// Decode steps of the block over `context` cached tokens (random K/V) split in token ranges over
// the ranks; rank t % n appends step t's token. Every rank also runs the unsplit layer.
bool context_parallel(const ga::BlockConfig& c, std::int64_t context, std::int64_t steps) {
  std::mt19937 rng(12);  // the same weights, cache and tokens on every rank
  const std::int64_t hid = c.hidden_size, row = c.kv_width();
  const RandomWeights weights(c, rng);
  const ga::BlockWeights<float>& w = weights.views;
  const std::vector<float> x = random_values(rng, (steps + 1) * hid, 1.0f),
                           k = random_values(rng, context * row, 1.0f),
                           v = random_values(rng, context * row, 1.0f);
  const int r = rank_of(), n = size_of();
  const std::int64_t lo = context * r / n, hi = context * (r + 1) / n;
  Layer whole(c, w, context + steps + 1), part(c, w, hi - lo + steps + 1);
  std::copy(k.begin(), k.end(), whole.k.begin());
  std::copy(v.begin(), v.end(), whole.v.begin());
  std::copy(k.begin() + lo * row, k.begin() + hi * row, part.k.begin());
  std::copy(v.begin() + lo * row, v.begin() + hi * row, part.v.begin());
  whole.length = context;
  part.length = hi - lo;
  MpiContextExchange exchange;
  double compute = 0.0, gather = 0.0, worst = 0.0;
  for (std::int64_t t = 0; t <= steps; ++t) {  // step 0 warms up
    const std::int64_t position = whole.length;
    const std::vector<float> expected = whole.step(x.data() + t * hid, 1, position);
    const double gathered_before = exchange.seconds;
    const double t0 = now();
    const std::vector<float> y = part.step(x.data() + t * hid, 1, position,
                                           {&MpiContextExchange::exchange, &exchange, t % n == r});
    const double t1 = now(), in_gather = exchange.seconds - gathered_before;
    worst = std::max(worst, relative_difference(y, expected));
    if (t > 0) compute += slowest(t1 - t0 - in_gather), gather += slowest(in_gather);
  }
  worst = slowest(worst);
  if (r == 0) {
    std::printf("context parallel: %lld tokens over %d ranks; max |diff| / max |y| %.2e\n",
                static_cast<long long>(context), n, worst);
    std::printf(
        "  decode step: compute %.3f ms, all-gather %.3f ms, %zu bytes per rank "
        "(K/V read per rank: %lld bytes)\n",
        1e3 * compute / double(steps), 1e3 * gather / double(steps), exchange.bytes,
        static_cast<long long>((hi - lo) * row * 2 * 4));
  }
  return worst <= kAgreement;
}

std::int64_t arg_value(int argc, char** argv, const char* name, std::int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::int64_t context = arg_value(argc, argv, "--context", 32768);
  const std::int64_t steps = std::max<std::int64_t>(1, arg_value(argc, argv, "--steps", 8));
  // Qwen3-Next's full-attention layer: hidden 2048, 16 query heads over 2 KV heads of 256, the
  // elementwise gate packed per head in q_proj, zero-centred QK norm, RoPE on a quarter.
  ga::BlockConfig c;
  c.hidden_size = 2048;
  c.num_q_heads = 16;
  c.num_kv_heads = 2;
  c.head_dim = 256;
  c.rotary_dim = ga::rotary_dim_for(c.head_dim, 0.25);
  if (rank_of() == 0) {
    std::printf("%d ranks, path %s\n", size_of(), ga::sdpa_path());
  }
  const bool heads_agree = tensor_parallel(c, /*prompt=*/64, steps);
  const bool context_agrees = context_parallel(c, context, steps);
  const bool agree = heads_agree && context_agrees;
  if (rank_of() == 0) std::printf("%s\n", agree ? "agree" : "DISAGREE");
  MPI_Finalize();
  return agree ? 0 : 1;
}
