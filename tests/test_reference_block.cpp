// reference::block_forward: the q/gate layouts, a direct recomputation of the block, KV cache
// consistency (prefill, chunked prefill, decode, batched decode with different lengths), the gate's
// semantics, the use of positions, and validation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "block_model.hpp"
#include "support.hpp"

namespace ga = gated_attention;
using ga::testing::make_rng;
using ga::testing::max_tolerance_ratio;
using ga::testing::random_vector;
using ga::testing::Tensor;
using namespace ga::testing;  // block_model.hpp: Model, Cache, small_config, ...

namespace {

template <class T>
ga::Status try_forward(const Model<T>& m, const ga::BlockWeights<T>& w, const std::vector<T>& x,
                       std::int64_t batch, std::int64_t len, const Positions& positions,
                       const ga::KvCacheView<T>& cache, std::vector<T>& y) {
  const std::int64_t hid = m.c.hidden_size;
  y.assign(static_cast<std::size_t>(batch * len * hid), nan_of<T>());
  return ga::reference::block_forward(
      m.c, w, ga::TensorView<const T, 3>::contiguous(x.data(), {batch, len, hid}),
      ga::TensorView<const std::int64_t, 2>::contiguous(positions.data(), {batch, len}), cache,
      ga::TensorView<T, 3>::contiguous(y.data(), {batch, len, hid}));
}

template <class T>
std::vector<T> forward(const Model<T>& m, const std::vector<T>& x, std::int64_t batch,
                       std::int64_t len, const Positions& positions,
                       const ga::KvCacheView<T>& cache) {
  REQUIRE(static_cast<std::int64_t>(x.size()) == batch * len * m.c.hidden_size);
  REQUIRE(static_cast<std::int64_t>(positions.size()) == batch * len);
  std::vector<T> y;
  const ga::Status s = try_forward(m, m.weights(), x, batch, len, positions, cache, y);
  INFO(s.message());
  REQUIRE(s.is_ok());
  return y;
}

// Rows [first, first + count) of a [rows, hidden] buffer.
template <class T>
std::vector<T> rows_of(const std::vector<T>& y, std::int64_t hidden, std::int64_t first,
                       std::int64_t count) {
  return std::vector<T>(y.begin() + first * hidden, y.begin() + (first + count) * hidden);
}

template <class T>
void append(std::vector<T>& to, const std::vector<T>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}

template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return worst;
}

template <class T>
bool all_finite(const std::vector<T>& v) {
  return std::all_of(v.begin(), v.end(), [](T x) { return std::isfinite(x); });
}

template <class T>
bool all_nan(const T* begin, const T* end) {
  return std::all_of(begin, end, [](T x) { return std::isnan(x); });
}

// Equal element by element, NaN matching NaN.
template <class T>
bool same_values(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  }
  return true;
}

