// Paged K/V: ops/sdpa reading K/V (and int8 row scales) from shuffled pages through a page table,
// on every path and element type, against reference::sdpa on the same keys held contiguously.
//
// Tolerance: the contiguous cases' (sdpa_problem.hpp, test_kv_types.cpp): pages change where the
// kernels read each row and where blocks of keys end, never what a row holds, so every bound
// derived for the contiguous kernels holds unchanged.
//
// Pages cover sizes 1 (single-token slots) and 7 (blocks straddling pages), which decode reads
// through tables of rows and prefill gathers, 16 and 32 (decode in place, prefill gathered) and 256
// (in place, larger than the sequence); entries sharing prefix pages; lengths 0 and 1 and last
// pages partly filled; unused pool pages and unused table entries hold NaN and -1. Each case is
// one problem, and one reference, for every page size.
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

const std::vector<std::int64_t> kPageSizes = {1, 7, 16, 32, 256};

// Each case runs over every page size (check_every_path_as: one problem and reference for all).
std::vector<Case> paged_cases() {
  using GK = GateKind;
  const std::string t = " paged";
  return {
      Case::make("prefill d128 shared" + t, 2, 70, 90, 8, 2, 128, 128)
          .causal()
          .with_kv_lens({90, 75})
          .with_gate(GK::elementwise)
          .with_shared_prefix(40),
      Case::make("prefill d33 dk!=dv lse" + t, 2, 37, 75, 4, 2, 33, 20)
          .causal()
          .with_kv_lens({75, 40})
          .with_lse(),
      Case::make("decode d128 splits shared" + t, 3, 1, 700, 32, 8, 128, 128)
          .causal()
          .with_kv_lens({700, 1, 333})
          .with_threads(3)
          .with_shared_prefix(300),
      Case::make("decode d256 sinks stats" + t, 2, 1, 300, 16, 2, 256, 256)
          .causal()
          .with_kv_lens({0, 299})
          .with_sinks(SinkKind::learned)
          .with_stats(4)
          .with_lse(),
      Case::make("decode d80 chunk window" + t, 2, 3, 150, 8, 2, 80, 80)
          .with_mask(Mask::causal_window(50))
          .with_kv_lens({150, 97})
          .with_threads(2),
  };
}

template <ElementType k, ElementType v, ElementType activations = ElementType::f32>
void check_paged(DotPrecision precision = DotPrecision::exact) {
  const std::string failures =
      typed_case_failures<k, v, activations>(paged_cases(), precision, kPageSizes);
  INFO(failures);
  CHECK(failures.empty());
}

}  // namespace

TEST_CASE("sdpa paged: f32 K/V on every path", "[sdpa][paged]") {
  check_paged<ElementType::f32, ElementType::f32>();
}

TEST_CASE("sdpa paged: bf16, f16 and int8 K/V on every path", "[sdpa][paged][kv_types]") {
  check_paged<ElementType::bf16, ElementType::bf16>();
  check_paged<ElementType::f16, ElementType::f16>();
  check_paged<ElementType::i8, ElementType::i8>();
  check_paged<ElementType::bf16, ElementType::i8>();
}

TEST_CASE("sdpa paged: the storage dot and bf16 activations", "[sdpa][paged][kv_types]") {
  check_paged<ElementType::bf16, ElementType::bf16>(DotPrecision::storage);
  check_paged<ElementType::i8, ElementType::i8>(DotPrecision::storage);
  check_paged<ElementType::bf16, ElementType::bf16, ElementType::bf16>();
  check_paged<ElementType::f16, ElementType::f16, ElementType::f16>(DotPrecision::storage);
}

TEST_CASE("sdpa paged: the reference reads pages as the contiguous keys", "[sdpa][paged]") {
  for (std::int64_t page : kPageSizes) {
    Case c = paged_cases()[1].with_kv_types(ElementType::i8, ElementType::bf16).with_pages(page);
    Problem p(c);
    REQUIRE(p.run_reference<std::int8_t, bf16>().is_ok());
    const Tensor<float, 4> contiguous = p.ref_out;
    SdpaArgs<float, std::int8_t, bf16> paged = p.paged(p.typed_args<std::int8_t, bf16>());
    paged.out = split_heads(p.ref_out.view(), c.hkv);
    paged.maybe_lse = {};
    REQUIRE(reference::sdpa(paged).is_ok());
    CHECK(p.ref_out.data == contiguous.data);
  }
}

TEST_CASE("sdpa paged: bad page tables are refused, each error naming the tensor",
          "[sdpa][paged][validate]") {
  Case c = paged_cases()[1].with_kv_types(ElementType::i8, ElementType::i8).with_pages(16);
  Problem p(c);
  const auto good = p.paged(p.typed_args<std::int8_t, std::int8_t>());
  REQUIRE(can_implement(good).is_ok());
  const auto refused = [&](auto change, const char* expected) {
    auto a = good;
    std::vector<std::int32_t> table = p.pages.table;
    std::vector<std::int64_t> lens = p.pages.lens;
    a.maybe_page_table.data = table.data();
    a.maybe_kv_lens = lens.data();
    change(a, table, lens);
    const Status s = can_implement(a);
    INFO(expected << " -> " << s.message());
    CHECK(!s.is_ok());
    CHECK(std::string(s.message()).find(expected) != std::string::npos);
  };
  using A = std::remove_const_t<decltype(good)>;
  using Table = std::vector<std::int32_t>;
  using Lens = std::vector<std::int64_t>;
  refused([](A& a, Table&, Lens&) { a.maybe_kv_lens = nullptr; }, "kv_lens: expected every entry");
  refused([&](A&, Table& t, Lens&) { t[1] = static_cast<std::int32_t>(p.pages.num_pages); },
          "page_table: entry 0, page 1: expected 0..");
  refused([](A&, Table& t, Lens&) { t[0] = -1; }, "page_table: entry 0, page 0");
  refused([](A& a, Table&, Lens& l) { l[1] = a.kv_capacity() + 1; },
          "kv_lens: entry 1: expected 0..");
  refused([](A& a, Table&, Lens&) { a.maybe_page_table.extents[0] = 1; }, "page_table: dim 0");
  refused([](A& a, Table&, Lens&) { a.k.extents[1] = a.v.extents[1] = 0; }, "k: dim 1");
  refused([](A& a, Table&, Lens&) { a.v.extents[0] -= 1; }, "v: dim 0 (pages)");
  refused([](A& a, Table&, Lens&) { a.maybe_k_scales.extents[1] += 1; }, "k_scales: dim 1");
  // A NaN scale in a row the call reads (entry 1's key 20: page 1, row 4) is refused; the spare
  // pages hold NaN scales already and are not read.
  refused(
      [&](A&, Table& t, Lens&) {
        const auto page =
            static_cast<std::size_t>(t[static_cast<std::size_t>(p.pages.max_pages + 1)]);
        p.pages.v_scales[(page * 16 + 4) * static_cast<std::size_t>(c.hkv)] = kNaN;
      },
      "v_scales: batch 1, position 20");
}
