// GatedMultiHeadAttention against reference::block_forward: every layout, gate mode, QK norm and
// bias option; prefill, chunked prefill and batched decode through the KV cache; every ISA path;
// 1 and 3 threads; the ith/nth entry from std::threads; strided and in-place x/y; the GEMM hook;
// bf16 weights (the kernel, widened panels, AMX tiles); validation and the workspace.
//
// Tolerance: the block runs in f32 (projections through Eigen, attention through the kernels),
// the reference in double on the same f32 weights. Each output element must satisfy
// |y - y_ref| <= 1e-4 + 1e-3 |y_ref| (about 8 f32 ulps of accumulated rounding over sums of
// hidden = 96 products, two projections and the softmax); the largest error measured is 0.06 of it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "block_model.hpp"
#include "support.hpp"

namespace ga = gated_attention;
using namespace ga::testing;

namespace {

constexpr double kAtol = 1e-4, kRtol = 1e-3;

// hidden 96, 4 query heads over 2 KV heads, head_dim 64 (a specialised SDPA kernel), RoPE on 16.
ga::BlockConfig block_config(ga::GateMode mode, ga::QGateLayout layout) {
  ga::BlockConfig c = small_config(mode, layout);
  c.hidden_size = 96;
  c.head_dim = 64;
  c.rotary_dim = 16;
  return c;
}

// Runs the block (f32 activations and cache, weights W) on contiguous x [batch, len, hidden] and
// returns y.
template <class W>
struct BlockRun {
  const ga::GatedMultiHeadAttention<float, float, W>& block;
  ga::Executor executor;
  ga::DotPrecision projection_precision = ga::DotPrecision::exact;

  ga::Status forward(const std::vector<float>& x, std::int64_t batch, std::int64_t len,
                     const Positions& pos, const ga::KvCacheView<float>& cache,
                     std::vector<float>& y) const {
    const std::int64_t hid = block.config().hidden_size;
    y.assign(static_cast<std::size_t>(batch * len * hid), nan_of<float>());
    ga::BlockForwardArgs<float> args;
    args.x = ga::TensorView<const float, 3>::contiguous(x.data(), {batch, len, hid});
    args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {batch, len});
    args.cache = cache;
    args.y = ga::TensorView<float, 3>::contiguous(y.data(), {batch, len, hid});
    args.projection_precision = projection_precision;
    std::vector<std::byte> ws(block.workspace_size(args, executor));
    return block.forward(args, ga::Workspace(ws.data(), ws.size()), executor);
  }
};
template <class W>
BlockRun(const ga::GatedMultiHeadAttention<float, float, W>&, ga::Executor) -> BlockRun<W>;

template <class W>
std::vector<float> reference_forward(const ga::BlockConfig& c,
                                     const ga::BlockWeights<float, W>& weights,
                                     const std::vector<float>& x, std::int64_t batch,
                                     std::int64_t len, const Positions& pos,
                                     const ga::KvCacheView<float>& cache) {
  const std::int64_t hid = c.hidden_size;
  std::vector<float> y(static_cast<std::size_t>(batch * len * hid));
  const ga::Status s = ga::reference::block_forward(
      c, weights, ga::TensorView<const float, 3>::contiguous(x.data(), {batch, len, hid}),
      ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {batch, len}), cache,
      ga::TensorView<float, 3>::contiguous(y.data(), {batch, len, hid}));
  REQUIRE(s.is_ok());
  return y;
}

std::vector<float> reference_forward(const Model<float>& m, const std::vector<float>& x,
                                     std::int64_t batch, std::int64_t len, const Positions& pos,
                                     const ga::KvCacheView<float>& cache) {
  return reference_forward(m.c, m.weights(), x, batch, len, pos, cache);
}

// Elements that differ: NaN on one side only, or beyond the tolerance.
std::int64_t cache_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      bad += std::isnan(a[i]) != std::isnan(b[i]) ? 1 : 0;
    } else {
      bad += std::fabs(a[i] - b[i]) <= kAtol + kRtol * std::fabs(b[i]) ? 0 : 1;
    }
  }
  return bad;
}

// One call of a test: `len` new tokens for each of the sequences [first_seq, first_seq + batch).
struct Step {
  std::int64_t first_seq, batch, len;

