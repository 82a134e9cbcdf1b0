// Reference scaled dot-product attention: the specification of ops/sdpa. Every logit, the softmax
// and the weighted sum are computed in double, one query row at a time, in the most direct way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gated_attention/core/status.hpp"
#include "gated_attention/ops/sdpa_args.hpp"
#include "gated_attention/reference/common.hpp"
#include "gated_attention/reference/output_gate.hpp"

namespace gated_attention::reference {

namespace detail {

// One query row (batch b, position i, KV head kv, head j of its group), computed in double; `at`
// is where the row lies in q, out and the per-row views.
template <class T, class KT, class VT>
struct SdpaRow {
  const SdpaArgs<T, KT, VT>& args;
  std::int64_t b, i, kv, j;
  QueryAt at;
  std::vector<double>& logits;  // [keys of the longest entry]
  std::vector<double>& acc;     // [dv]
  static constexpr double kNegInf = -std::numeric_limits<double>::infinity();

  std::int64_t keys() const { return static_cast<std::int64_t>(logits.size()); }

  // K and V elements as the values they stand for: int8 rows times their scale.
  double key_element(std::int64_t key, std::int64_t d) const {
    const KeyAt at = args.key_at(b, key);
    const double x = as_double(args.k(at.index, at.row, kv, d));
    return args.maybe_k_scales.data ? x * args.maybe_k_scales(at.index, at.row, kv) : x;
  }
  double value_element(std::int64_t key, std::int64_t d) const {
    const KeyAt at = args.key_at(b, key);
    const double x = as_double(args.v(at.index, at.row, kv, d));
    return args.maybe_v_scales.data ? x * args.maybe_v_scales(at.index, at.row, kv) : x;
  }

  // Scaled logits of the attended keys (-inf elsewhere); returns their max.
  double compute_logits(std::int64_t valid) const {
    const std::int64_t dk = args.q.extents[4];
    const std::int64_t pos = i + valid - args.q_len(b);
    // Under DotPrecision::storage the query row as the kernels round it, in log2 units.
    const bool rounded = args.dot_precision == DotPrecision::storage && rounds_query_v<T, KT>;
    std::vector<double> query(static_cast<std::size_t>(dk));
    std::vector<float> row(static_cast<std::size_t>(dk));
    for (std::int64_t d = 0; d < dk; ++d) {
      row[d] =
          static_cast<float>(as_double(args.q(at.index, at.row, kv, j, d))) * args.scale_log2();
    }
    if (rounded) round_query_row<KT>(row.data(), dk);
    for (std::int64_t d = 0; d < dk; ++d) {
      query[d] = rounded ? row[d] : as_double(args.q(at.index, at.row, kv, j, d));
    }
    const double scale = rounded ? std::log(2.0) : args.effective_scale();
    double max_logit = kNegInf;
    for (std::int64_t key = 0; key < keys(); ++key) {
      logits[key] = kNegInf;
      if (key >= valid || !args.mask.allows(pos, key)) continue;
      double dot = 0.0;
      for (std::int64_t d = 0; d < dk; ++d) dot += query[d] * key_element(key, d);
      logits[key] = scale * dot;
      max_logit = std::max(max_logit, logits[key]);
    }
    return max_logit;
  }

  // acc = sum_key exp(logit - max) V[key]; returns the softmax denominator (with the sink's
  // term). It is 0 only without any attended key or sink; NaN (from NaN or Inf in the attended
  // inputs) propagates to the outputs, as any arithmetic would.
  double accumulate(double max_logit, double sink_term) const {
    const std::int64_t dv = args.v.extents[3];
    double denom = sink_term;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (std::int64_t key = 0; key < keys(); ++key) {
      if (logits[key] == kNegInf) continue;
      const double p = std::exp(logits[key] - max_logit);
      denom += p;
      for (std::int64_t d = 0; d < dv; ++d) acc[d] += p * value_element(key, d);
    }
    return denom;
  }