// One sequence's output [len, hidden] from an empty cache, computed directly from the model's
// head-major tensors with plain loops (no views, no reference ops).
std::vector<double> direct_block(const Model<double>& m, const double* x, std::int64_t len,
                                 const std::int64_t* pos) {
  const ga::BlockConfig& c = m.c;
  const std::int64_t hid = c.hidden_size, nh = c.num_q_heads, nkv = c.num_kv_heads;
  const std::int64_t d = c.head_dim, g = nh / nkv, rot = c.rotary_dim, gph = gate_per_head(c);
  const double eps = static_cast<double>(c.rms_norm_eps);
  // The scale is a float parameter: 1 / sqrt(head_dim) rounded to float, as SdpaArgs defines it.
  const double scale = c.scale != 0.0f
                           ? static_cast<double>(c.scale)
                           : static_cast<double>(1.0f / std::sqrt(static_cast<float>(d)));
  auto at = [](const std::vector<double>& v, std::int64_t i) {
    return v[static_cast<std::size_t>(i)];
  };
  auto affine = [&](const std::vector<double>& w, const std::vector<double>& b, bool use_bias,
                    std::int64_t row, const double* in, std::int64_t n) {
    double s = use_bias ? at(b, row) : 0.0;
    for (std::int64_t i = 0; i < n; ++i) s += at(w, row * n + i) * in[i];
    return s;
  };
  auto normalise = [&](double* v, const std::vector<double>& w) {
    if (c.qk_norm == ga::QkNorm::none) return;
    double ms = 0.0;
    for (std::int64_t e = 0; e < d; ++e) ms += v[e] * v[e];
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(d) + eps);
    for (std::int64_t e = 0; e < d; ++e) {
      v[e] *= inv * (c.qk_norm == ga::QkNorm::rms ? at(w, e) : 1.0 + at(w, e));
    }
  };
  auto rotate = [&](double* v, std::int64_t p) {  // NeoX rotate-half on the first rot dims
    const std::int64_t half = rot / 2;
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(p) *
          std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(rot));
      const double x1 = v[i], x2 = v[i + half];
      v[i] = x1 * std::cos(angle) - x2 * std::sin(angle);
      v[i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
    }
  };
  auto idx = [](std::int64_t i) { return static_cast<std::size_t>(i); };

  std::vector<double> q(idx(len * nh * d)), gate(idx(len * nh * gph)), k(idx(len * nkv * d)),
      v(idx(len * nkv * d));
  for (std::int64_t t = 0; t < len; ++t) {
    const double* xt = x + t * hid;
    for (std::int64_t r = 0; r < nh * d; ++r)
      q[idx(t * nh * d + r)] = affine(m.wq, m.bq, m.biases, r, xt, hid);
    for (std::int64_t r = 0; r < nh * gph; ++r) {
      gate[idx(t * nh * gph + r)] = affine(m.wg, m.bg, m.biases, r, xt, hid);
    }
    for (std::int64_t r = 0; r < nkv * d; ++r) {
      k[idx(t * nkv * d + r)] = affine(m.wk, m.bk, m.biases, r, xt, hid);
      v[idx(t * nkv * d + r)] = affine(m.wv, m.bv, m.biases, r, xt, hid);
    }
    for (std::int64_t h = 0; h < nh; ++h) {
      normalise(&q[idx((t * nh + h) * d)], m.q_norm);
      rotate(&q[idx((t * nh + h) * d)], pos[t]);
    }
    for (std::int64_t h = 0; h < nkv; ++h) {
      normalise(&k[idx((t * nkv + h) * d)], m.k_norm);
      rotate(&k[idx((t * nkv + h) * d)], pos[t]);
    }
  }

  std::vector<double> attn(idx(len * nh * d));
  std::vector<double> p(idx(len));
  for (std::int64_t t = 0; t < len; ++t) {
    for (std::int64_t h = 0; h < nh; ++h) {
      const std::int64_t kv = h / g;
      double mx = -INFINITY;
      for (std::int64_t j = 0; j <= t; ++j) {
        double dot = 0.0;
        for (std::int64_t e = 0; e < d; ++e) {
          dot += q[idx((t * nh + h) * d + e)] * k[idx((j * nkv + kv) * d + e)];
        }
        p[idx(j)] = scale * dot;
        mx = std::max(mx, p[idx(j)]);
      }
      double denom = 0.0;
      for (std::int64_t j = 0; j <= t; ++j) denom += (p[idx(j)] = std::exp(p[idx(j)] - mx));
      for (std::int64_t e = 0; e < d; ++e) {
        double o = 0.0;
        for (std::int64_t j = 0; j <= t; ++j) o += p[idx(j)] * v[idx((j * nkv + kv) * d + e)];
        o /= denom;
        if (gph > 0) {
          const double gv = gate[idx((t * nh + h) * gph + (gph == 1 ? 0 : e))];
          const double sig = 1.0 / (1.0 + std::exp(-gv));
          o *= c.gate_activation == ga::GateActivation::sigmoid ? sig : gv * sig;
        }
        attn[idx((t * nh + h) * d + e)] = o;
      }
    }
  }

  std::vector<double> y(idx(len * hid));
  for (std::int64_t t = 0; t < len; ++t) {
    for (std::int64_t o = 0; o < hid; ++o) {
      y[idx(t * hid + o)] = affine(m.wo, m.bo, m.o_bias, o, &attn[idx(t * nh * d)], nh * d);
    }
  }
  return y;
}

}  // namespace

