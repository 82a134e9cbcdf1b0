// The Qwen3-Next attention fixture (tests/data/qwen3_next_attention.safetensors, written by
// tools/make_qwen3_next_fixtures.py from transformers' Qwen3NextAttention in f32): the block
// config, weight views and per-step inputs/outputs, plus the agreement measure the tests use.
// Free of Catch2 so that block tests and examples can share it.
#pragma once

#include <gated_attention/block/config.hpp>
#include <gated_attention/io/safetensors.hpp>
#include <gated_attention/ops/rope_args.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gated_attention::testing {

#ifdef GATED_ATTENTION_TEST_DATA_DIR
inline std::string qwen3_next_fixture_path() {
  return std::string(GATED_ATTENTION_TEST_DATA_DIR) + "/qwen3_next_attention.safetensors";
}
#endif

// One forward call: `len` new tokens for each of `b` sequences.
struct Qwen3NextFixtureStep {
  TensorView<const float, 3> hidden_states;        // [b, len, hidden]
  TensorView<const std::int64_t, 2> position_ids;  // [b, len]
  TensorView<const float, 3> output;               // [b, len, hidden], transformers' result
};

// Views point into `file`; the fixture is neither copied nor moved once loaded (views would still
// be valid after a move, but a copy's would point into the original).
struct Qwen3NextFixture {
  io::SafetensorsFile file;
  BlockConfig config;  // from the file's metadata
  BlockWeights<float> weights;
  // One sequence, one cache: steps[0] is the prefill (37 tokens), then one-token decode steps.
  std::vector<Qwen3NextFixtureStep> steps;
  // Two sequences: sequence 0 is prefilled with steps[0], sequence 1 with seq1_prefill (20
  // tokens); then batch_decode[i] appends one token to each ([2, 1, ...], positions 37 + i and
  // 20 + i). transformers ran each sequence with its own cache.
  Qwen3NextFixtureStep seq1_prefill;
  std::vector<Qwen3NextFixtureStep> batch_decode;
  std::string versions;  // "torch ..., transformers ..., python ..."

  Qwen3NextFixture() = default;
  Qwen3NextFixture(const Qwen3NextFixture&) = delete;
  Qwen3NextFixture& operator=(const Qwen3NextFixture&) = delete;
};

namespace detail {

inline Status fixture_step(const io::SafetensorsFile& f, const std::string& prefix,
                           std::int64_t hidden, Qwen3NextFixtureStep* step) {
  GATED_ATTENTION_RETURN_IF_ERROR(f.view(prefix + ".hidden_states", &step->hidden_states));
  GATED_ATTENTION_RETURN_IF_ERROR(f.view(prefix + ".position_ids", &step->position_ids));
  GATED_ATTENTION_RETURN_IF_ERROR(f.view(prefix + ".output", &step->output));
  const auto& x = step->hidden_states.extents;
  const auto& p = step->position_ids.extents;
  const auto& y = step->output.extents;
  if (x[2] != hidden || y != x || p[0] != x[0] || p[1] != x[1]) {
    return Status::error(StatusCode::invalid_argument,
                         "fixture: %.60s: shapes disagree: hidden_states [%lld, %lld, %lld], "
                         "position_ids [%lld, %lld], output [%lld, %lld, %lld]",
                         prefix.c_str(), static_cast<long long>(x[0]), static_cast<long long>(x[1]),
                         static_cast<long long>(x[2]), static_cast<long long>(p[0]),
                         static_cast<long long>(p[1]), static_cast<long long>(y[0]),
                         static_cast<long long>(y[1]), static_cast<long long>(y[2]));
  }
  return Status::ok();
}

}  // namespace detail

