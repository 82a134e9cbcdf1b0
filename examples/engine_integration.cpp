// How an inference engine embeds the block: its own weights (raw pointers), its own KV cache
// layout (head-major [seq, kv_head, capacity, d], addressed through strides, no copy), its own
// worker threads (each calls the ith/nth entry, phase by phase, with the engine's barrier) and
// its own matmul (the GEMM hook). It serves several sequences: one prefill per sequence, then
// batched decode steps of all of them. The results are checked against forward() with the
// library's thread pool, which must give the same bits.
//
//   engine_integration [--sequences N] [--decode N] [--threads N]
#include <gated_attention/gated_attention.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace ga = gated_attention;

namespace {

// ---- The engine's side: threads, barrier, matmul, cache. ----

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t generation = generation_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int n_, waiting_ = 0;
  std::uint64_t generation_ = 0;
};

// nth persistent workers; run(job) calls job(ith) on every worker (the caller is worker 0).
class EngineWorkers {
 public:
  explicit EngineWorkers(int nth) : nth_(nth), start_(nth), done_(nth) {
    for (int ith = 1; ith < nth; ++ith) {
      threads_.emplace_back([this, ith] {
        for (;;) {
          start_.arrive_and_wait();
          if (stop_) return;
          (*job_)(ith);
          done_.arrive_and_wait();
        }
      });
    }
  }
  ~EngineWorkers() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& t : threads_) t.join();
  }
  int size() const { return nth_; }
  Barrier& barrier() { return phase_; }
  void run(const std::function<void(int)>& job) {
    job_ = &job;
    start_.arrive_and_wait();
    job(0);
    done_.arrive_and_wait();
  }

 private:
  int nth_;
  Barrier start_, done_, phase_{nth_};
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<bool> stop_{false};
};

// The engine's matmul, y = x W^T (+ bias), called by the block for each panel of outputs.
std::atomic<long> g_matmul_calls{0};
ga::Status engine_matmul(void* /*context*/, const ga::LinearArgs<float>& a) {
  g_matmul_calls.fetch_add(1, std::memory_order_relaxed);
  const std::int64_t rows = a.x.extents[0], out = a.weight.extents[0], in = a.x.extents[1];
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = a.x.data + r * a.x.strides[0];
    for (std::int64_t o = 0; o < out; ++o) {
      const float* w = a.weight.data + o * a.weight.strides[0];
      float sum = 0.0f;
      for (std::int64_t i = 0; i < in; ++i) sum += x[i] * w[i];
      a.y.data[r * a.y.strides[0] + o] = sum + (a.maybe_bias ? a.maybe_bias[o] : 0.0f);
    }
  }
  return ga::Status::ok();
}

// A head-major cache: element (seq, kv_head, slot, d) at ((seq * H + kv_head) * capacity + slot) *
// D + d.
struct EngineCache {
  std::int64_t seqs, heads, capacity, dim;
  std::vector<float> k, v;
  std::vector<std::int64_t> lengths;

  EngineCache(std::int64_t s, std::int64_t h, std::int64_t c, std::int64_t d)
      : seqs(s),
        heads(h),
        capacity(c),
        dim(d),
        k(static_cast<std::size_t>(s * h * c * d)),
        v(k.size()),
        lengths(static_cast<std::size_t>(s), 0) {}

  // Sequences [first, first + count) as the block's [seq, capacity, kv_heads, d] view.
  ga::KvCacheView<float> view(std::int64_t first, std::int64_t count) {
    const ga::TensorView<float, 4>::Index extents = {count, capacity, heads, dim};
    const ga::TensorView<float, 4>::Index strides = {heads * capacity * dim, dim, capacity * dim,
                                                     1};
    const std::int64_t offset = first * heads * capacity * dim;
    return {ga::TensorView<float, 4>(k.data() + offset, extents, strides),
            ga::TensorView<float, 4>(v.data() + offset, extents, strides), lengths.data() + first};
  }
};