TEST_CASE("q_view and gate_view address each layout's rows", "[reference][block]") {
  const std::int64_t batch = 2, len = 3, pad = 3;
  for (const ga::QGateLayout layout : kLayouts) {
    for (const ga::GateMode mode :
         {ga::GateMode::headwise, ga::GateMode::elementwise, ga::GateMode::none}) {
      INFO("layout " << name_of(layout) << ", gate " << name_of(mode));
      const ga::BlockConfig c = small_config(mode, layout);
      const std::int64_t nh = c.num_q_heads, nkv = c.num_kv_heads, d = c.head_dim;
      const std::int64_t g = nh / nkv;
      const std::int64_t gph = mode == ga::GateMode::none       ? 0
                               : mode == ga::GateMode::headwise ? 1
                                                                : d;
      const bool separate = layout == ga::QGateLayout::separate;
      const bool gated = mode != ga::GateMode::none;
      const bool packed = gated && !separate;
      // Rows per token: q (and the gate, when packed) in q_proj; the gate alone in gate_proj.
      const std::int64_t q_rows = nh * d + (packed ? nh * gph : 0);
      const std::int64_t gate_rows = separate ? nh * gph : 0;
      REQUIRE(c.q_proj_rows() == q_rows);
      REQUIRE(c.has_gate_proj() == (separate && gated));

      // Padded token rows, so that the batch and length strides are not the dense ones. Every
      // element holds its own flat index (the gate_proj buffer's are offset by 1e6).
      const std::int64_t q_stride = q_rows + pad, gate_stride = gate_rows + pad;
      std::vector<double> q_buf(static_cast<std::size_t>(batch * len * q_stride));
      std::vector<double> gate_buf(static_cast<std::size_t>(batch * len * gate_stride));
      for (std::size_t i = 0; i < q_buf.size(); ++i) q_buf[i] = static_cast<double>(i);
      for (std::size_t i = 0; i < gate_buf.size(); ++i) gate_buf[i] = 1e6 + static_cast<double>(i);
      const ga::TensorView<double, 3> q_src(q_buf.data(), {batch, len, q_rows},
                                            {len * q_stride, q_stride, 1});
      const ga::TensorView<double, 3> gate_src(gate_buf.data(), {batch, len, gate_rows},
                                               {len * gate_stride, gate_stride, 1});

      const ga::TensorView<double, 5> qv = ga::q_view(c, q_src);
      const std::array<std::int64_t, 5> extents = {batch, len, nkv, g, d};
      CHECK(qv.extents == extents);
      std::vector<int> q_hits(q_buf.size(), 0), gate_hits(q_buf.size() + gate_buf.size(), 0);
      std::int64_t bad_q = 0, bad_gate = 0;
      std::string first_bad;
      auto record = [&](std::int64_t& bad, const char* what, double got, double expected,
                        std::int64_t b, std::int64_t t, std::int64_t kv, std::int64_t j,
                        std::int64_t e) {
        if (got == expected) return;
        if (bad++ == 0) {
          std::ostringstream os;
          os << what << "(" << b << ", " << t << ", " << kv << ", " << j << ", " << e
             << ") = " << got << ", expected " << expected;
          first_bad = os.str();
        }
      };
      for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t t = 0; t < len; ++t) {
          const std::int64_t q_base = (b * len + t) * q_stride;
          const std::int64_t gate_base = (b * len + t) * gate_stride;
          for (std::int64_t kv = 0; kv < nkv; ++kv) {
            for (std::int64_t j = 0; j < g; ++j) {
              const std::int64_t h = kv * g + j;
              for (std::int64_t e = 0; e < d; ++e) {
                std::int64_t q_at = q_base + h * d + e;  // separate, or no gate
                if (packed && layout == ga::QGateLayout::qwen3_next) {
                  q_at = q_base + h * (d + gph) + e;
                } else if (packed) {
                  q_at = q_base + kv * g * (d + gph) + j * d + e;
                }
                record(bad_q, "q", qv(b, t, kv, j, e), static_cast<double>(q_at), b, t, kv, j, e);
                ++q_hits[static_cast<std::size_t>(q_at)];
              }
            }
          }
          if (!gated) continue;
          const ga::TensorView<double, 5> gv = ga::gate_view(c, separate ? gate_src : q_src);
          CHECK(gv.extents == extents);
          if (mode == ga::GateMode::headwise) CHECK(gv.strides[4] == 0);
          for (std::int64_t kv = 0; kv < nkv; ++kv) {
            for (std::int64_t j = 0; j < g; ++j) {
              const std::int64_t h = kv * g + j;
              for (std::int64_t e = 0; e < d; ++e) {
                const std::int64_t ge = mode == ga::GateMode::headwise ? 0 : e;
                double expected = 0.0;
                std::size_t hit = 0;
                if (separate) {
                  const std::int64_t at = gate_base + h * gph + ge;
                  expected = 1e6 + static_cast<double>(at);
                  hit = q_buf.size() + static_cast<std::size_t>(at);
                } else {
                  const std::int64_t at = layout == ga::QGateLayout::qwen3_next
                                              ? q_base + h * (d + gph) + d + ge
                                              : q_base + kv * g * (d + gph) + g * d + j * gph + ge;
                  expected = static_cast<double>(at);
                  hit = static_cast<std::size_t>(at);
                }
                record(bad_gate, "gate", gv(b, t, kv, j, e), expected, b, t, kv, j, e);
                ++gate_hits[hit];
              }
            }
          }
        }
      }
      INFO(first_bad);
      CHECK(bad_q == 0);
      CHECK(bad_gate == 0);

      // Every row element is read by exactly one of q (once) and the gate (once, or head_dim
      // times when a headwise gate broadcasts it); padding is never read.
      std::int64_t bad_cover = 0;
      const int gate_reads = mode == ga::GateMode::headwise ? static_cast<int>(d) : 1;
      for (std::size_t i = 0; i < q_buf.size(); ++i) {
        const bool is_pad = static_cast<std::int64_t>(i) % q_stride >= q_rows;
        const int qh = q_hits[i], gh = gate_hits[i];
        const bool ok =
            is_pad ? qh == 0 && gh == 0 : (qh == 1 && gh == 0) || (qh == 0 && gh == gate_reads);
        bad_cover += ok ? 0 : 1;
      }
      for (std::size_t i = 0; i < gate_buf.size(); ++i) {
        const bool is_pad = static_cast<std::int64_t>(i) % gate_stride >= gate_rows;
        const int gh = gate_hits[q_buf.size() + i];
        bad_cover += (is_pad ? gh == 0 : gh == gate_reads) ? 0 : 1;
      }
      CHECK(bad_cover == 0);
    }
  }
}

