// Linear layer y = x W^T + bias, and the GEMM hook engines use to plug their own matmul
// (quantized, BLAS, ...) into the block.
//
//   Status s = run(args, executor);  // splits the output features into panels over the workers
//
// Backends: a null hook runs OpenBLAS where the build defines GATED_ATTENTION_OPENBLAS=1 (the CMake
// target does where it finds OpenBLAS; ops/linear_openblas.hpp), Eigen otherwise; bf16 weights run
// the library's own kernel (linear_kernel), or with many rows are widened into a caller's scratch
// first (linear_widened; the block does so from its workspace), or multiplied on AMX tiles with x
// rounded to bf16 (linear_tiles; the block's prefill under DotPrecision::storage). Every
// translation unit of a program must agree on the macro. OpenBLAS picks its kernels at run time;
// Eigen is compiled with the includer's flags and without -march uses SSE2 only, far slower
// (docs/performance-notes.md, "Projections: Eigen without -march"). The attention kernels need no
// -march either way (they dispatch at run time).
//
// Allocation: Eigen's GEMM takes its packing buffers from the stack up to
// EIGEN_STACK_ALLOCATION_LIMIT (128 KB) and from the heap (malloc) above it, so large products
// allocate; matrix-vector products (one row, i.e. decode) do not. A LinearHook that allocates
// nothing makes the whole block forward allocation-free.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "gated_attention/core/executor.hpp"
#include "gated_attention/core/status.hpp"
#include "gated_attention/dispatch/amx.hpp"
#include "gated_attention/dispatch/cpu.hpp"
#include "gated_attention/kernels/amx_linear.hpp"
#include "gated_attention/kernels/isa_kernels.hpp"
#include "gated_attention/ops/linear_args.hpp"

namespace gated_attention {

// Output features per task: about two tasks per worker over `out_features` (fewer, wider panels
// repack x less often), in multiples of 64, at least 64.
inline std::int64_t linear_panel_width(std::int64_t out_features, int num_workers) {
  const std::int64_t tasks = 2 * std::max(1, num_workers);
  const std::int64_t width = (out_features + tasks - 1) / tasks;
  return std::max<std::int64_t>(64, (width + 63) / 64 * 64);
}

// An engine's matmul: computes args.y = args.x args.weight^T + args.maybe_bias on the calling
// thread. The block calls it once per panel of output features, from its workers, so it must be
// safe to call concurrently on disjoint outputs. Views have stride 1 over their last dimension.
template <class T, class W = T>
struct LinearHook {
  using Fn = Status (*)(void* context, const LinearArgs<T, W>& args);
  Fn fn = nullptr;  // null: the build's default backend (default_linear_fn)
  void* context = nullptr;
};

// Element types run() multiplies without a hook: float or double throughout, or f32 activations
// with bf16 weights (the library's own kernel).
template <class T, class W>
constexpr bool linear_types_supported() {
  return (std::is_same_v<T, W> && (std::is_same_v<T, float> || std::is_same_v<T, double>)) ||
         (std::is_same_v<T, float> && std::is_same_v<W, bf16>);
}

template <class T, class W>
Status can_implement(const LinearArgs<T, W>& args) {
  GATED_ATTENTION_RETURN_IF_ERROR(validate(args));
  if (!linear_types_supported<T, W>()) {
    return Status::error(StatusCode::not_supported,
                         "linear: element types: expected float/double, or float activations "
                         "with bf16 weights");
  }
  return Status::ok();
}

// y = x W^T + bias through the library's own kernel (kernels/generic/linear_rows.inl) on the
// calling thread, on the best path the CPU has; f32 sums. Shapes are not validated here.
template <class W>
Status linear_kernel(void* /*context*/, const LinearArgs<float, W>& args) {
  if (args.y.extents[0] == 0 || args.y.extents[1] == 0) return Status::ok();
  switch (active_isa()) {
#if GATED_ATTENTION_X86
    case Isa::avx512:
      kernels::avx512::linear_rows<W>(args);
      break;
    case Isa::avx2:
      kernels::avx2::linear_rows<W>(args);
      break;
#endif
#if GATED_ATTENTION_AARCH64
    case Isa::neon:
      kernels::neon::linear_rows<W>(args);
      break;
#endif
    default:
      kernels::scalar::linear_rows<W>(args);
      break;
  }
  return Status::ok();
}

// One Eigen product on the calling thread. Shapes are not validated here.
template <class T>
Status linear_eigen(void* /*context*/, const LinearArgs<T>& args) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using ConstMap = Eigen::Map<const Matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
    using Map = Eigen::Map<Matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
    const ConstMap x(args.x.data, args.x.extents[0], args.x.extents[1],
                     Eigen::OuterStride<>(args.x.strides[0]));
    const ConstMap w(args.weight.data, args.weight.extents[0], args.weight.extents[1],
                     Eigen::OuterStride<>(args.weight.strides[0]));
    Map y(args.y.data, args.y.extents[0], args.y.extents[1],
          Eigen::OuterStride<>(args.y.strides[0]));
    if (y.size() == 0) return Status::ok();
    y.noalias() = x * w.transpose();
    if (args.maybe_bias != nullptr) {
      const Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> bias(args.maybe_bias, y.cols());
      y.rowwise() += bias;
    }
    return Status::ok();
  } else {
    return Status::error(StatusCode::not_supported, "linear: element type: expected float/double");
  }
}

