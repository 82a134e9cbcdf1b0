// The named shapes of the design notes: the bench/report contract.
#pragma once

#include <cstdint>

namespace gated_attention::bench {

struct AttentionShape {
  const char* name;
  std::int64_t batch, q_heads, kv_heads, head_dim, q_len, kv_len;
  bool decode;  // one query token: reported in bytes/s as well as FLOP/s
  int hidden;   // the model's hidden size (block benchmarks)

  // Query/key pairs a causal, bottom-right-aligned mask leaves visible.
  double visible_pairs() const {
    double pairs = 0;
    for (std::int64_t i = 0; i < q_len; ++i) {
      const std::int64_t pos = i + kv_len - q_len;
      if (pos >= 0) pairs += static_cast<double>(pos < kv_len ? pos + 1 : kv_len);
    }
    return pairs;
  }
  // Useful FLOPs per call: 4 * B * Hq * D per visible pair (Q.K and P.V).
  double useful_flops() const {
    return 4.0 * static_cast<double>(batch * q_heads * head_dim) * visible_pairs();
  }
  // K and V bytes in f32.
  double kv_bytes() const {
    return 2.0 * 4.0 * static_cast<double>(batch * kv_len * kv_heads * head_dim);
  }
};

inline constexpr AttentionShape kShapes[] = {
    {"qwen3next_prefill_4k", 1, 16, 2, 256, 4096, 4096, false, 2048},
    {"qwen3next_chunk_512x20k", 1, 32, 2, 256, 512, 20000, false, 2048},
    {"qwen3next_decode_32k", 1, 16, 2, 256, 1, 32768, true, 2048},
    {"dense1p7b_prefill_2k", 1, 16, 8, 128, 2048, 2048, false, 2048},
    {"llama8b_decode_8k", 1, 32, 8, 128, 1, 8192, true, 4096},
    {"gpt2_prefill_1k", 1, 12, 12, 64, 1024, 1024, false, 768},
};

// Sequence-length sweeps (sweep/prefill/<gate>/f32/<len>, sweep/decode/<gate>/f32/<kv_len>):
// Qwen3-Next's attention heads (B 1, Hq 16, Hkv 2, D 256), causal, bottom-right aligned.
inline constexpr std::int64_t kSweepPrefillLens[] = {512, 1024, 2048, 4096, 8192, 16384};
inline constexpr std::int64_t kSweepDecodeLens[] = {1024,  2048,  4096,  8192,
                                                    16384, 32768, 65536, 131072};
inline constexpr AttentionShape sweep_prefill_shape(std::int64_t len) {
  return {"sweep_prefill", 1, 16, 2, 256, len, len, false, 2048};
}
inline constexpr AttentionShape sweep_decode_shape(std::int64_t kv_len) {
  return {"sweep_decode", 1, 16, 2, 256, 1, kv_len, true, 2048};
}

}  // namespace gated_attention::bench