TEST_CASE("Block matches a direct computation of gated attention", "[reference][block]") {
  struct Variant {
    ga::GateMode mode;
    ga::QGateLayout layout;
    ga::GateActivation activation;
    ga::QkNorm norm;
    float scale;
  };
  const Variant variants[] = {
      {ga::GateMode::elementwise, ga::QGateLayout::qwen3_next, ga::GateActivation::sigmoid,
       ga::QkNorm::zero_centered_rms, 0.0f},
      {ga::GateMode::headwise, ga::QGateLayout::grouped, ga::GateActivation::silu, ga::QkNorm::rms,
       0.3f},
      {ga::GateMode::elementwise, ga::QGateLayout::separate, ga::GateActivation::silu,
       ga::QkNorm::none, 0.0f},
      {ga::GateMode::none, ga::QGateLayout::qwen3_next, ga::GateActivation::sigmoid,
       ga::QkNorm::zero_centered_rms, 0.0f},
  };
  std::uint64_t salt = 100;
  for (const Variant& var : variants) {
    INFO("layout " << name_of(var.layout) << ", gate " << name_of(var.mode));
    ga::BlockConfig c = small_config(var.mode, var.layout);
    c.gate_activation = var.activation;
    c.qk_norm = var.norm;
    c.scale = var.scale;
    Rng rng = make_rng(salt++);
    const Model<double> m = make_model<double>(c, rng);
    const std::int64_t batch = 2, len = 5, hid = c.hidden_size;
    const std::vector<double> x = random_vector<double>(rng, batch * len * hid);
    const Positions pos = {3, 4, 5, 6, 7, 0, 1, 2, 3, 4};
    Cache<double> cache(c, batch, 8);
    const std::vector<double> y = forward(m, x, batch, len, pos, cache.view());
    CHECK(cache.lengths == std::vector<std::int64_t>{len, len});
    for (std::int64_t b = 0; b < batch; ++b) {
      INFO("sequence " << b);
      const std::vector<double> expected =
          direct_block(m, x.data() + b * len * hid, len, pos.data() + b * len);
      CHECK(max_tolerance_ratio(rows_of(y, hid, b * len, len), expected, 1e-12, 1e-12) <= 1.0);
    }
  }
}

TEST_CASE("The qwen3_next, grouped and separate layouts compute the same block",
          "[reference][block]") {
  for (const ga::GateMode mode : {ga::GateMode::headwise, ga::GateMode::elementwise}) {
    INFO("gate " << name_of(mode));
    Rng rng = make_rng(200 + static_cast<std::uint64_t>(mode));
    const Model<double> base =
        make_model<double>(small_config(mode, ga::QGateLayout::separate), rng);
    const std::int64_t batch = 2, len = 5, hid = base.c.hidden_size;
    const std::vector<double> x = random_vector<double>(rng, batch * len * hid);
    const Positions pos = {0, 1, 2, 3, 4, 3, 4, 5, 6, 7};

    std::vector<std::vector<double>> outs;
    std::vector<Model<double>> models;
    for (const ga::QGateLayout layout : kLayouts) {
      Model<double> m = base;
      m.c.q_gate_layout = layout;
      m.pack();
      REQUIRE(static_cast<std::int64_t>(m.q_proj.size()) == m.c.q_proj_rows() * hid);
      Cache<double> cache(m.c, batch, 8);
      outs.push_back(forward(m, x, batch, len, pos, cache.view()));
      CHECK(cache.lengths == std::vector<std::int64_t>{len, len});
      CHECK(all_finite(outs.back()));
      models.push_back(std::move(m));
    }
    CHECK(max_tolerance_ratio(outs[0], outs[2], 1e-12, 1e-12) <= 1.0);  // qwen3_next, separate
    CHECK(max_tolerance_ratio(outs[1], outs[2], 1e-12, 1e-12) <= 1.0);  // grouped, separate

    // The layouts are told apart: grouped-packed weights read as qwen3_next give another block.
    Model<double> mixed = models[1];
    mixed.c.q_gate_layout = ga::QGateLayout::qwen3_next;
    Cache<double> cache(mixed.c, batch, 8);
    CHECK(max_abs_diff(forward(mixed, x, batch, len, pos, cache.view()), outs[2]) > 1e-3);
  }
}