  // Each token's position, after its sequence's cached tokens.
  Positions positions(const std::vector<std::int64_t>& lengths) const {
    Positions pos;
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t start = lengths[static_cast<std::size_t>(first_seq + b)];
      for (std::int64_t t = 0; t < len; ++t) pos.push_back(start + t);
    }
    return pos;
  }
  // The step's sequences of `cache` as one cache view.
  template <class T>
  ga::KvCacheView<T> sequences(Cache<T>& cache) const {
    ga::KvCacheView<T> v = cache.slot(first_seq);
    v.k.extents[0] = v.v.extents[0] = batch;
    return v;
  }
};

// The same steps through the block (weights W) and the reference, each with its own cache; checks
// y after every step and the caches at the end.
template <class W = float>
struct Steps {
  const ga::BlockConfig& c;
  ga::BlockWeights<float, W> weights;
  ga::Executor executor;
  std::int64_t seqs, capacity;
  ga::LinearHook<float, W> gemm = {};
  std::int64_t first_prefill = 37;
  // storage: x may be rounded to bf16 in the prefill products (AMX tiles), which the bound
  // |y - y_ref| <= 8 2^-8 max|y_ref| covers (as for bf16 activations); the caches are then not
  // compared element by element.
  ga::DotPrecision projection_precision = ga::DotPrecision::exact;

  void run(std::uint64_t salt) const {
    const ga::GatedMultiHeadAttention<float, float, W> block(c, weights, gemm);
    const BlockRun<W> runner{block, executor, projection_precision};
    const bool exact = projection_precision == ga::DotPrecision::exact;
    Cache<float> ours(c, seqs, capacity), theirs(c, seqs, capacity);
    std::mt19937_64 rng = make_rng(salt);
    const std::int64_t hid = c.hidden_size;
    // Prefill first_prefill tokens into sequence 0 and 17 into sequence 1 (one call each), a
    // chunk of 5 into both, then 3 batched decode steps of every sequence.
    const Step steps[] = {{0, 1, first_prefill}, {1, 1, 17},   {0, 2, 5},
                          {0, seqs, 1},          {0, seqs, 1}, {0, seqs, 1}};
    for (const Step& step : steps) {
      INFO("step: sequences " << step.first_seq << "+" << step.batch << ", " << step.len
                              << " tokens");
      const std::vector<float> x = random_vector<float>(rng, step.batch * step.len * hid);
      const Positions pos = step.positions(ours.lengths);
      std::vector<float> y;
      const ga::Status s = runner.forward(x, step.batch, step.len, pos, step.sequences(ours), y);
      INFO(s.message());
      REQUIRE(s.is_ok());
      const std::vector<float> expected =
          reference_forward(c, weights, x, step.batch, step.len, pos, step.sequences(theirs));
      if (exact) {
        CHECK(max_tolerance_ratio(y, expected, kAtol, kRtol) <= 1.0);
      } else {
        double max_y = 0.0, worst = 0.0;
        for (const float e : expected) max_y = std::max(max_y, std::fabs(double{e}));
        for (std::size_t i = 0; i < y.size(); ++i) {
          track(worst, std::fabs(double{y[i]} - expected[i]) / max_y);
        }
        INFO("max |y - y_ref| / max |y_ref| = " << worst);
        CHECK(worst <= 8.0 * 0x1p-8);
      }
      CHECK(ours.lengths == theirs.lengths);
    }
    // Cached K and V: the same slots written (NaN elsewhere on both sides), with the same values.
    if (exact) {
      CHECK(cache_mismatches(ours.k.data, theirs.k.data) == 0);
      CHECK(cache_mismatches(ours.v.data, theirs.v.data) == 0);
    }
  }
};

}  // namespace

