// K and V stored in bf16, f16 or int8 (per-row scales): ops/sdpa on each path against
// reference::sdpa reading the same stored values exactly, and the block with such a cache against
// the reference block with the same cache type.
//
// Tolerance: the one of test_sdpa.cpp (sdpa_problem.hpp), unchanged. The kernels widen bf16 and
// f16 exactly to f32 and int8 exactly to f32, so the only arithmetic added to the f32 kernel's is,
// for int8 rows, one f32 product by the row's scale: the logit (after the dot product) and the
// softmax weight (before P.V) each gain a relative error of at most 2^-24, far below the f32
// accumulation error the tolerance already covers (rtol 1e-4 per element, NMSE 1e-10).
//
// The cases cover both regimes (prefill and decode), the compile-time and generic head dims with
// tails (dk 33), dk != dv, GQA, per-batch kv lengths with key splits across threads, cache views
// with padded rows, [b, h, s, d] memory, misaligned pointers, the gate, sinks, lse and the
// statistics. K/V rows no query can see hold NaN (bf16, f16) or a scale of 1e30 (int8).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "block_model.hpp"
#include "sdpa_problem.hpp"

namespace {

using namespace gated_attention::testing::sdpa;

std::vector<Case> kv_type_cases(ElementType k, ElementType v) {
  using GK = GateKind;
  const std::string t = std::string(" k ") + to_string(k) + " v " + to_string(v);
  std::vector<Case> cases = {
      Case::make("prefill d128" + t, 1, 70, 70, 8, 2, 128, 128).causal().with_gate(GK::elementwise),
      Case::make("prefill d256 lse" + t, 1, 40, 90, 4, 2, 256, 256).causal().with_lse(),
      Case::make("prefill d33 dk!=dv cache" + t, 2, 37, 75, 4, 2, 33, 20)
          .causal()
          .with_kv_lens({75, 40})
          .with_layout(Layout::kv_cache),
      Case::make("prefill d64 bhsd misaligned" + t, 1, 45, 45, 4, 4, 64, 64)
          .causal()
          .with_layout(Layout::bhsd)
          .with_misaligned(),
      Case::make("decode d128 splits" + t, 3, 1, 700, 32, 8, 128, 128)
          .causal()
          .with_kv_lens({700, 1, 333})
          .with_threads(3),
      Case::make("decode d256 gate stats sinks" + t, 1, 1, 300, 16, 2, 256, 256)
          .causal()
          .with_gate(GK::elementwise)
          .with_sinks(SinkKind::learned)
          .with_stats(4)
          .with_lse(),
      Case::make("decode d80 padded" + t, 2, 2, 150, 8, 2, 80, 80)
          .causal()
          .with_layout(Layout::padded)
          .with_threads(2),
      Case::make("decode d33 dk!=dv window" + t, 1, 3, 200, 4, 1, 33, 17)
          .with_mask(gated_attention::Mask::causal_window(50)),
      // Groups of 6, 3 and 1 rows: the storage dot's row lanes with their last group partial.
      Case::make("decode d96 group 6" + t, 1, 1, 130, 6, 1, 96, 96).causal(),
      Case::make("decode d64 group 3" + t, 2, 1, 77, 6, 2, 64, 64).causal(),
      Case::make("decode d48 group 1" + t, 1, 1, 70, 2, 2, 48, 48).causal(),
  };
  for (Case& c : cases) c.with_kv_types(k, v);
  cases[0].poison_invisible_keys = true;
  return cases;
}

// DotPrecision::storage: the reference rounds q as the kernels do (round_query_row), so the q
// rounding adds no error; the storage dot's integer sums of int8 products are exact, and its one
// f32 product by the query row's scale adds 2^-24 relative to the logit. What remains is the
// rounding of the softmax weights where the storage dot reads V:
// - bf16 V, weights in bf16: each weight p moves by at most the unit roundoff 2^-8 times p, so an
//   output sum_n p_n v_n / l moves by at most 2^-8 max|v| = 3.9e-3 (|v| <= 1). Tolerance factor
//   400: per-element atol 4e-3, NMSE bound 1.6e-5 against an expected (2^-8)^2 / 3 = 5.1e-6.
// - int8 V, weights w_n = p_n s_n (s_n the V row's scale) in 8 bits per decode block of at most
//   B = 64 keys (StorageDot::kDecodeBlock) and row, step m_b / 255 for the block's largest m_b:
//   each weight moves by at most m_b / 510, a block's output sum by at most B m_b / 510 max|v8|;
//   since m_b <= max(s) max_{n in b} p_n and the blocks' largest p_n sum to at most l, an output
//   moves by at most (B / 510) max(s) 127 = 0.125 max|v|. Tolerance factor 12800: per-element
//   atol 0.128 (the worst case needs every rounding of a block in one direction; every case of
//   this file also passes at a quarter of it, 3.2e-2).
//
// bf16 or f16 activations (q, gate, out): the reference reads the same rounded q and gate; the
// kernel's f32 output rounded to the type is within the unit roundoff of it (compare() adds that
// allowance), the rest as for f32 activations.
template <ElementType k, ElementType v, ElementType activations = ElementType::f32>
void check_types(gated_attention::DotPrecision precision = gated_attention::DotPrecision::exact) {
  for (const Case& typed : kv_type_cases(k, v)) {
    const Case c = with_typed_activations(typed, activations, precision);
    const PathCheck r = check_every_path_as<ElementOf<k>, ElementOf<v>, ElementOf<activations>>(c);
    INFO(r.failure);
    CHECK(r.failure.empty());
  }
}

}  // namespace

