// Both splits across MPI ranks (run by ctest under mpirun -np 2 and -np 3):
//   tensor parallel: each rank runs the block on its shard of KV heads (shard_heads), the ranks'
//     outputs are summed by MPI_Allreduce and must equal the whole block, prefill and decode steps,
//     in every q/gate layout;
//   context parallel, SDPA: each rank holds a slice of every sequence's keys (uneven, one of them
//     empty on rank 0), runs SDPA over it with lse and no sinks or gate, the ranks' outputs and
//     lses are gathered (MPI_Allgather) and merged (merge_attention) with the sinks (learned,
//     softmax+1, none) and the gate (elementwise, headwise, none), and must equal the unsplit call;
//   context parallel, block: each rank's cache holds the tokens of the steps it appended (the
//     appending rank moves from step to step: some ranks start empty), packed sequences of
//     different lengths, prefill, chunks and decode, in every gate mode; ContextParallel's
//     exchange is one MPI_Allgather per step; every rank's y must equal the unsplit block's;
//   bad input: a rank whose shard is invalid, or whose part of the cache cannot take the tokens it
//     must append, makes every rank return the error before any collective (no rank left
//     waiting).
// Every rank computes the unsplit result itself. Exit status 0 when every rank agrees.
#include "mpi_context_exchange.hpp"  // the example's exchange; includes <mpi.h>, C API only

#include <gated_attention/gated_attention.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "../block_model.hpp"

namespace ga = gated_attention;
using namespace ga::testing;

namespace {

constexpr double kAtol = 1e-4, kRtol = 1e-3;  // the block tests' bound (test_block.cpp)

int rank_of() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int size_of() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Whether every rank's status is ok; every rank calls it, so all return the same answer.
bool all_ok(const ga::Status& s) {
  int ok = s.is_ok() ? 1 : 0, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!s.is_ok()) std::fprintf(stderr, "rank %d: %s\n", rank_of(), s.message());
  return all == 1;
}

// [begin, end) of the r-th of n near-equal parts of count.
std::pair<std::int64_t, std::int64_t> part_of(std::int64_t count, int r, int n) {
  return {count * r / n, count * (r + 1) / n};
}

std::vector<float> block_step(const ga::GatedMultiHeadAttention<float>& block,
                              const std::vector<float>& x, std::int64_t len, std::int64_t start,
                              const ga::KvCacheView<float>& cache, ga::Status* status) {
  const std::int64_t hid = block.config().hidden_size;
  const Positions pos = positions_from(1, len, start);
  std::vector<float> y(static_cast<std::size_t>(len * hid), 0.0f);
  ga::BlockForwardArgs<float> args;
  args.x = ga::TensorView<const float, 3>::contiguous(x.data() + start * hid, {1, len, hid});
  args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {1, len});
  args.cache = cache;
  args.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, len, hid});
  std::vector<std::byte> ws(block.workspace_size(args, 1));
  *status = block.forward(args, ga::Workspace(ws.data(), ws.size()));
  return y;
}

