// Merging attention over disjoint key sets (context-parallel ranks, or any split of the keys) into
// the result of one call over all of them. Each part is an SDPA call over its keys with
// maybe_lse set, no sinks and no gate; the merge weights each part's rows by their share of the
// softmax total, adds the sinks once and applies the gate:
//
//   lse = log(sum_p exp(lse_p) + exp(sink))        (sink: the head's logit, 0 for softmax+1)
//   out = combine(sum_p exp(lse_p - lse) out_p, act(gate))
//
// A part whose row saw no key has lse -inf and weighs nothing; a row no part saw is 0 (lse -inf,
// or the sink's logit with a sink).
#pragma once

#include <cstdint>
#include <cstdio>

#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"
#include "gated_attention/core/validate.hpp"
#include "gated_attention/ops/output_gate_args.hpp"
#include "gated_attention/ops/sdpa_args.hpp"

namespace gated_attention {

// One part: an SDPA call's output and log-sum-exp over its keys, without sinks or gate.
template <class T>
struct AttentionPart {
  TensorView<const T, 5> out;      // [b, len, kv_heads, group, dv]
  TensorView<const float, 4> lse;  // [b, len, kv_heads, group], natural log; -inf: no keys
};

template <class T>
struct MergeAttentionArgs {
  const AttentionPart<T>* parts = nullptr;  // [num_parts], num_parts >= 1
  std::int64_t num_parts = 0;
  TensorView<T, 5> out;                      // [b, len, kv_heads, group, dv]; may be a part's out
  const float* maybe_sink_logits = nullptr;  // [kv_heads * group] learned sink logit per head
  bool softmax_plus_one = false;             // a zero sink logit for every head
  TensorView<float, 4> maybe_lse;            // [b, len, kv_heads, group], sinks included; may be a
                                             // part's lse
  GateSpec<T> gate;                          // optional output gate
};

namespace detail {

// The views of part p checked against the output's shape, named "parts[p].out" / "parts[p].lse".
template <class T>
Status check_part(const MergeAttentionArgs<T>& args, std::int64_t p) {
  const AttentionPart<T>& part = args.parts[p];
  const auto& e = args.out.extents;
  char out_name[40], lse_name[40];
  std::snprintf(out_name, sizeof out_name, "parts[%lld].out", static_cast<long long>(p));
  std::snprintf(lse_name, sizeof lse_name, "parts[%lld].lse", static_cast<long long>(p));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view(out_name, part.out, e, kQueryHeadDims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_view(lse_name, part.lse, {e[0], e[1], e[2], e[3]},
                                             detail::kSdpaRowDims, InnerStride::any));
  GATED_ATTENTION_RETURN_IF_ERROR(check_in_place_or_disjoint("out", args.out, out_name, part.out));
  GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap("out", args.out, lse_name, part.lse));
  if (args.maybe_lse.data == nullptr) return Status::ok();
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_in_place_or_disjoint("lse", args.maybe_lse, lse_name, part.lse));
  return check_no_overlap("lse", args.maybe_lse, out_name, part.out);
}

}  // namespace detail

template <class T>
Status validate(const MergeAttentionArgs<T>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(
      check_view("out", args.out, {-1, -1, -1, -1, -1}, kQueryHeadDims));
  const auto& e = args.out.extents;
  if (e[4] < 1 || e[4] > kMaxHeadDim) {
    return Status::error(StatusCode::invalid_argument,
                         "out: dim 4 (dim): expected 1..%lld, got %lld",
                         static_cast<long long>(kMaxHeadDim), static_cast<long long>(e[4]));
  }
  if (args.num_parts < 1 || args.parts == nullptr) {
    return Status::error(
        StatusCode::invalid_argument, "parts: expected at least one part, got %lld%s",
        static_cast<long long>(args.num_parts), args.parts == nullptr ? " (null pointer)" : "");
  }
  if (args.maybe_sink_logits != nullptr && args.softmax_plus_one) {
    return Status::error(StatusCode::invalid_argument,
                         "sinks: softmax_plus_one and maybe_sink_logits are exclusive");
  }
  GATED_ATTENTION_RETURN_IF_ERROR(check_gate(args.gate, e));
  GATED_ATTENTION_RETURN_IF_ERROR(check_distinct_elements("out", args.out, kQueryHeadDims));
  GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap("out", args.out, "gate", args.gate.values));
  if (args.maybe_lse.data != nullptr) {
    GATED_ATTENTION_RETURN_IF_ERROR(check_view("lse", args.maybe_lse, {e[0], e[1], e[2], e[3]},
                                               detail::kSdpaRowDims, InnerStride::any));
    GATED_ATTENTION_RETURN_IF_ERROR(
        check_distinct_elements("lse", args.maybe_lse, detail::kSdpaRowDims));
    GATED_ATTENTION_RETURN_IF_ERROR(check_no_overlap("lse", args.maybe_lse, "out", args.out));
    GATED_ATTENTION_RETURN_IF_ERROR(
        check_no_overlap("lse", args.maybe_lse, "gate", args.gate.values));
  }
  for (std::int64_t p = 0; p < args.num_parts; ++p) {
    GATED_ATTENTION_RETURN_IF_ERROR(detail::check_part(args, p));
  }
  return Status::ok();
}

}  // namespace gated_attention
