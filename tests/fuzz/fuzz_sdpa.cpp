// libFuzzer target: every input is one differential case of ops/sdpa (fuzz/sdpa_case.hpp); a
// disagreement with the reference prints the case and its bytes and aborts.
//
//   cmake --preset sanitize && cmake --build --preset sanitize --target fuzz_sdpa
//   build/sanitize/tests/fuzz/fuzz_sdpa -max_len=128 corpus_dir tests/fuzz/corpus
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "sdpa_case.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string failure = gated_attention::fuzzing::check_input(data, size);
  if (!failure.empty()) {
    std::fprintf(stderr, "fuzz_sdpa: %s\n", failure.c_str());
    std::abort();
  }
  return 0;
}