// Tensor parallel over 3 KV heads in `layout`: returns the number of failed checks.
int tensor_parallel(ga::QGateLayout layout) {
  ga::BlockConfig c = small_config(ga::GateMode::elementwise, layout);
  c.num_q_heads = 6;
  c.num_kv_heads = 3;
  Rng rng = make_rng(3520);  // the same weights and inputs on every rank
  const Model<float> m = make_model<float>(c, rng);
  const std::int64_t prefill = 7, total = 10, hid = c.hidden_size;
  const std::vector<float> x = random_vector<float>(rng, total * hid, -1.0, 1.0);
  const auto [begin, end] = part_of(c.num_kv_heads, rank_of(), size_of());
  ga::BlockConfig sc;
  ga::BlockWeights<float> sw;
  ga::Status s = ga::shard_heads(c, m.weights(), {begin, end - begin}, &sc, &sw);
  if (!all_ok(s)) return 1;
  const ga::GatedMultiHeadAttention<float> whole(c, m.weights()), shard(sc, sw);
  Cache<float> whole_cache(c, 1, total), shard_cache(sc, 1, total);
  int failures = 0;
  for (std::int64_t start = 0; start < total; start = start == 0 ? prefill : start + 1) {
    const std::int64_t len = start == 0 ? prefill : 1;
    ga::Status ws, ss;
    const std::vector<float> expected = block_step(whole, x, len, start, whole_cache.view(), &ws);
    std::vector<float> y = block_step(shard, x, len, start, shard_cache.view(), &ss);
    if (!all_ok(ws.is_ok() ? ss : ws)) return failures + 1;
    MPI_Allreduce(MPI_IN_PLACE, y.data(), static_cast<int>(y.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    const double worst = max_tolerance_ratio(y, expected, kAtol, kRtol);
    if (!(worst <= 1.0)) {
      std::fprintf(stderr, "rank %d: tensor parallel, layout %s, step at %lld: ratio %g\n",
                   rank_of(), name_of(layout), static_cast<long long>(start), worst);
      ++failures;
    }
  }
  return failures;
}

enum class Sinks { none, learned, plus_one };

// Context parallel decode of 2 sequences (37 and 20 keys) of one query each, with `sinks` and the
// gate of `gate_mode` at the merge: returns the number of failed checks.
int context_parallel(Sinks sink_mode, ga::GateMode gate_mode) {
  const std::int64_t b = 2, kv = 2, g = 2, d = 32, max_len = 37;
  const std::vector<std::int64_t> lens = {37, 20};
  Rng rng = make_rng(3521);
  const std::vector<float> q = random_vector<float>(rng, b * kv * g * d, -1.0, 1.0);
  const std::vector<float> k = random_vector<float>(rng, b * max_len * kv * d, -1.0, 1.0);
  const std::vector<float> v = random_vector<float>(rng, b * max_len * kv * d, -2.0, 2.0);
  const std::vector<float> gate = random_vector<float>(rng, b * kv * g * d, -3.0, 3.0);
  const std::vector<float> sinks = random_vector<float>(rng, kv * g, -1.0, 2.0);
  const std::array<std::int64_t, 5> out_e = {b, 1, kv, g, d};
  const std::array<std::int64_t, 4> rows_e = {b, 1, kv, g}, kv_e = {b, max_len, kv, d};
  ga::GateSpec<float> gate_spec;  // headwise: one value per head, broadcast over d
  if (gate_mode != ga::GateMode::none) {
    gate_spec.values = ga::TensorView<const float, 5>::contiguous(gate.data(), out_e);
    if (gate_mode == ga::GateMode::headwise) gate_spec.values.strides[4] = 0;
  }
  const auto finish_with_sinks = [&](auto& a) {
    a.maybe_sink_logits = sink_mode == Sinks::learned ? sinks.data() : nullptr;
    a.softmax_plus_one = sink_mode == Sinks::plus_one;
    a.gate = gate_spec;
  };
  const auto sdpa = [&](const std::vector<float>& keys, const std::vector<float>& values,
                        const std::int64_t* kv_lens, bool finish, float* out, float* lse) {
    ga::SdpaArgs<float> a;
    a.q = ga::TensorView<const float, 5>::contiguous(q.data(), out_e);
    a.k = ga::TensorView<const float, 4>::contiguous(keys.data(), kv_e);
    a.v = ga::TensorView<const float, 4>::contiguous(values.data(), kv_e);
    a.maybe_kv_lens = kv_lens;
    a.out = ga::TensorView<float, 5>::contiguous(out, out_e);
    a.maybe_lse = ga::TensorView<float, 4>::contiguous(lse, rows_e);
    if (finish) finish_with_sinks(a);
    std::vector<std::byte> ws(ga::workspace_size(a, 1));
    return ga::run(a, ga::Workspace(ws.data(), ws.size()));
  };
  const std::size_t out_n = static_cast<std::size_t>(b * kv * g * d);
  const std::size_t rows_n = static_cast<std::size_t>(b * kv * g);
  std::vector<float> expected(out_n), expected_lse(rows_n);
  if (!all_ok(sdpa(k, v, lens.data(), true, expected.data(), expected_lse.data()))) return 1;

  // This rank's keys: sequence 0 in near-equal parts; sequence 1 none on rank 0 (an empty
  // slice), the rest split over the other ranks.
  const int r = rank_of(), n = size_of();
  const std::pair<std::int64_t, std::int64_t> slices[2] = {
      part_of(lens[0], r, n),
      r == 0 ? std::pair<std::int64_t, std::int64_t>{0, 0} : part_of(lens[1], r - 1, n - 1)};
  std::vector<float> local_k(k.size(), 0.0f), local_v(v.size(), 0.0f);
  std::vector<std::int64_t> local_lens(2);
  const std::size_t row = static_cast<std::size_t>(kv * d);
  for (std::int64_t s = 0; s < b; ++s) {
    const auto [lo, hi] = slices[s];
    local_lens[s] = hi - lo;
    const std::size_t from = static_cast<std::size_t>(s * max_len + lo) * row;
    const std::size_t to = static_cast<std::size_t>(s * max_len) * row;
    std::copy_n(k.begin() + from, (hi - lo) * row, local_k.begin() + to);
    std::copy_n(v.begin() + from, (hi - lo) * row, local_v.begin() + to);
  }
  std::vector<float> out(out_n), lse(rows_n);
  if (!all_ok(sdpa(local_k, local_v, local_lens.data(), false, out.data(), lse.data()))) return 1;

  // Exchange every rank's part, then merge.
  std::vector<float> outs(out_n * n), lses(rows_n * n);
  MPI_Allgather(out.data(), int(out_n), MPI_FLOAT, outs.data(), int(out_n), MPI_FLOAT,
                MPI_COMM_WORLD);
  MPI_Allgather(lse.data(), int(rows_n), MPI_FLOAT, lses.data(), int(rows_n), MPI_FLOAT,
                MPI_COMM_WORLD);
  std::vector<ga::AttentionPart<float>> parts;
  for (int p = 0; p < n; ++p) {
    parts.push_back({ga::TensorView<const float, 5>::contiguous(outs.data() + p * out_n, out_e),
                     ga::TensorView<const float, 4>::contiguous(lses.data() + p * rows_n, rows_e)});
  }
  ga::MergeAttentionArgs<float> m;
  m.parts = parts.data();
  m.num_parts = n;
  m.out = ga::TensorView<float, 5>::contiguous(out.data(), out_e);
  m.maybe_lse = ga::TensorView<float, 4>::contiguous(lse.data(), rows_e);
  finish_with_sinks(m);
  if (!all_ok(ga::run(m, ga::Workspace(nullptr, 0)))) return 1;
  int failures = 0;
  if (!(max_tolerance_ratio(out, expected, kSdpaAtol, kSdpaRtol) <= 1.0)) ++failures;
  for (std::size_t i = 0; i < rows_n; ++i) {
    if (!(std::fabs(lse[i] - expected_lse[i]) <= kSdpaLseAtol)) ++failures;
  }
  if (failures) {
    std::fprintf(stderr, "rank %d: context parallel SDPA disagrees (sinks %d, gate %s)\n", r,
                 static_cast<int>(sink_mode), name_of(gate_mode));
  }
  return failures;
}

// One packed step of 2 sequences through `block`: y, or an error in *status.
std::vector<float> packed_step(const ga::GatedMultiHeadAttention<float>& block,
                               const std::vector<float>& x, const std::vector<std::int32_t>& cu,
                               const Positions& pos, const ga::KvCacheView<float>& cache,
                               const ga::ContextParallel<float>& context, ga::Status* status) {
  const std::int64_t hid = block.config().hidden_size, total = cu.back();
  std::vector<float> y(static_cast<std::size_t>(total * hid), 0.0f);
  ga::BlockForwardArgs<float> args;
  args.x = ga::TensorView<const float, 3>::contiguous(x.data(), {1, total, hid});
  args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {1, total});
  args.cache = cache;
  args.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, total, hid});
  args.maybe_cu_seqlens = ga::TensorView<const std::int32_t, 1>::contiguous(cu.data(), {3});
  args.context_parallel = context;
  std::vector<std::byte> ws(block.workspace_size(args, 1));
  *status = block.forward(args, ga::Workspace(ws.data(), ws.size()));
  return y;
}

