// Executor: how an op spreads its independent tasks over threads. The engine owns the threads.
//
//   * Executor{}                  serial, on the calling thread (the default).
//   * Executor{fn, ctx, workers}  the engine's own pool: fn(ctx, n, task, arg) must call
//                                 task(arg, i, w) once for every i in [0, n), with w in
//                                 [0, workers) and no two concurrent calls sharing a w, and return
//                                 when all calls have returned.
//   * ThreadPool(n).executor()    a small std::thread pool for programs without one.
//   * run_worker_share(...)       for engines (ggml style) that call every kernel from each of
//                                 their nth workers: worker ith runs its share of the tasks.
//
// Ops size per-worker scratch from Executor::num_workers, so it must be the pool's worker count.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace gated_attention {

using TaskFn = void (*)(void* arg, std::int64_t task, int worker);
using ParallelForFn = void (*)(void* context, std::int64_t num_tasks, TaskFn task, void* arg);

inline void run_serial(void* /*context*/, std::int64_t num_tasks, TaskFn task, void* arg) {
  for (std::int64_t i = 0; i < num_tasks; ++i) task(arg, i, 0);
}

struct Executor {
  ParallelForFn parallel_for = run_serial;
  void* context = nullptr;
  int num_workers = 1;

  void run(std::int64_t num_tasks, TaskFn task, void* arg) const {
    if (num_tasks <= 0) return;
    if (num_tasks == 1 || num_workers <= 1) {
      run_serial(nullptr, num_tasks, task, arg);
      return;
    }
    parallel_for(context, num_tasks, task, arg);
  }
};

// Calls f(task, worker) for every task in [0, num_tasks) through the executor.
template <class F>
void parallel_for(const Executor& executor, std::int64_t num_tasks, F&& f) {
  using Fn = std::remove_reference_t<F>;
  executor.run(
      num_tasks,
      [](void* arg, std::int64_t task, int worker) { (*static_cast<Fn*>(arg))(task, worker); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

// The contiguous share [begin, end) of num_tasks that worker ith of nth runs; shares differ in
// size by at most one task.
struct TaskRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

inline TaskRange worker_share(std::int64_t num_tasks, int ith, int nth) {
  if (nth <= 0 || ith < 0 || ith >= nth || num_tasks <= 0) return {};
  const std::int64_t base = num_tasks / nth;
  const std::int64_t extra = num_tasks % nth;
  const std::int64_t begin = ith * base + std::min<std::int64_t>(ith, extra);
  return {begin, begin + base + (ith < extra ? 1 : 0)};
}

// Runs worker ith's share of the tasks on the calling thread, as worker ith.
inline void run_worker_share(std::int64_t num_tasks, TaskFn task, void* arg, int ith, int nth) {
  const TaskRange r = worker_share(num_tasks, ith, nth);
  for (std::int64_t i = r.begin; i < r.end; ++i) task(arg, i, ith);
}

// One step of a spin-wait: a hint to the core that the thread is waiting (x86 pause, Arm yield).
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#else
  std::this_thread::yield();
#endif
}

// A fixed pool of num_threads workers: the thread calling parallel_for is worker 0, num_threads - 1
// threads are started once. Tasks are handed out dynamically. Calls from several threads are
// serialised. parallel_for allocates nothing. Where the workers are no more than the hardware
// threads, idle workers (and a caller waiting for them) spin for about kSpinMicroseconds before
// they sleep, yielding between short runs of pauses: waking a sleeping thread costs tens of
// microseconds on some hosts (docs/performance-notes.md, "Thread pool: spin before sleeping"), as
// much as a short call.
class ThreadPool {
 public:
  static constexpr std::int64_t kSpinMicroseconds = 200;

  explicit ThreadPool(int num_threads)
      : num_workers_(std::max(1, num_threads)),
        spins_(static_cast<unsigned>(num_workers_) <= std::thread::hardware_concurrency()) {
    threads_.reserve(static_cast<std::size_t>(num_workers_ - 1));
    for (int w = 1; w < num_workers_; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_.store(true, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  int num_workers() const { return num_workers_; }

  Executor executor() { return Executor{&ThreadPool::parallel_for, this, num_workers_}; }

  static void parallel_for(void* context, std::int64_t num_tasks, TaskFn task, void* arg) {
    static_cast<ThreadPool*>(context)->run(num_tasks, task, arg);
  }

 private:
  using Clock = std::chrono::steady_clock;

  // Spins until done() or about kSpinMicroseconds have passed (not at all where !spins_); returns
  // done().
  template <class Done>
  bool spin_until(Done done) const {
    if (!spins_) return done();
    const Clock::time_point end = Clock::now() + std::chrono::microseconds(kSpinMicroseconds);
    for (;;) {
      for (int i = 0; i < 4; ++i) {
        if (done()) return true;
        spin_pause();
      }
      if (Clock::now() >= end) return done();
      std::this_thread::yield();
    }
  }

  void run(std::int64_t num_tasks, TaskFn task, void* arg) {
    std::lock_guard<std::mutex> serialise(call_mutex_);
    bool sleepers = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = task;
      arg_ = arg;
      num_tasks_ = num_tasks;
      next_task_.store(0, std::memory_order_relaxed);
      busy_workers_.store(num_workers_ - 1, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      sleepers = sleeping_workers_ > 0;
    }
    if (sleepers) wake_.notify_all();
    drain(0);
    const auto all_done = [this] { return busy_workers_.load(std::memory_order_acquire) == 0; };
    if (spin_until(all_done)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, all_done);
  }

  void drain(int worker) {
    for (;;) {
      const std::int64_t i = next_task_.fetch_add(1, std::memory_order_relaxed);
      if (i >= num_tasks_) return;
      task_(arg_, i, worker);
    }
  }

  void worker_loop(int worker) {
    std::uint64_t seen = 0;
    const auto called = [&] {
      return stopping_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    for (;;) {
      if (!spin_until(called)) {
        std::unique_lock<std::mutex> lock(mutex_);
        ++sleeping_workers_;
        wake_.wait(lock, called);
        --sleeping_workers_;
      }
      if (stopping_.load(std::memory_order_acquire)) return;
      seen = generation_.load(std::memory_order_acquire);
      drain(worker);
      if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);  // the caller may be about to sleep
        done_.notify_one();
      }
    }
  }

  const int num_workers_;
  const bool spins_;  // idle threads spin before they sleep
  std::vector<std::thread> threads_;
  std::mutex call_mutex_;
  std::mutex mutex_;  // guards the sleeps (and the call's fields as they are set)
  std::condition_variable wake_;
  std::condition_variable done_;
  TaskFn task_ = nullptr;
  void* arg_ = nullptr;
  std::int64_t num_tasks_ = 0;
  std::atomic<std::int64_t> next_task_{0};
  std::atomic<int> busy_workers_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  int sleeping_workers_ = 0;  // under mutex_
};

}  // namespace gated_attention
