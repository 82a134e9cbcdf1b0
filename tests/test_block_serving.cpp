// The block as a serving engine calls it: a paged cache (shuffled pages, two sequences sharing
// prefix pages) and mixed batches of packed tokens (sequences prefilling chunks while others
// decode, some with no new token), step after step, against each sequence run alone through the
// contiguous cache. Checked: every output row, the new K/V rows written into the pages, the
// lengths; pages 1, 7 and 16; f32 and bf16 caches; 1 and 2 workers; and the refusals
// (overlapping writes, bad tables, bad offsets).
//
// Tolerance: y as in the block tests (tests/test_block.cpp), |y - y_alone| <= 1e-4 + 1e-3 |y|.
// The K/V rows: the projections multiply a different number of rows in the two calls, so Eigen
// sums in another order (a few f32 ulps), which the cache's rounding can carry to one step of its
// type: |k - k_alone| <= 1e-5 + u |k_alone| with u = 1e-5 (f32) or 2^-7 (bf16: one ulp, 2^-8
// relative, at either side).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "block_model.hpp"
#include "support.hpp"

namespace ga = gated_attention;
using namespace ga::testing;

namespace {

constexpr double kAtol = 1e-4, kRtol = 1e-3;

// hidden 96, 4 query heads over 2 KV heads, head_dim 64, RoPE on 16.
ga::BlockConfig serving_config() {
  ga::BlockConfig c = small_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  c.hidden_size = 96;
  c.head_dim = 64;
  c.rotary_dim = 16;
  return c;
}

// Page pools [num_pages, page_size, kv_heads, d] (NaN where unwritten) and a table giving each
// sequence the pages for `final_lens` tokens from a shuffled free list; sequence `sharer` takes
// its first `shared_pages` pages from sequence `owner`.
template <class KvT>
struct PagedCache {
  std::int64_t page_size, max_pages, num_pages;
  Tensor<KvT, 4> k, v;
  std::vector<std::int32_t> table;
  std::vector<std::int64_t> lengths;

  PagedCache(const ga::BlockConfig& c, std::int64_t page,
             const std::vector<std::int64_t>& final_lens, std::int64_t owner, std::int64_t sharer,
             std::int64_t shared_pages, Rng& rng)
      : page_size(page),
        max_pages(pages_for(*std::max_element(final_lens.begin(), final_lens.end()))),
        num_pages(pages_needed(final_lens) + 3),
        k({num_pages, page, c.num_kv_heads, c.head_dim}, nan_of<KvT>()),
        v({num_pages, page, c.num_kv_heads, c.head_dim}, nan_of<KvT>()),
        table(final_lens.size() * static_cast<std::size_t>(max_pages), -1),
        lengths(final_lens.size(), 0) {
    std::vector<std::int32_t> free(static_cast<std::size_t>(num_pages));
    std::iota(free.begin(), free.end(), 0);
    std::shuffle(free.begin(), free.end(), rng);
    for (std::size_t s = 0; s < final_lens.size(); ++s) {
      for (std::int64_t i = 0; i < pages_for(final_lens[s]); ++i) {
        const bool shared = static_cast<std::int64_t>(s) == sharer && i < shared_pages;
        table[s * max_pages + i] = shared ? table[owner * max_pages + i] : free.back();
        if (!shared) free.pop_back();
      }
    }
  }
  std::int64_t pages_for(std::int64_t len) const { return (len + page_size - 1) / page_size; }
  std::int64_t pages_needed(const std::vector<std::int64_t>& lens) const {
    std::int64_t n = 0;
    for (std::int64_t len : lens) n += pages_for(len);
    return n;
  }

