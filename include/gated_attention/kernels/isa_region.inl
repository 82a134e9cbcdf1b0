// One ISA path's kernels: the generic code compiled over that path's Simd and Tuning, inside its
// own namespace and (where it has one) target region. Included once per path by
// kernels/isa_kernels.hpp, which defines before each inclusion:
//   GATED_ATTENTION_REGION_NAMESPACE  the path's namespace under kernels (scalar, avx2, ...)
//   GATED_ATTENTION_REGION_SIMD       "gated_attention/kernels/<isa>/simd.inl"
//   GATED_ATTENTION_REGION_TUNING     "gated_attention/kernels/<isa>/tuning.inl"
//   GATED_ATTENTION_REGION_TARGET     the target string (kernels/target.hpp); undefined: none
//   GATED_ATTENTION_REGION_STORAGE_DOT  its StorageDot specialisations; undefined: none
// and this file undefines them.
#if defined(GATED_ATTENTION_REGION_TARGET)
GATED_ATTENTION_TARGET_BEGIN(GATED_ATTENTION_REGION_TARGET)
#endif
namespace gated_attention::kernels::GATED_ATTENTION_REGION_NAMESPACE {
#define GATED_ATTENTION_IN_KERNEL_REGION 1
// clang-format off
#include GATED_ATTENTION_REGION_SIMD
#include GATED_ATTENTION_REGION_TUNING
#include "gated_attention/kernels/generic/kv_rows.inl"
#include "gated_attention/kernels/generic/storage_dot.inl"
#if defined(GATED_ATTENTION_REGION_STORAGE_DOT)
#include GATED_ATTENTION_REGION_STORAGE_DOT
#endif
// clang-format on
static_assert(satisfies_simd_contract<Simd, Tuning>());
// clang-format off
#include "gated_attention/kernels/generic/math.inl"
#include "gated_attention/kernels/generic/sdpa_scores.inl"
#include "gated_attention/kernels/generic/sdpa_values.inl"
#include "gated_attention/kernels/generic/sdpa_softmax.inl"
#include "gated_attention/kernels/generic/sdpa_epilogue.inl"
#include "gated_attention/kernels/generic/sdpa_unit.inl"
#include "gated_attention/kernels/generic/sdpa_prefill.inl"
#include "gated_attention/kernels/generic/sdpa_decode.inl"
#include "gated_attention/kernels/generic/sdpa_task.inl"
#include "gated_attention/kernels/generic/sdpa_merge.inl"
#include "gated_attention/kernels/generic/output_gate.inl"
#include "gated_attention/kernels/generic/merge_attention.inl"
#include "gated_attention/kernels/generic/linear_rows.inl"
// clang-format on
#undef GATED_ATTENTION_IN_KERNEL_REGION
}  // namespace gated_attention::kernels::GATED_ATTENTION_REGION_NAMESPACE
#if defined(GATED_ATTENTION_REGION_TARGET)
GATED_ATTENTION_TARGET_END
#endif
#undef GATED_ATTENTION_REGION_NAMESPACE
#undef GATED_ATTENTION_REGION_SIMD
#undef GATED_ATTENTION_REGION_TUNING
#undef GATED_ATTENTION_REGION_TARGET
#undef GATED_ATTENTION_REGION_STORAGE_DOT
