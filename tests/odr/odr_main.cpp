// ODR check: two translation units, one built with -march=native and one without, linked into
// this binary (the native one first). Each dispatches sdpa and the output gate on every path the
// host supports; both must report the path asked for, agree bit for bit, and match the reference
// (sdpa_problem.hpp's tolerance, applied twice: the gate runs again on the gated output). Exit
// status 0 when all holds.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../sdpa_problem.hpp"
#include "odr_calls.hpp"

namespace ga = gated_attention;
using ga::testing::sdpa::Case;
using ga::testing::sdpa::Problem;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "odr check FAILED: %s\n", what.c_str());
  }
}

void check(const Case& c) {
  Problem native(c), plain(c);  // the same inputs, separate outputs
  const ga::SdpaArgs<float> native_args = native.args(), plain_args = plain.args();
  for (ga::Isa isa : ga::testing::available_isas()) {
    const std::string where = c.name + ", path " + ga::to_string(isa) + ": ";
    native.reset_outputs();
    plain.reset_outputs();
    const odr_check::Call a = odr_check::run_in_native_unit(native_args, isa, c.threads);
    const odr_check::Call b = odr_check::run_in_default_unit(plain_args, isa, c.threads);
    expect(a.sdpa.is_ok() && a.gate.is_ok(), where + "native unit: " + a.sdpa.message());
    expect(b.sdpa.is_ok() && b.gate.is_ok(), where + "default unit: " + b.sdpa.message());
    expect(std::string(a.path) == ga::to_string(isa),
           where + "native unit dispatched to " + a.path);
    expect(std::string(b.path) == ga::to_string(isa),
           where + "default unit dispatched to " + b.path);
    expect(native.out.storage == plain.out.storage, where + "outputs differ between the units");
    expect(native.lse.storage == plain.lse.storage, where + "lse differs between the units");
  }
  // The gate ran twice (fused, then standalone in place): the reference of that is the fused
  // reference gated once more, computed here in double from the reference output.
  if (const ga::Status s = plain.run_reference(); !s.is_ok()) {
    expect(false, c.name + ": reference: " + s.message());
    return;
  }
  double worst = 0.0;
  const std::int64_t g = c.hq / c.hkv;
  ga::testing::for_each_index(plain.out.view.extents, [&](const auto& i) {
    const double gate = plain.gate.view(i[0], i[1], i[2] / g, i[2] % g, i[3]);
    const double expected = plain.ref_out.cview()[i] / (1.0 + std::exp(-gate));
    const double got = plain.out.view[i];
    worst =
        std::max(worst, std::fabs(got - expected) / (2.0 * ga::testing::kSdpaAtol +
                                                     ga::testing::kSdpaRtol * std::fabs(expected)));
  });
  expect(worst <= 1.0,
         c.name + ": differs from the reference (" + std::to_string(worst) + " x tolerance)");
}

}  // namespace

int main() {
  std::printf("odr check: native unit AVX-512 %d, default unit AVX2 %d\n",
              odr_check::native_unit_has_avx512(), odr_check::default_unit_has_avx2());
  using ga::testing::sdpa::GateKind;
  check(Case::make("prefill d64", 1, 70, 70, 8, 2, 64, 64)
            .causal()
            .with_lse()
            .with_gate(GateKind::elementwise));
  check(Case::make("odd dims", 2, 9, 33, 6, 3, 33, 17).with_lse().with_gate(GateKind::headwise));
  check(Case::make("split decode d128", 1, 1, 1100, 8, 1, 128, 128)
            .with_lse()
            .with_threads(2)
            .with_gate(GateKind::elementwise));
  std::printf("odr check: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