  ga::KvCacheView<KvT> view() {
    ga::KvCacheView<KvT> view{k.view(), v.view(), lengths.data()};
    view.maybe_page_table = ga::TensorView<const std::int32_t, 2>::contiguous(
        table.data(), {static_cast<std::int64_t>(lengths.size()), max_pages});
    return view;
  }
};

template <class KvT>
ga::Status forward(const ga::GatedMultiHeadAttention<float, KvT>& block,
                   ga::BlockForwardArgs<float, KvT> args, const ga::Executor& executor) {
  std::vector<std::byte> ws(block.workspace_size(args, executor));
  return block.forward(args, ga::Workspace(ws.data(), ws.size()), executor);
}

// New tokens (x, positions) of sequence s alone: [1, n, hidden].
template <class KvT>
ga::Status run_alone(const ga::GatedMultiHeadAttention<float, KvT>& block, Cache<KvT>& cache,
                     std::int64_t s, const float* x, std::int64_t n, std::vector<float>& y,
                     const ga::Executor& executor) {
  const std::int64_t hid = block.config().hidden_size;
  const Positions pos = positions_from(1, n, cache.lengths[static_cast<std::size_t>(s)]);
  y.assign(static_cast<std::size_t>(n * hid), 0.0f);
  ga::BlockForwardArgs<float, KvT> args;
  args.x = ga::TensorView<const float, 3>::contiguous(x, {1, n, hid});
  args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {1, n});
  args.cache = cache.slot(s);
  args.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, n, hid});
  return forward(block, args, executor);
}

// One mixed batch: counts[s] new tokens for sequence s, packed.
struct Step {
  std::vector<std::int64_t> counts;
  std::vector<std::int32_t> cu;
  std::vector<float> x;
  Positions positions;

  Step(std::vector<std::int64_t> n, const std::vector<std::int64_t>& lengths, std::int64_t hid,
       Rng& rng)
      : counts(std::move(n)), cu(1, 0) {
    for (std::size_t s = 0; s < counts.size(); ++s) {
      cu.push_back(cu.back() + static_cast<std::int32_t>(counts[s]));
      for (std::int64_t t = 0; t < counts[s]; ++t) positions.push_back(lengths[s] + t);
    }
    x = random_vector<float>(rng, cu.back() * hid, -1.0, 1.0);
  }
  std::int64_t total() const { return cu.back(); }
};

// Cache elements equal up to the projections' summation order (see the top).
template <class KvT>
bool close(KvT a, KvT b) {
  const double x = ga::to_float(a), y = ga::to_float(b);
  const double u = sizeof(KvT) == 2 ? 0x1p-7 : 1e-5;
  return std::fabs(x - y) <= 1e-5 + u * std::fabs(y);
}

