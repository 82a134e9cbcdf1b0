// Test fixtures for the block: a random model in every q/gate layout, a NaN-filled KV cache and
// position helpers. Used by the reference block tests and the block tests.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "support.hpp"

namespace gated_attention::testing {

namespace ga = gated_attention;

using Rng = std::mt19937_64;
using Positions = std::vector<std::int64_t>;

inline constexpr ga::QGateLayout kLayouts[] = {ga::QGateLayout::qwen3_next,
                                               ga::QGateLayout::grouped, ga::QGateLayout::separate};

inline const char* name_of(ga::QGateLayout layout) {
  switch (layout) {
    case ga::QGateLayout::qwen3_next:
      return "qwen3_next";
    case ga::QGateLayout::grouped:
      return "grouped";
    case ga::QGateLayout::separate:
      return "separate";
  }
  return "?";
}

inline const char* name_of(ga::GateMode mode) {
  switch (mode) {
    case ga::GateMode::none:
      return "none";
    case ga::GateMode::headwise:
      return "headwise";
    case ga::GateMode::elementwise:
      return "elementwise";
  }
  return "?";
}

template <class T>
T nan_of() {
  return reference::from_double<T>(std::numeric_limits<double>::quiet_NaN());
}

// hidden 32, 4 query heads over 2 KV heads (groups of 2), head_dim 8, RoPE on 4 of 8 dims.
inline ga::BlockConfig small_config(ga::GateMode mode, ga::QGateLayout layout) {
  ga::BlockConfig c;
  c.hidden_size = 32;
  c.num_q_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.gate_mode = mode;
  c.q_gate_layout = layout;
  c.qk_norm = ga::QkNorm::zero_centered_rms;
  c.rotary_dim = 4;
  return c;
}

// Gate values per query head: 0 (no gate), 1 (headwise) or head_dim (elementwise).
inline std::int64_t gate_per_head(const ga::BlockConfig& c) {
  switch (c.gate_mode) {
    case ga::GateMode::none:
      return 0;
    case ga::GateMode::headwise:
      return 1;
    case ga::GateMode::elementwise:
      return c.head_dim;
  }
  return 0;
}

// The block's parameters, held head-major as the separate layout has them (q row h * D + d, gate
// row h * gate_per_head + e); pack() builds q_proj (and its bias) in the config's layout.
template <class T>
struct Model {
  ga::BlockConfig c;
  std::vector<T> wq, bq;          // [H * D, hidden], [H * D]
  std::vector<T> wg, bg;          // [gate_width, hidden], [gate_width]
  std::vector<T> wk, bk, wv, bv;  // [KV * D, hidden], [KV * D]
  std::vector<T> wo, bo;          // [hidden, H * D], [hidden]
  std::vector<T> q_norm, k_norm;  // [D]
  bool biases = true;             // pass the q/gate/k/v biases
  bool o_bias = true;             // pass o_proj's bias
  std::vector<T> q_proj, q_bias;  // q_proj's rows in c.q_gate_layout, built by pack()

  // Packs q_proj by the layout definitions: qwen3_next [q_h | gate_h] per head, grouped
  // [q of the g heads | gate of the g heads] per KV group, separate q rows only.
  void pack() {
    const std::int64_t hid = c.hidden_size, d = c.head_dim, g = c.num_q_heads / c.num_kv_heads;
    const std::int64_t gph = gate_per_head(c);
    q_proj.clear();
    q_bias.clear();
    auto append = [&](const std::vector<T>& w, const std::vector<T>& b, std::int64_t row) {
      q_proj.insert(q_proj.end(), w.begin() + row * hid, w.begin() + (row + 1) * hid);
      q_bias.push_back(b[static_cast<std::size_t>(row)]);
    };
    if (c.q_gate_layout == ga::QGateLayout::separate) {
      for (std::int64_t r = 0; r < c.num_q_heads * d; ++r) append(wq, bq, r);
    } else if (c.q_gate_layout == ga::QGateLayout::qwen3_next) {
      for (std::int64_t h = 0; h < c.num_q_heads; ++h) {
        for (std::int64_t e = 0; e < d; ++e) append(wq, bq, h * d + e);
        for (std::int64_t e = 0; e < gph; ++e) append(wg, bg, h * gph + e);
      }
    } else {
      for (std::int64_t kv = 0; kv < c.num_kv_heads; ++kv) {
        for (std::int64_t j = 0; j < g; ++j) {
          for (std::int64_t e = 0; e < d; ++e) append(wq, bq, (kv * g + j) * d + e);
        }
        for (std::int64_t j = 0; j < g; ++j) {
          for (std::int64_t e = 0; e < gph; ++e) append(wg, bg, (kv * g + j) * gph + e);
        }
      }
    }
  }

  ga::BlockWeights<T> weights() const { return weights_with_norms(q_norm, k_norm); }