#if GATED_ATTENTION_OPENBLAS
template <class T>
Status linear_openblas(void* context, const LinearArgs<T>& args);  // ops/linear_openblas.hpp
#endif

// The product a null hook runs: bf16 weights through the library's kernel; float/double through
// OpenBLAS where the build defines GATED_ATTENTION_OPENBLAS=1, Eigen otherwise; null for types
// only an engine's hook multiplies.
template <class T, class W = T>
typename LinearHook<T, W>::Fn default_linear_fn() {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<W, bf16>) {
    return &linear_kernel<W>;
  } else if constexpr (std::is_same_v<T, W> &&
                       (std::is_same_v<T, float> || std::is_same_v<T, double>)) {
#if GATED_ATTENTION_OPENBLAS
    return &linear_openblas<T>;
#else
    return &linear_eigen<T>;
#endif
  } else {
    return nullptr;
  }
}

// From this many rows on, a product with bf16 weights runs fastest with the weights widened to f32
// first (linear_widened); below, the kernel's one pass over W wins. performance-notes
// "bf16 weights in prefill: widened panels".
inline constexpr std::int64_t kWidenedWeightMinRows = 80;

// Scratch for linear_widened: `floats` f32 elements at `data`.
struct WidenScratch {
  float* data = nullptr;
  std::size_t floats = 0;
};

// Floats of scratch linear_widened needs for weights [out, in] (and a bias of out).
inline std::size_t widened_weight_floats(std::int64_t out, std::int64_t in) {
  return static_cast<std::size_t>(out) * static_cast<std::size_t>(in + 1);
}

// y = x W^T + bias for bf16 weights, widened to f32 into the scratch (a WidenScratch* context of
// widened_weight_floats) and multiplied by the f32 default backend: OpenBLAS's or Eigen's GEMM
// speed for many rows, at the cost of one pass writing the widened panel.
inline Status linear_widened(void* context, const LinearArgs<float, bf16>& args) {
  const auto* scratch = static_cast<const WidenScratch*>(context);
  const std::int64_t out = args.weight.extents[0], in = args.weight.extents[1];
  const std::size_t needed = widened_weight_floats(out, in);
  if (scratch == nullptr || scratch->floats < needed) {
    return Status::error(StatusCode::workspace_too_small,
                         "linear: widened weights: expected scratch of >= %zu floats, got %zu",
                         needed, scratch == nullptr ? std::size_t{0} : scratch->floats);
  }
  float* wide = scratch->data;
  for (std::int64_t o = 0; o < out; ++o) {
    const bf16* row = args.weight.data + o * args.weight.strides[0];
    for (std::int64_t i = 0; i < in; ++i) wide[o * in + i] = to_float(row[i]);
  }
  LinearArgs<float> widened;
  widened.x = args.x;
  widened.weight = TensorView<const float, 2>::contiguous(wide, {out, in});
  widened.y = args.y;
  if (args.maybe_bias != nullptr) {
    float* bias = wide + out * in;
    for (std::int64_t o = 0; o < out; ++o) bias[o] = to_float(args.maybe_bias[o]);
    widened.maybe_bias = bias;
  }
  return default_linear_fn<float>()(nullptr, widened);
}

// Whether linear_tiles multiplies weights of `in` features on AMX tiles here: the avx512 path
// active, AMX tiles ready and on (amx_tiles()), in a multiple of 32.
inline bool linear_tiles_run(std::int64_t in) {
#if GATED_ATTENTION_X86
  return in % 32 == 0 && active_isa() == Isa::avx512 && amx_tiles();
#else
  (void)in;
  return false;
#endif
}