TEST_CASE("sdpa: bf16 K/V on every path", "[sdpa][kv_types]") {
  check_types<ElementType::bf16, ElementType::bf16>();
}

TEST_CASE("sdpa: f16 K/V on every path", "[sdpa][kv_types]") {
  check_types<ElementType::f16, ElementType::f16>();
}

TEST_CASE("sdpa: int8 K/V with row scales on every path", "[sdpa][kv_types]") {
  check_types<ElementType::i8, ElementType::i8>();
}

TEST_CASE("sdpa: K and V of different types on every path", "[sdpa][kv_types]") {
  check_types<ElementType::bf16, ElementType::i8>();
  check_types<ElementType::i8, ElementType::f16>();
}

TEST_CASE("sdpa: NaN and Inf in 16-bit keys a decode row cannot see stay out of its output",
          "[sdpa][kv_types][numerics]") {
  // Two decode positions with a window: key 199 is visible to position 298 alone, so its block is
  // partly visible and, holding NaN or Inf, takes the exact accumulation that skips zero weights
  // (on bf16 V: in pair order, for 4 rows read in place and for 8 rows widened once).
  for (const float poison : {kNaN, kInf, -kInf}) {
    for (const ElementType t : {ElementType::bf16, ElementType::f16}) {
      for (const std::int64_t hq : {4, 8}) {
        Case c = Case::make("poison beside the window, decode", 1, 2, 300, hq, 2, 128, 128)
                     .with_mask(gated_attention::Mask::causal_window(100))
                     .with_kv_types(t, t)
                     .with_lse();
        c.poisoned_keys = {199};
        c.poison_value = poison;
        const PathCheck r =
            t == ElementType::bf16
                ? check_every_path_as<gated_attention::bf16, gated_attention::bf16>(c)
                : check_every_path_as<gated_attention::f16, gated_attention::f16>(c);
        INFO(r.failure);
        CHECK(r.failure.empty());
      }
    }
  }
}

TEST_CASE("sdpa: storage dot precision on every path", "[sdpa][kv_types]") {
  constexpr auto kStorage = gated_attention::DotPrecision::storage;
  check_types<ElementType::bf16, ElementType::bf16>(kStorage);
  check_types<ElementType::i8, ElementType::i8>(kStorage);
  check_types<ElementType::bf16, ElementType::i8>(kStorage);
  check_types<ElementType::i8, ElementType::f16>(kStorage);
  check_types<ElementType::f16, ElementType::f16>(kStorage);
}

TEST_CASE("sdpa: bf16 and f16 activations on every path", "[sdpa][kv_types]") {
  check_types<ElementType::bf16, ElementType::bf16, ElementType::bf16>();
  check_types<ElementType::f16, ElementType::f16, ElementType::f16>();
  check_types<ElementType::bf16, ElementType::bf16, ElementType::bf16>(
      gated_attention::DotPrecision::storage);
}

