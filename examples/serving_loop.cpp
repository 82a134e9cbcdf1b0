// A minimal continuous-batching server around the block: one layer's KV cache lives in a fixed
// pool of pages shared by every request; each step packs the decode token of every running request
// with prompt chunks of the waiting ones into one forward call (chunked prefill); a finished
// request's pages go back to the pool and are reused; two requests share their prompt's prefix
// through the same pages (prefix caching). Every step is checked against each sequence run alone
// through a contiguous cache. Prints tokens per second and the pool's use.
//
// The layer is attention only (no embedding or LM head): each request's input rows are fixed
// random hidden states, its prompt's and then one per generated token.
//
//   serving_loop [--requests N] [--page P] [--pages N] [--chunk N] [--threads N]
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

std::int64_t arg_value(int argc, char** argv, const char* name, std::int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

std::vector<float> random_rows(std::mt19937& rng, std::int64_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// The pool: K and V pages [num_pages, page_size, kv_heads, d], a free list and reference counts
// (shared prefix pages are held by several requests).
struct PagePool {
  std::int64_t page_size, num_pages;
  std::vector<float> k, v;
  std::vector<std::int32_t> free;
  std::vector<int> holders;
  std::int64_t peak_used = 0;

  PagePool(const ga::BlockConfig& c, std::int64_t page, std::int64_t pages)
      : page_size(page),
        num_pages(pages),
        k(static_cast<std::size_t>(pages * page * c.num_kv_heads * c.head_dim)),
        v(k.size()),
        holders(static_cast<std::size_t>(pages), 0) {
    for (std::int64_t p = pages - 1; p >= 0; --p) free.push_back(static_cast<std::int32_t>(p));
  }
  std::int64_t used() const { return num_pages - static_cast<std::int64_t>(free.size()); }
  bool take(std::vector<std::int32_t>& pages) {
    if (free.empty()) return false;
    pages.push_back(free.back());
    free.pop_back();
    holders[static_cast<std::size_t>(pages.back())] = 1;
    peak_used = std::max(peak_used, used());
    return true;
  }
  void share(std::int32_t page) { ++holders[static_cast<std::size_t>(page)]; }
  void release(const std::vector<std::int32_t>& pages) {
    for (std::int32_t p : pages) {
      if (--holders[static_cast<std::size_t>(p)] == 0) free.push_back(p);
    }
  }
  ga::TensorView<float, 4> view(std::vector<float>& data, const ga::BlockConfig& c) {
    return ga::TensorView<float, 4>::contiguous(data.data(),
                                                {num_pages, page_size, c.num_kv_heads, c.head_dim});
  }
};

struct Request {
  std::int64_t prompt = 0, generate = 0, arrival = 0;
  std::vector<float> x;  // [prompt + generate, hidden] input rows
  std::vector<std::int32_t> pages;
  std::int64_t length = 0;  // tokens in the cache
  std::vector<float> k, v;  // the contiguous cache of the check, [1, total, kv_heads, d]
  std::int64_t alone_length = 0;
  bool admitted = false, done = false;
  bool shares_prefix = false;  // request 1 while request 0 holds the prefix's pages

  std::int64_t total() const { return prompt + generate; }
  // Its input rows and the check's cache, for its current prompt and generate lengths.
  void draw(std::mt19937& rng, std::int64_t hidden, std::int64_t kv_width) {
    x = random_rows(rng, total() * hidden, 1.0f);
    k.assign(static_cast<std::size_t>(total() * kv_width), 0.0f);
    v.assign(k.size(), 0.0f);
  }
  // Pages it still needs to finish.
  std::int64_t pages_to_come(std::int64_t page) const {
    return (total() + page - 1) / page - static_cast<std::int64_t>(pages.size());
  }
  bool prefilling() const { return length < prompt; }
};

// One forward call of the block: x [b, n, hidden] rows against `cache`.
ga::Status forward(const ga::GatedMultiHeadAttention<float>& block, ga::BlockForwardArgs<float> a,
                   std::vector<std::byte>& ws, const ga::Executor& executor) {
  ws.resize(std::max(ws.size(), block.workspace_size(a, executor)));
  return block.forward(a, ga::Workspace(ws.data(), ws.size()), executor);
}

// Request r's tokens [from, from + n) alone through its contiguous cache; y [n, hidden].
ga::Status run_alone(const ga::GatedMultiHeadAttention<float>& block, Request& r, std::int64_t from,
                     std::int64_t n, std::vector<float>& y, std::vector<std::byte>& ws,
                     const ga::Executor& executor) {
  const ga::BlockConfig& c = block.config();
  std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < n; ++t) positions[t] = from + t;
  y.resize(static_cast<std::size_t>(n * c.hidden_size));
  ga::BlockForwardArgs<float> a;
  a.x = ga::TensorView<const float, 3>::contiguous(r.x.data() + from * c.hidden_size,
                                                   {1, n, c.hidden_size});
  a.positions = ga::TensorView<const std::int64_t, 2>::contiguous(positions.data(), {1, n});
  const ga::TensorView<float, 4>::Index e = {1, r.total(), c.num_kv_heads, c.head_dim};
  a.cache = {ga::TensorView<float, 4>::contiguous(r.k.data(), e),
             ga::TensorView<float, 4>::contiguous(r.v.data(), e), &r.alone_length};
  a.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, n, c.hidden_size});
  return forward(block, a, ws, executor);
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t requests = arg_value(argc, argv, "--requests", 8);
  const std::int64_t page = arg_value(argc, argv, "--page", 16);
  const std::int64_t pool_pages = arg_value(argc, argv, "--pages", 96);
  const std::int64_t chunk = arg_value(argc, argv, "--chunk", 64);
  const int threads = static_cast<int>(arg_value(argc, argv, "--threads", 2));

  ga::BlockConfig c;  // a Qwen3-Next-shaped layer, scaled down
  c.hidden_size = 256;
  c.num_q_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.gate_mode = ga::GateMode::elementwise;
  c.q_gate_layout = ga::QGateLayout::qwen3_next;
  c.qk_norm = ga::QkNorm::zero_centered_rms;
  c.rotary_dim = 16;
  std::mt19937 rng(11);
  const std::int64_t hid = c.hidden_size;
  const auto q_proj = random_rows(rng, c.q_proj_rows() * hid, 0.06f);
  const auto k_proj = random_rows(rng, c.kv_width() * hid, 0.06f);
  const auto v_proj = random_rows(rng, c.kv_width() * hid, 0.06f);
  const auto o_proj = random_rows(rng, hid * c.q_width(), 0.06f);
  const std::vector<float> norms(static_cast<std::size_t>(c.head_dim), 0.0f);
  ga::BlockWeights<float> w;
  w.q_proj = ga::TensorView<const float, 2>::contiguous(q_proj.data(), {c.q_proj_rows(), hid});
  w.k_proj = ga::TensorView<const float, 2>::contiguous(k_proj.data(), {c.kv_width(), hid});
  w.v_proj = ga::TensorView<const float, 2>::contiguous(v_proj.data(), {c.kv_width(), hid});
  w.o_proj = ga::TensorView<const float, 2>::contiguous(o_proj.data(), {hid, c.q_width()});
  w.maybe_q_norm = w.maybe_k_norm = norms.data();
  const ga::GatedMultiHeadAttention<float> block(c, w);

  // Requests arrive one step apart with prompts of 20 to 150 tokens; request 1 repeats request
  // 0's prompt prefix, which it reads from request 0's pages once they are written.
  std::vector<Request> reqs(static_cast<std::size_t>(requests));
  std::uniform_int_distribution<std::int64_t> prompt_len(20, 150), gen_len(4, 24);
  for (std::int64_t i = 0; i < requests; ++i) {
    Request& r = reqs[static_cast<std::size_t>(i)];
    r.prompt = prompt_len(rng);
    r.generate = gen_len(rng);
    r.arrival = i == 1 ? 4 : i;
    r.draw(rng, hid, c.kv_width());
  }
  // Request 1 shares the whole pages of the first half of the shorter prompt (both at least 64).
  for (std::int64_t i = 0; i < std::min<std::int64_t>(requests, 2); ++i) {
    Request& r = reqs[static_cast<std::size_t>(i)];
    r.prompt = std::max<std::int64_t>(r.prompt, 64);
    r.draw(rng, hid, c.kv_width());
  }
  const std::int64_t shared_pages =
      requests > 1 ? std::min(reqs[0].prompt, reqs[1].prompt) / 2 / page : 0;
  if (shared_pages > 0) {
    std::copy(reqs[0].x.begin(), reqs[0].x.begin() + shared_pages * page * hid, reqs[1].x.begin());
  }

  PagePool pool(c, page, pool_pages);
  ga::ThreadPool thread_pool(threads);
  const ga::Executor executor = thread_pool.executor();
  std::vector<std::byte> ws, alone_ws;
  double seconds = 0.0, worst = 0.0;
  std::int64_t tokens = 0, steps = 0, finished = 0, shared_reads = 0;
  for (std::int64_t now = 0; finished < requests; ++now) {
    if (now > 100000) {
      std::printf("the pool of %lld pages cannot hold the requests\n",
                  static_cast<long long>(pool_pages));
      return 1;
    }
    // Schedule: every running request decodes one token, then prompt chunks within the budget.
    std::vector<Request*> batch;
    std::vector<std::int64_t> counts;
    std::int64_t budget = chunk;
    // Admission: a request starts once the pool holds every page it will need beyond what the
    // running ones will (so none ever waits for a page mid-way).
    std::int64_t promised = 0;
    for (const Request& r : reqs) promised += r.admitted && !r.done ? r.pages_to_come(page) : 0;
    for (std::int64_t i = 0; i < requests; ++i) {
      Request& r = reqs[static_cast<std::size_t>(i)];
      if (r.done || r.arrival > now) continue;
      if (!r.admitted) {
        r.shares_prefix = i == 1 && shared_pages > 0 && !reqs[0].done;
        if (r.shares_prefix && reqs[0].length < shared_pages * page) continue;  // not yet written
        const std::int64_t prefix = r.shares_prefix ? shared_pages : 0;
        const std::int64_t needed = (r.total() + page - 1) / page - prefix;
        if (static_cast<std::int64_t>(pool.free.size()) - promised < needed) continue;
        r.admitted = true;
        promised += needed;
      }
      if (r.shares_prefix && r.length == 0) {
        for (std::int64_t p = 0; p < shared_pages; ++p) {  // prefix caching: shared pages
          r.pages.push_back(reqs[0].pages[static_cast<std::size_t>(p)]);
          pool.share(r.pages.back());
        }
        r.length = shared_pages * page;
        shared_reads += r.length;
        std::vector<float> y;  // the check's contiguous cache gets the prefix too
        if (!run_alone(block, r, 0, r.length, y, alone_ws, executor).is_ok()) return 1;
      }
      const std::int64_t n = r.prefilling() ? std::min(r.prompt - r.length, budget) : 1;
      if (n <= 0) continue;
      while (static_cast<std::int64_t>(r.pages.size()) * page < r.length + n) {
        if (!pool.take(r.pages)) return 1;  // admission promised it
      }
      if (r.prefilling()) budget -= n;
      batch.push_back(&r);
      counts.push_back(n);
    }
    if (batch.empty()) continue;
    // Pack: x rows, positions, offsets, the table's rows and the lengths, in batch order.
    const auto b = static_cast<std::int64_t>(batch.size());
    std::int64_t max_pages = 0;
    for (Request* r : batch) max_pages = std::max<std::int64_t>(max_pages, r->pages.size());
    std::vector<float> x;
    std::vector<std::int64_t> positions, lengths;
    std::vector<std::int32_t> cu(1, 0), table(static_cast<std::size_t>(b * max_pages), 0);
    for (std::int64_t s = 0; s < b; ++s) {
      Request& r = *batch[s];
      x.insert(x.end(), r.x.begin() + r.length * hid, r.x.begin() + (r.length + counts[s]) * hid);
      for (std::int64_t t = 0; t < counts[s]; ++t) positions.push_back(r.length + t);
      cu.push_back(cu.back() + static_cast<std::int32_t>(counts[s]));
      std::copy(r.pages.begin(), r.pages.end(), table.begin() + s * max_pages);
      lengths.push_back(r.length);
    }
    const std::int64_t total = cu.back();
    std::vector<float> y(static_cast<std::size_t>(total * hid));
    ga::BlockForwardArgs<float> a;
    a.x = ga::TensorView<const float, 3>::contiguous(x.data(), {1, total, hid});
    a.positions = ga::TensorView<const std::int64_t, 2>::contiguous(positions.data(), {1, total});
    a.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, total, hid});
    a.maybe_cu_seqlens = ga::TensorView<const std::int32_t, 1>::contiguous(cu.data(), {b + 1});
    a.cache = {pool.view(pool.k, c), pool.view(pool.v, c), lengths.data()};
    a.cache.maybe_page_table =
        ga::TensorView<const std::int32_t, 2>::contiguous(table.data(), {b, max_pages});
    const auto t0 = std::chrono::steady_clock::now();
    const ga::Status status = forward(block, a, ws, executor);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!status.is_ok()) {
      std::printf("step %lld: %s\n", static_cast<long long>(now), status.message());
      return 1;
    }
    // The check: each sequence's new tokens alone through its contiguous cache.
    for (std::int64_t s = 0; s < b; ++s) {
      Request& r = *batch[s];
      std::vector<float> alone;
      if (!run_alone(block, r, r.length, counts[s], alone, alone_ws, executor).is_ok()) return 1;
      for (std::int64_t i = 0; i < counts[s] * hid; ++i) {
        const double got = y[static_cast<std::size_t>(cu[s] * hid + i)], want = alone[i];
        worst = std::max(worst, std::fabs(got - want) / (1e-4 + 1e-3 * std::fabs(want)));
      }
      r.length = lengths[s];
      if (r.length == r.total()) {  // finished: its pages back to the pool
        pool.release(r.pages);
        r.pages.clear();
        r.done = true;
        ++finished;
      }
    }
    tokens += total;
    ++steps;
  }
  std::printf(
      "served %lld requests in %lld steps: %lld tokens, %.0f tokens/s (%d threads, "
      "pages of %lld)\n",
      static_cast<long long>(requests), static_cast<long long>(steps),
      static_cast<long long>(tokens), static_cast<double>(tokens) / seconds, threads,
      static_cast<long long>(page));
  std::printf(
      "pool: %lld pages, peak %lld in use (%.0f%%), %lld prefix tokens read from shared "
      "pages, %lld free at the end\n",
      static_cast<long long>(pool.num_pages), static_cast<long long>(pool.peak_used),
      100.0 * static_cast<double>(pool.peak_used) / static_cast<double>(pool.num_pages),
      static_cast<long long>(shared_reads), static_cast<long long>(pool.free.size()));
  std::printf("each step against each sequence alone: worst error %.3f of the tolerance\n", worst);
  return worst <= 1.0 && static_cast<std::int64_t>(pool.free.size()) == pool.num_pages ? 0 : 1;
}
