// The differential fuzzer without libFuzzer: seeded random inputs and the committed corpus, each
// decoded and checked by fuzz/sdpa_case.hpp on every path against the reference.
//
//   GATED_ATTENTION_FUZZ_CASES   number of random inputs (default kDefaultCases)
//   GATED_ATTENTION_TEST_SEED    seeds the inputs (as for every random test)
//   GATED_ATTENTION_FUZZ_CORPUS  a directory of inputs to replay instead of fuzz/corpus/
// A failure prints the case and its input bytes (hex): written to a file, the bytes replay it
// (add it to tests/fuzz/corpus/, or pass it to the libFuzzer binary).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "fuzz/sdpa_case.hpp"
#include "support.hpp"

namespace ga = gated_attention;

namespace {

// About 45 s in the RelWithDebInfo build on one core of the development machine (20000 took
// about 90 s, too long for every CI build; the fuzzing campaigns run far more).
constexpr std::int64_t kDefaultCases = 10000;
constexpr std::size_t kInputBytes = 96;  // more than decode_case() reads
constexpr int kMaxReported = 3;

std::int64_t replay_cases() {
  if (const char* env = std::getenv("GATED_ATTENTION_FUZZ_CASES")) {
    return std::strtoll(env, nullptr, 10);
  }
  return kDefaultCases;
}

bool quiet() {
  return std::getenv("GATED_ATTENTION_TEST_QUIET") != nullptr;
}

}  // namespace

TEST_CASE("fuzz replay: seeded random inputs agree with the reference on every path",
          "[fuzz][sdpa][long]") {
  const std::int64_t cases = replay_cases();
  auto rng = ga::testing::make_rng(0xf022ca5e);
  std::vector<std::uint8_t> input(kInputBytes);
  std::int64_t failed = 0, rejections = 0;
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < cases; ++i) {
    for (auto& byte : input) byte = static_cast<std::uint8_t>(rng());
    const auto decoded = ga::fuzzing::decode_case(input.data(), input.size());
    if (decoded.corruption != ga::fuzzing::Corruption::none) ++rejections;
    const std::string failure = ga::fuzzing::check_input(input.data(), input.size());
    if (!failure.empty() && ++failed <= kMaxReported) {
      INFO("input " << i << " of " << cases << " (seed " << ga::testing::test_seed()
                    << "): " << failure);
      CHECK(failure.empty());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!quiet()) {
    std::fprintf(stderr, "fuzz replay: %lld inputs (%lld rejection cases), %lld failed, %.1f s\n",
                 static_cast<long long>(cases), static_cast<long long>(rejections),
                 static_cast<long long>(failed), seconds);
  }
  CHECK(failed == 0);
}

TEST_CASE("fuzz replay: every input of the committed corpus", "[fuzz][sdpa][long]") {
  namespace fs = std::filesystem;
  const char* other = std::getenv("GATED_ATTENTION_FUZZ_CORPUS");  // replays another directory
  const fs::path dir = other != nullptr ? other : GATED_ATTENTION_FUZZ_CORPUS_DIR;
  REQUIRE(fs::is_directory(dir));
  std::int64_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream file(entry.path(), std::ios::binary);
    const std::vector<std::uint8_t> input((std::istreambuf_iterator<char>(file)),
                                          std::istreambuf_iterator<char>());
    ++count;
    const std::string failure = ga::fuzzing::check_input(input.data(), input.size());
    INFO("corpus file " << entry.path().filename().string() << ": " << failure);
    CHECK(failure.empty());
  }
  CHECK(count > 0);
}
