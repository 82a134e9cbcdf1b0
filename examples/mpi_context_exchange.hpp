// ContextParallel::exchange over MPI (examples/distributed_attention.cpp and the MPI tests): this
// rank's part, its output then its log-sum-exp, sent to every rank in one MPI_Allgather on
// MPI_COMM_WORLD; the parts handed to the block are views of what arrived. The all-gather is timed
// after a barrier, so that the time is the exchange's and not the wait for the slowest rank.
//
//   MpiContextExchange exchange;
//   args.context_parallel = {&MpiContextExchange::exchange, &exchange, appends_this_step};
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API only: Open MPI's C++ bindings do not compile warning-free
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <gated_attention/gated_attention.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

struct MpiContextExchange {
  std::vector<float> sent, gathered;
  std::vector<gated_attention::AttentionPart<float>> parts;
  double seconds = 0.0;   // in MPI_Allgather, summed over calls
  std::size_t bytes = 0;  // sent by this rank in the last call

  static gated_attention::Status exchange(void* context,
                                          const gated_attention::AttentionPart<float>& local,
                                          const gated_attention::AttentionPart<float>** parts,
                                          std::int64_t* num_parts) {
    namespace ga = gated_attention;
    MpiContextExchange& x = *static_cast<MpiContextExchange*>(context);
    const auto& e = local.out.extents;  // [b, len, kv_heads, group, d]
    const std::int64_t rows = e[0] * e[1] * e[2] * e[3], part = rows * (e[4] + 1);
    x.pack(local);
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    x.gathered.resize(static_cast<std::size_t>(part * n));
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    MPI_Allgather(x.sent.data(), static_cast<int>(part), MPI_FLOAT, x.gathered.data(),
                  static_cast<int>(part), MPI_FLOAT, MPI_COMM_WORLD);
    x.seconds += MPI_Wtime() - t0;
    x.bytes = x.sent.size() * sizeof(float);
    x.parts.clear();
    for (int p = 0; p < n; ++p) {
      const float* from = x.gathered.data() + p * part;
      x.parts.push_back({ga::TensorView<const float, 5>::contiguous(from, e),
                         ga::TensorView<const float, 4>::contiguous(from + rows * e[4],
                                                                    {e[0], e[1], e[2], e[3]})});
    }
    *parts = x.parts.data();
    *num_parts = n;
    return ga::Status::ok();
  }

  // The part's rows, contiguous: every output row, then every lse.
  void pack(const gated_attention::AttentionPart<float>& local) {
    const auto& e = local.out.extents;
    const std::int64_t rows = e[0] * e[1] * e[2] * e[3];
    sent.resize(static_cast<std::size_t>(rows * (e[4] + 1)));
    float* out = sent.data();
    float* lse = out + rows * e[4];
    for (std::int64_t b = 0; b < e[0]; ++b) {
      for (std::int64_t t = 0; t < e[1]; ++t) {
        for (std::int64_t h = 0; h < e[2]; ++h) {
          for (std::int64_t j = 0; j < e[3]; ++j) {
            *lse++ = local.lse(b, t, h, j);
            for (std::int64_t k = 0; k < e[4]; ++k) *out++ = local.out(b, t, h, j, k);
          }
        }
      }
    }
  }
};