TEST_CASE("Block matches the reference: layouts, gates, norms, biases, paths, threads", "[block]") {
  struct Variant {
    ga::GateMode mode;
    ga::QGateLayout layout;
    ga::QkNorm norm;
    ga::GateActivation activation;
    bool biases;
    std::int64_t rotary_dim;
  };
  const Variant variants[] = {
      {ga::GateMode::elementwise, ga::QGateLayout::qwen3_next, ga::QkNorm::zero_centered_rms,
       ga::GateActivation::sigmoid, false, 16},
      {ga::GateMode::headwise, ga::QGateLayout::qwen3_next, ga::QkNorm::rms,
       ga::GateActivation::sigmoid, true, 64},
      {ga::GateMode::elementwise, ga::QGateLayout::grouped, ga::QkNorm::zero_centered_rms,
       ga::GateActivation::silu, true, 16},
      {ga::GateMode::headwise, ga::QGateLayout::grouped, ga::QkNorm::none,
       ga::GateActivation::sigmoid, false, 0},
      {ga::GateMode::elementwise, ga::QGateLayout::separate, ga::QkNorm::rms,
       ga::GateActivation::sigmoid, true, 32},
      {ga::GateMode::none, ga::QGateLayout::qwen3_next, ga::QkNorm::zero_centered_rms,
       ga::GateActivation::sigmoid, true, 16},
  };
  ga::ThreadPool pool(3);
  std::uint64_t salt = 1000;
  for (const Variant& var : variants) {
    ga::BlockConfig c = block_config(var.mode, var.layout);
    c.qk_norm = var.norm;
    c.gate_activation = var.activation;
    c.rotary_dim = var.rotary_dim;
    std::mt19937_64 rng = make_rng(salt++);
    Model<float> m = make_model<float>(c, rng);
    m.biases = m.o_bias = var.biases;
    for (const ga::Isa isa : available_isas()) {
      ga::set_isa_limit(isa);
      for (const ga::Executor& executor : {ga::Executor{}, pool.executor()}) {
        for (const ga::testing::LinearBackend& backend : ga::testing::linear_backends()) {
          INFO("layout " << name_of(var.layout) << ", gate " << name_of(var.mode) << ", path "
                         << ga::to_string(isa) << ", workers " << executor.num_workers
                         << ", projections " << backend.name);
          Steps<>{c, m.weights(), executor, 3, 48, backend.hook}.run(salt);
        }
      }
    }
    ga::clear_isa_limit();
  }
}

TEST_CASE("Block: strided x and y, and y written in place of x", "[block]") {
  const ga::BlockConfig c = block_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  std::mt19937_64 rng = make_rng(1100);
  const Model<float> m = make_model<float>(c, rng);
  const ga::GatedMultiHeadAttention<float> block(c, m.weights());
  const std::int64_t batch = 2, len = 9, hid = c.hidden_size, pad = 5;
  const std::vector<float> x = random_vector<float>(rng, batch * len * hid);
  const Positions pos = positions_from(batch, len, 0);

  Cache<float> theirs(c, batch, 16);
  const std::vector<float> expected = reference_forward(m, x, batch, len, pos, theirs.view());

  ga::ThreadPool pool(2);
  for (const ga::Executor& executor : {ga::Executor{}, pool.executor()}) {
    INFO("workers " << executor.num_workers);
    // x and y with padded rows and a batch stride that no single row stride covers.
    const std::int64_t row = hid + pad, seq = len * row + 3;
    std::vector<float> xs(static_cast<std::size_t>(batch * seq), nan_of<float>());
    std::vector<float> ys(xs.size(), nan_of<float>());
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t t = 0; t < len; ++t) {
        std::copy_n(&x[static_cast<std::size_t>((b * len + t) * hid)], hid,
                    &xs[static_cast<std::size_t>(b * seq + t * row)]);
      }
    }
    ga::BlockForwardArgs<float> args;
    args.x = ga::TensorView<const float, 3>(xs.data(), {batch, len, hid}, {seq, row, 1});
    args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {batch, len});
    args.y = ga::TensorView<float, 3>(ys.data(), {batch, len, hid}, {seq, row, 1});
    Cache<float> ours(c, batch, 16);
    args.cache = ours.view();
    std::vector<std::byte> ws(block.workspace_size(args, executor));
    REQUIRE(block.forward(args, ga::Workspace(ws.data(), ws.size()), executor).is_ok());
    std::vector<float> y, y_in_place;
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t t = 0; t < len; ++t) {
        const auto at = ys.begin() + b * seq + t * row;
        y.insert(y.end(), at, at + hid);
        CHECK(std::all_of(at + hid, at + row, [](float v) { return std::isnan(v); }));
      }
    }
    CHECK(max_tolerance_ratio(y, expected, kAtol, kRtol) <= 1.0);

    // In place: y is x.
    Cache<float> again(c, batch, 16);
    args.cache = again.view();
    args.y = ga::TensorView<float, 3>(xs.data(), {batch, len, hid}, {seq, row, 1});
    REQUIRE(block.forward(args, ga::Workspace(ws.data(), ws.size()), executor).is_ok());
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t t = 0; t < len; ++t) {
        const auto at = xs.begin() + b * seq + t * row;
        y_in_place.insert(y_in_place.end(), at, at + hid);
      }
    }
    CHECK(y_in_place == y);
  }
}

