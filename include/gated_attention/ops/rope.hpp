// Rotary position embedding, NeoX style with partial rotary (see rope_args.hpp), in place or out
// of place.
//
//   Status s = run(args, executor);  // needs no workspace
//
// Angles are computed in double once per token and shared by every head of that token.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "gated_attention/core/executor.hpp"
#include "gated_attention/core/status.hpp"
#include "gated_attention/ops/rope_args.hpp"

namespace gated_attention {

// Tokens per task of run().
inline constexpr std::int64_t kRopeTokensPerTask = 16;
// Largest rotary_dim run() accepts.
inline constexpr std::int64_t kMaxRotaryDim = 512;

template <class T, int Rank>
Status can_implement(const RopeArgs<T, Rank>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(args));
  if (!std::is_floating_point_v<T>) {
    return Status::error(StatusCode::not_supported, "rope: element type: expected float/double");
  }
  if (args.rotary_dim > kMaxRotaryDim) {
    return Status::error(StatusCode::not_supported, "rope: rotary_dim: expected <= %lld, got %lld",
                         static_cast<long long>(kMaxRotaryDim),
                         static_cast<long long>(args.rotary_dim));
  }
  return Status::ok();
}

// cos and sin [rotary_dim / 2] of one position.
struct RopeAngles {
  float cos[kMaxRotaryDim / 2];
  float sin[kMaxRotaryDim / 2];

  void compute(std::int64_t position, double theta, std::int64_t rotary_dim) {
    for (std::int64_t i = 0; i < rotary_dim / 2; ++i) {
      const double inv_freq =
          std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim));
      const double angle = static_cast<double>(position) * inv_freq;
      cos[i] = static_cast<float>(std::cos(angle));
      sin[i] = static_cast<float>(std::sin(angle));
    }
  }
};

// Rotates the first rotary_dim values of one head row; out may equal x. Dims past rotary_dim are
// copied when out != x.
template <class T>
void rope_row(const T* x, T* out, std::int64_t d, std::int64_t rotary_dim,
              const RopeAngles& angles) {
  const std::int64_t half = rotary_dim / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    const T a = x[i], b = x[i + half];
    const T c = static_cast<T>(angles.cos[i]), s = static_cast<T>(angles.sin[i]);
    out[i] = a * c - b * s;
    out[i + half] = b * c + a * s;
  }
  if (out != x) {
    for (std::int64_t i = rotary_dim; i < d; ++i) out[i] = x[i];
  }
}

// Every head row of token (b, t) of a [b, len, heads..., d] view.
template <class T, int Rank>
void rope_token(const RopeArgs<T, Rank>& args, std::int64_t b, std::int64_t t,
                const RopeAngles& angles) {
  const std::int64_t d = args.x.extents[Rank - 1];
  std::int64_t heads = 1;
  for (int i = 2; i + 1 < Rank; ++i) heads *= args.x.extents[i];
  for (std::int64_t h = 0; h < heads; ++h) {
    typename TensorView<const T, Rank>::Index index{};
    index[0] = b;
    index[1] = t;
    std::int64_t rest = h;
    for (int i = Rank - 2; i >= 2; --i) {
      index[i] = rest % args.x.extents[i];
      rest /= args.x.extents[i];
    }
    rope_row(&args.x[index], &args.out[index], d, args.rotary_dim, angles);
  }
}

template <class T, int Rank>
Status run(const RopeArgs<T, Rank>& args, const Executor& executor = {}) {
  GATED_ATTENTION_RETURN_IF_ERROR(can_implement(args));
  if (args.x.empty()) return Status::ok();
  const std::int64_t len = args.x.extents[1], tokens = args.x.extents[0] * len;
  parallel_for(executor, (tokens + kRopeTokensPerTask - 1) / kRopeTokensPerTask,
               [&](std::int64_t task, int) {
                 RopeAngles angles;
                 const std::int64_t end = std::min(tokens, (task + 1) * kRopeTokensPerTask);
                 for (std::int64_t token = task * kRopeTokensPerTask; token < end; ++token) {
                   const std::int64_t b = token / len, t = token % len;
                   angles.compute(args.positions(b, t), args.theta, args.rotary_dim);
                   rope_token(args, b, t, angles);
                 }
               });
  return Status::ok();
}

}  // namespace gated_attention