TEMPLATE_TEST_CASE("Prefill, chunked prefill and decode through the KV cache agree",
                   "[reference][block]", float, double) {
  using T = TestType;
  ga::BlockConfig c = small_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  c.hidden_size = 48;
  c.head_dim = 12;
  c.rotary_dim = 6;
  Rng rng = make_rng(300);
  const Model<T> m = make_model<T>(c, rng);
  const std::int64_t len = 10, capacity = 10, hid = c.hidden_size;
  const std::vector<T> x = random_vector<T>(rng, len * hid);
  const Positions pos = positions_from(1, len, 2);
  const double tol = tolerance<T>();
  auto x_rows = [&](std::int64_t first, std::int64_t count) {
    return rows_of(x, hid, first, count);
  };
  auto pos_rows = [&](std::int64_t first, std::int64_t count) {
    return Positions(pos.begin() + first, pos.begin() + first + count);
  };

  // One call fills the cache exactly to capacity.
  Cache<T> full(c, 1, capacity);
  const std::vector<T> y_full = forward(m, x, 1, len, pos, full.view());
  CHECK(full.lengths[0] == len);
  CHECK(all_finite(y_full));

  SECTION("prefill 7, then 3 decode steps") {
    Cache<T> cache(c, 1, capacity);
    const std::vector<T> y7 = forward(m, x_rows(0, 7), 1, 7, pos_rows(0, 7), cache.view());
    CHECK(cache.lengths[0] == 7);
    CHECK(max_tolerance_ratio(y7, rows_of(y_full, hid, 0, 7), tol, tol) <= 1.0);
    for (std::int64_t t = 7; t < len; ++t) {
      INFO("decode step at token " << t);
      const std::vector<T> y1 = forward(m, x_rows(t, 1), 1, 1, pos_rows(t, 1), cache.view());
      CHECK(cache.lengths[0] == t + 1);
      CHECK(max_tolerance_ratio(y1, rows_of(y_full, hid, t, 1), tol, tol) <= 1.0);
    }
    CHECK(max_tolerance_ratio(cache.k.data, full.k.data, tol, tol) <= 1.0);
    CHECK(max_tolerance_ratio(cache.v.data, full.v.data, tol, tol) <= 1.0);
  }
  SECTION("chunked prefill 4 + 6") {
    Cache<T> cache(c, 1, capacity);
    std::vector<T> y = forward(m, x_rows(0, 4), 1, 4, pos_rows(0, 4), cache.view());
    CHECK(cache.lengths[0] == 4);
    // The first chunk wrote slots 0..3 only.
    const std::int64_t per_token = c.num_kv_heads * c.head_dim;
    CHECK(all_nan(cache.k.data.data() + 4 * per_token, cache.k.data.data() + capacity * per_token));
    append(y, forward(m, x_rows(4, 6), 1, 6, pos_rows(4, 6), cache.view()));
    CHECK(cache.lengths[0] == len);
    CHECK(max_tolerance_ratio(y, y_full, tol, tol) <= 1.0);
    CHECK(max_tolerance_ratio(cache.k.data, full.k.data, tol, tol) <= 1.0);
    CHECK(max_tolerance_ratio(cache.v.data, full.v.data, tol, tol) <= 1.0);
  }
  SECTION("the cached keys matter: a chunk without its prefix differs") {
    Cache<T> cache(c, 1, capacity);
    const std::vector<T> y = forward(m, x_rows(4, 6), 1, 6, pos_rows(4, 6), cache.view());
    CHECK(max_abs_diff(y, rows_of(y_full, hid, 4, 6)) > 1e-3);
  }
}

TEMPLATE_TEST_CASE("Batched decode over sequences of different cached lengths",
                   "[reference][block]", float, double) {
  using T = TestType;
  const ga::BlockConfig c = small_config(ga::GateMode::headwise, ga::QGateLayout::grouped);
  Rng rng = make_rng(400);
  const Model<T> m = make_model<T>(c, rng);
  const std::int64_t hid = c.hidden_size, capacity = 12;
  const std::int64_t len0 = 5, len1 = 9;
  const std::vector<T> x0 = random_vector<T>(rng, len0 * hid);
  const std::vector<T> x1 = random_vector<T>(rng, len1 * hid);
  const std::vector<T> x_dec = random_vector<T>(rng, 2 * hid);
  const Positions pos0 = positions_from(1, len0, 0), pos1 = positions_from(1, len1, 20);
  const double tol = tolerance<T>();

  // Each sequence prefilled alone into its own slot of a two-sequence cache.
  Cache<T> cache(c, 2, capacity);
  forward(m, x0, 1, len0, pos0, cache.slot(0));
  CHECK(cache.lengths == std::vector<std::int64_t>{len0, 0});
  forward(m, x1, 1, len1, pos1, cache.slot(1));
  CHECK(cache.lengths == std::vector<std::int64_t>{len0, len1});
  Cache<T> alone = cache;  // the same state, decoded one sequence at a time below

  const std::vector<T> y = forward(m, x_dec, 2, 1, {len0, 20 + len1}, cache.view());
  CHECK(cache.lengths == std::vector<std::int64_t>{len0 + 1, len1 + 1});
  CHECK(all_finite(y));

  const std::vector<T> y0 = forward(m, rows_of(x_dec, hid, 0, 1), 1, 1, {len0}, alone.slot(0));
  const std::vector<T> y1 = forward(m, rows_of(x_dec, hid, 1, 1), 1, 1, {20 + len1}, alone.slot(1));
  CHECK(alone.lengths == std::vector<std::int64_t>{len0 + 1, len1 + 1});
  CHECK(max_tolerance_ratio(rows_of(y, hid, 0, 1), y0, tol, tol) <= 1.0);
  CHECK(max_tolerance_ratio(rows_of(y, hid, 1, 1), y1, tol, tol) <= 1.0);
  // Both caches hold the same tokens, and the same untouched (NaN) slots.
  CHECK(same_values(cache.k.data, alone.k.data));
  CHECK(same_values(cache.v.data, alone.v.data));

  // The decode steps equal the last rows of whole-sequence prefills.
  std::vector<T> whole0 = x0, whole1 = x1;
  append(whole0, rows_of(x_dec, hid, 0, 1));
  append(whole1, rows_of(x_dec, hid, 1, 1));
  Cache<T> c0(c, 1, capacity), c1(c, 1, capacity);
  const std::vector<T> p0 =
      forward(m, whole0, 1, len0 + 1, positions_from(1, len0 + 1, 0), c0.view());
  const std::vector<T> p1 =
      forward(m, whole1, 1, len1 + 1, positions_from(1, len1 + 1, 20), c1.view());
  CHECK(max_tolerance_ratio(rows_of(y, hid, 0, 1), rows_of(p0, hid, len0, 1), tol, tol) <= 1.0);
  CHECK(max_tolerance_ratio(rows_of(y, hid, 1, 1), rows_of(p1, hid, len1, 1), tol, tol) <= 1.0);
}

