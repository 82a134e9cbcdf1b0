// Heap allocations inside GatedMultiHeadAttention::forward, counted at the malloc level: this
// program replaces glibc's malloc family (which operator new, Eigen and everything else call) with
// counting wrappers around glibc's own __libc_* functions. A separate program, so that the
// replacement touches no other test; not built under sanitizers, which replace malloc themselves.
//
// Checks: with a GEMM hook that allocates nothing, and with OpenBLAS where the build has it (its
// buffers are mmap'ed, not malloc'ed), forward allocates nothing (prefill, chunked prefill and
// batched decode; 1 and 2 workers); the same with bf16 weights (the kernel, and in prefill the
// weights widened in the workspace for OpenBLAS, or under storage precision AMX tiles where the
// host has them). Reports: what Eigen's GEMM allocates.
#include <gated_attention/gated_attention.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
}

namespace {

std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
std::atomic<long> g_bytes{0};

void note(std::size_t bytes) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    g_bytes.fetch_add(static_cast<long>(bytes), std::memory_order_relaxed);
  }
}

}  // namespace

extern "C" {
void* malloc(std::size_t n) {
  note(n);
  return __libc_malloc(n);
}
void* calloc(std::size_t count, std::size_t n) {
  note(count * n);
  return __libc_calloc(count, n);
}
void* realloc(void* p, std::size_t n) {
  note(n);
  return __libc_realloc(p, n);
}
void* memalign(std::size_t alignment, std::size_t n) {
  note(n);
  return __libc_memalign(alignment, n);
}
void* aligned_alloc(std::size_t alignment, std::size_t n) {
  note(n);
  return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t n) {
  note(n);
  void* p = __libc_memalign(alignment, n);
  if (p == nullptr) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}

namespace ga = gated_attention;

namespace {

// y = x W^T (+ bias) with plain loops: allocates nothing.
ga::Status loop_gemm(void*, const ga::LinearArgs<float>& a) {
  for (std::int64_t r = 0; r < a.x.extents[0]; ++r) {
    for (std::int64_t o = 0; o < a.weight.extents[0]; ++o) {
      float sum = a.maybe_bias != nullptr ? a.maybe_bias[o] : 0.0f;
      for (std::int64_t i = 0; i < a.x.extents[1]; ++i) sum += a.x(r, i) * a.weight(o, i);
      a.y(r, o) = sum;
    }
  }
  return ga::Status::ok();
}

struct Counted {
  long allocations = 0, bytes = 0;
  bool ok = true;
};

struct Layer {
  ga::BlockConfig c;
  std::vector<float> q_proj, k_proj, v_proj, o_proj, norm;
  std::vector<ga::bf16> q_bf16, k_bf16, v_bf16, o_bf16;  // the matrices rounded to bf16
  std::vector<float> k_cache, v_cache;
  std::vector<std::int64_t> lengths;
  std::int64_t capacity = 0;

  Layer(std::int64_t seqs, std::int64_t cap) : capacity(cap) {
    c.hidden_size = 256;
    c.num_q_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.gate_mode = ga::GateMode::elementwise;
    c.rotary_dim = 16;
    const std::int64_t hid = c.hidden_size;
    auto fill = [](std::int64_t n) {
      std::vector<float> v(static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
      return v;
    };
    q_proj = fill(c.q_proj_rows() * hid);
    k_proj = fill(c.kv_width() * hid);
    v_proj = fill(c.kv_width() * hid);
    o_proj = fill(hid * c.q_width());
    norm = fill(c.head_dim);
    for (auto [to, from] : {std::pair{&q_bf16, &q_proj},
                            {&k_bf16, &k_proj},
                            {&v_bf16, &v_proj},
                            {&o_bf16, &o_proj}}) {
      for (const float e : *from) to->push_back(ga::bf16(e));
    }
    k_cache.resize(static_cast<std::size_t>(seqs * cap * c.kv_width()));
    v_cache.resize(k_cache.size());
    lengths.assign(static_cast<std::size_t>(seqs), 0);
  }

  // The weights, the matrices in W: f32 or their bf16 copies.
  template <class W>
  ga::BlockWeights<float, W> weights() const {
    const std::int64_t hid = c.hidden_size;
    const auto pick = [](const std::vector<float>& f32, const std::vector<ga::bf16>& bf16) {
      if constexpr (std::is_same_v<W, float>) {
        return f32.data();
      } else {
        return bf16.data();
      }
    };
    ga::BlockWeights<float, W> w;
    w.q_proj = ga::TensorView<const W, 2>::contiguous(pick(q_proj, q_bf16), {c.q_proj_rows(), hid});
    w.k_proj = ga::TensorView<const W, 2>::contiguous(pick(k_proj, k_bf16), {c.kv_width(), hid});
    w.v_proj = ga::TensorView<const W, 2>::contiguous(pick(v_proj, v_bf16), {c.kv_width(), hid});
    w.o_proj = ga::TensorView<const W, 2>::contiguous(pick(o_proj, o_bf16), {hid, c.q_width()});
    w.maybe_q_norm = w.maybe_k_norm = norm.data();
    return w;
  }

  // Appends len tokens to sequences [0, batch); counts the allocations of forward() alone.
  template <class W>
  Counted forward(const ga::GatedMultiHeadAttention<float, float, W>& block, std::int64_t batch,
                  std::int64_t len, const ga::Executor& executor, ga::DotPrecision precision) {
    const std::int64_t hid = c.hidden_size;
    const std::vector<float> x(static_cast<std::size_t>(batch * len * hid), 0.5f);
    std::vector<float> y(x.size());
    std::vector<std::int64_t> positions;
    for (std::int64_t s = 0; s < batch; ++s) {
      for (std::int64_t t = 0; t < len; ++t) positions.push_back(lengths[s] + t);
    }
    const std::array<std::int64_t, 4> extents = {batch, capacity, c.num_kv_heads, c.head_dim};
    ga::BlockForwardArgs<float> args;
    args.x = ga::TensorView<const float, 3>::contiguous(x.data(), {batch, len, hid});
    args.positions =
        ga::TensorView<const std::int64_t, 2>::contiguous(positions.data(), {batch, len});
    args.cache = {ga::TensorView<float, 4>::contiguous(k_cache.data(), extents),
                  ga::TensorView<float, 4>::contiguous(v_cache.data(), extents), lengths.data()};
    args.y = ga::TensorView<float, 3>::contiguous(y.data(), {batch, len, hid});
    args.projection_precision = precision;
    std::vector<std::byte> ws(block.workspace_size(args, executor));

    g_allocations = 0;
    g_bytes = 0;
    g_counting = true;
    const ga::Status s = block.forward(args, ga::Workspace(ws.data(), ws.size()), executor);
    g_counting = false;
    Counted counted{g_allocations.load(), g_bytes.load(), s.is_ok()};
    if (!s) std::fprintf(stderr, "forward failed: %s\n", s.message());
    return counted;
  }
};

struct Step {
  const char* name;
  std::int64_t batch, len;
};
constexpr Step kSteps[] = {
    {"prefill 512 tokens", 1, 512}, {"chunk of 32", 1, 32}, {"decode, 3 sequences", 3, 1}};

// Runs the steps through `block`; counts a failure per failed call, and per call that allocates
// where the backend must not.
template <class W>
int run_steps(Layer& layer, const ga::GatedMultiHeadAttention<float, float, W>& block,
              const char* backend, bool must_not_allocate, const ga::Executor& executor,
              ga::DotPrecision precision = ga::DotPrecision::exact) {
  int failures = 0;
  for (const Step& step : kSteps) {
    const Counted n = layer.forward(block, step.batch, step.len, executor, precision);
    std::printf("%-22s %-20s %d worker(s): %ld allocations, %ld bytes\n", backend, step.name,
                executor.num_workers, n.allocations, n.bytes);
    if (!n.ok || (must_not_allocate && n.allocations != 0)) ++failures;
  }
  return failures;
}

}  // namespace

int main() {
  int failures = 0;
  for (const int workers : {1, 2}) {
    ga::ThreadPool pool(workers);  // threads start before counting
    struct Backend {
      const char* name;
      ga::LinearHook<float> hook;
      bool must_not_allocate;
    };
    std::vector<Backend> backends = {{"allocation-free hook", {&loop_gemm, nullptr}, true},
                                     {"Eigen", {&ga::linear_eigen<float>, nullptr}, false}};
#if GATED_ATTENTION_OPENBLAS
    backends.push_back({"OpenBLAS", ga::openblas_linear_hook<float>(), true});
#endif
    for (const Backend& backend : backends) {
      Layer layer(/*seqs=*/3, /*capacity=*/600);
      const ga::GatedMultiHeadAttention<float> block(layer.c, layer.weights<float>(), backend.hook);
      failures += run_steps(layer, block, backend.name, backend.must_not_allocate, pool.executor());
    }
    // bf16 weights, the default: the kernel, and in prefill the weights widened for the f32
    // default (which allocates only where that is Eigen).
    Layer layer(/*seqs=*/3, /*capacity=*/600);
    const ga::GatedMultiHeadAttention<float, float, ga::bf16> block(layer.c,
                                                                    layer.weights<ga::bf16>());
#if GATED_ATTENTION_OPENBLAS
    const bool widened_must_not_allocate = true;
#else
    const bool widened_must_not_allocate = false;
#endif
    failures += run_steps(layer, block, "bf16 weights", widened_must_not_allocate, pool.executor());
    // Under storage precision, prefill on AMX tiles where the host has them (from the workspace).
    const bool tiles_must_not_allocate = widened_must_not_allocate || ga::linear_tiles_run(256);
    Layer fresh(/*seqs=*/3, /*capacity=*/600);
    const ga::GatedMultiHeadAttention<float, float, ga::bf16> tiled(fresh.c,
                                                                    fresh.weights<ga::bf16>());
    failures += run_steps(fresh, tiled, "bf16 weights, storage", tiles_must_not_allocate,
                          pool.executor(), ga::DotPrecision::storage);
  }
  std::printf("%s\n",
              failures == 0 ? "ok: forward allocates nothing outside Eigen's products" : "FAILED");
  return failures == 0 ? 0 : 1;
}