TEST_CASE("Block: the ith/nth entry from std::threads equals forward() bit for bit",
          "[block][threads]") {
  const ga::BlockConfig c = block_config(ga::GateMode::elementwise, ga::QGateLayout::grouped);
  std::mt19937_64 rng = make_rng(1200);
  const Model<float> m = make_model<float>(c, rng);
  const ga::GatedMultiHeadAttention<float> block(c, m.weights());
  const std::int64_t hid = c.hidden_size;

  for (const int nth : {2, 3}) {
    for (const std::int64_t len : {std::int64_t{29}, std::int64_t{1}}) {
      INFO(nth << " workers, " << len << " tokens");
      const std::int64_t batch = len == 1 ? 3 : 1, cached = len == 1 ? 300 : 0;
      Cache<float> pooled(c, batch, 320), threaded(c, batch, 320);
      // A cached prefix (written by the pool run) so that decode splits its keys.
      for (std::int64_t s = 0; s < batch; ++s) {
        for (std::int64_t i = 0; i < cached * c.num_kv_heads * c.head_dim; ++i) {
          const float kv = std::sin(0.01f * static_cast<float>(i + s));
          const auto at = static_cast<std::size_t>(s * 320 * c.num_kv_heads * c.head_dim + i);
          pooled.k.data[at] = threaded.k.data[at] = kv;
          pooled.v.data[at] = threaded.v.data[at] = -kv;
        }
        pooled.lengths[static_cast<std::size_t>(s)] = cached;
        threaded.lengths[static_cast<std::size_t>(s)] = cached;
      }
      const std::vector<float> x = random_vector<float>(rng, batch * len * hid);
      const Positions pos = positions_from(batch, len, cached);

      ga::ThreadPool pool(nth);
      std::vector<float> y_pool;
      REQUIRE(BlockRun{block, pool.executor()}
                  .forward(x, batch, len, pos, pooled.view(), y_pool)
                  .is_ok());

      std::vector<float> y(static_cast<std::size_t>(batch * len * hid), nan_of<float>());
      ga::BlockForwardArgs<float> args;
      args.x = ga::TensorView<const float, 3>::contiguous(x.data(), {batch, len, hid});
      args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {batch, len});
      args.cache = threaded.view();
      args.y = ga::TensorView<float, 3>::contiguous(y.data(), {batch, len, hid});
      std::vector<std::byte> ws(block.workspace_size(args, nth));
      std::vector<int> failures(static_cast<std::size_t>(nth), 0);
      for (int phase = 0; phase < block.num_phases(); ++phase) {
        std::vector<std::thread> workers;
        for (int ith = 0; ith < nth; ++ith) {
          workers.emplace_back([&, ith, phase] {
            const ga::Status s =
                block.run_phase(args, ga::Workspace(ws.data(), ws.size()), phase, ith, nth);
            failures[static_cast<std::size_t>(ith)] += s.is_ok() ? 0 : 1;
          });
        }
        for (auto& t : workers) t.join();  // the barrier between phases
      }
      CHECK(failures == std::vector<int>(static_cast<std::size_t>(nth), 0));
      CHECK(y == y_pool);
      CHECK(threaded.lengths == pooled.lengths);
      CHECK(threaded.lengths[0] == cached + len);
    }
  }
}

namespace {

// An engine's GEMM for any element types (activations T, weights W): sums in double, each output
// rounded to T once; counts its calls.
template <class T, class W = T>
struct LoopGemm {
  std::atomic<int> calls{0};