TEST_CASE("Gate semantics: none, sigmoid(0) = 1/2 and silu(0) = 0", "[reference][block]") {
  const std::int64_t batch = 2, len = 4;
  const Positions pos = positions_from(batch, len, 0);

  SECTION("no gate equals an elementwise gate saturated at 1") {
    Rng rng = make_rng(500);
    Model<double> gated =
        make_model<double>(small_config(ga::GateMode::elementwise, ga::QGateLayout::separate), rng);
    std::fill(gated.wg.begin(), gated.wg.end(), 0.0);
    std::fill(gated.bg.begin(), gated.bg.end(), 1e4);  // sigmoid(1e4) = 1 in double
    gated.pack();
    const std::vector<double> x = random_vector<double>(rng, batch * len * gated.c.hidden_size);
    for (const ga::QGateLayout layout : {ga::QGateLayout::separate, ga::QGateLayout::qwen3_next}) {
      INFO("ungated layout " << name_of(layout));
      Model<double> ungated = gated;
      ungated.c.gate_mode = ga::GateMode::none;
      ungated.c.q_gate_layout = layout;
      ungated.pack();
      CHECK(ungated.c.q_proj_rows() == ungated.c.q_width());
      CHECK_FALSE(ungated.c.has_gate_proj());
      Cache<double> c1(gated.c, batch, len), c2(gated.c, batch, len);
      const std::vector<double> yg = forward(gated, x, batch, len, pos, c1.view());
      const std::vector<double> yu = forward(ungated, x, batch, len, pos, c2.view());
      CHECK(max_tolerance_ratio(yg, yu, 1e-15, 1e-14) <= 1.0);
    }
  }
  SECTION("a headwise gate at 0 halves the ungated output") {
    Rng rng = make_rng(501);
    Model<double> gated =
        make_model<double>(small_config(ga::GateMode::headwise, ga::QGateLayout::qwen3_next), rng);
    std::fill(gated.wg.begin(), gated.wg.end(), 0.0);
    std::fill(gated.bg.begin(), gated.bg.end(), 0.0);
    gated.o_bias = false;
    gated.pack();
    Model<double> ungated = gated;
    ungated.c.gate_mode = ga::GateMode::none;
    ungated.pack();
    const std::vector<double> x = random_vector<double>(rng, batch * len * gated.c.hidden_size);
    Cache<double> c1(gated.c, batch, len), c2(gated.c, batch, len);
    const std::vector<double> yg = forward(gated, x, batch, len, pos, c1.view());
    const std::vector<double> yu = forward(ungated, x, batch, len, pos, c2.view());
    CHECK(max_abs_diff(yu, std::vector<double>(yu.size(), 0.0)) > 1e-2);
    std::int64_t mismatches = 0;
    for (std::size_t i = 0; i < yg.size(); ++i) mismatches += yg[i] == 0.5 * yu[i] ? 0 : 1;
    CHECK(mismatches == 0);  // exact: sigmoid(0) = 1/2 and halving commutes with rounding
  }
  SECTION("a silu gate at 0 zeroes attention: the output is o_proj's bias") {
    Rng rng = make_rng(502);
    ga::BlockConfig c = small_config(ga::GateMode::elementwise, ga::QGateLayout::grouped);
    c.gate_activation = ga::GateActivation::silu;
    Model<double> m = make_model<double>(c, rng);
    std::fill(m.wg.begin(), m.wg.end(), 0.0);
    std::fill(m.bg.begin(), m.bg.end(), 0.0);
    m.pack();
    const std::vector<double> x = random_vector<double>(rng, batch * len * c.hidden_size);
    Cache<double> c1(c, batch, len), c2(c, batch, len);
    const std::vector<double> y = forward(m, x, batch, len, pos, c1.view());
    std::vector<double> expected;
    for (std::int64_t r = 0; r < batch * len; ++r) append(expected, m.bo);
    CHECK(y == expected);
    m.o_bias = false;
    CHECK(forward(m, x, batch, len, pos, c2.view()) == std::vector<double>(y.size(), 0.0));
  }
}

