// Reference forward of the gated attention block (prefill, chunked prefill and decode through a KV
// cache), composed of the reference ops and computed in double. The cache holds its own element
// type, as a real engine's would; the weights (any W) are read exactly; everything else stays in
// double.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "gated_attention/block/config.hpp"
#include "gated_attention/ops/linear_args.hpp"
#include "gated_attention/reference/linear.hpp"
#include "gated_attention/reference/rms_norm.hpp"
#include "gated_attention/reference/rope.hpp"
#include "gated_attention/reference/sdpa.hpp"
#include "gated_attention/reference/store_kv.hpp"

namespace gated_attention::reference {

namespace detail {

template <class T>
std::vector<double> to_double_rows(const TensorView<const T, 2>& m) {
  std::vector<double> out(static_cast<std::size_t>(m.num_elements()));
  for (std::int64_t r = 0; r < m.extents[0]; ++r) {
    for (std::int64_t c = 0; c < m.extents[1]; ++c) out[r * m.extents[1] + c] = as_double(m(r, c));
  }
  return out;
}

// y [rows, out] = x [rows, in] W^T + bias, all in double.
template <class T>
std::vector<double> project(const std::vector<double>& x, std::int64_t rows,
                            const TensorView<const T, 2>& weight, const T* maybe_bias) {
  const std::int64_t out = weight.extents[0], in = weight.extents[1];
  const std::vector<double> w = to_double_rows(weight);
  std::vector<double> bias;
  if (maybe_bias) {
    for (std::int64_t o = 0; o < out; ++o) bias.push_back(as_double(maybe_bias[o]));
  }
  std::vector<double> y(static_cast<std::size_t>(rows * out));
  Status s =
      linear(LinearArgs<double>{TensorView<const double, 2>::contiguous(x.data(), {rows, in}),
                                TensorView<const double, 2>::contiguous(w.data(), {out, in}),
                                maybe_bias ? bias.data() : nullptr,
                                TensorView<double, 2>::contiguous(y.data(), {rows, out})});
  (void)s;  // shapes were validated by the caller
  return y;
}

template <class T, int Rank>
Status qk_norm(const BlockConfig& c, const TensorView<double, Rank>& x, const T* weight) {
  if (c.qk_norm == QkNorm::none) return Status::ok();
  std::vector<double> w;
  for (std::int64_t i = 0; i < c.head_dim; ++i) w.push_back(as_double(weight[i]));
  RmsNormArgs<double, Rank> args{
      x, w.data(), x, c.rms_norm_eps,
      c.qk_norm == QkNorm::rms ? RmsNormWeight::standard : RmsNormWeight::zero_centered};
  return rms_norm(args);
}

template <int Rank>
Status rotate(const BlockConfig& c, const TensorView<double, Rank>& x,
              const TensorView<const std::int64_t, 2>& positions) {
  if (c.rotary_dim == 0) return Status::ok();
  return rope(RopeArgs<double, Rank>{x, positions, x, c.rope_theta, c.rotary_dim});
}

// Stores rows [b, len, kv_heads, d] into each sequence's cache after its cached tokens, as
// reference::store_kv does (float and double: rounded; the others from the rows rounded to float).
template <class KvT>
Status store_rows(const TensorView<double, 4>& rows, const TensorView<KvT, 4>& cache,
                  const TensorView<float, 3>& maybe_scales, const std::int64_t* lengths) {
  const auto& e = rows.extents;
  for (std::int64_t s = 0; s < e[0]; ++s) {
    for (std::int64_t t = 0; t < e[1]; ++t) {
      for (std::int64_t h = 0; h < e[2]; ++h) {
        const std::int64_t slot = lengths[s] + t;
        if constexpr (std::is_floating_point_v<KvT>) {
          for (std::int64_t d = 0; d < e[3]; ++d) {
            cache(s, slot, h, d) = static_cast<KvT>(rows(s, t, h, d));
          }
        } else {
          std::vector<float> row(static_cast<std::size_t>(e[3]));
          for (std::int64_t d = 0; d < e[3]; ++d) {
            row[static_cast<std::size_t>(d)] = static_cast<float>(rows(s, t, h, d));
          }
          StoreKvArgs<KvT> a;
          a.src = TensorView<const float, 4>::contiguous(row.data(), {1, 1, 1, e[3]});
          a.dst = TensorView<KvT, 4>(&cache(s, slot, h, 0), {1, 1, 1, e[3]},
                                     {0, 0, 0, cache.strides[3]});
          if (maybe_scales.data) {
            a.maybe_scales = TensorView<float, 3>(&maybe_scales(s, slot, h), {1, 1, 1}, {0, 0, 0});
          }
          GATED_ATTENTION_RETURN_IF_ERROR(store_kv(a));
        }
      }
    }
  }
  return Status::ok();
}

// Appends k, v [b, len, kv_heads, d] to each sequence's cache; returns the lengths after.
template <class KvT>
std::vector<std::int64_t> append_to_cache(const TensorView<double, 4>& k,
                                          const TensorView<double, 4>& v,
                                          const KvCacheView<KvT>& cache, Status* status) {
  *status = store_rows(k, cache.k, cache.maybe_k_scales, cache.lengths);
  if (status->is_ok()) *status = store_rows(v, cache.v, cache.maybe_v_scales, cache.lengths);
  std::vector<std::int64_t> kv_lens(static_cast<std::size_t>(k.extents[0]));
  for (std::int64_t s = 0; s < k.extents[0]; ++s) kv_lens[s] = cache.lengths[s] + k.extents[1];
  return kv_lens;
}

// Causal attention of q over each sequence's cache, gated by gate_rows (the gate projection's
// rows, or q_rows where q_proj carries the gate), into attn [b, len, q_width].
template <class KvT>
Status attend(const BlockConfig& c, const TensorView<double, 5>& q,
              const TensorView<double, 3>& gate_rows, const KvCacheView<KvT>& cache,
              const std::vector<std::int64_t>& kv_lens, std::vector<double>& attn) {
  const std::int64_t batch = q.extents[0], len = q.extents[1];
  SdpaArgs<double, KvT> sdpa_args;
  sdpa_args.q = q;
  sdpa_args.k = cache.k;
  sdpa_args.v = cache.v;
  sdpa_args.k.extents[0] = sdpa_args.v.extents[0] = batch;
  sdpa_args.maybe_k_scales = cache.maybe_k_scales;
  sdpa_args.maybe_v_scales = cache.maybe_v_scales;
  if (cache.maybe_k_scales.data) sdpa_args.maybe_k_scales.extents[0] = batch;
  if (cache.maybe_v_scales.data) sdpa_args.maybe_v_scales.extents[0] = batch;
  sdpa_args.out = TensorView<double, 5>::contiguous(
      attn.data(), {batch, len, c.num_kv_heads, c.group_size(), c.head_dim});
  sdpa_args.scale = c.scale;
  sdpa_args.mask = Mask::causal();
  sdpa_args.maybe_kv_lens = kv_lens.data();
  if (c.gate_mode != GateMode::none) {
    sdpa_args.gate.values = gate_view(c, gate_rows);
    sdpa_args.gate.activation = c.gate_activation;
  }
  return sdpa(sdpa_args);
}

}  // namespace detail

// x [b, len, hidden] and positions [b, len]: `len` new tokens for each of the b sequences, appended
// to cache sequence s = 0..b-1 after its cached tokens (len = 1 is a decode step). Writes
// y [b, len, hidden] and advances cache.lengths[0..b).
template <class T, class KvT, class W>
Status block_forward(const BlockConfig& c, const BlockWeights<T, W>& w,
                     const TensorView<const T, 3>& x,
                     const TensorView<const std::int64_t, 2>& positions,
                     const KvCacheView<KvT>& cache, const TensorView<T, 3>& y) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate_forward(c, w, x, positions, cache, y));
  if (cache.paged()) {  // the block's paged path is checked against its contiguous one
    return Status::error(StatusCode::not_supported,
                         "cache.page_table: the reference block takes a contiguous cache");
  }
  const std::int64_t batch = x.extents[0], len = x.extents[1], rows = batch * len;

  // Projections.
  std::vector<double> xd(static_cast<std::size_t>(rows * c.hidden_size));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < len; ++t) {
      for (std::int64_t i = 0; i < c.hidden_size; ++i) {
        xd[(b * len + t) * c.hidden_size + i] = as_double(x(b, t, i));
      }
    }
  }
  std::vector<double> qp = detail::project(xd, rows, w.q_proj, w.maybe_q_bias);
  std::vector<double> gp;
  if (c.has_gate_proj()) gp = detail::project(xd, rows, w.maybe_gate_proj, w.maybe_gate_bias);
  std::vector<double> kp = detail::project(xd, rows, w.k_proj, w.maybe_k_bias);
  std::vector<double> vp = detail::project(xd, rows, w.v_proj, w.maybe_v_bias);

  const auto q_rows = TensorView<double, 3>::contiguous(qp.data(), {batch, len, c.q_proj_rows()});
  const TensorView<double, 5> q = q_view(c, q_rows);
  const auto k =
      TensorView<double, 4>::contiguous(kp.data(), {batch, len, c.num_kv_heads, c.head_dim});
  const auto v =
      TensorView<double, 4>::contiguous(vp.data(), {batch, len, c.num_kv_heads, c.head_dim});

  // QK norm and RoPE, in place.
  GATED_ATTENTION_RETURN_IF_ERROR(detail::qk_norm(c, q, w.maybe_q_norm));
  GATED_ATTENTION_RETURN_IF_ERROR(detail::qk_norm(c, k, w.maybe_k_norm));
  GATED_ATTENTION_RETURN_IF_ERROR(detail::rotate(c, q, positions));
  GATED_ATTENTION_RETURN_IF_ERROR(detail::rotate(c, k, positions));

  // Append to the cache, then causal attention over each sequence's cache and the gate.
  Status stored;
  const std::vector<std::int64_t> kv_lens = detail::append_to_cache(k, v, cache, &stored);
  GATED_ATTENTION_RETURN_IF_ERROR(stored);
  std::vector<double> attn(static_cast<std::size_t>(rows * c.q_width()));
  const auto gate_rows =
      c.has_gate_proj() ? TensorView<double, 3>::contiguous(gp.data(), {batch, len, c.gate_width()})
                        : q_rows;
  GATED_ATTENTION_RETURN_IF_ERROR(detail::attend(c, q, gate_rows, cache, kv_lens, attn));

  // Output projection.
  const std::vector<double> out = detail::project(attn, rows, w.o_proj, w.maybe_o_bias);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < len; ++t) {
      for (std::int64_t i = 0; i < c.hidden_size; ++i) {
        y(b, t, i) = from_double<T>(out[(b * len + t) * c.hidden_size + i]);
      }
    }
  }
  for (std::int64_t s = 0; s < batch; ++s) cache.lengths[s] = kv_lens[s];
  return Status::ok();
}

}  // namespace gated_attention::reference