// Runs `steps` mixed batches on sequences whose caches first hold `prior` tokens (sequence 4's
// first `shared` the same as sequence 3's), through the paged packed call and through each
// sequence alone; returns what differed.
template <class KvT>
std::string serve(std::int64_t page, int threads, const std::vector<std::int64_t>& prior,
                  std::int64_t shared, const std::vector<std::vector<std::int64_t>>& steps) {
  const ga::BlockConfig c = serving_config();
  const std::int64_t hid = c.hidden_size, seqs = static_cast<std::int64_t>(prior.size());
  Rng rng(1234 + static_cast<std::uint64_t>(page));
  const Model<float> m = make_model<float>(c, rng);
  const ga::GatedMultiHeadAttention<float, KvT> block(c, m.weights());
  ga::ThreadPool pool(threads);
  const ga::Executor executor = threads > 1 ? pool.executor() : ga::Executor{};
  std::vector<std::int64_t> final_lens = prior;
  for (const auto& counts : steps) {
    for (std::size_t s = 0; s < counts.size(); ++s) final_lens[s] += counts[s];
  }
  Cache<KvT> alone(c, seqs, *std::max_element(final_lens.begin(), final_lens.end()));
  PagedCache<KvT> paged(c, page, final_lens, 3, 4, shared / page, rng);
  // The prior tokens: each sequence alone, then copied into its pages.
  std::vector<float> prior_x3;
  for (std::int64_t s = 0; s < seqs; ++s) {
    std::vector<float> x = random_vector<float>(rng, prior[s] * hid, -1.0, 1.0), y;
    if (s == 3) prior_x3 = x;
    if (s == 4) std::copy(prior_x3.begin(), prior_x3.begin() + shared * hid, x.begin());
    if (!run_alone(block, alone, s, x.data(), prior[s], y, executor).is_ok()) return "prefill";
    paged.lengths[s] = prior[s];
    const auto to = paged.view();
    for (std::int64_t n = 0; n < prior[s]; ++n) {
      const ga::KeyAt at = to.slot(s, n);
      for (std::int64_t h = 0; h < c.num_kv_heads; ++h) {
        for (std::int64_t d = 0; d < c.head_dim; ++d) {
          to.k(at.index, at.row, h, d) = alone.k.view()(s, n, h, d);
          to.v(at.index, at.row, h, d) = alone.v.view()(s, n, h, d);
        }
      }
    }
  }
  for (const auto& counts : steps) {
    const std::vector<std::int64_t> before = paged.lengths;
    const Step step(counts, before, hid, rng);
    std::vector<float> y(static_cast<std::size_t>(step.total() * hid), nan_of<float>());
    ga::BlockForwardArgs<float, KvT> args;
    args.x = ga::TensorView<const float, 3>::contiguous(step.x.data(), {1, step.total(), hid});
    args.positions =
        ga::TensorView<const std::int64_t, 2>::contiguous(step.positions.data(), {1, step.total()});
    args.cache = paged.view();
    args.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, step.total(), hid});
    args.maybe_cu_seqlens =
        ga::TensorView<const std::int32_t, 1>::contiguous(step.cu.data(), {seqs + 1});
    const ga::Status s = forward(block, args, executor);
    if (!s.is_ok()) return std::string("paged packed forward: ") + s.message();
    for (std::int64_t q = 0; q < seqs; ++q) {
      if (counts[q] == 0) continue;
      std::vector<float> y_alone;
      if (!run_alone(block, alone, q, step.x.data() + step.cu[q] * hid, counts[q], y_alone,
                     executor)
               .is_ok()) {
        return "alone";
      }
      for (std::int64_t i = 0; i < counts[q] * hid; ++i) {
        const double got = y[static_cast<std::size_t>(step.cu[q] * hid + i)], want = y_alone[i];
        if (!(std::fabs(got - want) <= kAtol + kRtol * std::fabs(want))) {
          return "sequence " + std::to_string(q) + " element " + std::to_string(i) + ": " +
                 std::to_string(got) + " alone " + std::to_string(want);
        }
      }
      const auto view = paged.view();
      for (std::int64_t n = before[q]; n < before[q] + counts[q]; ++n) {
        const ga::KeyAt at = view.slot(q, n);
        for (std::int64_t h = 0; h < c.num_kv_heads; ++h) {
          for (std::int64_t d = 0; d < c.head_dim; ++d) {
            if (!close(view.k(at.index, at.row, h, d), alone.k.view()(q, n, h, d)) ||
                !close(view.v(at.index, at.row, h, d), alone.v.view()(q, n, h, d))) {
              return "cache row " + std::to_string(n) + " of sequence " + std::to_string(q);
            }
          }
        }
      }
    }
    if (paged.lengths != alone.lengths) return "lengths";
  }
  return "";
}

}  // namespace

TEST_CASE("Block serving: mixed packed batches over a paged cache equal each sequence alone",
          "[block][paged][varlen]") {
  // Sequence 0 prefills in chunks, 1, 3 and 4 decode (3 and 4 share a prefix), 2 resumes a
  // prefill; then everybody decodes, then a mix with a sequence idle.
  const std::vector<std::int64_t> prior = {0, 37, 20, 64, 40};
  const std::vector<std::vector<std::int64_t>> steps = {
      {24, 1, 13, 1, 1}, {1, 1, 1, 1, 1}, {9, 0, 1, 2, 1}};
  for (std::int64_t page : {1, 7, 16}) {
    for (int threads : {1, 2}) {
      INFO("page " << page << " threads " << threads);
      CHECK(serve<float>(page, threads, prior, 32, steps) == "");
      CHECK(serve<ga::bf16>(page, threads, prior, 32, steps) == "");
    }
  }
}