std::int64_t arg_value(int argc, char** argv, const char* name, std::int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t seqs = arg_value(argc, argv, "--sequences", 4);
  const std::int64_t decode = arg_value(argc, argv, "--decode", 8);
  const int nth = static_cast<int>(arg_value(argc, argv, "--threads", 2));

  ga::BlockConfig c;
  c.hidden_size = 256;
  c.num_q_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.gate_mode = ga::GateMode::headwise;
  c.q_gate_layout = ga::QGateLayout::grouped;  // the official repository's packing
  c.qk_norm = ga::QkNorm::rms;
  c.rotary_dim = c.head_dim;

  // The engine's weights: plain arrays, e.g. from a memory-mapped checkpoint.
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f / 16.0f);
  auto make = [&](std::int64_t n) {
    std::vector<float> w(static_cast<std::size_t>(n));
    for (float& x : w) x = dist(rng);
    return w;
  };
  const std::int64_t hid = c.hidden_size;
  const auto q_proj = make(c.q_proj_rows() * hid), k_proj = make(c.kv_width() * hid);
  const auto v_proj = make(c.kv_width() * hid), o_proj = make(hid * c.q_width());
  const auto q_norm = make(c.head_dim), k_norm = make(c.head_dim);
  ga::BlockWeights<float> w;
  w.q_proj = ga::TensorView<const float, 2>::contiguous(q_proj.data(), {c.q_proj_rows(), hid});
  w.k_proj = ga::TensorView<const float, 2>::contiguous(k_proj.data(), {c.kv_width(), hid});
  w.v_proj = ga::TensorView<const float, 2>::contiguous(v_proj.data(), {c.kv_width(), hid});
  w.o_proj = ga::TensorView<const float, 2>::contiguous(o_proj.data(), {hid, c.q_width()});
  w.maybe_q_norm = q_norm.data();
  w.maybe_k_norm = k_norm.data();
  const ga::GatedMultiHeadAttention<float> block(c, w, {&engine_matmul, nullptr});

  // Prompts of different lengths, then `decode` tokens for every sequence.
  std::vector<std::int64_t> prompt(static_cast<std::size_t>(seqs));
  for (std::int64_t s = 0; s < seqs; ++s) prompt[s] = 5 + 7 * s;
  const std::int64_t capacity = prompt.back() + decode;
  EngineWorkers workers(nth);
  ga::ThreadPool pool(nth);

  // Runs one forward call through the engine's workers (engine) or through forward() (pool).
  auto step = [&](EngineCache& cache, std::int64_t first, std::int64_t count, std::int64_t len,
                  const std::vector<float>& x, std::vector<float>& y, bool engine) {
    std::vector<std::int64_t> positions;
    for (std::int64_t s = 0; s < count; ++s) {
      for (std::int64_t t = 0; t < len; ++t) positions.push_back(cache.lengths[first + s] + t);
    }
    ga::BlockForwardArgs<float> args;
    args.x = ga::TensorView<const float, 3>::contiguous(x.data(), {count, len, hid});
    args.positions =
        ga::TensorView<const std::int64_t, 2>::contiguous(positions.data(), {count, len});
    args.cache = cache.view(first, count);
    args.y = ga::TensorView<float, 3>::contiguous(y.data(), {count, len, hid});
    std::vector<std::byte> ws(block.workspace_size(args, nth));
    if (!engine) return block.forward(args, ga::Workspace(ws.data(), ws.size()), pool.executor());
    std::vector<ga::Status> status(static_cast<std::size_t>(nth));
    workers.run([&](int ith) {
      for (int phase = 0; phase < block.num_phases(); ++phase) {
        const ga::Status s =
            block.run_phase(args, ga::Workspace(ws.data(), ws.size()), phase, ith, nth);
        if (!s) status[static_cast<std::size_t>(ith)] = s;
        workers.barrier().arrive_and_wait();
      }
    });
    for (const ga::Status& s : status) {
      if (!s) return s;
    }
    return ga::Status::ok();
  };

  std::vector<float> outputs[2];  // engine, pool
  double decode_seconds = 0;
  for (const bool engine : {true, false}) {
    EngineCache cache(seqs, c.num_kv_heads, capacity, c.head_dim);
    std::mt19937 inputs(11);
    std::normal_distribution<float> unit(0.0f, 1.0f);
    auto tokens = [&](std::int64_t n) {
      std::vector<float> x(static_cast<std::size_t>(n * hid));
      for (float& v : x) v = unit(inputs);
      return x;
    };
    std::vector<float>& out = outputs[engine ? 0 : 1];
    for (std::int64_t s = 0; s < seqs; ++s) {  // prefill each sequence alone
      const auto x = tokens(prompt[s]);
      std::vector<float> y(x.size());
      const ga::Status st = step(cache, s, 1, prompt[s], x, y, engine);
      if (!st) {
        std::fprintf(stderr, "prefill failed: %s\n", st.message());
        return 1;
      }
      out.insert(out.end(), y.begin(), y.end());
    }
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t t = 0; t < decode; ++t) {  // batched decode of every sequence
      const auto x = tokens(seqs);
      std::vector<float> y(x.size());
      const ga::Status st = step(cache, 0, seqs, 1, x, y, engine);
      if (!st) {
        std::fprintf(stderr, "decode failed: %s\n", st.message());
        return 1;
      }
      out.insert(out.end(), y.begin(), y.end());
    }
    if (engine) {
      decode_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }

  const bool same = outputs[0] == outputs[1];
  std::printf(
      "engine integration: %lld sequences (prompts %lld..%lld tokens), %d engine "
      "threads, %s path, %ld matmul calls\n",
      static_cast<long long>(seqs), static_cast<long long>(prompt.front()),
      static_cast<long long>(prompt.back()), nth, ga::sdpa_path(), g_matmul_calls.load());
  std::printf("batched decode: %.1f tokens/s (engine matmul, engine threads)\n",
              static_cast<double>(seqs * decode) / decode_seconds);
  std::printf("engine threads (ith/nth) vs forward() with the library pool: %s\n",
              same ? "identical" : "DIFFERENT");
  return same ? 0 : 1;
}
