// The machine's own limits, measured in the benchmark binary so that kernel rows can be read as a
// share of them:
//   peak/fma_f32/threads:<n>          counter flops: independent FMA chains on the widest ISA
//   peak/bf16_dot/threads:<n>         counter flops: independent vdpbf16ps chains (AVX512-BF16
//                                     hosts only; each lane adds two bf16 products)
//   peak/read_bw/<shape>/threads:<n>  counter bytes_per_second: a streaming read of exactly the
//                                     K/V bytes of that decode shape (named, or
//                                     sweep_decode_<kv_len>)
//   peak/read_bw_head_major/<shape>/threads:<n>  the same K/V bytes read in the decode kernel's
//                                     order, hardware prefetch alone: per block of
//                                     head_major_block() keys, each head's K rows, then its V
//                                     rows
//   decode_read_share/<f32|f32-kv<t>>/<shape>/threads:<n>  counter share: the median over
//                                     back-to-back pairs of (streaming read time / decode call
//                                     time), the two reading the same K/V bytes (t in bf16, f16,
//                                     i8; int8 scales included): the decode row's bytes_per_second
//                                     as a share of peak/read_bw, with the machine's drift between
//                                     separately timed rows cancelled within each pair
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <gated_attention/gated_attention.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "aligned_buffer.hpp"
#include "sdpa_case.hpp"
#include "shapes.hpp"

namespace ga = gated_attention;
using ga::bench::AttentionShape;

namespace {

constexpr int kChains = 12;  // independent accumulators: latency 4 x 2 FMA ports, with margin
constexpr std::int64_t kFmaIterations = 1 << 20;

#if defined(__x86_64__) || defined(_M_X64)
// Through memory: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized.
__attribute__((target("avx512f"))) float sum_lanes(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

__attribute__((target("avx512f"))) float fma_chains_avx512(std::int64_t iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return sum_lanes(sum);
}

// vdpbf16ps chains: acc += x[2l] y[2l] + x[2l+1] y[2l+1] per f32 lane, 64 FLOPs an instruction.
__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_chains(std::int64_t iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(2e-3f), _mm512_set1_ps(2e-3f));
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], x, y);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return sum_lanes(sum);
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(std::int64_t iterations) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

__attribute__((target("avx512f"))) float read_avx512(const float* p, std::int64_t n) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int c = 0; c < 4; ++c) acc[c] = _mm512_add_ps(acc[c], _mm512_loadu_ps(p + i + 16 * c));
  }
  float tail = 0;
  for (; i < n; ++i) tail += p[i];
  return sum_lanes(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]))) +
         tail;
}
#endif

float fma_chains_scalar(std::int64_t iterations) {
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = static_cast<float>(c);
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * 0.999999f + 1e-7f;
  }
  float total = 0;
  for (float x : acc) total += x;
  return total;
}

float read_scalar(const float* p, std::int64_t n) {
  float acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int c = 0; c < 8; ++c) acc[c] += p[i + c];
  }
  for (; i < n; ++i) acc[0] += p[i];
  float total = 0;
  for (float x : acc) total += x;
  return total;
}

struct Isa {
  const char* name;
  int lanes;
  float (*fma_chains)(std::int64_t);
  float (*read)(const float*, std::int64_t);
};

// The widest path the library dispatches to (the same detection and GATED_ATTENTION_ISA cap).
Isa widest_isa() {
  switch (ga::active_isa()) {
#if defined(__x86_64__) || defined(_M_X64)
    case ga::Isa::avx512:
      return {"avx512", 16, fma_chains_avx512, read_avx512};
    case ga::Isa::avx2:
      return {"avx2", 8, fma_chains_avx2, read_scalar};
#endif
    default:
      return {"scalar", 1, fma_chains_scalar, read_scalar};
  }
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Rounds of `chains` (kFmaIterations steps of kChains independent chains) on every worker,
// reported as flops for flops_per_step FLOPs a chain step.
void time_chains(benchmark::State& state, int threads, float (*chains)(std::int64_t),
                 double flops_per_step, const char* label) {
  ga::ThreadPool pool(threads);
  const ga::Executor ex = pool.executor();
  std::vector<float> sink(static_cast<std::size_t>(threads));
  std::int64_t rounds = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    ga::parallel_for(ex, threads, [&](std::int64_t t, int) {
      sink[static_cast<std::size_t>(t)] = chains(kFmaIterations);
    });
    benchmark::DoNotOptimize(sink.data());
    ++rounds;
  }
  const double flops = flops_per_step * kChains * static_cast<double>(kFmaIterations) * threads *
                       static_cast<double>(rounds);
  state.counters["flops"] = flops / seconds_since(start);
  state.SetLabel(label);
}

