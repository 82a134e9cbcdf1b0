// ops/sdpa run() allocates no memory: every global operator new / new[] of the test program is
// replaced by a counting one, and counting is switched on only around run() (on the calling
// thread and the ThreadPool's workers alike: the flag and the counter are process-wide atomics).
// Catch's own allocations stay outside the counted region: results are stored first and asserted
// after counting is switched off.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <new>
#include <string>
#include <vector>

#include "support.hpp"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<std::int64_t> g_allocations{0};

void note_allocation() {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
}

void* allocate(std::size_t n) {
  note_allocation();
  return std::malloc(n == 0 ? 1 : n);
}

void* allocate_aligned(std::size_t n, std::size_t alignment) {
  note_allocation();
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  const std::size_t size = (n == 0 ? 1 : n + alignment - 1) / alignment * alignment;
#if defined(_WIN32)
  return _aligned_malloc(size, alignment);
#else
  return std::aligned_alloc(alignment, size);
#endif
}

void release_aligned(void* p) noexcept {
#if defined(_WIN32)
  _aligned_free(p);
#else
  std::free(p);
#endif
}

}  // namespace

void* operator new(std::size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return allocate(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return allocate(n);
}
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = allocate_aligned(n, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) {
  if (void* p = allocate_aligned(n, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_aligned(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_aligned(n, static_cast<std::size_t>(a));
}

void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  release_aligned(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  release_aligned(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  release_aligned(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  release_aligned(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  release_aligned(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  release_aligned(p);
}

namespace ga = gated_attention;
using ga::testing::Tensor;

namespace {

// Owned inputs and outputs of one problem, [b, len, heads, d] contiguous.
struct AllocProblem {
  std::int64_t hkv;
  Tensor<float, 4> q, k, v, out, gate, lse;
  std::vector<float> sinks;

  AllocProblem(std::int64_t b, std::int64_t ql, std::int64_t kl, std::int64_t hq, std::int64_t hkv_,
               std::int64_t d, std::uint64_t salt)
      : hkv(hkv_),
        q({b, ql, hq, d}),
        k({b, kl, hkv_, d}),
        v({b, kl, hkv_, d}),
        out({b, ql, hq, d}),
        gate({b, ql, hq, d}),
        lse({b, ql, hkv_, hq / hkv_}),
        sinks(static_cast<std::size_t>(hq), 0.5f) {
    auto rng = ga::testing::make_rng(salt);
    q = Tensor<float, 4>(q.extents, rng);
    k = Tensor<float, 4>(k.extents, rng);
    v = Tensor<float, 4>(v.extents, rng);
    gate = Tensor<float, 4>(gate.extents, rng, -3.0, 3.0);
  }

  ga::SdpaArgs<float> args() {
    ga::SdpaArgs<float> a;
    a.q = ga::split_heads(q.cview(), hkv);
    a.k = k.cview();
    a.v = v.cview();
    a.out = ga::split_heads(out.view(), hkv);
    return a;
  }
};

struct Counted {
  ga::Status status;
  std::int64_t allocations = 0;
};

// The counted region holds run() and nothing else.
Counted counted_run(const ga::SdpaArgs<float>& args, std::vector<std::byte>& ws,
                    const ga::Executor& executor) {
  Counted r;
  g_allocations.store(0, std::memory_order_relaxed);
  g_counting.store(true, std::memory_order_seq_cst);
  r.status = ga::run(args, ga::Workspace(ws.data(), ws.size()), executor);
  g_counting.store(false, std::memory_order_seq_cst);
  r.allocations = g_allocations.load(std::memory_order_relaxed);
  return r;
}

}  // namespace

TEST_CASE("sdpa: run() allocates no memory on any path", "[sdpa][alloc]") {
  // Sanity: the replacement counts.
  g_allocations.store(0);
  g_counting.store(true);
  void* volatile probe = ::operator new(100);
  ::operator delete(probe);
  void* volatile probe_array = ::operator new[](100, std::align_val_t{64});
  ::operator delete[](probe_array, std::align_val_t{64});
  g_counting.store(false);
  REQUIRE(g_allocations.load() == 2);

  ga::ThreadPool pool(2);
  const ga::Executor serial;
  const ga::Executor two = pool.executor();

  AllocProblem prefill(1, 96, 96, 8, 2, 64, 1);
  ga::SdpaArgs<float> prefill_args = prefill.args();
  prefill_args.mask = ga::Mask::causal();

  AllocProblem decode(1, 1, 1500, 8, 1, 128, 2);
  const ga::SdpaArgs<float> decode_args = decode.args();
  REQUIRE(ga::kernels::make_sdpa_plan(decode_args, 2).splits > 1);

  AllocProblem gated(2, 5, 700, 8, 2, 80, 3);
  const std::int64_t kv_lens[2] = {700, 301};
  ga::SdpaArgs<float> gated_args = gated.args();
  gated_args.mask = ga::Mask::causal();
  gated_args.maybe_kv_lens = kv_lens;
  gated_args.maybe_sink_logits = gated.sinks.data();
  gated_args.maybe_lse = gated.lse.view();
  gated_args.gate.values = ga::split_heads(gated.gate.cview(), 2);
  gated_args.gate.activation = ga::GateActivation::silu;

  AllocProblem gated_decode(1, 1, 1200, 4, 1, 64, 4);
  ga::SdpaArgs<float> gated_decode_args = gated_decode.args();
  gated_decode_args.softmax_plus_one = true;
  gated_decode_args.maybe_lse = gated_decode.lse.view();
  gated_decode_args.gate.values = ga::split_heads(gated_decode.gate.cview(), 1);
  REQUIRE(ga::kernels::make_sdpa_plan(gated_decode_args, 2).splits > 1);

  struct Run {
    const char* name;
    const ga::SdpaArgs<float>* args;
    const ga::Executor* executor;
  };
  const Run runs[] = {
      {"prefill, serial", &prefill_args, &serial},
      {"prefill, 2 workers", &prefill_args, &two},
      {"decode, split keys, 2 workers", &decode_args, &two},
      {"gated, sinks, lse, kv_lens, serial", &gated_args, &serial},
      {"gated, sinks, lse, kv_lens, 2 workers", &gated_args, &two},
      {"gated decode, softmax+1, lse, split keys, 2 workers", &gated_decode_args, &two},
  };
  std::vector<std::vector<std::byte>> workspaces;
  for (const Run& r : runs) {
    workspaces.emplace_back(ga::workspace_size(*r.args, *r.executor));
  }

  for (ga::Isa isa : ga::testing::available_isas()) {
    ga::set_isa_limit(isa);
    const bool selected = ga::active_isa() == isa;
    Counted results[std::size(runs)];
    for (std::size_t i = 0; i < std::size(runs); ++i) {
      results[i] = counted_run(*runs[i].args, workspaces[i], *runs[i].executor);
    }
    ga::clear_isa_limit();
    INFO("isa " << ga::to_string(isa));
    REQUIRE(selected);
    for (std::size_t i = 0; i < std::size(runs); ++i) {
      INFO(runs[i].name << ": " << results[i].status.message());
      CHECK(results[i].status.is_ok());
      CHECK(results[i].allocations == 0);
    }
  }
}