TEST_CASE("Positions enter through RoPE, which is relative", "[reference][block]") {
  ga::BlockConfig c = small_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  c.qk_norm = ga::QkNorm::rms;
  Rng rng = make_rng(600);
  const Model<double> m = make_model<double>(c, rng);
  const std::int64_t len = 6, hid = c.hidden_size;
  const std::vector<double> x = random_vector<double>(rng, len * hid);
  auto run = [&](const Model<double>& model, const Positions& pos) {
    Cache<double> cache(model.c, 1, len);
    return forward(model, x, 1, len, pos, cache.view());
  };
  const std::vector<double> y = run(m, positions_from(1, len, 0));

  SECTION("a common shift of all positions leaves the output unchanged") {
    CHECK(max_tolerance_ratio(run(m, positions_from(1, len, 1000)), y, 1e-9, 1e-9) <= 1.0);
    CHECK(max_tolerance_ratio(run(m, positions_from(1, len, 37)), y, 1e-9, 1e-9) <= 1.0);
    // Per sequence: each batch entry uses its own positions.
    std::vector<double> x2 = x;
    append(x2, x);
    Positions pos2 = positions_from(1, len, 5);
    append(pos2, positions_from(1, len, 123));
    Cache<double> cache(c, 2, len);
    const std::vector<double> y2 = forward(m, x2, 2, len, pos2, cache.view());
    CHECK(max_tolerance_ratio(rows_of(y2, hid, 0, len), y, 1e-9, 1e-9) <= 1.0);
    CHECK(max_tolerance_ratio(rows_of(y2, hid, len, len), y, 1e-9, 1e-9) <= 1.0);
  }
  SECTION("permuted or stretched positions change it") {
    CHECK(max_abs_diff(run(m, {5, 4, 3, 2, 1, 0}), y) > 1e-3);
    CHECK(max_abs_diff(run(m, {0, 2, 4, 6, 8, 10}), y) > 1e-3);
  }
  SECTION("without RoPE positions are ignored") {
    Model<double> no_rope = m;
    no_rope.c.rotary_dim = 0;
    const std::vector<double> y0 = run(no_rope, positions_from(1, len, 0));
    CHECK(max_abs_diff(y0, y) > 1e-3);
    CHECK(run(no_rope, {5, 4, 3, 2, 1, 0}) == y0);
  }
}