  static ga::Status run(void* context, const ga::LinearArgs<T, W>& a) {
    static_cast<LoopGemm*>(context)->calls.fetch_add(1);
    for (std::int64_t r = 0; r < a.x.extents[0]; ++r) {
      for (std::int64_t o = 0; o < a.weight.extents[0]; ++o) {
        double sum = a.maybe_bias != nullptr ? ga::reference::as_double(a.maybe_bias[o]) : 0.0;
        for (std::int64_t i = 0; i < a.x.extents[1]; ++i) {
          sum += ga::reference::as_double(a.x(r, i)) * ga::reference::as_double(a.weight(o, i));
        }
        a.y(r, o) = ga::reference::from_double<T>(sum);
      }
    }
    return ga::Status::ok();
  }
};

ga::Status failing_gemm(void*, const ga::LinearArgs<float>&) {
  return ga::Status::error(ga::StatusCode::not_supported, "engine gemm: no kernel for this shape");
}

}  // namespace

TEST_CASE("Block: an engine's GEMM hook replaces Eigen, and its errors are returned", "[block]") {
  const ga::BlockConfig c = block_config(ga::GateMode::headwise, ga::QGateLayout::separate);
  std::mt19937_64 rng = make_rng(1300);
  const Model<float> m = make_model<float>(c, rng);
  const std::int64_t batch = 1, len = 11, hid = c.hidden_size;
  const std::vector<float> x = random_vector<float>(rng, batch * len * hid);
  const Positions pos = positions_from(batch, len, 4);

  LoopGemm<float> gemm;
  const ga::GatedMultiHeadAttention<float> block(c, m.weights(), {&LoopGemm<float>::run, &gemm});
  Cache<float> ours(c, batch, 16), theirs(c, batch, 16);
  std::vector<float> y;
  REQUIRE(BlockRun{block, {}}.forward(x, batch, len, pos, ours.view(), y).is_ok());
  CHECK(gemm.calls.load() >= 5);  // q, gate, k, v and o projections
  CHECK(max_tolerance_ratio(y, reference_forward(m, x, batch, len, pos, theirs.view()), kAtol,
                            kRtol) <= 1.0);

  const ga::GatedMultiHeadAttention<float> failing(c, m.weights(), {&failing_gemm, nullptr});
  Cache<float> cache(c, batch, 16);
  const ga::Status s = BlockRun{failing, {}}.forward(x, batch, len, pos, cache.view(), y);
  CHECK(s.code() == ga::StatusCode::not_supported);
  CHECK(std::string(s.message()).find("engine gemm") != std::string::npos);
}

// bf16 weights with f32 activations: the reference reads the same rounded weights exactly (their
// widening to f32 is exact), so the f32 tolerance holds. A first prefill of 100 rows takes the
// widened path (kWidenedWeightMinRows), the other steps the kernel; an engine's hook gets the bf16
// weights as they are. Under storage projection precision the prefill runs on AMX tiles where the
// host has them, x rounded to bf16 (Steps' bound for it).
TEST_CASE("Block with bf16 weights matches the reference on the rounded weights", "[block]") {
  STATIC_REQUIRE(ga::kWidenedWeightMinRows <= 100);
  ga::ThreadPool pool(3);
  std::uint64_t salt = 1500;
  for (const auto& [mode, layout] :
       {std::pair{ga::GateMode::elementwise, ga::QGateLayout::qwen3_next},
        {ga::GateMode::headwise, ga::QGateLayout::separate},
        {ga::GateMode::none, ga::QGateLayout::qwen3_next}}) {
    const ga::BlockConfig c = block_config(mode, layout);
    std::mt19937_64 rng = make_rng(salt++);
    const Model<float> m = make_model<float>(c, rng);
    const Model<ga::bf16> rounded_weights = rounded_model<ga::bf16>(m);
    const ga::BlockWeights<float, ga::bf16> weights =
        rounded_weights.weights_with_norms(m.q_norm, m.k_norm);
    LoopGemm<float, ga::bf16> gemm;
    const ga::LinearHook<float, ga::bf16> hooks[] = {{}, {&LoopGemm<float, ga::bf16>::run, &gemm}};
    for (const ga::Isa isa : available_isas()) {
      ga::set_isa_limit(isa);
      for (const ga::Executor& executor : {ga::Executor{}, pool.executor()}) {
        for (const ga::LinearHook<float, ga::bf16>& hook : hooks) {
          INFO("layout " << name_of(layout) << ", gate " << name_of(mode) << ", path "
                         << ga::to_string(isa) << ", workers " << executor.num_workers
                         << ", projections " << ga::linear_backend(hook));
          Steps<ga::bf16>{c, weights, executor, 3, 112, hook, 100}.run(salt);
        }
        INFO("path " << ga::to_string(isa) << ", workers " << executor.num_workers
                     << ", projection precision storage (AMX tiles: "
                     << ga::linear_tiles_run(c.hidden_size) << ")");
        Steps<ga::bf16>{c, weights, executor, 3, 112, {}, 100, ga::DotPrecision::storage}.run(salt);
      }
    }
    ga::clear_isa_limit();
    CHECK(gemm.calls.load() > 0);
  }
}

