// core/: Status, TensorView, Workspace, Executor and shape validation.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "support.hpp"

namespace ga = gated_attention;

TEST_CASE("Status carries a code and a message naming tensor and dimension", "[core][status]") {
  const ga::Status ok;
  CHECK(ok.is_ok());
  CHECK(std::string(ok.message()) == "ok");

  const ga::Status s = ga::Status::shape_mismatch("k", 2, "kv heads", 8, 6);
  CHECK_FALSE(s.is_ok());
  CHECK(s.code() == ga::StatusCode::invalid_argument);
  CHECK(std::string(s.message()) == "k: dim 2 (kv heads): expected 8, got 6");

  const std::string long_name(400, 'x');
  const ga::Status truncated =
      ga::Status::error(ga::StatusCode::not_supported, "%s", long_name.c_str());
  CHECK(std::strlen(truncated.message()) == ga::Status::kMaxMessage - 1);
  CHECK(std::string(ga::to_string(ga::StatusCode::workspace_too_small)) == "workspace too small");
}

namespace {
ga::Status fails_at_second(int* reached) {
  GATED_ATTENTION_RETURN_IF_ERROR(ga::Status::ok());
  *reached = 1;
  GATED_ATTENTION_RETURN_IF_ERROR(ga::Status::error(ga::StatusCode::invalid_argument, "second"));
  *reached = 2;
  return ga::Status::ok();
}
}  // namespace

TEST_CASE("GATED_ATTENTION_RETURN_IF_ERROR returns the first error", "[core][status]") {
  int reached = 0;
  const ga::Status s = fails_at_second(&reached);
  CHECK(reached == 1);
  CHECK(std::string(s.message()) == "second");
}

TEST_CASE("TensorView indexes row-major, strided and broadcast views", "[core][tensor_view]") {
  std::vector<float> buf(2 * 3 * 4);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i);
  const auto v = ga::TensorView<float, 3>::contiguous(buf.data(), {2, 3, 4});
  CHECK(v.strides == std::array<std::int64_t, 3>{12, 4, 1});
  CHECK(v(1, 2, 3) == 23.0f);
  CHECK(v[{1, 0, 2}] == 14.0f);
  CHECK(v.num_elements() == 24);
  CHECK(v.span() == 24);

  // A transposed view of the last two dims.
  const ga::TensorView<float, 3> t(buf.data(), {2, 4, 3}, {12, 1, 4});
  CHECK(t(1, 3, 2) == v(1, 2, 3));

  // Stride 0 broadcasts one value per row over the last dim.
  const ga::TensorView<const float, 2> b(buf.data(), {3, 5}, {4, 0});
  for (int j = 0; j < 5; ++j) CHECK(b(2, j) == 8.0f);
  CHECK(b.span() == 9);

  const ga::TensorView<const float, 3> c = v;  // const view from a mutable one
  CHECK(c.data == v.data);
  CHECK(ga::TensorView<float, 2>().empty());
}

TEST_CASE("may_overlap compares the byte ranges views address", "[core][tensor_view]") {
  std::vector<float> buf(64);
  const auto a = ga::TensorView<float, 2>::contiguous(buf.data(), {4, 8});
  const auto b = ga::TensorView<float, 2>::contiguous(buf.data() + 32, {4, 8});
  const auto c = ga::TensorView<float, 2>::contiguous(buf.data() + 31, {1, 2});
  CHECK_FALSE(ga::may_overlap(a, b));
  CHECK(ga::may_overlap(a, c));
  CHECK(ga::may_overlap(b, c));
  CHECK_FALSE(ga::may_overlap(a, ga::TensorView<float, 2>()));
}

