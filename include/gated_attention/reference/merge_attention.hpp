// Reference merge of attention parts over disjoint key sets, in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gated_attention/core/status.hpp"
#include "gated_attention/ops/merge_attention_args.hpp"
#include "gated_attention/reference/common.hpp"
#include "gated_attention/reference/output_gate.hpp"

namespace gated_attention::reference {

template <class T>
Status merge_attention(const MergeAttentionArgs<T>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(args));
  const auto& e = args.out.extents;
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  std::vector<double> row(static_cast<std::size_t>(e[4]));
  for_each_row(e, [&](std::array<std::int64_t, 5> index) {
    const std::array<std::int64_t, 4> r = {index[0], index[1], index[2], index[3]};
    double sink = kNegInf;  // no sink, or a -inf logit: none
    if (args.maybe_sink_logits != nullptr) sink = args.maybe_sink_logits[r[2] * e[3] + r[3]];
    if (args.softmax_plus_one) sink = 0.0;
    double m = sink;
    for (std::int64_t p = 0; p < args.num_parts; ++p) m = std::max(m, double{args.parts[p].lse[r]});
    double total = 0.0;
    std::fill(row.begin(), row.end(), 0.0);
    for (std::int64_t p = 0; p < args.num_parts && m != kNegInf; ++p) {
      const double w = std::exp(double{args.parts[p].lse[r]} - m);
      total += w;
      for (std::int64_t d = 0; d < e[4]; ++d) {
        index[4] = d;
        row[static_cast<std::size_t>(d)] += w * as_double(args.parts[p].out[index]);
      }
    }
    const double sink_weight = m == kNegInf || sink == kNegInf ? 0.0 : std::exp(sink - m);
    const double denominator = total + sink_weight;
    if (args.maybe_lse.data != nullptr) {
      args.maybe_lse[r] =
          static_cast<float>(denominator > 0.0 ? m + std::log(denominator) : kNegInf);
    }
    for (std::int64_t d = 0; d < e[4]; ++d) {
      index[4] = d;
      double y = denominator > 0.0 ? row[static_cast<std::size_t>(d)] / denominator : 0.0;
      if (args.gate.enabled()) y = apply_gate(args.gate, index, y);
      args.out[index] = from_double<T>(y);
    }
  });
  return Status::ok();
}

}  // namespace gated_attention::reference
