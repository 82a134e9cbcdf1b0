// Packed variable-length queries: ops/sdpa with q [1, total_q, ...] and cu_seqlens_q, each entry
// causal and bottom-right aligned against its own keys, decode and prefill entries in one call,
// on every path and element type and over paged K/V, against reference::sdpa on the same packed
// batch (whose rows the harness compares position by position with the unpacked buffers).
//
// Tolerance: the contiguous cases' (sdpa_problem.hpp, test_kv_types.cpp): packing changes where
// a row's query and output lie and which unit (decode or prefill) computes it, and each regime's
// bounds are derived for any row.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "sdpa_problem.hpp"

namespace {

using namespace gated_attention;
using namespace gated_attention::testing;
using namespace gated_attention::testing::sdpa;

std::vector<Case> varlen_cases() {
  using GK = GateKind;
  return {
      // Decode only: every entry one query (group 4: decode units of every KV head).
      Case::make("decode only gqa", 5, 1, 300, 16, 4, 64, 64)
          .causal()
          .with_kv_lens({300, 1, 77, 0, 256})
          .with_packed_queries({1, 1, 1, 0, 1})
          .with_gate(GK::elementwise)
          .with_lse(),
      // Prefill only: chunks of different lengths, one longer than a unit's rows.
      Case::make("prefill only chunks", 4, 70, 140, 8, 2, 128, 128)
          .causal()
          .with_kv_lens({140, 70, 33, 90})
          .with_packed_queries({70, 5, 33, 3})
          .with_sinks(SinkKind::learned)
          .with_lse(),
      // Both, with entries of no queries, no keys and one key, and two workers.
      Case::make("mixed decode and chunks", 6, 40, 200, 8, 2, 80, 80)
          .causal()
          .with_kv_lens({200, 40, 0, 1, 150, 7})
          .with_packed_queries({1, 40, 0, 1, 2, 7})
          .with_gate(GK::headwise)
          .with_stats(2)
          .with_lse()
          .with_threads(2),
      // No mask: more queries than keys is allowed (a row of no keys outputs 0).
      Case::make("unmasked more queries than keys", 3, 9, 12, 4, 4, 32, 48)
          .with_kv_lens({12, 0, 3})
          .with_packed_queries({2, 9, 5})
          .with_lse(),
      // Sliding window, group 1 (decode units up to 8 positions), run_phase by two workers.
      Case::make("window group 1 run_phase", 3, 20, 100, 2, 2, 64, 64)
          .with_mask(Mask::causal_window(16))
          .with_kv_lens({100, 60, 20})
          .with_packed_queries({8, 20, 9})
          .with_threads(2),
  };
}

template <ElementType k, ElementType v, ElementType activations = ElementType::f32>
void check_varlen(DotPrecision precision = DotPrecision::exact,
                  const std::vector<std::int64_t>& page_sizes = {}) {
  const std::string failures =
      typed_case_failures<k, v, activations>(varlen_cases(), precision, page_sizes);
  INFO(failures);
  CHECK(failures.empty());
}

}  // namespace

TEST_CASE("sdpa varlen: packed decode and prefill entries on every path", "[sdpa][varlen]") {
  check_varlen<ElementType::f32, ElementType::f32>();
  for (Case c : varlen_cases()) {  // run_phase and several worker counts
    c.run_phase = true;
    for (int threads : {1, 3}) {
      const PathCheck r = check_every_path(c.with_threads(threads));
      INFO(r.failure);
      CHECK(r.failure.empty());
    }
  }
}

TEST_CASE("sdpa varlen: one decode entry splits its keys across workers", "[sdpa][varlen]") {
  Case c = Case::make("one long decode and a chunk", 2, 4, 2000, 8, 2, 64, 64)
               .causal()
               .with_kv_lens({2000, 300})
               .with_packed_queries({1, 4})
               .with_lse()
               .with_stats(1)
               .with_threads(2)
               .with_splits(2);
  for (bool phases : {false, true}) {
    c.run_phase = phases;
    const PathCheck r = check_every_path(c);
    INFO(r.failure);
    CHECK(r.failure.empty());
  }
}

TEST_CASE("sdpa varlen: bf16, f16 and int8 K/V, the storage dot and bf16 activations",
          "[sdpa][varlen][kv_types]") {
  check_varlen<ElementType::bf16, ElementType::bf16>();
  check_varlen<ElementType::f16, ElementType::f16>();
  check_varlen<ElementType::i8, ElementType::i8>();
  check_varlen<ElementType::bf16, ElementType::bf16>(DotPrecision::storage);
  check_varlen<ElementType::i8, ElementType::i8>(DotPrecision::storage);
  check_varlen<ElementType::bf16, ElementType::bf16, ElementType::bf16>(DotPrecision::storage);
  check_varlen<ElementType::f16, ElementType::f16, ElementType::f16>();
}

