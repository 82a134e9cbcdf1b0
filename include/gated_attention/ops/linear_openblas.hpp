// Linear layer y = x W^T + bias through OpenBLAS (Debian: libopenblas-dev), whose kernels are
// chosen at run time for the CPU: the projections run at full speed whatever the includer's -march.
//
//   LinearHook<float> hook = openblas_linear_hook<float>();  // or the default where CMake found it
//
// f32 decode steps and small batches (up to 16 rows) run the library's own kernel instead, which
// reads W once for a few rows at a time (ops/linear.hpp, linear_kernel): a row's result can thus
// differ in its last bits with the batch's row count.
//
// Threads: the block calls the hook once per panel of output features from its own workers, so
// OpenBLAS must run each call on the calling thread. The first call sets OpenBLAS's thread count to
// 1 for the whole process (openblas_set_num_threads(1)), which the program must then leave at 1;
// set OPENBLAS_NUM_THREADS=1 as well to keep it from starting an idle pool at load. Only the
// pthread build of OpenBLAS (Debian's default) is used: where another build is loaded (serial: not
// safe for concurrent callers; OpenMP: one team per caller), f32 products run the library's kernel
// and double ones Eigen.
//
// Allocation: none through malloc; OpenBLAS maps its packing buffers (mmap) on the first products
// of each thread and keeps them until exit (docs/projection-backends.md).
//
// Needs <cblas.h> from OpenBLAS and linking -lopenblas; the CMake target does both where it finds
// OpenBLAS (option GATED_ATTENTION_OPENBLAS) and defines GATED_ATTENTION_OPENBLAS=1, which makes
// this the block's default projection backend (ops/linear.hpp).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

// OpenBLAS's header declares C99 complex types, which clang's -Wpedantic reports in C++.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wc99-extensions"
#endif
#include <cblas.h>
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

#include "gated_attention/core/status.hpp"
#include "gated_attention/ops/linear.hpp"
#include "gated_attention/ops/linear_args.hpp"

namespace gated_attention {
namespace detail {

// Up to this many rows (decode steps, small batches), f32 products go through the library's kernel
// (linear_kernel: one pass over W for a few rows at a time) rather than OpenBLAS's GEMM, which
// packs W first; performance-notes "Projections through OpenBLAS: the kernel up to 16 rows".
constexpr std::int64_t kOpenblasKernelRows = 16;

// Whether BLAS can take the view as a row-major matrix with 32-bit sizes: rows at least a row
// apart, columns dense.
template <class T>
bool blas_row_major(const TensorView<T, 2>& view) {
  const std::int64_t rows = view.extents[0], cols = view.extents[1];
  return rows <= INT_MAX && cols <= INT_MAX && view.strides[0] <= INT_MAX &&
         view.strides[0] >= std::max<std::int64_t>(1, cols) && (cols <= 1 || view.strides[1] == 1);
}

// Whether the loaded OpenBLAS is its pthread build (openblas_get_parallel() == 1), the one whose
// concurrent callers are safe; once true, OpenBLAS runs each call on the calling thread
// (openblas_set_num_threads(1), process-wide). The serial and OpenMP builds are not used.
inline bool openblas_on_calling_thread() {
  static const bool usable = [] {
    if (openblas_get_parallel() != 1) return false;
    openblas_set_num_threads(1);
    return true;
  }();
  return usable;
}

// y[rows, out] = bias, or zero without one: the products then accumulate onto it (beta = 1).
template <class T>
void fill_with_bias(const LinearArgs<T>& args) {
  for (std::int64_t r = 0; r < args.y.extents[0]; ++r) {
    T* row = args.y.data + r * args.y.strides[0];
    if (args.maybe_bias != nullptr) {
      std::copy(args.maybe_bias, args.maybe_bias + args.y.extents[1], row);
    } else {
      std::fill(row, row + args.y.extents[1], T(0));
    }
  }
}

template <class T>
void openblas_product(const LinearArgs<T>& args) {
  const int rows = static_cast<int>(args.x.extents[0]);
  const int in = static_cast<int>(args.x.extents[1]);
  const int out = static_cast<int>(args.weight.extents[0]);
  const int ldx = static_cast<int>(args.x.strides[0]),
            ldw = static_cast<int>(args.weight.strides[0]);
  const int ldy = static_cast<int>(args.y.strides[0]);
  const T beta = args.maybe_bias != nullptr ? T(1) : T(0);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, args.x.data, ldx,
                args.weight.data, ldw, beta, args.y.data, ldy);
  } else {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0, args.x.data, ldx,
                args.weight.data, ldw, beta, args.y.data, ldy);
  }
}

}  // namespace detail

// y = x W^T + bias on the calling thread through OpenBLAS's GEMM. f32 products of up to
// kOpenblasKernelRows rows go through the library's kernel, as do f32 views BLAS cannot take
// (sizes past 32 bits, rows closer than a row apart) and every f32 product when the loaded
// OpenBLAS is not its pthread build; double ones then go through Eigen. Shapes are not validated.
template <class T>
Status linear_openblas(void* context, const LinearArgs<T>& args) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (args.y.extents[0] == 0 || args.y.extents[1] == 0) return Status::ok();
    const bool blas = detail::openblas_on_calling_thread() && detail::blas_row_major(args.x) &&
                      detail::blas_row_major(args.weight) && detail::blas_row_major(args.y);
    if constexpr (std::is_same_v<T, float>) {
      if (!blas || args.x.extents[0] <= detail::kOpenblasKernelRows) {
        return linear_kernel<T>(context, args);
      }
    }
    if (!blas) return linear_eigen<T>(context, args);
    if (args.maybe_bias != nullptr || args.x.extents[1] == 0) detail::fill_with_bias(args);
    if (args.x.extents[1] > 0) detail::openblas_product(args);
    return Status::ok();
  } else {
    return Status::error(StatusCode::not_supported, "linear: element type: expected float/double");
  }
}

template <class T>
LinearHook<T> openblas_linear_hook() {
  return {&linear_openblas<T>, nullptr};
}

}  // namespace gated_attention