void peak_fma(benchmark::State& state, int threads) {
  const Isa isa = widest_isa();
  time_chains(state, threads, isa.fma_chains, 2.0 * isa.lanes, isa.name);
}

#if defined(__x86_64__)
// 16 lanes, each adding two bf16 products an instruction.
void peak_bf16_dot(benchmark::State& state, int threads) {
  time_chains(state, threads, bf16_dot_chains, 64.0, "avx512_bf16");
}
#endif

// n floats with distinct values on every page (value i % modulus): identical pages may be merged
// by the host and then read from cache, which would overstate the bandwidth.
ga::bench::AlignedVector<float> distinct_floats(std::int64_t n, std::int64_t modulus) {
  ga::bench::AlignedVector<float> buffer(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    buffer[static_cast<std::size_t>(i)] = static_cast<float>(i % modulus);
  return buffer;
}

// Rounds of read_share(t) (worker t of `threads` reads its share and returns a sum), reported as
// bytes_per_second for `bytes` read per round.
template <class ReadShare>
void time_reads(benchmark::State& state, double bytes, int threads, const char* isa_name,
                ReadShare read_share) {
  ga::ThreadPool pool(threads);
  const ga::Executor ex = pool.executor();
  std::vector<float> sink(static_cast<std::size_t>(threads));
  std::int64_t rounds = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    ga::parallel_for(ex, threads, [&](std::int64_t t, int) {
      sink[static_cast<std::size_t>(t)] = read_share(static_cast<int>(t));
    });
    benchmark::DoNotOptimize(sink.data());
    ++rounds;
  }
  state.counters["bytes_per_second"] = bytes * static_cast<double>(rounds) / seconds_since(start);
  state.SetLabel(isa_name);
}

void peak_read_bw(benchmark::State& state, std::int64_t bytes, int threads) {
  const Isa isa = widest_isa();
  const std::int64_t n = bytes / static_cast<std::int64_t>(sizeof(float));
  const auto buffer = distinct_floats(n, 1000003);
  time_reads(state, static_cast<double>(bytes), threads, isa.name, [&](int t) {
    const ga::TaskRange r = ga::worker_share(n, t, threads);
    return isa.read(buffer.data() + r.begin, r.end - r.begin);
  });
}

// time_pairs of an ungated decode call with K/V stored as E and a streaming read of a buffer of
// the call's K/V bytes (scales included), on the same workers; counter `share`: read time / call
// time.
template <class E>
void decode_read_share(benchmark::State& state, AttentionShape s, int threads,
                       ga::DotPrecision precision) {
  const Isa isa = widest_isa();
  const auto n = static_cast<std::int64_t>(ga::bench::StoredKv<E>::bytes(s) / sizeof(float));
  const auto buffer = distinct_floats(n, 1000003);
  const ga::bench::SdpaCase c(s);
  ga::bench::SdpaRunner call(threads, {c.args});
  std::vector<float> sink(static_cast<std::size_t>(threads));
  auto read = [&] {
    ga::parallel_for(call.executor, threads, [&](std::int64_t t, int) {
      const ga::TaskRange r = ga::worker_share(n, static_cast<int>(t), threads);
      sink[static_cast<std::size_t>(t)] = isa.read(buffer.data() + r.begin, r.end - r.begin);
    });
    benchmark::DoNotOptimize(sink.data());
  };
  auto pairs = [&](const auto& args) {
    ga::bench::time_pairs(
        state, "share", [&] { call(state, args); }, read);
  };
  if constexpr (std::is_same_v<E, float>) {
    pairs(c.args);
    state.SetLabel(ga::sdpa_path());
  } else {
    const ga::bench::StoredKv<E> stored(c);
    auto args = stored.args(c.args);
    args.dot_precision = precision;
    pairs(args);
    state.SetLabel(ga::sdpa_path(args));
  }
}

// Keys per decode block (Tuning::kDecodeBlock) of the path that runs.
std::int64_t head_major_block() {
  namespace k = ga::kernels;
  switch (ga::active_isa()) {
#if GATED_ATTENTION_X86
    case ga::Isa::avx512:
      return k::avx512::Tuning::kDecodeBlock;
    case ga::Isa::avx2:
      return k::avx2::Tuning::kDecodeBlock;
#elif GATED_ATTENTION_AARCH64
    case ga::Isa::neon:
      return k::neon::Tuning::kDecodeBlock;
#endif
    default:
      return k::scalar::Tuning::kDecodeBlock;
  }
}

