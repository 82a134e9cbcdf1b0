// Consumer smoke test, built with the consumer's default flags (no -march): one gated attention
// call through the reference, and one projection through the backend the package chose, which
// must be GATED_ATTENTION_CONSUMER_EXPECTS_BACKEND; exits non-zero on error.
#include <gated_attention/gated_attention.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>

namespace {

// y = x W^T for x [2, 3] and W [2, 3] with integer entries (exact in float).
bool projection_ok() {
  namespace ga = gated_attention;
  const float x[6] = {1, 2, 3, 4, 5, 6};
  const float w[6] = {1, 0, -1, 2, 1, 0};
  const float expected[4] = {-2, 4, -2, 13};
  float y[4] = {};
  ga::LinearArgs<float> args;
  args.x = ga::TensorView<const float, 2>::contiguous(x, {2, 3});
  args.weight = ga::TensorView<const float, 2>::contiguous(w, {2, 3});
  args.y = ga::TensorView<float, 2>::contiguous(y, {2, 2});
  const ga::Status status = ga::run(args);
  const char* backend = ga::linear_backend<float>();
  const bool ok = status.is_ok() && std::memcmp(y, expected, sizeof y) == 0 &&
                  std::strcmp(backend, GATED_ATTENTION_CONSUMER_EXPECTS_BACKEND) == 0;
  std::printf("consumer: projections through %s (expected %s): %s\n", backend,
              GATED_ATTENTION_CONSUMER_EXPECTS_BACKEND, ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main() {
  namespace ga = gated_attention;
  // One query, two keys, head dim 2: logits 1 and 0, gate pre-activation 0 (sigmoid 1/2).
  const float q[2] = {1.0f, 0.0f};
  const float k[4] = {1.0f, 0.0f, 0.0f, 1.0f};
  const float v[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  const float gate[2] = {0.0f, 0.0f};
  float out[2] = {};
  ga::SdpaArgs<float> args;
  args.q = ga::TensorView<const float, 5>::contiguous(q, {1, 1, 1, 1, 2});
  args.k = ga::TensorView<const float, 4>::contiguous(k, {1, 2, 1, 2});
  args.v = ga::TensorView<const float, 4>::contiguous(v, {1, 2, 1, 2});
  args.out = ga::TensorView<float, 5>::contiguous(out, {1, 1, 1, 1, 2});
  args.scale = 1.0f;
  args.gate.values = ga::TensorView<const float, 5>::contiguous(gate, {1, 1, 1, 1, 2});
  const ga::Status status = ga::reference::sdpa(args);
  const double p0 = std::exp(1.0) / (std::exp(1.0) + 1.0);
  const double expected[2] = {0.5 * (p0 + 3.0 * (1.0 - p0)), 0.5 * (2.0 * p0 + 4.0 * (1.0 - p0))};
  const bool ok = status.is_ok() && std::fabs(out[0] - expected[0]) < 1e-6 &&
                  std::fabs(out[1] - expected[1]) < 1e-6;
  std::printf("consumer: %s (%s) out = [%.6f, %.6f]\n", ok ? "ok" : "FAILED", status.message(),
              static_cast<double>(out[0]), static_cast<double>(out[1]));
  return ok && projection_ok() ? 0 : 1;
}
