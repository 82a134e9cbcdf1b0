// The README's example: gated SDPA on the fast path, checked against the double reference.
// Kept identical to the README's code block (ctest runs it as example/quick_start).
#include <gated_attention/gated_attention.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace ga = gated_attention;

int main() {
  const std::int64_t B = 1, L = 8, Hq = 16, Hkv = 2, D = 256;  // 8 tokens, causal
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  auto randn = [&](std::int64_t n) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (float& e : x) e = normal(rng);
    return x;
  };
  const std::vector<float> q = randn(B * L * Hq * D), k = randn(B * L * Hkv * D),
                           v = randn(B * L * Hkv * D), gate = randn(B * L * Hq * D);
  std::vector<float> out(q.size()), expected(q.size());
  using In = ga::TensorView<const float, 4>;
  using Out = ga::TensorView<float, 4>;

  ga::SdpaArgs<float> args;  // query-head tensors are [b, len, kv_heads, group, d]
  args.q = ga::split_heads(In::contiguous(q.data(), {B, L, Hq, D}), Hkv);
  args.k = In::contiguous(k.data(), {B, L, Hkv, D});
  args.v = In::contiguous(v.data(), {B, L, Hkv, D});
  args.out = ga::split_heads(Out::contiguous(out.data(), {B, L, Hq, D}), Hkv);
  args.mask = ga::Mask::causal();
  args.gate.values = ga::split_heads(In::contiguous(gate.data(), {B, L, Hq, D}), Hkv);

  ga::ThreadPool pool(2);
  std::vector<std::byte> ws(ga::workspace_size(args, pool.executor()));
  ga::Status s = ga::can_implement(args);
  if (s) s = ga::run(args, ga::Workspace(ws.data(), ws.size()), pool.executor());

  ga::SdpaArgs<float> check = args;
  check.out = ga::split_heads(Out::contiguous(expected.data(), {B, L, Hq, D}), Hkv);
  if (s) s = ga::reference::sdpa(check);
  double max_error = 0;
  for (std::size_t i = 0; i < out.size(); ++i)
    max_error = std::fmax(max_error, std::fabs(out[i] - expected[i]));
  std::printf("%s, %s path, max |out - reference| = %.2g\n", s.message(), ga::sdpa_path(),
              max_error);
  return s ? 0 : 1;
}