// K and V [kv_len, kv_heads, head_dim] each, read as the decode kernel walks them (one unit of
// every head; each worker a share of the blocks).
void peak_read_bw_head_major(benchmark::State& state, AttentionShape s, int threads) {
  const Isa isa = widest_isa();
  const std::int64_t heads = s.batch * s.kv_heads, d = s.head_dim, row = heads * d;
  const auto k = distinct_floats(s.kv_len * row, 1000003);
  const auto v = distinct_floats(s.kv_len * row, 999983);
  const std::int64_t block = head_major_block();
  const std::int64_t blocks = (s.kv_len + block - 1) / block;
  time_reads(state, s.kv_bytes(), threads, isa.name, [&](int t) {
    const ga::TaskRange r = ga::worker_share(blocks, t, threads);
    float total = 0;
    for (std::int64_t b = r.begin; b < r.end; ++b) {
      const std::int64_t first = b * block;
      const std::int64_t last = std::min(s.kv_len, first + block);
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t key = first; key < last; ++key)
          total += isa.read(&k[static_cast<std::size_t>(key * row + h * d)], d);
        for (std::int64_t key = first; key < last; ++key)
          total += isa.read(&v[static_cast<std::size_t>(key * row + h * d)], d);
      }
    }
    return total;
  });
}

// The K/V bytes of a decode shape: the named ones under their names, the decode sweep's as
// sweep_decode_<kv_len>.
void register_read_bw(const std::string& name, const AttentionShape& s, const std::string& suffix,
                      int threads) {
  benchmark::RegisterBenchmark(("peak/read_bw/" + name + suffix).c_str(), peak_read_bw,
                               static_cast<std::int64_t>(s.kv_bytes()), threads)
      ->Unit(benchmark::kMillisecond);
}

template <class E>
void register_read_share(const char* dtype, const AttentionShape& s, const std::string& suffix,
                         int threads, ga::DotPrecision precision = ga::DotPrecision::exact) {
  const bool storage = precision == ga::DotPrecision::storage;
  benchmark::RegisterBenchmark(
      (std::string("decode_read_share/") + dtype + (storage ? "-storage/" : "/") + s.name + suffix)
          .c_str(),
      decode_read_share<E>, s, threads, precision)
      ->Unit(benchmark::kMillisecond);
}

int register_peaks() {
  benchmark::AddCustomContext("huge_pages", ga::bench::huge_pages_requested()
                                                ? "advised for buffers of 2 MiB or more"
                                                : "no (GATED_ATTENTION_BENCH_HUGE_PAGES unset)");
  for (int threads : {1, 2}) {
    const std::string suffix = "/threads:" + std::to_string(threads);
    benchmark::RegisterBenchmark(("peak/fma_f32" + suffix).c_str(), peak_fma, threads)
        ->Unit(benchmark::kMillisecond);
#if defined(__x86_64__)
    if (ga::cpu_features().avx512_bf16 && ga::isa_available(ga::Isa::avx512)) {
      benchmark::RegisterBenchmark(("peak/bf16_dot" + suffix).c_str(), peak_bf16_dot, threads)
          ->Unit(benchmark::kMillisecond);
    }
#endif
    for (const AttentionShape& s : ga::bench::kShapes) {
      if (!s.decode) continue;
      register_read_bw(s.name, s, suffix, threads);
      benchmark::RegisterBenchmark(
          (std::string("peak/read_bw_head_major/") + s.name + suffix).c_str(),
          peak_read_bw_head_major, s, threads)
          ->Unit(benchmark::kMillisecond);
      register_read_share<float>("f32", s, suffix, threads);
      register_read_share<ga::bf16>("f32-kvbf16", s, suffix, threads);
      register_read_share<ga::f16>("f32-kvf16", s, suffix, threads);
      register_read_share<std::int8_t>("f32-kvi8", s, suffix, threads);
      register_read_share<ga::bf16>("f32-kvbf16", s, suffix, threads, ga::DotPrecision::storage);
      register_read_share<std::int8_t>("f32-kvi8", s, suffix, threads, ga::DotPrecision::storage);
    }
    for (std::int64_t kv_len : ga::bench::kSweepDecodeLens) {
      register_read_bw("sweep_decode_" + std::to_string(kv_len),
                       ga::bench::sweep_decode_shape(kv_len), suffix, threads);
    }
  }
  return 0;
}
const int registered = register_peaks();

}  // namespace