TEST_CASE("sdpa: sdpa_path names the storage dot where it runs", "[sdpa][kv_types]") {
  namespace ga = gated_attention;
  using ga::DotInstructions;
  Case c = Case::make("path", 1, 1, 40, 4, 2, 64, 64)
               .with_kv_types(ElementType::bf16, ElementType::bf16);
  Problem p(c);
  ga::SdpaArgs<float, ga::bf16, ga::bf16> a = p.typed_args<ga::bf16, ga::bf16>();
  // A prefill call (32 rows of a KV head): on AMX hosts its blocks run on tiles.
  Problem prefill(Case::make("path prefill", 1, 16, 40, 4, 2, 64, 64)
                      .with_kv_types(ElementType::bf16, ElementType::bf16));
  ga::SdpaArgs<float, ga::bf16, ga::bf16> ap = prefill.typed_args<ga::bf16, ga::bf16>();
  ap.dot_precision = ga::DotPrecision::storage;
  ga::SdpaArgs<float, std::int8_t, std::int8_t> a8 = p.typed_args<std::int8_t, std::int8_t>();
  // bf16 q over a bf16 K: the storage dot reads q unscaled (exact products), so exact runs it too.
  ga::SdpaArgs<ga::bf16, ga::bf16, ga::bf16> all_bf16 = p.args_as<ga::bf16, ga::bf16, ga::bf16>();
  PathGuard guard;
  const bool region = ga::detail::has_avx512_bf16_region_features(ga::cpu_features());
  for (DotInstructions d :
       {DotInstructions::where_faster, DotInstructions::always, DotInstructions::never}) {
    ga::set_dot_instructions(d);
    CHECK(ga::dot_instructions() == d);
    for (ga::Isa isa : ga::testing::available_isas()) {
      ga::set_isa_limit(isa);
      const bool on_avx512 = isa == ga::Isa::avx512 && region;
      const std::string plain = ga::to_string(isa);
      const auto expected = [&](bool int8, bool prefill = false) {
        const bool tiles = !int8 && ga::amx_tiles();
        if (!on_avx512 ||
            !ga::detail::wants_dot_instructions(d, ga::cpu_features(), int8, prefill && tiles)) {
          return plain;
        }
        return std::string(tiles ? "avx512_bf16+amx" : "avx512_bf16");
      };
      INFO("dot instructions " << ga::to_string(d) << ", path " << plain);
      a.dot_precision = ga::DotPrecision::exact;
      CHECK(ga::sdpa_path(a) == plain);
      a.dot_precision = ga::DotPrecision::storage;
      CHECK(ga::sdpa_path(a) == expected(false));
      a8.dot_precision = ga::DotPrecision::storage;
      CHECK(ga::sdpa_path(a8) == expected(true));
      CHECK(ga::sdpa_path(ap) == expected(false, true));
      for (const ga::DotPrecision precision :
           {ga::DotPrecision::exact, ga::DotPrecision::storage}) {
        all_bf16.dot_precision = precision;
        CHECK(ga::sdpa_path(all_bf16) == expected(false));
      }
    }
  }
  ga::clear_isa_limit();
  const ga::SdpaArgs<float> f32 = p.args();
  ga::SdpaArgs<float> storage_f32 = f32;
  storage_f32.dot_precision = ga::DotPrecision::storage;
  CHECK(std::string(ga::sdpa_path(storage_f32)) == ga::sdpa_path());
}

