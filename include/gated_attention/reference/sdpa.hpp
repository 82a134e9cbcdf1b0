// Reference scaled dot-product attention: the specification of ops/sdpa. Every logit, the softmax
// and the weighted sum are computed in double, one query row at a time, in the most direct way.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gated_attention/core/status.hpp"
#include "gated_attention/ops/sdpa_args.hpp"
#include "gated_attention/reference/common.hpp"
#include "gated_attention/reference/output_gate.hpp"

namespace gated_attention::reference {

template <class T, class KvT>
Status sdpa(const SdpaArgs<T, KvT>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(args));
  const auto& qe = args.q.extents;
  const std::int64_t batch = qe[0], q_len = qe[1], kv_heads = qe[2], group = qe[3], dk = qe[4];
  const std::int64_t kv_len = args.k.extents[1];
  const std::int64_t dv = args.v.extents[3];
  const double scale = args.effective_scale();
  const double neg_inf = -std::numeric_limits<double>::infinity();

  std::vector<double> logits(static_cast<std::size_t>(kv_len));
  std::vector<double> acc(static_cast<std::size_t>(dv));
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t valid = args.maybe_kv_lens ? args.maybe_kv_lens[b] : kv_len;
    for (std::int64_t i = 0; i < q_len; ++i) {
      const std::int64_t pos = i + valid - q_len;
      for (std::int64_t kv = 0; kv < kv_heads; ++kv) {
        for (std::int64_t j = 0; j < group; ++j) {
          const std::int64_t head = kv * group + j;
          // Logits of attended keys; -inf elsewhere.
          double max_logit = neg_inf;
          for (std::int64_t key = 0; key < kv_len; ++key) {
            logits[key] = neg_inf;
            if (key >= valid || !args.mask.allows(pos, key)) continue;
            double dot = 0.0;
            for (std::int64_t d = 0; d < dk; ++d) {
              dot += as_double(args.q(b, i, kv, j, d)) * as_double(args.k(b, key, kv, d));
            }
            logits[key] = scale * dot;
            max_logit = std::max(max_logit, logits[key]);
          }
          bool has_sink = args.maybe_sink_logits != nullptr || args.softmax_plus_one;
          const double sink = args.maybe_sink_logits ? args.maybe_sink_logits[head] : 0.0;
          if (has_sink && sink == neg_inf) has_sink = false;  // exp(-inf) adds nothing
          if (has_sink) max_logit = std::max(max_logit, sink);

          // Softmax normaliser and weighted sum of values.
          double denom = has_sink ? std::exp(sink - max_logit) : 0.0;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (std::int64_t key = 0; key < kv_len; ++key) {
            if (logits[key] == neg_inf) continue;
            const double p = std::exp(logits[key] - max_logit);
            denom += p;
            for (std::int64_t d = 0; d < dv; ++d) acc[d] += p * as_double(args.v(b, key, kv, d));
          }
          // denom is 0 only without any attended key or sink; NaN (from NaN or Inf in the
          // attended inputs) propagates to the outputs, as any arithmetic would.
          const bool no_keys = denom == 0.0;
          if (args.maybe_lse.data != nullptr) {
            args.maybe_lse(b, i, kv, j) =
                static_cast<float>(no_keys ? neg_inf : max_logit + std::log(denom));
          }
          double max_before = 0.0, max_after = 0.0, gate_sum = 0.0, gate_small = 0.0;
          for (std::int64_t d = 0; d < dv; ++d) {
            const double attended = no_keys ? 0.0 : acc[d] / denom;
            double o = attended;
            double activated = 1.0;
            if (args.gate.enabled()) {
              activated = gate_activation(args.gate.activation,
                                          as_double(args.gate.values(b, i, kv, j, d)));
              o = gate_combine(args.gate.combine, attended, activated);
            }
            max_before = std::max(max_before, std::fabs(attended));
            max_after = std::max(max_after, std::fabs(o));
            gate_sum += activated;
            gate_small += activated < 0.1 ? 1.0 : 0.0;
            args.out(b, i, kv, j, d) = from_double<T>(o);
          }
          const AttentionStats& st = args.stats;
          if (st.sink_share.data != nullptr) {
            double sink_mass = 0.0;
            for (std::int64_t key = 0; key < std::min(st.n_sink, kv_len); ++key) {
              if (logits[key] != neg_inf) sink_mass += std::exp(logits[key] - max_logit);
            }
            st.sink_share(b, i, kv, j) = static_cast<float>(no_keys ? 0.0 : sink_mass / denom);
          }
          if (st.gate_mean.data != nullptr) {
            st.gate_mean(b, i, kv, j) = static_cast<float>(gate_sum / static_cast<double>(dv));
          }
          if (st.gate_below_0_1.data != nullptr) {
            st.gate_below_0_1(b, i, kv, j) =
                static_cast<float>(gate_small / static_cast<double>(dv));
          }
          if (st.max_abs_before.data != nullptr) {
            st.max_abs_before(b, i, kv, j) = static_cast<float>(max_before);
          }
          if (st.max_abs_after.data != nullptr) {
            st.max_abs_after(b, i, kv, j) = static_cast<float>(max_after);
          }
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace gated_attention::reference