  // The gated output and the row's statistics.
  void write(double max_logit, double denom) const {
    const std::int64_t dv = args.v.extents[3];
    const bool no_keys = denom == 0.0;
    if (args.maybe_lse.data != nullptr) {
      args.maybe_lse(at.index, at.row, kv, j) =
          static_cast<float>(no_keys ? kNegInf : max_logit + std::log(denom));
    }
    double max_before = 0.0, max_after = 0.0, gate_sum = 0.0, gate_small = 0.0;
    for (std::int64_t d = 0; d < dv; ++d) {
      const double attended = no_keys ? 0.0 : acc[d] / denom;
      double o = attended;
      double activated = 1.0;
      if (args.gate.enabled()) {
        activated = gate_activation(args.gate.activation,
                                    as_double(args.gate.values(at.index, at.row, kv, j, d)));
        o = gate_combine(args.gate.combine, attended, activated);
      }
      max_before = std::max(max_before, std::fabs(attended));
      max_after = std::max(max_after, std::fabs(o));
      gate_sum += activated;
      gate_small += activated < 0.1 ? 1.0 : 0.0;
      args.out(at.index, at.row, kv, j, d) = from_double<T>(o);
    }
    const AttentionStats& st = args.stats;
    const auto put = [&](const TensorView<float, 4>& view, double value) {
      if (view.data != nullptr) view(at.index, at.row, kv, j) = static_cast<float>(value);
    };
    if (st.sink_share.data != nullptr) {
      double sink_mass = 0.0;
      for (std::int64_t key = 0; key < std::min(st.n_sink, keys()); ++key) {
        if (logits[key] != kNegInf) sink_mass += std::exp(logits[key] - max_logit);
      }
      put(st.sink_share, no_keys ? 0.0 : sink_mass / denom);
    }
    put(st.gate_mean, gate_sum / static_cast<double>(dv));
    put(st.gate_below_0_1, gate_small / static_cast<double>(dv));
    put(st.max_abs_before, max_before);
    put(st.max_abs_after, max_after);
  }

  void run(std::int64_t valid) const {
    double max_logit = compute_logits(valid);
    const std::int64_t head = kv * args.q.extents[3] + j;
    bool has_sink = args.maybe_sink_logits != nullptr || args.softmax_plus_one;
    const double sink = args.maybe_sink_logits ? args.maybe_sink_logits[head] : 0.0;
    if (has_sink && sink == kNegInf) has_sink = false;  // exp(-inf) adds nothing
    if (has_sink) max_logit = std::max(max_logit, sink);
    const double denom = accumulate(max_logit, has_sink ? std::exp(sink - max_logit) : 0.0);
    write(max_logit, denom);
  }
};

}  // namespace detail

template <class T, class KT, class VT>
Status sdpa(const SdpaArgs<T, KT, VT>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(args));
  const auto& qe = args.q.extents;
  // Paged: up to the longest entry (the table's capacity may be far larger).
  std::int64_t kv_len = args.paged() ? 0 : args.kv_capacity();
  for (std::int64_t b = 0; args.paged() && b < args.batch(); ++b) {
    kv_len = std::max(kv_len, args.maybe_kv_lens[b]);
  }
  std::vector<double> logits(static_cast<std::size_t>(kv_len));
  std::vector<double> acc(static_cast<std::size_t>(args.v.extents[3]));
  for (std::int64_t b = 0; b < args.batch(); ++b) {
    for (std::int64_t i = 0; i < args.q_len(b); ++i) {
      for (std::int64_t kv = 0; kv < qe[2]; ++kv) {
        for (std::int64_t j = 0; j < qe[3]; ++j) {
          detail::SdpaRow<T, KT, VT>{args, b, i, kv, j, args.query_at(b, i), logits, acc}.run(
              args.kv_len(b));
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace gated_attention::reference