TEST_CASE("dispatch: the dot instructions where they are faster, by CPU family", "[dispatch]") {
  namespace ga = gated_attention;
  using ga::DotInstructions;
  ga::CpuFeatures intel, amd, other;
  intel.vendor = ga::CpuVendor::intel;
  amd.vendor = ga::CpuVendor::amd;
  const auto wants = ga::detail::wants_dot_instructions;
  // vdpbf16ps does not outrun two FMA ports on Intel, unless prefill runs on AMX tiles; vpdpbusd
  // outruns widening everywhere.
  CHECK_FALSE(wants(DotInstructions::where_faster, intel, false, false));
  CHECK(wants(DotInstructions::where_faster, intel, false, true));
  CHECK(wants(DotInstructions::where_faster, intel, true, false));
  CHECK(wants(DotInstructions::where_faster, amd, false, false));
  CHECK(wants(DotInstructions::where_faster, amd, true, false));
  CHECK(wants(DotInstructions::where_faster, other, false, false));
  for (const ga::CpuFeatures& f : {intel, amd, other}) {
    for (bool int8 : {false, true}) {
      for (bool tiles : {false, true}) {
        CHECK(wants(DotInstructions::always, f, int8, tiles));
        CHECK_FALSE(wants(DotInstructions::never, f, int8, tiles));
      }
    }
  }
#if defined(__x86_64__) && defined(__linux__)
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line) && line.rfind("vendor_id", 0) != 0) {
  }
  INFO("/proc/cpuinfo: " << line);
  const bool is_intel = line.find("GenuineIntel") != std::string::npos;
  const bool is_amd = line.find("AuthenticAMD") != std::string::npos ||
                      line.find("HygonGenuine") != std::string::npos;
  CHECK((ga::cpu_features().vendor == ga::CpuVendor::intel) == is_intel);
  CHECK((ga::cpu_features().vendor == ga::CpuVendor::amd) == is_amd);
#endif
  PathGuard guard;
  ga::set_dot_instructions(DotInstructions::never);
  CHECK(ga::dot_instructions() == DotInstructions::never);
  ga::clear_dot_instructions();
  const char* env = std::getenv("GATED_ATTENTION_DOT_INSTRUCTIONS");
  if (env == nullptr) CHECK(ga::dot_instructions() == DotInstructions::where_faster);
}

#if GATED_ATTENTION_X86
// The int8 storage dot's query rows (StorageDot<int8_t>::pack_query, by vectors) against
// detail::quantize_query_row, which round_query_row and the reference use: the same bytes, the
// same offset -128 sum(q) and the same scale, bit for bit.
TEST_CASE("sdpa: the int8 storage dot packs query rows as quantize_query_row rounds them",
          "[sdpa][kv_types]") {
  namespace ga = gated_attention;
  if (!ga::detail::has_avx512_bf16_region_features(ga::cpu_features())) {
    SUCCEED("no avx512_bf16 region on this CPU");
    return;
  }
  using Dot = ga::kernels::avx512_bf16::StorageDot<std::int8_t>;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const std::int64_t d : {128, 256, 80, 33, 1}) {
    const std::int64_t padded = (d + 15) / 16 * 16;
    const auto cases = [&](int which, std::vector<float>& row) {
      for (std::int64_t i = 0; i < d; ++i) row[i] = uniform(rng) * (which == 1 ? 1e-39f : 3.0f);
      if (which == 2) {  // ties at 127 / max = 1: halves round to even
        for (std::int64_t i = 0; i < d; ++i) row[i] = static_cast<float>(i % 9) - 4.5f;
        row[0] = -127.0f;
      }
      if (which == 3) std::fill(row.begin(), row.begin() + d, 0.0f);
      if (which == 4) row[d - 1] = nan;
      if (which == 5) row[d / 2] = -inf;
    };
    for (int which = 0; which < 6; ++which) {
      std::vector<float> row(static_cast<std::size_t>(padded), -7.0f);
      cases(which, row);
      std::int8_t q[ga::kMaxHeadDim] = {};
      const float scale = ga::detail::quantize_query_row(row.data(), d, q);
      std::int32_t sum = 0;
      for (std::int64_t i = 0; i < d; ++i) sum += q[i];
      Dot::pack_query(row.data(), d, padded);
      INFO("d " << d << ", case " << which);
      std::vector<std::int8_t> bytes(static_cast<std::size_t>(padded));
      std::memcpy(bytes.data(), row.data(), bytes.size());
      for (std::int64_t i = 0; i < padded; ++i) {
        INFO("byte " << i);
        CHECK(static_cast<int>(bytes[i]) == (i < d ? static_cast<int>(q[i]) : 0));
      }
      std::int32_t offset = 0;
      std::memcpy(&offset, row.data() + padded - 2, sizeof(offset));
      CHECK(offset == -128 * sum);
      if (std::isnan(scale)) {
        CHECK(std::isnan(row[padded - 1]));
        CHECK(which >= 4);
      } else {
        CHECK(row[padded - 1] == scale);
      }
    }
  }
}
#endif

