// Test entry point. Random cases draw from test_seed(): GATED_ATTENTION_TEST_SEED (or Catch's
// --rng-seed) sets it; the seed is printed so that any failure can be replayed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>

#include "support.hpp"

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  std::uint64_t seed = 20251130;
  if (const char* env = std::getenv("GATED_ATTENTION_TEST_SEED")) {
    seed = std::strtoull(env, nullptr, 10);
  } else if (session.configData().rngSeed != 0) {
    seed = session.configData().rngSeed;
  }
  gated_attention::testing::set_test_seed(seed);
  std::fprintf(stderr,
               "gated_attention tests: seed %llu (set GATED_ATTENTION_TEST_SEED to replay)\n",
               static_cast<unsigned long long>(seed));
  return session.run();
}