TEST_CASE("Block with bf16 weights: prefill widens them in the workspace, decode reads them",
          "[block]") {
  const ga::BlockConfig c = block_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  std::mt19937_64 rng = make_rng(1510);
  const Model<float> m = make_model<float>(c, rng);
  const Model<ga::bf16> rounded_weights = rounded_model<ga::bf16>(m);
  const ga::GatedMultiHeadAttention<float, float, ga::bf16> block(
      c, rounded_weights.weights_with_norms(m.q_norm, m.k_norm));
  const ga::GatedMultiHeadAttention<float> f32_block(c, m.weights());
  Cache<float> cache(c, 1, 128);
  const std::int64_t hid = c.hidden_size;
  std::vector<float> x(static_cast<std::size_t>(128 * hid)), y(x.size());
  const Positions pos = positions_from(1, 128, 0);
  // Extra bytes over the f32-weight block: the widest panel widened, per worker, from
  // kWidenedWeightMinRows rows on; none below.
  auto extra_bytes = [&](std::int64_t len, int workers) {
    ga::BlockForwardArgs<float> args;
    args.x = ga::TensorView<const float, 3>::contiguous(x.data(), {1, len, hid});
    args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {1, len});
    args.cache = cache.view();
    args.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, len, hid});
    return static_cast<std::int64_t>(block.workspace_size(args, workers)) -
           static_cast<std::int64_t>(f32_block.workspace_size(args, workers));
  };
  const std::int64_t widened = static_cast<std::int64_t>(ga::widened_weight_floats(
      std::min(ga::linear_panel_width(c.hidden_size, 1), c.hidden_size), c.q_width()));
  CHECK(extra_bytes(1, 1) == 0);
  CHECK(extra_bytes(ga::kWidenedWeightMinRows - 1, 1) == 0);
  CHECK(extra_bytes(ga::kWidenedWeightMinRows, 1) >= widened * 4);
  CHECK(extra_bytes(ga::kWidenedWeightMinRows, 2) >= 2 * widened * 4);
  CHECK(std::string(ga::linear_backend<float, ga::bf16>()) == "kernel");
}