TEST_CASE("sdpa: int8 scales are required, shaped and finite, each error naming the view",
          "[sdpa][kv_types][validate]") {
  namespace ga = gated_attention;
  using ga::testing::contains;
  Case c = Case::make("int8 scales", 2, 3, 40, 4, 2, 32, 32)
               .causal()
               .with_kv_lens({40, 25})
               .with_kv_types(ElementType::i8, ElementType::i8);
  Problem p(c);
  using I8 = std::int8_t;
  const ga::SdpaArgs<float, I8, I8> good = p.typed_args<I8, I8>();
  REQUIRE(ga::can_implement(good).is_ok());
  std::vector<std::byte> ws(ga::workspace_size(good, 1));
  const auto refused = [&](const ga::SdpaArgs<float, I8, I8>& a, const char* what) {
    const ga::Status s = ga::can_implement(a);
    INFO(s.message());
    CHECK(!s.is_ok());
    CHECK(contains(s, what));
    CHECK(!ga::run(a, ga::Workspace(ws.data(), ws.size())).is_ok());
  };
  auto a = good;
  a.maybe_k_scales = {};
  refused(a, "k_scales: expected a [b, kv_len, kv_heads] view for an int8 K, got none");
  a = good;
  a.maybe_v_scales.extents[1] = 39;
  refused(a, "v_scales: dim 1 (kv length): expected 40, got 39");
  std::vector<float> scales(p.k_stored.scales);
  a = good;
  a.maybe_k_scales.data = scales.data();
  // Entry 1's 25 keys x 2 heads are scanned 16 floats at a time, then a tail of 2: a bad scale in
  // the first block, a later one, and the tail.
  for (const int key : {7, 12, 24}) {
    for (float bad : {-1.0f, kNaN, kInf}) {
      scales[(1 * 40 + key) * 2 + 1] = bad;  // entry 1, kv head 1
      refused(a, ("k_scales: batch 1, position " + std::to_string(key) +
                  ", kv head 1: expected a finite scale >= 0")
                     .c_str());
    }
    scales[(1 * 40 + key) * 2 + 1] = -0.0f;  // zero, with its sign bit: a scale of 0
    CHECK(ga::can_implement(a).is_ok());
  }
  scales[(1 * 40 + 30) * 2 + 1] = kNaN;  // past entry 1's 25 keys: never read, not checked
  CHECK(ga::can_implement(a).is_ok());

  const ga::SdpaArgs<float> floats = p.args();
  ga::SdpaArgs<float> f = floats;
  f.maybe_v_scales = good.maybe_v_scales;
  const ga::Status s = ga::can_implement(f);
  CHECK(contains(s, "v_scales: expected none for a float, bf16 or f16 V, got a view"));
}

