// Packed variable-length batches (flash-attn's varlen layout: q [1, total_q, ...] with
// cu_seqlens_q), llama8b's heads (Hq 32, Hkv 8, D 128), causal, bottom-right aligned:
//   sdpa_varlen/<dtype>/<batch>/threads:<n>  counters: varlen_speedup, the median over
//       back-to-back pairs of (the batch as one call per entry / the batch as one packed call);
//       packed_ms, the median packed call; flops, the useful FLOP/s of the packed call
// with batch
//   mixed       4 entries decoding at 8K keys and one 512-query chunk ending a 4K prompt
//   many_small  64 entries decoding at 128 to 2K keys (evenly spaced)
// and dtype f32 or f32-kvbf16-storage (K/V stored as bf16, read by the storage dot). K/V are one
// contiguous cache per entry; both sides of a pair read the same buffers on the same workers.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "sdpa_case.hpp"

namespace ga = gated_attention;
using ga::bench::AlignedVector;

namespace {

constexpr std::int64_t kQueryHeads = 32, kKvHeads = 8, kHeadDim = 128;

struct Entry {
  std::int64_t q_len, kv_len;
};

std::vector<Entry> batch_of(const std::string& name) {
  std::vector<Entry> entries;
  if (name == "mixed") {
    entries.assign(4, Entry{1, 8192});
    entries.push_back({512, 4096});
  } else {  // many_small
    for (std::int64_t b = 0; b < 64; ++b) entries.push_back({1, 128 + (2048 - 128) * b / 63});
  }
  return entries;
}

// The batch's buffers and its packed and per-entry arguments, K/V as E.
template <class E>
struct VarlenBatch {
  std::vector<Entry> entries;
  std::int64_t capacity = 0, total_q = 0;
  std::vector<std::int32_t> cu;
  std::vector<std::int64_t> kv_lens;
  AlignedVector<float> q, out;
  AlignedVector<E> k, v;
  ga::SdpaArgs<float, E, E> packed;
  std::vector<ga::SdpaArgs<float, E, E>> separate;  // one call per entry

  VarlenBatch(std::vector<Entry> batch, ga::DotPrecision precision) : entries(std::move(batch)) {
    cu.push_back(0);
    for (const Entry& e : entries) {
      capacity = std::max(capacity, e.kv_len);
      kv_lens.push_back(e.kv_len);
      cu.push_back(cu.back() + static_cast<std::int32_t>(e.q_len));
    }
    total_q = cu.back();
    const auto b = static_cast<std::int64_t>(entries.size());
    q = ga::bench::random_buffer(static_cast<std::size_t>(total_q * kQueryHeads * kHeadDim), 1);
    out.assign(q.size(), 0.0f);
    k = stored(
        ga::bench::random_buffer(static_cast<std::size_t>(b * capacity * kKvHeads * kHeadDim), 2));
    v = stored(
        ga::bench::random_buffer(static_cast<std::size_t>(b * capacity * kKvHeads * kHeadDim), 3));
    packed = args_of(0, total_q, 0, b);
    packed.maybe_cu_seqlens_q =
        ga::TensorView<const std::int32_t, 1>::contiguous(cu.data(), {b + 1});
    packed.dot_precision = precision;
    for (std::int64_t i = 0; i < b; ++i) {
      separate.push_back(args_of(cu[static_cast<std::size_t>(i)], entries[i].q_len, i, 1));
      separate.back().dot_precision = precision;
    }
  }

  // Queries [first, first + count) of the packed rows against entries [entry, entry + n).
  ga::SdpaArgs<float, E, E> args_of(std::int64_t first, std::int64_t count, std::int64_t entry,
                                    std::int64_t n) const {
    const std::int64_t row = kKvHeads * kHeadDim, q_row = kQueryHeads * kHeadDim;
    ga::SdpaArgs<float, E, E> a;
    a.q = ga::split_heads(ga::TensorView<const float, 4>::contiguous(
                              q.data() + first * q_row, {1, count, kQueryHeads, kHeadDim}),
                          kKvHeads);
    a.out = ga::split_heads(
        ga::TensorView<float, 4>::contiguous(const_cast<float*>(out.data()) + first * q_row,
                                             {1, count, kQueryHeads, kHeadDim}),
        kKvHeads);
    a.k = ga::TensorView<const E, 4>::contiguous(k.data() + entry * capacity * row,
                                                 {n, capacity, kKvHeads, kHeadDim});
    a.v = ga::TensorView<const E, 4>::contiguous(v.data() + entry * capacity * row,
                                                 {n, capacity, kKvHeads, kHeadDim});
    a.maybe_kv_lens = kv_lens.data() + entry;
    a.mask = ga::Mask::causal();
    return a;
  }

  static AlignedVector<E> stored(const AlignedVector<float>& x) {
    AlignedVector<E> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = ga::from_float<E>(x[i]);
    return y;
  }

  // Useful FLOPs of the batch: 4 * Hq * D per visible (query, key) pair.
  double useful_flops() const {
    double pairs = 0.0;
    for (const Entry& e : entries) {
      for (std::int64_t i = 0; i < e.q_len; ++i)
        pairs += static_cast<double>(e.kv_len - e.q_len + i + 1);
    }
    return 4.0 * static_cast<double>(kQueryHeads * kHeadDim) * pairs;
  }
};

template <class E>
void run_varlen(benchmark::State& state, std::string batch, int threads,
                ga::DotPrecision precision) {
  const VarlenBatch<E> t(batch_of(batch), precision);
  ga::bench::SdpaRunner call(threads, {});
  std::size_t bytes = ga::workspace_size(t.packed, call.executor);
  for (const auto& a : t.separate) bytes = std::max(bytes, ga::workspace_size(a, call.executor));
  call.workspace.resize(bytes);
  if (const ga::Status s = ga::can_implement(t.packed); !s) {
    state.SkipWithError(s.message());
    return;
  }
  const double packed = ga::bench::time_pairs(
      state, "varlen_speedup", [&] { call(state, t.packed); },
      [&] {
        for (const auto& a : t.separate) call(state, a);
      });
  if (packed <= 0.0) return;
  state.counters["packed_ms"] = packed * 1e3;
  state.counters["flops"] = t.useful_flops() / packed;
  state.SetLabel(ga::sdpa_path(t.packed));
}

template <class E>
void register_varlen(const std::string& dtype, ga::DotPrecision precision) {
  for (const char* batch : {"mixed", "many_small"}) {
    for (int threads : {1, 2}) {
      const std::string name =
          "sdpa_varlen/" + dtype + "/" + batch + "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), run_varlen<E>, std::string(batch), threads,
                                   precision)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

int register_all() {
  register_varlen<float>("f32", ga::DotPrecision::exact);
  register_varlen<ga::bf16>("f32-kvbf16-storage", ga::DotPrecision::storage);
  return 0;
}
const int registered = register_all();

}  // namespace