// Floats of scratch linear_tiles needs for weights [out, in] (enough for linear_widened too).
inline std::size_t tile_weight_floats(std::int64_t out, std::int64_t in) {
#if GATED_ATTENTION_X86
  return std::max(kernels::amx::linear_tile_floats(out, in), widened_weight_floats(out, in));
#else
  return widened_weight_floats(out, in);
#endif
}

// y = round_bf16(x) W^T + bias for bf16 weights on AMX tiles: x rounded to bf16 (nearest even;
// relative error up to 2^-9 per element), products exact, f32 sums. context: a WidenScratch* of
// tile_weight_floats. Where the tiles do not run (linear_tiles_run), as linear_widened.
inline Status linear_tiles(void* context, const LinearArgs<float, bf16>& args) {
  const std::int64_t out = args.weight.extents[0], in = args.weight.extents[1];
  const auto* scratch = static_cast<const WidenScratch*>(context);
  const std::size_t needed = tile_weight_floats(out, in);
  if (scratch == nullptr || scratch->floats < needed) {
    return Status::error(StatusCode::workspace_too_small,
                         "linear: AMX tiles: expected scratch of >= %zu floats, got %zu", needed,
                         scratch == nullptr ? std::size_t{0} : scratch->floats);
  }
  if (!linear_tiles_run(in)) return linear_widened(context, args);
#if GATED_ATTENTION_X86
  const auto bits = [](const bf16* p) { return reinterpret_cast<const std::uint16_t*>(p); };
  kernels::amx::linear_tiles(args.x.data, args.x.strides[0], args.x.extents[0],
                             bits(args.weight.data), args.weight.strides[0], out, in,
                             bits(args.maybe_bias), args.y.data, args.y.strides[0], scratch->data);
#endif
  return Status::ok();
}

// The backend `hook` runs: "openblas", "eigen", "kernel" (the library's own), "widened" (bf16
// weights widened, then the f32 default), "amx" (bf16 weights, x rounded, on AMX tiles), "engine"
// for an engine's own function, or "none".
template <class T, class W = T>
const char* linear_backend(const LinearHook<T, W>& hook = {}) {
  const auto fn = hook.fn != nullptr ? hook.fn : default_linear_fn<T, W>();
  if (fn == nullptr) return "none";
  if constexpr (std::is_same_v<T, float>) {
    if (fn == &linear_kernel<W>) return "kernel";
  }
  if constexpr (std::is_same_v<T, float> && std::is_same_v<W, bf16>) {
    if (fn == &linear_widened) return "widened";
    if (fn == &linear_tiles) return "amx";
  }
  if constexpr (std::is_same_v<T, W>) {
#if GATED_ATTENTION_OPENBLAS
    if (fn == &linear_openblas<T>) return "openblas";
#endif
    if (fn == &linear_eigen<T>) return "eigen";
  }
  return "engine";
}

// Output features [begin, begin + count): the slice of weight, bias and y they cover.
template <class T, class W>
LinearArgs<T, W> linear_panel(const LinearArgs<T, W>& args, std::int64_t begin,
                              std::int64_t count) {
  LinearArgs<T, W> panel = args;
  panel.weight.data += begin * args.weight.strides[0];
  panel.weight.extents[0] = count;
  if (panel.maybe_bias != nullptr) panel.maybe_bias += begin;
  panel.y.data += begin * args.y.strides[1];
  panel.y.extents[1] = count;
  return panel;
}

// y = x W^T + bias, output features split in panels over the executor's workers.
template <class T, class W>
Status run(const LinearArgs<T, W>& args, const Executor& executor = {},
           const LinearHook<T, W>& hook = {}) {
  GATED_ATTENTION_RETURN_IF_ERROR(can_implement(args));
  if (args.y.strides[1] != 1) {
    return Status::error(StatusCode::invalid_argument,
                         "y: dim 1 (out features): stride %lld, "
                         "expected 1",
                         static_cast<long long>(args.y.strides[1]));
  }
  const auto fn = hook.fn != nullptr ? hook.fn : default_linear_fn<T, W>();
  const std::int64_t out = args.weight.extents[0];
  const std::int64_t width = linear_panel_width(out, executor.num_workers);
  Status first_error;
  std::atomic<bool> failed{false};
  parallel_for(executor, (out + width - 1) / width, [&](std::int64_t p, int) {
    const std::int64_t begin = p * width;
    Status s = fn(hook.context, linear_panel(args, begin, std::min(width, out - begin)));
    if (!s.is_ok() && !failed.exchange(true)) first_error = s;
  });
  return first_error;
}

}  // namespace gated_attention

#if GATED_ATTENTION_OPENBLAS
#include "gated_attention/ops/linear_openblas.hpp"
#endif
