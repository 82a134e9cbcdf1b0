// Qwen3-Next's gated attention layer, loaded from a safetensors checkpoint of transformers'
// Qwen3NextAttention (the test fixture tests/data/qwen3_next_attention.safetensors, written by
// tools/make_qwen3_next_fixtures.py), run as a prefill then decode steps through the KV cache.
// Prints the agreement with transformers' outputs for every step and the tokens/s.
//
//   qwen3_next_attention [path/to/qwen3_next_attention.safetensors] [--threads N]
#include <gated_attention/gated_attention.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qwen3_next_fixture.hpp"  // tests/: maps the checkpoint's tensors to BlockWeights

namespace ga = gated_attention;

int main(int argc, char** argv) {
  std::string path = ga::testing::qwen3_next_fixture_path();
  int threads = 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      path = argv[i];
    }
  }

  ga::testing::Qwen3NextFixture fixture;
  ga::Status s = ga::testing::load_qwen3_next_fixture(path, &fixture);
  if (!s) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), s.message());
    return 1;
  }
  const ga::BlockConfig& c = fixture.config;
  std::printf("Qwen3-Next attention from %s (%s)\n", path.c_str(), fixture.versions.c_str());
  std::printf(
      "hidden %lld, %lld query / %lld KV heads of %lld, rotary dims %lld, %d thread(s), "
      "%s path\n",
      static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_q_heads),
      static_cast<long long>(c.num_kv_heads), static_cast<long long>(c.head_dim),
      static_cast<long long>(c.rotary_dim), threads, ga::sdpa_path());

  // The layer: views of the checkpoint's weights (nothing copied), a cache for one sequence.
  const ga::GatedMultiHeadAttention<float> attention(c, fixture.weights);
  const std::int64_t capacity = 64;
  std::vector<float> k_cache(static_cast<std::size_t>(capacity * c.kv_width()));
  std::vector<float> v_cache(k_cache.size());
  std::int64_t length = 0;
  const ga::TensorView<float, 4>::Index cache_extents = {1, capacity, c.num_kv_heads, c.head_dim};
  const ga::KvCacheView<float> cache{
      ga::TensorView<float, 4>::contiguous(k_cache.data(), cache_extents),
      ga::TensorView<float, 4>::contiguous(v_cache.data(), cache_extents), &length};
  ga::ThreadPool pool(threads);
  const ga::Executor executor = pool.executor();

  // steps[0]: the prefill; then one token per step.
  bool all_agree = true;
  for (std::size_t i = 0; i < fixture.steps.size(); ++i) {
    const ga::testing::Qwen3NextFixtureStep& step = fixture.steps[i];
    const std::int64_t tokens = step.hidden_states.extents[1];
    std::vector<float> y(static_cast<std::size_t>(step.output.num_elements()));
    ga::BlockForwardArgs<float> args;
    args.x = step.hidden_states;
    args.positions = step.position_ids;
    args.cache = cache;
    args.y = ga::TensorView<float, 3>::contiguous(y.data(), step.output.extents);
    std::vector<std::byte> workspace(attention.workspace_size(args, executor));

    // Time repeated calls on a cache rewound to its length before the step.
    const std::int64_t start_length = length;
    const int repeats = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < repeats && s.is_ok(); ++r) {
      length = start_length;
      s = attention.forward(args, ga::Workspace(workspace.data(), workspace.size()), executor);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
    if (!s) {
      std::fprintf(stderr, "forward failed: %s\n", s.message());
      return 1;
    }
    // f32 against transformers' f32: documented in tests/test_qwen3_next_fixture.cpp.
    const ga::testing::Agreement a = ga::testing::measure_agreement(
        y.data(), step.output.data, step.output.num_elements(), 1e-5, 1e-4);
    const bool agree = a.finite && a.relative_error() <= 1e-5 && a.worst_ratio <= 1.0;
    all_agree = all_agree && agree;
    std::printf(
        "%-8s %3lld token(s) at position %3lld: max |ours - transformers| %.2e "
        "(%.2e of max |y|) %s, %8.0f tokens/s\n",
        i == 0 ? "prefill" : "decode", static_cast<long long>(tokens),
        static_cast<long long>(step.position_ids(0, 0)), a.max_abs_error, a.relative_error(),
        agree ? "agree" : "DISAGREE", static_cast<double>(tokens) / seconds);
  }
  std::printf("%s\n", all_agree ? "all steps agree with transformers" : "MISMATCH");
  return all_agree ? 0 : 1;
}