// Context parallel through the block, gate `mode`: returns the number of failed checks.
int context_parallel_block(ga::GateMode mode) {
  const ga::BlockConfig c = small_config(mode, ga::QGateLayout::qwen3_next);
  Rng rng = make_rng(3523);  // the same weights and inputs on every rank
  const Model<float> m = make_model<float>(c, rng);
  const ga::GatedMultiHeadAttention<float> block(c, m.weights());
  const std::vector<std::array<std::int32_t, 2>> steps = {{6, 3}, {4, 5}, {1, 1}, {1, 1}, {0, 1}};
  Cache<float> whole(c, 2, 16), part(c, 2, 16);
  MpiContextExchange exchange;
  int failures = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    std::vector<std::int32_t> cu = {0, steps[i][0], steps[i][0] + steps[i][1]};
    Positions pos;
    for (int s = 0; s < 2; ++s) {
      for (std::int32_t t = 0; t < steps[i][s]; ++t) pos.push_back(whole.lengths[s] + t);
    }
    const std::vector<float> x = random_vector<float>(rng, cu.back() * c.hidden_size, -1.0, 1.0);
    ga::Status ws, ps;
    const std::vector<float> expected = packed_step(block, x, cu, pos, whole.view(), {}, &ws);
    const bool appends = static_cast<int>(i) % size_of() == rank_of();
    const std::vector<float> y = packed_step(
        block, x, cu, pos, part.view(), {&MpiContextExchange::exchange, &exchange, appends}, &ps);
    if (!all_ok(ws.is_ok() ? ps : ws)) return failures + 1;
    const double worst = max_tolerance_ratio(y, expected, kAtol, kRtol);
    if (!(worst <= 1.0)) {
      std::fprintf(stderr, "rank %d: context parallel block, gate %s, step %zu: ratio %g\n",
                   rank_of(), name_of(mode), i, worst);
      ++failures;
    }
  }
  return failures;
}

