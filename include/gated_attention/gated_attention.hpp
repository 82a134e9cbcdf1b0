// gated_attention: gated scaled dot-product attention for CPUs (Qiu et al. 2025, Qwen3-Next).
// The one header users include.
#pragma once

#include "gated_attention/block/config.hpp"
#include "gated_attention/core/config.hpp"
#include "gated_attention/core/dtypes.hpp"
#include "gated_attention/core/executor.hpp"
#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"
#include "gated_attention/core/validate.hpp"
#include "gated_attention/core/workspace.hpp"
#include "gated_attention/ops/heads.hpp"
#include "gated_attention/ops/linear_args.hpp"
#include "gated_attention/ops/output_gate_args.hpp"
#include "gated_attention/ops/rms_norm_args.hpp"
#include "gated_attention/ops/rope_args.hpp"
#include "gated_attention/ops/sdpa_args.hpp"
#include "gated_attention/reference/block.hpp"
#include "gated_attention/reference/linear.hpp"
#include "gated_attention/reference/output_gate.hpp"
#include "gated_attention/reference/rms_norm.hpp"
#include "gated_attention/reference/rope.hpp"
#include "gated_attention/reference/sdpa.hpp"