TEST_CASE("check_view reports tensor, dimension, expected and got", "[core][validate]") {
  std::vector<float> buf(24);
  const auto v = ga::TensorView<const float, 3>::contiguous(buf.data(), {2, 3, 4});
  const std::array<const char*, 3> names = {"batch", "heads", "dim"};
  CHECK(ga::check_view("x", v, {2, 3, 4}, names).is_ok());
  CHECK(ga::check_view("x", v, {-1, -1, 4}, names).is_ok());
  CHECK(std::string(ga::check_view("x", v, {2, 5, 4}, names).message()) ==
        "x: dim 1 (heads): expected 5, got 3");

  const ga::TensorView<const float, 3> strided(buf.data(), {2, 3, 4}, {12, 4, 2});
  const ga::Status inner = ga::check_view("x", strided, {2, 3, 4}, names);
  CHECK(std::string(inner.message()) == "x: dim 2 (dim): innermost stride must be 1, got 2");

  const ga::TensorView<const float, 3> broadcast(buf.data(), {2, 3, 4}, {12, 4, 0});
  CHECK_FALSE(ga::check_view("x", broadcast, {2, 3, 4}, names).is_ok());
  CHECK(
      ga::check_view("x", broadcast, {2, 3, 4}, names, ga::InnerStride::unit_or_broadcast).is_ok());

  const ga::TensorView<const float, 3> null_view(nullptr, {2, 3, 4}, {12, 4, 1});
  CHECK(std::string(ga::check_view("x", null_view, {2, 3, 4}, names).message()) ==
        "x: null data pointer");
  const ga::TensorView<const float, 3> empty_null(nullptr, {0, 3, 4}, {12, 4, 1});
  CHECK(ga::check_view("x", empty_null, {-1, 3, 4}, names).is_ok());
  const ga::TensorView<const float, 3> negative(buf.data(), {2, -3, 4}, {12, 4, 1});
  CHECK(std::string(ga::check_view("x", negative, {-1, -1, -1}, names).message()) ==
        "x: dim 1 (heads): negative extent -3");
}

TEST_CASE("Workspace counting mode sizes exactly what allocation takes", "[core][workspace]") {
  auto take = [](ga::Workspace& ws, void** p) {
    p[0] = ws.allocate<float>(10);
    p[1] = ws.allocate<double>(3, 8);
    p[2] = ws.allocate<char>(1);
    p[3] = ws.allocate<float>(100, 128);
  };
  ga::Workspace counter = ga::Workspace::counting();
  void* none[4];
  take(counter, none);
  for (void* p : none) CHECK(p == nullptr);
  const std::size_t needed = counter.bytes_needed();
  CHECK(needed >= 10 * 4 + 3 * 8 + 1 + 400);

  // Whatever the buffer's alignment, `needed` bytes suffice and every pointer is aligned.
  std::vector<unsigned char> storage(needed + 256);
  for (std::size_t shift = 0; shift < 128; ++shift) {
    ga::Workspace ws(storage.data() + shift, needed);
    void* p[4];
    take(ws, p);
    REQUIRE_FALSE(ws.exhausted());
    CHECK(reinterpret_cast<std::uintptr_t>(p[0]) % 64 == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(p[1]) % 8 == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(p[3]) % 128 == 0);
    CHECK(static_cast<unsigned char*>(p[3]) + 400 <= storage.data() + shift + needed);
    CHECK(static_cast<char*>(p[1]) >= static_cast<char*>(p[0]) + 40);
  }

  ga::Workspace small(storage.data(), 16);
  CHECK(small.allocate<float>(100) == nullptr);
  CHECK(small.exhausted());
}

TEST_CASE("Workspace mark and release reuse memory", "[core][workspace]") {
  std::vector<unsigned char> storage(1024);
  ga::Workspace ws(storage.data(), storage.size());
  float* a = ws.allocate<float>(16);
  const std::size_t m = ws.mark();
  float* b = ws.allocate<float>(16);
  ws.release(m);
  float* c = ws.allocate<float>(16);
  CHECK(b == c);
  CHECK(a != b);
  CHECK(ws.bytes_needed() >= 128);
}

TEST_CASE("worker_share splits tasks contiguously and evenly", "[core][executor]") {
  for (std::int64_t n : {0, 1, 5, 16, 17, 1000}) {
    for (int nth : {1, 2, 3, 7}) {
      std::int64_t expected_begin = 0;
      for (int ith = 0; ith < nth; ++ith) {
        const ga::TaskRange r = ga::worker_share(n, ith, nth);
        CHECK(r.begin == expected_begin);
        CHECK(r.end - r.begin >= n / nth);
        CHECK(r.end - r.begin <= n / nth + 1);
        expected_begin = r.end;
      }
      CHECK(expected_begin == n);
    }
  }
  CHECK(ga::worker_share(10, 3, 3).end == 0);  // ith out of range: nothing
}