// run() checks the scales in the tasks that read them (decode: block by block), so the error must
// come back from every path, regime, precision and worker count, from whichever task reads the
// bad scale: a split unit's second half, a later decode block, the second entry, K or V.
TEST_CASE("sdpa: run() finds a bad int8 scale in the task that reads it, on every path",
          "[sdpa][kv_types][validate]") {
  namespace ga = gated_attention;
  using I8 = std::int8_t;
  struct Bad {
    bool k;
    std::int64_t entry, key, head;
  };
  const Bad bads[] = {{true, 0, 3, 0}, {false, 0, 270, 1}, {true, 1, 168, 1}, {false, 1, 100, 0}};
  PathGuard guard;
  for (const std::int64_t q_len : {1, 20}) {
    for (const int threads : {1, 2}) {
      Case c = Case::make("int8 scales in tasks", 2, q_len, 300, 4, 2, 64, 64)
                   .with_kv_lens({300, 170})
                   .with_threads(threads)
                   .with_kv_types(ElementType::i8, ElementType::i8);
      if (q_len > 1) c.causal();
      Problem p(c);
      const ga::SdpaArgs<float, I8, I8> good = p.typed_args<I8, I8>();
      std::vector<std::byte> ws(ga::workspace_size(good, threads));
      const ga::Workspace w(ws.data(), ws.size());
      const ga::Executor executor = threads > 1 ? shared_pool(threads).executor() : ga::Executor{};
      for (const Bad& bad : bads) {
        std::vector<float> scales(bad.k ? p.k_stored.scales : p.v_stored.scales);
        ga::SdpaArgs<float, I8, I8> a = good;
        (bad.k ? a.maybe_k_scales : a.maybe_v_scales).data = scales.data();
        scales[static_cast<std::size_t>((bad.entry * 300 + bad.key) * 2 + bad.head)] = kNaN;
        const ga::Status expected = ga::can_implement(a);
        REQUIRE(!expected.is_ok());
        INFO(describe(c) << ", " << expected.message());
        for (ga::Isa isa : ga::testing::available_isas()) {
          ga::set_isa_limit(isa);
          for (ga::DotPrecision precision : {ga::DotPrecision::exact, ga::DotPrecision::storage}) {
            a.dot_precision = precision;
            INFO(ga::to_string(isa) << ", precision " << static_cast<int>(precision));
            CHECK(std::string(ga::run(a, w, executor).message()) == expected.message());
            // run_phase: the workers whose tasks read it return it, the others nothing.
            int refused = 0;
            for (int ith = 0; ith < threads; ++ith) {
              const ga::Status s = ga::run_phase(a, w, 0, ith, threads);
              if (s.is_ok()) continue;
              ++refused;
              CHECK(std::string(s.message()) == expected.message());
            }
            CHECK(refused >= 1);
            CHECK(ga::run(good, w, executor).is_ok());  // nothing left behind
          }
        }
        ga::clear_isa_limit();
      }
    }
  }
}

// A bad scale of a key no query sees (outside every row's window) fails can_implement(), which
// checks every scale below kv_lens, but not run(), which checks those its tasks read.
TEST_CASE("sdpa: run() passes a bad int8 scale that no query reads", "[sdpa][kv_types][validate]") {
  namespace ga = gated_attention;
  using I8 = std::int8_t;
  Case c = Case::make("int8 scale outside the window", 1, 1, 200, 4, 2, 64, 64)
               .with_mask(ga::Mask::window(16, 0))
               .with_kv_types(ElementType::i8, ElementType::i8);
  Problem p(c);
  ga::SdpaArgs<float, I8, I8> a = p.typed_args<I8, I8>();
  std::vector<float> scales(p.k_stored.scales);
  a.maybe_k_scales.data = scales.data();
  scales[10 * 2] = kNaN;  // key 10: the query at position 199 sees keys 183..199
  CHECK(!ga::can_implement(a).is_ok());
  std::vector<std::byte> ws(ga::workspace_size(a, 1));
  PathGuard guard;
  for (ga::Isa isa : ga::testing::available_isas()) {
    ga::set_isa_limit(isa);
    INFO(ga::to_string(isa));
    CHECK(ga::run(a, ga::Workspace(ws.data(), ws.size())).is_ok());
  }
}

// ---- The block with a bf16, f16 or int8 cache ----
//
// Tolerance. The block and the reference block each store their own K/V rows (f32 in the block,
// double rounded to f32 in the reference) into the cache type. Rows that agree to f32 precision
// round to the same cache values except where one lies within f32 error of a rounding boundary:
// there the two caches differ by one unit of the format (checked: no element more). Such a unit
// moves a logit or a value by at most as much as rounding every element of the row to the format
// does, so the block's output may differ from the reference's by the f32 tolerance of
// test_block.cpp plus the change the format itself makes to the reference's output (the
// reference block with the f32 cache against the same with the typed cache), measured per step.

namespace {

namespace ga = gated_attention;
using ga::testing::Model;
using ga::testing::Positions;

constexpr double kBlockAtol = 1e-4, kBlockRtol = 1e-3;  // test_block.cpp's f32 tolerance

template <class KvT>
struct TypedCache {
  static constexpr bool kQuantised = std::is_same_v<KvT, std::int8_t>;
  std::array<std::int64_t, 4> extents;
  std::vector<KvT> k, v;
  std::vector<float> k_scales, v_scales;
  std::vector<std::int64_t> lengths;