TEST_CASE("Block serving: overlapping writes, bad tables and bad offsets are refused",
          "[block][paged][varlen][validate]") {
  const ga::BlockConfig c = serving_config();
  const std::int64_t hid = c.hidden_size;
  Rng rng(99);
  const Model<float> m = make_model<float>(c, rng);
  const ga::GatedMultiHeadAttention<float> block(c, m.weights());
  PagedCache<float> paged(c, 4, {12, 12, 12}, 0, 1, 1, rng);  // 1 shares 0's first page
  paged.lengths = {6, 8, 3};
  const Step step({2, 1, 3}, paged.lengths, hid, rng);
  std::vector<float> y(static_cast<std::size_t>(step.total() * hid));
  ga::BlockForwardArgs<float> good;
  good.x = ga::TensorView<const float, 3>::contiguous(step.x.data(), {1, step.total(), hid});
  good.positions =
      ga::TensorView<const std::int64_t, 2>::contiguous(step.positions.data(), {1, step.total()});
  good.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, step.total(), hid});
  good.maybe_cu_seqlens = ga::TensorView<const std::int32_t, 1>::contiguous(step.cu.data(), {4});
  const auto refused = [&](auto change, const char* expected) {
    std::vector<std::int32_t> table = paged.table;
    std::vector<std::int32_t> cu = step.cu;
    std::vector<std::int64_t> lengths = paged.lengths;
    ga::BlockForwardArgs<float> a = good;
    a.cache = paged.view();
    a.cache.maybe_page_table.data = table.data();
    a.cache.lengths = lengths.data();
    a.maybe_cu_seqlens.data = cu.data();
    change(a, table, cu);
    const std::vector<std::int64_t> given = lengths;
    const ga::Status s = forward(block, a, ga::Executor{});
    INFO(expected << " -> " << s.message());
    CHECK(!s.is_ok());
    CHECK(contains(s, expected));
    CHECK(lengths == given);  // nothing committed
  };
  using A = ga::BlockForwardArgs<float>;
  using V = std::vector<std::int32_t>;
  // Sequence 1 reads its page 1 (tokens 4..7), which sequence 0 writes (its tokens 6 and 7).
  refused([](A&, V& t, V&) { t[3 + 1] = t[1]; }, "cache.page_table: sequence 1, page 1");
  // Sequence 2 writes its page 1 (tokens 3..5), which sequence 0 writes too.
  refused([](A&, V& t, V&) { t[6 + 1] = t[1]; }, "receives sequence 0's new tokens");
  refused([&](A&, V& t, V&) { t[6 + 1] = static_cast<std::int32_t>(paged.num_pages); },
          "cache.page_table: sequence 2, page 1: expected 0..");
  refused([](A& a, V&, V&) { a.cache.maybe_page_table.extents[0] = 2; },
          "cache.page_table: dim 0 (sequences)");
  refused([](A&, V&, V& cu) { cu[3] -= 1; }, "cu_seqlens: entry 3: expected 6 (x's dim 1)");
  refused([](A&, V&, V& cu) { cu[0] = 1; }, "cu_seqlens: entry 0: expected 0");
  refused([](A& a, V&, V&) { a.cache.lengths[2] = 10; }, "cache.lengths: sequence 2");
  refused([](A& a, V&, V&) { a.x.extents[0] = 2; }, "x: dim 0");
  paged.lengths = {6, 8, 3};
  ga::BlockForwardArgs<float> ok = good;
  ok.cache = paged.view();
  const ga::Status s = forward(block, ok, ga::Executor{});
  CHECK(s.is_ok());
  CHECK(paged.lengths == std::vector<std::int64_t>{8, 9, 6});
}