// bf16 and f16 activations: these compile the typed kernels in this unit, which the
// [threads]-only build (its kernels library f32 only) leaves out.
#if !defined(GATED_ATTENTION_THREADS_TESTS_ONLY)
namespace {

// bf16 or f16 activations: x, the weights, every projection's output, the attention's output and
// y in T (norm, RoPE, softmax and the GEMM's sums in f32 or better), a cache of T; against the
// reference in double on the same rounded weights, inputs and cache. Each of the five roundings
// on the way (the projection outputs, q after norm and RoPE, the attention output, y) moves y by
// up to u/2 (u = 2^-8 bf16, 2^-11 f16) of the magnitudes it passes through, which o_proj's sums
// of random signs bring to about 2 max|y|: 5u in all, bound |y - y_ref| <= 8 u max|y_ref| per
// element (measured over seeds: up to 3.6 u).
template <class T>
void check_activations(double u, std::uint64_t salt) {
  const ga::BlockConfig c = block_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  std::mt19937_64 rng = make_rng(salt);
  const Model<T> m = rounded_model<T>(make_model<float>(c, rng));
  const Model<float> widened = rounded_model<float>(m);
  LoopGemm<T> gemm;
  const ga::GatedMultiHeadAttention<T, T> block(c, m.weights(), {&LoopGemm<T>::run, &gemm});
  const std::int64_t seqs = 2, hid = c.hidden_size;
  ga::ThreadPool pool(2);
  for (const ga::Isa isa : available_isas()) {
    ga::set_isa_limit(isa);
    for (const ga::Executor& executor : {ga::Executor{}, pool.executor()}) {
      Cache<T> ours(c, seqs, 48), theirs(c, seqs, 48);
      for (const Step step : {Step{0, 1, 37}, {1, 1, 17}, {0, seqs, 1}, {0, seqs, 1}}) {
        INFO("path " << ga::to_string(isa) << ", workers " << executor.num_workers << ", sequences "
                     << step.first_seq << "+" << step.batch << ", " << step.len << " tokens");
        const std::vector<T> x = random_vector<T>(rng, step.batch * step.len * hid);
        const Positions pos = step.positions(ours.lengths);
        const auto x_view =
            ga::TensorView<const T, 3>::contiguous(x.data(), {step.batch, step.len, hid});
        const auto pos_view =
            ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {step.batch, step.len});
        std::vector<T> y(x.size(), nan_of<T>());
        ga::BlockForwardArgs<T, T> args;
        args.x = x_view;
        args.positions = pos_view;
        args.cache = step.sequences(ours);
        args.y = ga::TensorView<T, 3>::contiguous(y.data(), {step.batch, step.len, hid});
        std::vector<std::byte> ws(block.workspace_size(args, executor));
        const ga::Status s = block.forward(args, ga::Workspace(ws.data(), ws.size()), executor);
        INFO(s.message());
        REQUIRE(s.is_ok());
        const std::vector<float> x_widened = rounded<float>(x);
        std::vector<float> expected(x.size());
        REQUIRE(ga::reference::block_forward(c, widened.weights(),
                                             ga::TensorView<const float, 3>::contiguous(
                                                 x_widened.data(), {step.batch, step.len, hid}),
                                             pos_view, step.sequences(theirs),
                                             ga::TensorView<float, 3>::contiguous(
                                                 expected.data(), {step.batch, step.len, hid}))
                    .is_ok());
        double max_y = 0.0, worst = 0.0;
        for (const float e : expected) max_y = std::max(max_y, std::fabs(double{e}));
        for (std::size_t i = 0; i < y.size(); ++i) {
          track(worst, std::fabs(ga::reference::as_double(y[i]) - expected[i]) / max_y);
        }
        INFO("max |y - y_ref| / max |y_ref| = " << worst << " (u = " << u << ")");
        CHECK(worst <= 8.0 * u);
        CHECK(ours.lengths == theirs.lengths);
      }
    }
  }
  ga::clear_isa_limit();
  CHECK(gemm.calls.load() > 0);
}

}  // namespace

TEST_CASE("Block: bf16 and f16 activations through a GEMM hook match the reference", "[block]") {
  check_activations<ga::bf16>(0x1p-8, 1400);
  check_activations<ga::f16>(0x1p-11, 1401);
}

TEST_CASE("Block: bf16 activations without a GEMM hook are refused", "[block]") {
  const ga::BlockConfig c = block_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  std::mt19937_64 rng = make_rng(1402);
  const Model<ga::bf16> m = rounded_model<ga::bf16>(make_model<float>(c, rng));
  const ga::GatedMultiHeadAttention<ga::bf16> block(c, m.weights());
  Cache<ga::bf16> cache(c, 1, 8);
  const std::vector<ga::bf16> x = random_vector<ga::bf16>(rng, 4 * c.hidden_size);
  std::vector<ga::bf16> y(x.size());
  const Positions pos = positions_from(1, 4, 0);
  ga::BlockForwardArgs<ga::bf16> args;
  args.x = ga::TensorView<const ga::bf16, 3>::contiguous(x.data(), {1, 4, c.hidden_size});
  args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {1, 4});
  args.cache = cache.view();
  args.y = ga::TensorView<ga::bf16, 3>::contiguous(y.data(), {1, 4, c.hidden_size});
  const ga::Status s = block.can_implement(args);
  CHECK(s.code() == ga::StatusCode::not_supported);
  CHECK(std::string(s.message()).find("LinearHook") != std::string::npos);
  CHECK(block.workspace_size(args, 1) == 0);
}

