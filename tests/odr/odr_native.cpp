// One of the ODR check's two translation units (see odr_calls.hpp).
#include <cstddef>
#include <memory>
#include <vector>

#include "odr_calls.hpp"

namespace odr_check {

namespace ga = gated_attention;

Call run_in_native_unit(const ga::SdpaArgs<float>& args, ga::Isa isa, int workers) {
  Call call;
  ga::set_isa_limit(isa);
  call.path = ga::sdpa_path();
  std::unique_ptr<ga::ThreadPool> pool;
  ga::Executor executor;
  if (workers > 1) {
    pool = std::make_unique<ga::ThreadPool>(workers);
    executor = pool->executor();
  }
  std::vector<std::byte> ws(ga::workspace_size(args, executor));
  call.sdpa = ga::run(args, ga::Workspace(ws.data(), ws.size()), executor);
  if (args.gate.enabled()) {
    ga::OutputGateArgs<float> gate;
    gate.attn = args.out;
    gate.out = args.out;
    gate.gate = args.gate;
    call.gate = ga::run(gate, ga::Workspace(nullptr, 0), executor);
  }
  ga::clear_isa_limit();
  return call;
}

bool native_unit_has_avx512() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

}  // namespace odr_check
