// What the per-ISA kernel regions need, included before any target region opens (standard and
// library headers must be parsed with the default target).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "gated_attention/core/executor.hpp"
#include "gated_attention/dispatch/cpu.hpp"
#include "gated_attention/kernels/denormals.hpp"
#include "gated_attention/kernels/linear_plan.hpp"
#include "gated_attention/kernels/merge_attention_plan.hpp"
#include "gated_attention/kernels/output_gate_plan.hpp"
#include "gated_attention/kernels/prefetch.hpp"
#include "gated_attention/kernels/sdpa_plan.hpp"
#include "gated_attention/kernels/simd_contract.hpp"
#include "gated_attention/kernels/target.hpp"
#include "gated_attention/ops/sdpa_args.hpp"