// Loads the fixture at `path` into *out: the file, the Qwen3-Next block config (qwen3_next q/gate
// layout, elementwise sigmoid gate, zero-centred QK norm, partial NeoX RoPE), weight views and
// steps.
inline Status load_qwen3_next_fixture(const std::string& path, Qwen3NextFixture* out) {
  io::SafetensorsFile& f = out->file;
  GATED_ATTENTION_RETURN_IF_ERROR(f.read(path));

  BlockConfig& c = out->config;
  c = BlockConfig();
  double partial_rotary_factor = 0.0, rms_norm_eps = 0.0;
  std::int64_t decode_steps = 0;
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("hidden_size", &c.hidden_size));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("num_attention_heads", &c.num_q_heads));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("num_key_value_heads", &c.num_kv_heads));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("head_dim", &c.head_dim));
  GATED_ATTENTION_RETURN_IF_ERROR(
      f.metadata_number("partial_rotary_factor", &partial_rotary_factor));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_number("rope_theta", &c.rope_theta));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_number("rms_norm_eps", &rms_norm_eps));
  GATED_ATTENTION_RETURN_IF_ERROR(f.metadata_integer("decode_steps", &decode_steps));
  c.gate_mode = GateMode::elementwise;
  c.gate_activation = GateActivation::sigmoid;
  c.q_gate_layout = QGateLayout::qwen3_next;
  c.qk_norm = QkNorm::zero_centered_rms;
  c.rotary_dim = rotary_dim_for(c.head_dim, partial_rotary_factor);
  c.rms_norm_eps = static_cast<float>(rms_norm_eps);
  c.scale = 0.0f;  // head_dim^-1/2, as Qwen3NextAttention.scaling

  BlockWeights<float>& w = out->weights;
  w = BlockWeights<float>();
  GATED_ATTENTION_RETURN_IF_ERROR(f.view("q_proj.weight", &w.q_proj));
  GATED_ATTENTION_RETURN_IF_ERROR(f.view("k_proj.weight", &w.k_proj));
  GATED_ATTENTION_RETURN_IF_ERROR(f.view("v_proj.weight", &w.v_proj));
  GATED_ATTENTION_RETURN_IF_ERROR(f.view("o_proj.weight", &w.o_proj));
  TensorView<const float, 1> q_norm, k_norm;
  GATED_ATTENTION_RETURN_IF_ERROR(f.view("q_norm.weight", &q_norm));
  GATED_ATTENTION_RETURN_IF_ERROR(f.view("k_norm.weight", &k_norm));
  if (q_norm.extents[0] != c.head_dim || k_norm.extents[0] != c.head_dim) {
    return Status::error(StatusCode::invalid_argument,
                         "fixture: q_norm/k_norm: dim 0 (head dim): expected %lld, got %lld/%lld",
                         static_cast<long long>(c.head_dim),
                         static_cast<long long>(q_norm.extents[0]),
                         static_cast<long long>(k_norm.extents[0]));
  }
  w.maybe_q_norm = q_norm.data;
  w.maybe_k_norm = k_norm.data;
  GATED_ATTENTION_RETURN_IF_ERROR(validate(c, w));

  out->steps.assign(static_cast<std::size_t>(decode_steps + 1), Qwen3NextFixtureStep());
  for (std::size_t s = 0; s < out->steps.size(); ++s) {
    GATED_ATTENTION_RETURN_IF_ERROR(
        detail::fixture_step(f, "step" + std::to_string(s), c.hidden_size, &out->steps[s]));
  }
  GATED_ATTENTION_RETURN_IF_ERROR(
      detail::fixture_step(f, "batch.seq1_prefill", c.hidden_size, &out->seq1_prefill));
  out->batch_decode.assign(static_cast<std::size_t>(decode_steps), Qwen3NextFixtureStep());
  for (std::size_t i = 0; i < out->batch_decode.size(); ++i) {
    GATED_ATTENTION_RETURN_IF_ERROR(detail::fixture_step(f, "batch.decode" + std::to_string(i),
                                                         c.hidden_size, &out->batch_decode[i]));
  }

  out->versions.clear();
  for (const char* key : {"torch_version", "transformers_version", "python_version"}) {
    const std::string* v = f.find_metadata(key);
    if (!out->versions.empty()) out->versions += ", ";
    out->versions += std::string(key, std::strlen(key) - 8) + " " + (v ? *v : "?");
  }
  return Status::ok();
}

// How far `actual` is from `expected` (two equally shaped dense ranges).
struct Agreement {
  double max_abs_error = 0.0;     // max |actual - expected|
  double max_abs_expected = 0.0;  // max |expected|
  double worst_ratio = 0.0;  // max |actual - expected| / (atol + rtol * |expected|); <= 1 passes
  bool finite = true;        // no NaN or infinity in actual

  // max_abs_error relative to the output's scale.
  double relative_error() const {
    return max_abs_expected > 0.0 ? max_abs_error / max_abs_expected : max_abs_error;
  }
};

template <class A, class B>
Agreement measure_agreement(const A* actual, const B* expected, std::int64_t n, double atol,
                            double rtol) {
  Agreement a;
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(actual[i]), y = static_cast<double>(expected[i]);
    if (!std::isfinite(x)) a.finite = false;
    const double error = std::fabs(x - y);
    a.max_abs_error = std::max(a.max_abs_error, error);
    a.max_abs_expected = std::max(a.max_abs_expected, std::fabs(y));
    a.worst_ratio = std::max(a.worst_ratio, error / (atol + rtol * std::fabs(y)));
  }
  return a;
}

}  // namespace gated_attention::testing