TEST_CASE("sdpa varlen: packed queries over paged K/V", "[sdpa][varlen][paged]") {
  const std::vector<std::int64_t> page_sizes = {1, 7, 16, 32, 256};
  check_varlen<ElementType::f32, ElementType::f32>(DotPrecision::exact, page_sizes);
  check_varlen<ElementType::bf16, ElementType::i8>(DotPrecision::storage, page_sizes);
}

TEST_CASE("sdpa varlen: the workspace and phases follow from the shape alone", "[sdpa][varlen]") {
  const Case c = varlen_cases()[2];
  Problem p(c);
  PackedQueries<float> packing;
  SdpaArgs<float> args = packing.pack(p.args(), c.q_lens);
  REQUIRE(can_implement(args).is_ok());
  const SdpaShape shape = SdpaShape::of(args);
  CHECK(shape.packed);
  CHECK(shape.batch == c.batch);
  for (int workers : {1, 2, 5}) {
    CHECK(workspace_size(shape, workers) == workspace_size(args, workers));
    CHECK(num_phases(shape, workers) == num_phases(args, workers));
    // Other lengths of the same total fit the same workspace.
    std::vector<std::int32_t> cu = packing.cu;
    cu[1] = cu[2] = cu[3] = cu[4] = cu[5] = 0;  // every query in the last entry
    SdpaArgs<float> other = args;
    other.maybe_cu_seqlens_q.data = cu.data();
    other.mask = Mask::none();
    REQUIRE(can_implement(other).is_ok());
    CHECK(workspace_size(other, workers) == workspace_size(args, workers));
    std::vector<std::byte> ws(workspace_size(shape, workers));
    ThreadPool pool(workers);
    CHECK(run(other, Workspace(ws.data(), ws.size()), pool.executor()).is_ok());
  }
}

TEST_CASE("sdpa varlen: bad packed batches are refused, each error naming the tensor",
          "[sdpa][varlen][validate]") {
  const Case c = varlen_cases()[2];
  Problem p(c);
  PackedQueries<float> packing;
  const SdpaArgs<float> good = packing.pack(p.args(), c.q_lens);
  REQUIRE(can_implement(good).is_ok());
  const auto refused = [&](auto change, const char* expected) {
    SdpaArgs<float> a = good;
    std::vector<std::int32_t> cu = packing.cu;
    a.maybe_cu_seqlens_q.data = cu.data();
    change(a, cu);
    const Status s = can_implement(a);
    INFO(expected << " -> " << s.message());
    CHECK(!s.is_ok());
    CHECK(std::string(s.message()).find(expected) != std::string::npos);
  };
  using Cu = std::vector<std::int32_t>;
  refused([](SdpaArgs<float>&, Cu& cu) { cu[0] = 1; }, "cu_seqlens_q: entry 0: expected 0");
  refused([](SdpaArgs<float>&, Cu& cu) { cu[3] = cu[2] - 1; },
          "cu_seqlens_q: entry 3: expected >= ");
  refused([](SdpaArgs<float>&, Cu& cu) { cu.back() -= 1; },
          "cu_seqlens_q: entry 6: expected 51 (q's dim 1, total_q)");
  // Entry 3 has 1 key: 2 queries under the causal mask would precede its keys.
  refused([](SdpaArgs<float>&, Cu& cu) { cu[4] += 1; },
          "cu_seqlens_q: entry 3: expected at most its 1 keys");
  refused([](SdpaArgs<float>& a, Cu&) { a.maybe_cu_seqlens_q.extents[0] = 0; },
          "cu_seqlens_q: dim 0 (batch + 1): expected >= 1");
  refused([](SdpaArgs<float>& a, Cu&) { a.maybe_cu_seqlens_q.extents[0] -= 1; }, "k: dim 0");
  refused([](SdpaArgs<float>& a, Cu&) { a.q.extents[0] = 2; }, "q: dim 0 (batch): expected 1");
  refused(
      [&](SdpaArgs<float>& a, Cu& cu) {
        a.maybe_cu_seqlens_q.data = reinterpret_cast<const std::int32_t*>(a.out.data);
        std::copy(cu.begin(), cu.end(), reinterpret_cast<std::int32_t*>(a.out.data));
      },
      "out: overlaps cu_seqlens_q");
}