namespace {
struct Tally {
  std::vector<std::atomic<int>> runs;
  std::vector<std::atomic<int>> busy;  // per worker: concurrent users (must stay <= 1)
  std::atomic<int> worker_clash{0};
  std::atomic<int> worker_out_of_range{0};
  int num_workers;
  Tally(std::int64_t n, int workers) : runs(n), busy(workers), num_workers(workers) {}

  static void task(void* arg, std::int64_t i, int worker) {
    auto* t = static_cast<Tally*>(arg);
    if (worker < 0 || worker >= t->num_workers) {
      ++t->worker_out_of_range;
      return;
    }
    if (t->busy[worker].fetch_add(1) != 0) ++t->worker_clash;
    volatile double sink = 0;
    for (int k = 0; k < 200; ++k) sink = sink + k;
    ++t->runs[i];
    t->busy[worker].fetch_sub(1);
  }
};
}  // namespace

TEST_CASE("Executors run every task exactly once with valid worker ids",
          "[core][executor][threads]") {
  const std::int64_t n = 257;
  SECTION("serial") {
    Tally t(n, 1);
    ga::Executor{}.run(n, &Tally::task, &t);
    for (auto& r : t.runs) CHECK(r.load() == 1);
  }
  SECTION("thread pool, repeated calls") {
    ga::ThreadPool pool(3);
    const ga::Executor ex = pool.executor();
    CHECK(ex.num_workers == 3);
    for (int round = 0; round < 20; ++round) {
      Tally t(n, 3);
      ex.run(n, &Tally::task, &t);
      int total = 0;
      for (auto& r : t.runs) {
        CHECK(r.load() == 1);
        total += r.load();
      }
      CHECK(total == n);
      CHECK(t.worker_clash.load() == 0);
      CHECK(t.worker_out_of_range.load() == 0);
    }
  }
  SECTION("thread pool, workers asleep between calls and a caller asleep until they finish") {
    // Past the spin, the workers sleep between calls; a task longer than the spin puts the caller
    // to sleep until the last worker is done.
    ga::ThreadPool pool(3);
    const ga::Executor ex = pool.executor();
    const auto spin = std::chrono::microseconds(ga::ThreadPool::kSpinMicroseconds);
    for (int round = 0; round < 4; ++round) {
      std::this_thread::sleep_for(2 * spin);
      Tally t(n, 3);
      ex.run(n, &Tally::task, &t);
      for (auto& r : t.runs) CHECK(r.load() == 1);
      CHECK(t.worker_clash.load() == 0);
      std::atomic<int> done{0};
      ga::parallel_for(ex, 3, [&](std::int64_t i, int) {
        if (i == 2) std::this_thread::sleep_for(3 * spin);
        ++done;
      });
      CHECK(done.load() == 3);
    }
  }
  SECTION("ith/nth: each engine worker runs its share") {
    Tally t(n, 4);
    std::vector<std::thread> workers;
    for (int ith = 0; ith < 4; ++ith) {
      workers.emplace_back([&, ith] { ga::run_worker_share(n, &Tally::task, &t, ith, 4); });
    }
    for (auto& w : workers) w.join();
    for (auto& r : t.runs) CHECK(r.load() == 1);
    CHECK(t.worker_clash.load() == 0);
  }
}

TEST_CASE("parallel_for runs a lambda through any executor", "[core][executor][threads]") {
  ga::ThreadPool pool(2);
  for (const ga::Executor& ex : {ga::Executor{}, pool.executor()}) {
    std::vector<std::int64_t> out(100, -1);
    ga::parallel_for(ex, 100, [&](std::int64_t i, int worker) {
      out[static_cast<std::size_t>(i)] = i * i + (worker < ex.num_workers ? 0 : 1000000);
    });
    for (std::int64_t i = 0; i < 100; ++i) CHECK(out[static_cast<std::size_t>(i)] == i * i);
  }
}

TEST_CASE("ThreadPool serialises calls from several threads", "[core][executor][threads]") {
  ga::ThreadPool pool(2);
  const ga::Executor ex = pool.executor();
  std::atomic<std::int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 25; ++round) {
        ga::parallel_for(ex, 10, [&](std::int64_t i, int) { sum += i; });
      }
    });
  }
  for (auto& t : callers) t.join();
  CHECK(sum.load() == 4 * 25 * 45);
}