#endif  // !GATED_ATTENTION_THREADS_TESTS_ONLY

TEST_CASE("Block: validation and the workspace", "[block]") {
  const ga::BlockConfig c = block_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  std::mt19937_64 rng = make_rng(1400);
  const Model<float> m = make_model<float>(c, rng);
  const ga::GatedMultiHeadAttention<float> block(c, m.weights());
  const std::int64_t batch = 2, len = 4, hid = c.hidden_size;
  const std::vector<float> x = random_vector<float>(rng, batch * len * hid);
  std::vector<float> y(x.size());
  const Positions pos = positions_from(batch, len, 0);
  Cache<float> cache(c, batch, 6);

  ga::BlockForwardArgs<float> args;
  args.x = ga::TensorView<const float, 3>::contiguous(x.data(), {batch, len, hid});
  args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {batch, len});
  args.cache = cache.view();
  args.y = ga::TensorView<float, 3>::contiguous(y.data(), {batch, len, hid});
  REQUIRE(block.can_implement(args).is_ok());

  auto message_of = [&](const ga::BlockForwardArgs<float>& a) {
    const ga::Status s = block.can_implement(a);
    CHECK(s.code() == ga::StatusCode::invalid_argument);
    return std::string(s.message());
  };
  {
    auto bad = args;
    bad.x.extents[2] = hid - 1;
    CHECK(message_of(bad) == "x: dim 2 (hidden): expected 96, got 95");
  }
  {
    auto bad = args;
    bad.y = ga::TensorView<float, 3>::contiguous(y.data(), {batch, len + 1, hid});
    CHECK(message_of(bad).rfind("y: dim 1 (length)", 0) == 0);
  }
  {
    auto bad = args;
    bad.cache.v.extents[3] = 8;
    CHECK(message_of(bad).rfind("cache.v: dim 3 (dim)", 0) == 0);
  }
  {
    auto bad = args;
    bad.y = ga::TensorView<float, 3>(y.data() + 1, {batch, len, hid}, {len * hid, hid, 1});
    bad.x = ga::TensorView<const float, 3>(y.data(), {batch, len, hid}, {len * hid, hid, 1});
    CHECK(message_of(bad) == "y: overlaps x");
  }
  {
    std::vector<std::int64_t> full = {3, 0};
    auto bad = args;
    bad.cache.lengths = full.data();
    CHECK(message_of(bad).find("exceeds capacity 6") != std::string::npos);
  }
  {
    auto bad = args;
    bad.cache.v = bad.cache.k;
    CHECK(message_of(bad) == "cache.k: overlaps cache.v");
  }

  // The workspace: too small is refused before anything is written.
  for (const int workers : {1, 2}) {
    ga::ThreadPool pool(workers);
    Cache<float> fresh(c, batch, 6);
    args.cache = fresh.view();
    const std::size_t need = block.workspace_size(args, workers);
    std::vector<std::byte> ws(need);
    const ga::Status s = block.forward(args, ga::Workspace(ws.data(), need / 2), pool.executor());
    CHECK(s.code() == ga::StatusCode::workspace_too_small);
    CHECK(fresh.lengths == std::vector<std::int64_t>{0, 0});
    CHECK(std::all_of(fresh.k.data.begin(), fresh.k.data.end(),
                      [](float v) { return std::isnan(v); }));
    REQUIRE(block.forward(args, ga::Workspace(ws.data(), need), pool.executor()).is_ok());
    CHECK(fresh.lengths == std::vector<std::int64_t>{len, len});
  }
  args.cache = cache.view();

  // The workspace depends on the capacity, not on the cached lengths.
  cache.lengths = {2, 1};
  const std::size_t with_prefix = block.workspace_size(args, 2);
  cache.lengths = {0, 0};
  CHECK(with_prefix == block.workspace_size(args, 2));

  const ga::Status phase = block.run_phase(args, ga::Workspace(nullptr, 0),
                                           ga::GatedMultiHeadAttention<float>::kNumPhases, 0, 1);
  CHECK(phase.code() == ga::StatusCode::invalid_argument);
}