  TypedCache(const ga::BlockConfig& c, std::int64_t seqs, std::int64_t capacity)
      : extents{seqs, capacity, c.num_kv_heads, c.head_dim},
        k(static_cast<std::size_t>(seqs * capacity * c.num_kv_heads * c.head_dim)),
        v(k.size()),
        k_scales(kQuantised ? static_cast<std::size_t>(seqs * capacity * c.num_kv_heads) : 0, kNaN),
        v_scales(k_scales.size(), kNaN),
        lengths(static_cast<std::size_t>(seqs), 0) {}

  ga::KvCacheView<KvT> view() {
    ga::KvCacheView<KvT> c{ga::TensorView<KvT, 4>::contiguous(k.data(), extents),
                           ga::TensorView<KvT, 4>::contiguous(v.data(), extents), lengths.data()};
    if constexpr (kQuantised) {
      c.maybe_k_scales = ga::TensorView<float, 3>::contiguous(k_scales.data(),
                                                              {extents[0], extents[1], extents[2]});
      c.maybe_v_scales = ga::TensorView<float, 3>::contiguous(v_scales.data(),
                                                              {extents[0], extents[1], extents[2]});
    }
    return c;
  }
};

// One unit of the format at x: the spacing of bf16 / f16 next to x (away from zero), one int8
// step.
template <class KvT>
double format_unit(KvT x) {
  if constexpr (std::is_same_v<KvT, std::int8_t>) {
    return 1.0;
  } else {
    const KvT next = KvT::from_bits(static_cast<std::uint16_t>(x.bits + 1));
    return std::fabs(static_cast<double>(ga::to_float(next)) - ga::to_float(x));
  }
}

template <class KvT, class Cache>
std::vector<float> block_forward(const ga::GatedMultiHeadAttention<float, KvT>* block,
                                 const Model<float>& m, const std::vector<float>& x,
                                 std::int64_t len, const Positions& pos, Cache& cache) {
  const std::int64_t batch = cache.extents[0], hid = m.c.hidden_size;
  std::vector<float> y(static_cast<std::size_t>(batch * len * hid), kNaN);
  const auto xv = ga::TensorView<const float, 3>::contiguous(x.data(), {batch, len, hid});
  const auto pv = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {batch, len});
  const auto yv = ga::TensorView<float, 3>::contiguous(y.data(), {batch, len, hid});
  ga::Status s;
  if (block != nullptr) {
    const ga::BlockForwardArgs<float, KvT> args{xv, pv, cache.view(), yv, {}};
    std::vector<std::byte> ws(block->workspace_size(args, 1));
    s = block->forward(args, ga::Workspace(ws.data(), ws.size()));
  } else {
    s = ga::reference::block_forward(m.c, m.weights(), xv, pv, cache.view(), yv);
  }
  INFO(s.message());
  REQUIRE(s.is_ok());
  return y;
}

