// SDPA reading K/V from shuffled pages through a page table (vLLM / FlashInfer layout):
//   sdpa_paged/<gate>/<dtype>/<shape>/page:<p>/threads:<n>  counters as sdpa/... (flops and, for
//       decode shapes, bytes_per_second)
//   paged_overhead/<dtype>/<shape>/page:<p>/threads:<n>  counter ratio: the median over
//       back-to-back pairs of (paged call time / contiguous call time), ungated, same workers
// with dtype f32 (every shape) and f32-kvbf16-storage (the decode shapes), p in 1, 16, 32, 256.
// The pool holds exactly the pages the sequence needs, in a shuffled order.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>

#include "sdpa_case.hpp"
#include "shapes.hpp"

namespace ga = gated_attention;
using ga::bench::AlignedVector;
using ga::bench::AttentionShape;
using ga::bench::Gate;

namespace {

constexpr std::int64_t kPageSizes[] = {1, 16, 32, 256};

// Contiguous K/V of a case (one entry) copied into shuffled pages of `page` keys.
template <class E>
struct PagedKv {
  std::int64_t page = 0, pages = 0;
  AlignedVector<E> k, v;
  AlignedVector<float> k_scales, v_scales;
  std::vector<std::int32_t> table;
  std::vector<std::int64_t> lens;

  template <class T>
  PagedKv(const ga::SdpaArgs<T, E, E>& a, std::int64_t page_size) : page(page_size) {
    const std::int64_t len = a.k.extents[1], heads = a.k.extents[2];
    pages = (len + page - 1) / page;
    table.resize(static_cast<std::size_t>(pages));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(7));
    lens.assign(1, len);
    copy(a.k, k);
    copy(a.v, v);
    if constexpr (std::is_same_v<E, std::int8_t>) {
      copy_scales(a.maybe_k_scales, k_scales, heads);
      copy_scales(a.maybe_v_scales, v_scales, heads);
    }
  }

  template <class T>
  ga::SdpaArgs<T, E, E> args(const ga::SdpaArgs<T, E, E>& a) const {
    const auto pool = [&](const E* data, const ga::TensorView<const E, 4>& t) {
      return ga::TensorView<const E, 4>::contiguous(data,
                                                    {pages, page, t.extents[2], t.extents[3]});
    };
    ga::TensorView<const float, 3> ks, vs;
    if (!k_scales.empty()) {
      ks = ga::TensorView<const float, 3>::contiguous(k_scales.data(),
                                                      {pages, page, a.k.extents[2]});
      vs = ga::TensorView<const float, 3>::contiguous(v_scales.data(),
                                                      {pages, page, a.k.extents[2]});
    }
    ga::SdpaArgs<T, E, E> p = ga::with_kv(a, pool(k.data(), a.k), pool(v.data(), a.v), ks, vs);
    p.maybe_kv_lens = lens.data();
    p.maybe_page_table =
        ga::TensorView<const std::int32_t, 2>::contiguous(table.data(), {1, pages});
    return p;
  }

 private:
  void copy(const ga::TensorView<const E, 4>& t, AlignedVector<E>& pool) {
    const std::int64_t row = t.extents[2] * t.extents[3];  // contiguous [1, len, heads, d]
    pool.assign(static_cast<std::size_t>(pages * page * row), E{});
    for (std::int64_t n = 0; n < t.extents[1]; ++n) {
      const std::int64_t at = table[static_cast<std::size_t>(n / page)] * page + n % page;
      std::copy(t.data + n * row, t.data + (n + 1) * row, pool.data() + at * row);
    }
  }
  void copy_scales(const ga::TensorView<const float, 3>& s, AlignedVector<float>& pool,
                   std::int64_t heads) {
    pool.assign(static_cast<std::size_t>(pages * page * heads), 0.0f);
    for (std::int64_t n = 0; n < s.extents[1]; ++n) {
      const std::int64_t at = table[static_cast<std::size_t>(n / page)] * page + n % page;
      std::copy(s.data + n * heads, s.data + (n + 1) * heads, pool.data() + at * heads);
    }
  }
};

// A case's contiguous arguments with K/V as E (f32: the case's own).
template <class E>
struct KvCase {
  ga::bench::SdpaCase c;
  ga::bench::StoredKv<E> stored;
  explicit KvCase(const AttentionShape& s) : c(s), stored(c) {}
  ga::SdpaArgs<float, E, E> args(Gate gate, ga::DotPrecision precision) const {
    ga::SdpaArgs<float, E, E> a;
    if constexpr (std::is_same_v<E, float>) {
      a = c.gated(gate);
    } else {
      a = stored.args(c.gated(gate));
    }
    a.dot_precision = precision;
    return a;
  }
};

template <class E>
void run_paged_sdpa(benchmark::State& state, AttentionShape s, Gate gate, std::int64_t page,
                    int threads, ga::DotPrecision precision) {
  const KvCase<E> t(s);
  const auto contiguous = t.args(gate, precision);
  const PagedKv<E> paged(contiguous, page);
  const auto args = paged.args(contiguous);
  ga::bench::SdpaRunner call(threads, {});
  call.workspace.resize(ga::workspace_size(args, call.executor));
  ga::bench::time_calls(state, s, ga::bench::StoredKv<E>::bytes(s), call, args);
  state.SetLabel(ga::sdpa_path(args));
}

template <class E>
void run_paged_overhead(benchmark::State& state, AttentionShape s, std::int64_t page, int threads,
                        ga::DotPrecision precision) {
  const KvCase<E> t(s);
  const auto contiguous = t.args(Gate::none, precision);
  const PagedKv<E> paged(contiguous, page);
  const auto args = paged.args(contiguous);
  ga::bench::SdpaRunner call(threads, {});
  call.workspace.resize(std::max(ga::workspace_size(args, call.executor),
                                 ga::workspace_size(contiguous, call.executor)));
  ga::bench::time_pairs(
      state, "ratio", [&] { call(state, contiguous); }, [&] { call(state, args); });
  state.SetLabel(ga::sdpa_path(args));
}

template <class E>
void register_paged(const std::string& dtype, ga::DotPrecision precision, bool decode_only) {
  for (const AttentionShape& s : ga::bench::kShapes) {
    if (decode_only && !s.decode) continue;
    for (std::int64_t page : kPageSizes) {
      for (int threads : {1, 2}) {
        const std::string rest = dtype + "/" + s.name + "/page:" + std::to_string(page) +
                                 "/threads:" + std::to_string(threads);
        for (Gate gate : {Gate::none, Gate::elementwise}) {
          benchmark::RegisterBenchmark(
              (std::string("sdpa_paged/") + ga::bench::gate_name(gate) + "/" + rest).c_str(),
              run_paged_sdpa<E>, s, gate, page, threads, precision)
              ->Unit(benchmark::kMillisecond);
        }
        benchmark::RegisterBenchmark(("paged_overhead/" + rest).c_str(), run_paged_overhead<E>, s,
                                     page, threads, precision)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

int register_all() {
  register_paged<float>("f32", ga::DotPrecision::exact, false);
  register_paged<ga::bf16>("f32-kvbf16-storage", ga::DotPrecision::storage, true);
  return 0;
}
const int registered = register_all();

}  // namespace