  // The weights with the QK norm weights in another type N (the activations' type of a block
  // whose projection weights are T).
  template <class N>
  ga::BlockWeights<N, T> weights_with_norms(const std::vector<N>& q_norm_weight,
                                            const std::vector<N>& k_norm_weight) const {
    const std::int64_t hid = c.hidden_size;
    ga::BlockWeights<N, T> w;
    w.q_proj = ga::TensorView<const T, 2>::contiguous(
        q_proj.data(), {static_cast<std::int64_t>(q_proj.size()) / hid, hid});
    if (c.has_gate_proj()) {
      w.maybe_gate_proj = ga::TensorView<const T, 2>::contiguous(wg.data(), {c.gate_width(), hid});
      if (biases) w.maybe_gate_bias = bg.data();
    }
    w.k_proj = ga::TensorView<const T, 2>::contiguous(wk.data(), {c.kv_width(), hid});
    w.v_proj = ga::TensorView<const T, 2>::contiguous(wv.data(), {c.kv_width(), hid});
    w.o_proj = ga::TensorView<const T, 2>::contiguous(wo.data(), {hid, c.q_width()});
    if (biases) {
      w.maybe_q_bias = q_bias.data();
      w.maybe_k_bias = bk.data();
      w.maybe_v_bias = bv.data();
    }
    if (o_bias) w.maybe_o_bias = bo.data();
    w.maybe_q_norm = q_norm_weight.data();
    w.maybe_k_norm = k_norm_weight.data();
    return w;
  }
};

// Every element of v rounded to T.
template <class T, class S>
std::vector<T> rounded(const std::vector<S>& v) {
  std::vector<T> out;
  for (const S x : v) out.push_back(reference::from_double<T>(reference::as_double(x)));
  return out;
}

// The model's parameters rounded to T (or widened exactly, from bf16/f16 to float).
template <class T, class S>
Model<T> rounded_model(const Model<S>& m) {
  Model<T> r;
  r.c = m.c;
  r.biases = m.biases;
  r.o_bias = m.o_bias;
  for (auto [to, from] : {std::pair{&r.wq, &m.wq},
                          {&r.bq, &m.bq},
                          {&r.wg, &m.wg},
                          {&r.bg, &m.bg},
                          {&r.wk, &m.wk},
                          {&r.bk, &m.bk},
                          {&r.wv, &m.wv},
                          {&r.bv, &m.bv},
                          {&r.wo, &m.wo},
                          {&r.bo, &m.bo},
                          {&r.q_norm, &m.q_norm},
                          {&r.k_norm, &m.k_norm}}) {
    *to = rounded<T>(*from);
  }
  r.pack();
  return r;
}

template <class T>
Model<T> make_model(const ga::BlockConfig& c, Rng& rng) {
  Model<T> m;
  m.c = c;
  const std::int64_t hid = c.hidden_size;
  m.wq = random_vector<T>(rng, c.q_width() * hid, -0.5, 0.5);
  m.bq = random_vector<T>(rng, c.q_width(), -0.5, 0.5);
  m.wg = random_vector<T>(rng, c.gate_width() * hid, -0.5, 0.5);
  m.bg = random_vector<T>(rng, c.gate_width(), -0.5, 0.5);
  m.wk = random_vector<T>(rng, c.kv_width() * hid, -0.5, 0.5);
  m.bk = random_vector<T>(rng, c.kv_width(), -0.5, 0.5);
  m.wv = random_vector<T>(rng, c.kv_width() * hid, -0.5, 0.5);
  m.bv = random_vector<T>(rng, c.kv_width(), -0.5, 0.5);
  m.wo = random_vector<T>(rng, hid * c.q_width(), -0.5, 0.5);
  m.bo = random_vector<T>(rng, hid, -0.5, 0.5);
  m.q_norm = random_vector<T>(rng, c.head_dim, 0.25, 0.75);
  m.k_norm = random_vector<T>(rng, c.head_dim, 0.25, 0.75);
  m.pack();
  return m;
}

// A KV cache for `seqs` sequences, NaN-filled so that reading a slot past a sequence's length
// poisons the output.
template <class T>
struct Cache {
  Tensor<T, 4> k, v;
  std::vector<std::int64_t> lengths;

  Cache(const ga::BlockConfig& c, std::int64_t seqs, std::int64_t capacity)
      : k({seqs, capacity, c.num_kv_heads, c.head_dim}, nan_of<T>()),
        v({seqs, capacity, c.num_kv_heads, c.head_dim}, nan_of<T>()),
        lengths(static_cast<std::size_t>(seqs), 0) {}

  ga::KvCacheView<T> view() { return {k.view(), v.view(), lengths.data()}; }

  // Sequence s alone, as a one-sequence cache.
  ga::KvCacheView<T> slot(std::int64_t s) {
    ga::KvCacheView<T> one = view();
    const std::int64_t step = k.extents[1] * k.extents[2] * k.extents[3];
    one.k.data += s * step;
    one.v.data += s * step;
    one.k.extents[0] = one.v.extents[0] = 1;
    one.lengths += s;
    return one;
  }
};

inline Positions positions_from(std::int64_t batch, std::int64_t len, std::int64_t start) {
  Positions p;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < len; ++t) p.push_back(start + t);
  }
  return p;
}

}  // namespace gated_attention::testing