TEST_CASE("Invalid arguments are reported and leave the cache untouched", "[reference][block]") {
  Rng rng = make_rng(700);
  const ga::BlockConfig c = small_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  const Model<double> m = make_model<double>(c, rng);
  const std::int64_t hid = c.hidden_size, capacity = 10;
  const std::vector<double> x3 = random_vector<double>(rng, 3 * hid);
  const Positions pos3 = positions_from(1, 3, 0);
  Cache<double> cache(c, 1, capacity);
  std::vector<double> y;
  auto expect_error = [&](const Model<double>& model, const ga::BlockWeights<double>& w,
                          const char* needle) {
    const std::int64_t before = cache.lengths[0];
    const ga::Status s = try_forward(model, w, x3, 1, 3, pos3, cache.view(), y);
    INFO("message: " << s.message());
    CHECK_FALSE(s.is_ok());
    CHECK(s.code() == ga::StatusCode::invalid_argument);
    CHECK(std::string(s.message()).find(needle) != std::string::npos);
    CHECK(cache.lengths[0] == before);
    CHECK(all_nan(y.data(), y.data() + y.size()));  // nothing written
  };

  SECTION("q_proj with the wrong number of rows") {
    ga::BlockWeights<double> w = m.weights();
    w.q_proj.extents[0] -= 1;
    expect_error(m, w, "q_proj");
    // Rows for the ungated layout (q only) are wrong too when the gate is packed.
    w.q_proj.extents[0] = c.q_width();
    expect_error(m, w, "q_proj");
  }
  SECTION("the cache would overflow its capacity") {
    const std::vector<double> x8 = random_vector<double>(rng, 8 * hid);
    forward(m, x8, 1, 8, positions_from(1, 8, 0), cache.view());
    REQUIRE(cache.lengths[0] == 8);
    expect_error(m, m.weights(), "capacity");
    const std::int64_t per_token = c.num_kv_heads * c.head_dim;
    CHECK(all_nan(cache.k.data.data() + 8 * per_token, cache.k.data.data() + 10 * per_token));
    // Exactly reaching capacity is fine.
    std::vector<double> y2;
    CHECK(try_forward(m, m.weights(), rows_of(x3, hid, 0, 2), 1, 2, positions_from(1, 2, 8),
                      cache.view(), y2)
              .is_ok());
    CHECK(cache.lengths[0] == capacity);
  }
  SECTION("num_q_heads not a multiple of num_kv_heads") {
    Model<double> bad = m;
    bad.c.num_q_heads = 3;
    expect_error(bad, m.weights(), "num_q_heads");
  }
  SECTION("the separate layout without gate_proj") {
    const Model<double> sep =
        make_model<double>(small_config(ga::GateMode::elementwise, ga::QGateLayout::separate), rng);
    ga::BlockWeights<double> w = sep.weights();
    w.maybe_gate_proj = {};
    expect_error(sep, w, "gate_proj");
    w = sep.weights();
    w.maybe_gate_proj.data = nullptr;  // right shape, no data
    expect_error(sep, w, "gate_proj");
    w = sep.weights();
    w.maybe_gate_proj.extents[0] = c.num_q_heads;  // headwise rows for an elementwise gate
    expect_error(sep, w, "gate_proj");
  }
  SECTION("missing qk norm weights") {
    ga::BlockWeights<double> w = m.weights();
    w.maybe_k_norm = nullptr;
    expect_error(m, w, "k_norm");
  }
  SECTION("a cache with fewer sequences than the batch") {
    const std::vector<double> x2 = random_vector<double>(rng, 2 * hid);
    std::vector<double> y2;
    const ga::Status s =
        try_forward(m, m.weights(), x2, 2, 1, positions_from(2, 1, 0), cache.view(), y2);
    INFO("message: " << s.message());
    CHECK_FALSE(s.is_ok());
    CHECK(std::string(s.message()).find("cache") != std::string::npos);
    CHECK(cache.lengths[0] == 0);
  }
  SECTION("a non-finite scale is rejected without advancing the cache") {
    Model<double> bad = m;
    bad.c.scale = std::numeric_limits<float>::infinity();
    expect_error(bad, bad.weights(), "scale");
  }
  SECTION("an invalid rms_norm_eps or rope_theta is rejected, not skipped") {
    Model<double> bad = m;
    bad.c.rms_norm_eps = -1.0f;
    expect_error(bad, bad.weights(), "rms_norm_eps");
    bad.c.rms_norm_eps = std::numeric_limits<float>::quiet_NaN();
    expect_error(bad, bad.weights(), "rms_norm_eps");
    bad = m;
    bad.c.rope_theta = std::numeric_limits<double>::infinity();
    expect_error(bad, bad.weights(), "rope_theta");
  }
}

TEST_CASE("Qwen3-Next-like block: partial RoPE, zero-centred qk norm, elementwise gate",
          "[reference][block]") {
  ga::BlockConfig c;
  c.hidden_size = 64;
  c.num_q_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.gate_mode = ga::GateMode::elementwise;
  c.gate_activation = ga::GateActivation::sigmoid;
  c.q_gate_layout = ga::QGateLayout::qwen3_next;
  c.qk_norm = ga::QkNorm::zero_centered_rms;
  c.rotary_dim = ga::rotary_dim_for(c.head_dim, 0.25);
  REQUIRE(c.rotary_dim == 4);
  REQUIRE(ga::validate(c).is_ok());
  REQUIRE(c.q_proj_rows() == 2 * 4 * 16);

  Rng rng = make_rng(800);
  Model<float> m = make_model<float>(c, rng);
  m.q_norm = random_vector<float>(rng, c.head_dim, -0.5, 0.5);
  m.k_norm = random_vector<float>(rng, c.head_dim, -0.5, 0.5);
  CHECK(std::none_of(m.q_norm.begin(), m.q_norm.end(), [](float w) { return w == 0.0f; }));
  const std::int64_t batch = 2, len = 5;
  const std::vector<float> x = random_vector<float>(rng, batch * len * c.hidden_size);
  const Positions pos = positions_from(batch, len, 0);

  Cache<float> cache(c, batch, len + 1);
  const std::vector<float> y = forward(m, x, batch, len, pos, cache.view());
  CHECK(all_finite(y));
  CHECK(cache.lengths == std::vector<std::int64_t>{len, len});

  Model<float> ungated = m;
  ungated.c.gate_mode = ga::GateMode::none;
  ungated.pack();
  Cache<float> cache_u(ungated.c, batch, len + 1);
  const std::vector<float> yu = forward(ungated, x, batch, len, pos, cache_u.view());
  CHECK(all_finite(yu));
  CHECK(max_abs_diff(y, yu) > 1e-2);
}
