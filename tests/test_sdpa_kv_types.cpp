// ops/sdpa with K and V stored in bf16, f16 or int8 (per-row scales), each path against
// reference::sdpa reading the same stored values exactly.
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

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sdpa_problem.hpp"

namespace {

using namespace gated_attention::testing::sdpa;

std::vector<Case> kv_type_cases(KvType k, KvType v) {
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
  };
  for (Case& c : cases) c.with_kv_types(k, v);
  cases[0].poison_invisible_keys = true;
  return cases;
}

template <KvType k, KvType v>
void check_types() {
  for (const Case& c : kv_type_cases(k, v)) {
    const PathCheck r = check_every_path_as<KvElement<k>, KvElement<v>>(c);
    INFO(r.failure);
    CHECK(r.failure.empty());
  }
}

}  // namespace

TEST_CASE("sdpa: bf16 K/V on every path", "[sdpa][kv_types]") {
  check_types<KvType::bf16, KvType::bf16>();
}

TEST_CASE("sdpa: f16 K/V on every path", "[sdpa][kv_types]") {
  check_types<KvType::f16, KvType::f16>();
}

TEST_CASE("sdpa: int8 K/V with row scales on every path", "[sdpa][kv_types]") {
  check_types<KvType::i8, KvType::i8>();
}

TEST_CASE("sdpa: K and V of different types on every path", "[sdpa][kv_types]") {
  check_types<KvType::bf16, KvType::i8>();
  check_types<KvType::i8, KvType::f16>();
}

TEST_CASE("sdpa: int8 scales are required, shaped and finite, each error naming the view",
          "[sdpa][kv_types][validate]") {
  namespace ga = gated_attention;
  using ga::testing::contains;
  Case c = Case::make("int8 scales", 2, 3, 40, 4, 2, 32, 32)
               .causal()
               .with_kv_lens({40, 25})
               .with_kv_types(KvType::i8, KvType::i8);
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
  for (float bad : {-1.0f, kNaN, kInf}) {
    scales[(1 * 40 + 7) * 2 + 1] = bad;  // entry 1, key 7, kv head 1
    refused(a, "k_scales: batch 1, position 7, kv head 1: expected a finite scale >= 0");
  }
  scales[(1 * 40 + 7) * 2 + 1] = 1.0f;
  scales[(1 * 40 + 30) * 2 + 1] = kNaN;  // past entry 1's 25 keys: never read, not checked
  CHECK(ga::can_implement(a).is_ok());

  const ga::SdpaArgs<float> floats = p.args();
  ga::SdpaArgs<float> f = floats;
  f.maybe_v_scales = good.maybe_v_scales;
  const ga::Status s = ga::can_implement(f);
  CHECK(contains(s, "v_scales: expected none for a float, bf16 or f16 V, got a view"));
}