template <class KvT>
void check_block_with_cache() {
  const ga::BlockConfig c =
      ga::testing::small_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  auto rng = ga::testing::make_rng(0xb10c);
  const Model<float> m = ga::testing::make_model<float>(c, rng);
  const ga::GatedMultiHeadAttention<float, KvT> block(c, m.weights());
  const std::int64_t seqs = 2, capacity = 48;
  TypedCache<KvT> ours(c, seqs, capacity), theirs(c, seqs, capacity);
  TypedCache<float> exact(c, seqs, capacity);
  for (const std::int64_t len : {19, 5, 1, 1}) {
    INFO("step of " << len << " tokens");
    const std::vector<float> x = ga::testing::random_vector<float>(rng, seqs * len * c.hidden_size);
    Positions pos;
    for (std::int64_t s = 0; s < seqs; ++s) {
      for (std::int64_t t = 0; t < len; ++t) pos.push_back(ours.lengths[s] + t);
    }
    const std::vector<float> y = block_forward(&block, m, x, len, pos, ours);
    const std::vector<float> ref = block_forward<KvT>(nullptr, m, x, len, pos, theirs);
    const std::vector<float> ref_f32 = block_forward<float>(nullptr, m, x, len, pos, exact);
    double format_effect = 0.0, worst = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      format_effect = std::max(format_effect, std::fabs(double{ref[i]} - ref_f32[i]));
    }
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double tol = kBlockAtol + kBlockRtol * std::fabs(ref[i]) + format_effect;
      ga::testing::track(worst, std::fabs(double{y[i]} - ref[i]) / tol);
    }
    INFO("format effect " << format_effect);
    CHECK(worst <= 1.0);
    CHECK(format_effect > 0.0);  // the cache type is in play
  }
  CHECK(ours.lengths == theirs.lengths);
  std::int64_t far = 0;
  for (std::size_t i = 0; i < ours.k.size(); ++i) {
    for (const auto* cache : {&ours.k, &ours.v}) {
      const auto& other = cache == &ours.k ? theirs.k : theirs.v;
      const double a = ga::reference::as_double((*cache)[i]),
                   b = ga::reference::as_double(other[i]);
      if (std::isnan(a) != std::isnan(b) || std::fabs(a - b) > format_unit(other[i])) ++far;
    }
  }
  CHECK(far == 0);
  for (std::size_t i = 0; i < ours.k_scales.size(); ++i) {
    const double a = ours.k_scales[i], b = theirs.k_scales[i];
    if (!(std::isnan(a) && std::isnan(b)) && !(std::fabs(a - b) <= 1e-6 * b)) ++far;
  }
  CHECK(far == 0);
}

}  // namespace

// BlockForwardArgs::dot_precision reaches the attention: with a bf16 cache, storage rounds each
// query row to bf16 on every path (and the softmax weights where the storage dot runs), so the
// output moves, by a few bf16 unit roundoffs of its scale at most: a logit moves by at most
// 2^-8 sum_d |q_d k_d| (O(1) here), a weight by twice that, an output by 2^-8 max|v| more.
TEST_CASE("block: dot_precision storage reaches the attention and stays near exact",
          "[block][kv_types]") {
  const ga::BlockConfig c =
      ga::testing::small_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  auto rng = ga::testing::make_rng(0xd07);
  const Model<float> m = ga::testing::make_model<float>(c, rng);
  const ga::GatedMultiHeadAttention<float, ga::bf16> block(c, m.weights());
  const std::int64_t len = 19, hid = c.hidden_size;
  const std::vector<float> x = ga::testing::random_vector<float>(rng, 2 * len * hid);
  Positions pos;
  for (std::int64_t t = 0; t < 2 * len; ++t) pos.push_back(t % len);
  std::vector<float> y[2];
  for (int precision = 0; precision < 2; ++precision) {
    TypedCache<ga::bf16> cache(c, 2, 32);
    y[precision].assign(x.size(), kNaN);
    ga::BlockForwardArgs<float, ga::bf16> args;
    args.x = ga::TensorView<const float, 3>::contiguous(x.data(), {2, len, hid});
    args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {2, len});
    args.cache = cache.view();
    args.y = ga::TensorView<float, 3>::contiguous(y[precision].data(), {2, len, hid});
    args.dot_precision = precision == 0 ? ga::DotPrecision::exact : ga::DotPrecision::storage;
    std::vector<std::byte> ws(block.workspace_size(args, 1));
    const ga::Status s = block.forward(args, ga::Workspace(ws.data(), ws.size()));
    INFO(s.message());
    REQUIRE(s.is_ok());
  }
  double moved = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    moved = std::max(moved, std::fabs(double{y[1][i]} - y[0][i]));
    scale = std::max(scale, std::fabs(double{y[0][i]}));
  }
  INFO("storage moved the output by " << moved << " of max |y| " << scale);
  CHECK(moved > 0.0);
  CHECK(moved <= 4.0 * 0x1p-8 * scale);
}

TEST_CASE("block: bf16, f16 and int8 caches match the reference block with that cache",
          "[block][kv_types]") {
  check_block_with_cache<ga::bf16>();
  check_block_with_cache<ga::f16>();
  check_block_with_cache<std::int8_t>();
}
