// A pre-norm decoder layer built from the library's pieces, the template to copy for your own:
//
//   h   = x + GatedAttention(RMSNorm(x))
//   out = h + W_down (silu(W_gate_mlp RMSNorm(h)) * W_up RMSNorm(h))      (SwiGLU MLP)
//
// It runs a prefill, then decode steps through the KV cache, and checks the decoded outputs
// against a single prefill over the whole sequence (the cache must give the same answer).
// One workspace and one thread pool serve every call; nothing is allocated per token.
//
//   custom_decoder_layer [--tokens N] [--decode N] [--threads N]
#include <gated_attention/gated_attention.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace ga = gated_attention;

namespace {

std::vector<float> random_values(std::mt19937& rng, std::int64_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

ga::TensorView<const float, 2> matrix(const std::vector<float>& w, std::int64_t rows,
                                      std::int64_t cols) {
  return ga::TensorView<const float, 2>::contiguous(w.data(), {rows, cols});
}

// The layer's weights and its scratch; forward() appends `len` tokens of one sequence.
class DecoderLayer {
 public:
  DecoderLayer(const ga::BlockConfig& config, std::int64_t intermediate, std::int64_t max_tokens,
               std::int64_t capacity, const ga::Executor& executor, std::mt19937& rng)
      : c_(config), intermediate_(intermediate), executor_(executor) {
    const std::int64_t hid = c_.hidden_size;
    const float s = 1.0f / std::sqrt(static_cast<float>(hid));
    q_proj_ = random_values(rng, c_.q_proj_rows() * hid, s);  // q and gate rows, per head
    k_proj_ = random_values(rng, c_.kv_width() * hid, s);
    v_proj_ = random_values(rng, c_.kv_width() * hid, s);
    o_proj_ = random_values(rng, hid * c_.q_width(), s);
    q_norm_ = random_values(rng, c_.head_dim, 0.1f);
    k_norm_ = random_values(rng, c_.head_dim, 0.1f);
    input_norm_ = random_values(rng, hid, 0.1f);
    post_norm_ = random_values(rng, hid, 0.1f);
    mlp_gate_ = random_values(rng, intermediate * hid, s);
    mlp_up_ = random_values(rng, intermediate * hid, s);
    mlp_down_ = random_values(rng, hid * intermediate, 1.0f / std::sqrt(float(intermediate)));

    ga::BlockWeights<float> w;
    w.q_proj = matrix(q_proj_, c_.q_proj_rows(), hid);
    w.k_proj = matrix(k_proj_, c_.kv_width(), hid);
    w.v_proj = matrix(v_proj_, c_.kv_width(), hid);
    w.o_proj = matrix(o_proj_, hid, c_.q_width());
    w.maybe_q_norm = q_norm_.data();
    w.maybe_k_norm = k_norm_.data();
    attention_ = std::make_unique<ga::GatedMultiHeadAttention<float>>(c_, w);

    k_cache_.resize(static_cast<std::size_t>(capacity * c_.kv_width()));
    v_cache_.resize(k_cache_.size());
    normed_.resize(static_cast<std::size_t>(max_tokens * hid));
    hidden_.resize(normed_.size());
    gate_.resize(static_cast<std::size_t>(max_tokens * intermediate));
    up_.resize(gate_.size());
    capacity_ = capacity;
    max_tokens_ = max_tokens;
    positions_.resize(static_cast<std::size_t>(max_tokens));
    // Size the attention workspace once, for the longest call.
    const ga::BlockForwardArgs<float> largest =
        attention_args(normed_.data(), hidden_.data(), max_tokens);
    workspace_.resize(attention_->workspace_size(largest, executor_));
  }

  std::int64_t length() const { return length_; }
  void reset() { length_ = 0; }

  // x, out [len, hidden]; len tokens at positions length() ...
  ga::Status forward(const float* x, float* out, std::int64_t len) {
    const std::int64_t hid = c_.hidden_size;
    if (len < 0 || len > max_tokens_) {
      return ga::Status::error(ga::StatusCode::invalid_argument,
                               "x: dim 0 (tokens): expected 0..%lld, got %lld",
                               static_cast<long long>(max_tokens_), static_cast<long long>(len));
    }
    // normed = RMSNorm(x); attention writes h - x into hidden_, then h = x + attention.
    GATED_ATTENTION_RETURN_IF_ERROR(rms_norm(x, normed_.data(), len, input_norm_));
    for (std::int64_t t = 0; t < len; ++t) positions_[t] = length_ + t;
    const ga::BlockForwardArgs<float> args = attention_args(normed_.data(), hidden_.data(), len);
    GATED_ATTENTION_RETURN_IF_ERROR(
        attention_->forward(args, ga::Workspace(workspace_.data(), workspace_.size()), executor_));
    for (std::int64_t i = 0; i < len * hid; ++i) hidden_[i] += x[i];

    // MLP on RMSNorm(h): gate and up projections, SwiGLU, down projection, residual.
    GATED_ATTENTION_RETURN_IF_ERROR(rms_norm(hidden_.data(), normed_.data(), len, post_norm_));
    auto project = [&](const std::vector<float>& w, std::int64_t out_features, const float* in,
                       std::int64_t in_features, float* y) {
      return ga::run(
          ga::LinearArgs<float>{ga::TensorView<const float, 2>::contiguous(in, {len, in_features}),
                                matrix(w, out_features, in_features), nullptr,
                                ga::TensorView<float, 2>::contiguous(y, {len, out_features})},
          executor_);
    };
    GATED_ATTENTION_RETURN_IF_ERROR(
        project(mlp_gate_, intermediate_, normed_.data(), hid, gate_.data()));
    GATED_ATTENTION_RETURN_IF_ERROR(
        project(mlp_up_, intermediate_, normed_.data(), hid, up_.data()));
    for (std::int64_t i = 0; i < len * intermediate_; ++i) {
      gate_[i] = gate_[i] / (1.0f + std::exp(-gate_[i])) * up_[i];
    }
    GATED_ATTENTION_RETURN_IF_ERROR(project(mlp_down_, hid, gate_.data(), intermediate_, out));
    for (std::int64_t i = 0; i < len * hid; ++i) out[i] += hidden_[i];
    return ga::Status::ok();
  }

 private:
  ga::Status rms_norm(const float* in, float* out, std::int64_t len,
                      const std::vector<float>& weight) const {
    const std::int64_t hid = c_.hidden_size;
    return ga::run(
        ga::RmsNormArgs<float, 2>{ga::TensorView<const float, 2>::contiguous(in, {len, hid}),
                                  weight.data(),
                                  ga::TensorView<float, 2>::contiguous(out, {len, hid}),
                                  c_.rms_norm_eps, ga::RmsNormWeight::zero_centered},
        executor_);
  }

  ga::BlockForwardArgs<float> attention_args(const float* x, float* y, std::int64_t len) {
    const std::int64_t hid = c_.hidden_size;
    const std::array<std::int64_t, 4> cache_extents = {1, capacity_, c_.num_kv_heads, c_.head_dim};
    ga::BlockForwardArgs<float> args;
    args.x = ga::TensorView<const float, 3>::contiguous(x, {1, len, hid});
    args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(positions_.data(), {1, len});
    args.cache = {ga::TensorView<float, 4>::contiguous(k_cache_.data(), cache_extents),
                  ga::TensorView<float, 4>::contiguous(v_cache_.data(), cache_extents), &length_};
    args.y = ga::TensorView<float, 3>::contiguous(y, {1, len, hid});
    return args;
  }

  ga::BlockConfig c_;
  std::int64_t intermediate_;
  ga::Executor executor_;
  std::vector<float> q_proj_, k_proj_, v_proj_, o_proj_, q_norm_, k_norm_;
  std::vector<float> input_norm_, post_norm_, mlp_gate_, mlp_up_, mlp_down_;
  std::unique_ptr<ga::GatedMultiHeadAttention<float>> attention_;
  std::vector<float> k_cache_, v_cache_, normed_, hidden_, gate_, up_;
  std::vector<std::int64_t> positions_;
  std::vector<std::byte> workspace_;
  std::int64_t capacity_ = 0, length_ = 0, max_tokens_ = 0;
};

std::int64_t arg_value(int argc, char** argv, const char* name, std::int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t prefill = arg_value(argc, argv, "--tokens", 128);
  const std::int64_t decode = arg_value(argc, argv, "--decode", 16);
  const int threads = static_cast<int>(arg_value(argc, argv, "--threads", 2));
  const std::int64_t total = prefill + decode;

  // A small Qwen3-Next-shaped layer: elementwise gate packed per head in q_proj, zero-centred
  // QK norm, RoPE on a quarter of each head.
  ga::BlockConfig c;
  c.hidden_size = 512;
  c.num_q_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.gate_mode = ga::GateMode::elementwise;
  c.q_gate_layout = ga::QGateLayout::qwen3_next;
  c.qk_norm = ga::QkNorm::zero_centered_rms;
  c.rotary_dim = ga::rotary_dim_for(c.head_dim, 0.25);

  ga::ThreadPool pool(threads);
  std::mt19937 rng(7);
  DecoderLayer layer(c, /*intermediate=*/1024, /*max_tokens=*/total, /*capacity=*/total,
                     pool.executor(), rng);
  const std::vector<float> x = random_values(rng, total * c.hidden_size, 1.0f);

  // Prefill, then one token at a time.
  std::vector<float> incremental(x.size());
  const auto start = std::chrono::steady_clock::now();
  ga::Status s = layer.forward(x.data(), incremental.data(), prefill);
  const auto prefilled = std::chrono::steady_clock::now();
  for (std::int64_t t = prefill; t < total && s.is_ok(); ++t) {
    s = layer.forward(x.data() + t * c.hidden_size, incremental.data() + t * c.hidden_size, 1);
  }
  const auto decoded = std::chrono::steady_clock::now();
  if (!s) {
    std::fprintf(stderr, "forward failed: %s\n", s.message());
    return 1;
  }

  // The whole sequence in one prefill must agree with the cached decode steps.
  std::vector<float> whole(x.size());
  layer.reset();
  s = layer.forward(x.data(), whole.data(), total);
  if (!s) {
    std::fprintf(stderr, "forward failed: %s\n", s.message());
    return 1;
  }
  double max_diff = 0, max_abs = 0;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(whole[i] - incremental[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(whole[i])));
  }
  const double prefill_s = std::chrono::duration<double>(prefilled - start).count();
  const double decode_s = std::chrono::duration<double>(decoded - prefilled).count();
  std::printf("decoder layer: hidden %lld, %lld query / %lld KV heads of %lld, %d thread(s), %s\n",
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_q_heads),
              static_cast<long long>(c.num_kv_heads), static_cast<long long>(c.head_dim), threads,
              ga::sdpa_path());
  std::printf("prefill %lld tokens: %.1f tokens/s; decode %lld tokens: %.1f tokens/s\n",
              static_cast<long long>(prefill), static_cast<double>(prefill) / prefill_s,
              static_cast<long long>(decode), static_cast<double>(decode) / decode_s);
  std::printf("cached decode vs one prefill: max |diff| %.3g (max |out| %.3g)\n", max_diff,
              max_abs);
  const bool agree = max_diff <= 1e-4 * std::max(1.0, max_abs);
  std::printf("%s\n", agree ? "agree" : "DISAGREE");
  return agree ? 0 : 1;
}