// Rank 0 asks for a shard past the heads: every rank must see the error, none may wait in a
// collective the others skip.
int refused_everywhere() {
  const ga::BlockConfig c = small_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  Rng rng = make_rng(3522);
  const Model<float> m = make_model<float>(c, rng);
  const ga::HeadShard shard = rank_of() == 0 ? ga::HeadShard{1, 5} : ga::HeadShard{0, 1};
  ga::BlockConfig sc;
  ga::BlockWeights<float> sw;
  const ga::Status s = ga::shard_heads(c, m.weights(), shard, &sc, &sw);
  if (rank_of() == 0 && s.is_ok()) return 1;
  return all_ok(s) ? 1 : 0;  // must be refused on every rank
}

// Context parallel, rank 0's part has no room for the tokens it must append: every rank checks
// can_implement and agrees before the call, so all skip it and none waits in the exchange.
int context_refused_everywhere() {
  const ga::BlockConfig c = small_config(ga::GateMode::elementwise, ga::QGateLayout::qwen3_next);
  Rng rng = make_rng(3524);
  const Model<float> m = make_model<float>(c, rng);
  const ga::GatedMultiHeadAttention<float> block(c, m.weights());
  Cache<float> part(c, 1, 4);
  part.lengths = {rank_of() == 0 ? 4 : 1};
  const std::vector<float> x = random_vector<float>(rng, c.hidden_size, -1.0, 1.0);
  const Positions pos = positions_from(1, 1, 8);
  std::vector<float> y(static_cast<std::size_t>(c.hidden_size));
  MpiContextExchange exchange;
  ga::BlockForwardArgs<float> args;
  args.x = ga::TensorView<const float, 3>::contiguous(x.data(), {1, 1, c.hidden_size});
  args.positions = ga::TensorView<const std::int64_t, 2>::contiguous(pos.data(), {1, 1});
  args.cache = part.view();
  args.y = ga::TensorView<float, 3>::contiguous(y.data(), {1, 1, c.hidden_size});
  args.context_parallel = {&MpiContextExchange::exchange, &exchange, rank_of() == 0};
  const ga::Status s = block.can_implement(args);
  if (rank_of() == 0 && s.is_ok()) return 1;
  if (all_ok(s)) return 1;  // must be refused on every rank, before any exchange
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int failures = 0;
  for (ga::QGateLayout layout : kLayouts) failures += tensor_parallel(layout);
  for (Sinks sinks : {Sinks::none, Sinks::learned, Sinks::plus_one}) {
    for (ga::GateMode gate :
         {ga::GateMode::none, ga::GateMode::headwise, ga::GateMode::elementwise}) {
      failures += context_parallel(sinks, gate);
    }
  }
  for (ga::GateMode gate :
       {ga::GateMode::none, ga::GateMode::headwise, ga::GateMode::elementwise}) {
    failures += context_parallel_block(gate);
  }
  failures += refused_everywhere();
  failures += context_refused_everywhere();
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_of() == 0) {
    std::printf(
        "%d ranks: tensor parallel (3 layouts), context parallel (SDPA: 3 sinks x 3 gates; "
        "block: 3 gates), bad input: %s\n",
        size_of(), total == 0 ? "agree" : "DISAGREE");
  }
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
