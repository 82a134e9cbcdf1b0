// GatedMultiHeadAttention: the whole attention layer of a gated transformer (Qwen3-Next style),
// from hidden states to hidden states, through a KV cache.
//
//   GatedMultiHeadAttention<float> attention(config, weights);     // views, nothing is copied
//   BlockForwardArgs<float> args{x, positions, cache, y};
//   std::vector<std::byte> ws(attention.workspace_size(args, executor.num_workers));
//   Status s = attention.forward(args, Workspace(ws.data(), ws.size()), executor);
//
// One forward call appends `len` new tokens to each of the b sequences of the cache: a prefill
// (empty cache), a chunk of prefill after a cached prefix, or a decode step (len = 1, any number
// of sequences, each with its own cached length). A mixed batch (continuous batching: some
// sequences decoding one token, others prefilling a chunk) passes its tokens packed, x [1, total,
// hidden] with cu_seqlens. The cache is contiguous per sequence or paged (the engine owns the
// pages and passes the table). With gate_mode none it is the ungated layer.
//
// Context parallel (across processes): each process holds a disjoint part of every sequence's
// keys and runs the same call; see ContextParallel.
//
// Engines that call kernels from each of their nth workers instead call, for every
// phase < num_phases(), run_phase(args, workspace, phase, ith, nth) on every worker, with a
// barrier between phases; the workspace is sized with workspace_size(args, nth).
//
// Allocation: none, except inside the GEMM hook; Eigen's default GEMM allocates packing buffers
// for large products (see ops/linear.hpp). Prefill with bf16 weights widens them (or packs them for
// AMX tiles) in the workspace. The workspace size depends on the shapes and the cache capacity
// only, so one buffer sized for the largest call serves every smaller one.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gated_attention/block/config.hpp"
#include "gated_attention/core/executor.hpp"
#include "gated_attention/core/status.hpp"
#include "gated_attention/core/workspace.hpp"
#include "gated_attention/ops/linear.hpp"
#include "gated_attention/ops/merge_attention.hpp"
#include "gated_attention/ops/rms_norm.hpp"
#include "gated_attention/ops/rope.hpp"
#include "gated_attention/ops/sdpa.hpp"
#include "gated_attention/ops/store_kv.hpp"

namespace gated_attention {

// Context parallelism (docs/distributed.md): every process holds a disjoint part of each
// sequence's keys in its own cache (cache.lengths: the part's length) and makes the same call with
// the same x and positions. Each attends over its own keys (no gate): a part, the ungated output
// and its log-sum-exp; exchange gathers every process's part; the merge adds them up and applies
// the gate; then o_proj. One process per call appends the new tokens (appends_new_tokens); moving
// that role from step to step spreads the cache over the processes. Every process checks
// can_implement() and they agree before the call: one that fails returns before its exchange,
// and its peers would wait in theirs.
template <class T>
struct ContextParallel {
  // Gathers the parts of every process, this one's `local` included (views into the workspace),
  // into views the callee owns, valid until the forward call returns: *parts [*num_parts].
  // Called once per forward call, on one worker, after this process's part is written. The block
  // only reads the parts; an exchange that hands out views of peers' memory (threads of one
  // process) keeps it alive until every peer has merged.
  using ExchangeFn = Status (*)(void* context, const AttentionPart<T>& local,
                                const AttentionPart<T>** parts, std::int64_t* num_parts);
  ExchangeFn exchange = nullptr;  // null: the whole cache is here (not context parallel)
  void* context = nullptr;
  bool appends_new_tokens = true;  // whether this process's cache receives the new tokens

  bool enabled() const { return exchange != nullptr; }
};

template <class T, class KvT = T>
struct BlockForwardArgs {
  TensorView<const T, 3> x;                          // [b, len, hidden] new tokens of b sequences
  TensorView<const std::int64_t, 2> positions;       // [b, len] RoPE position of each token
  KvCacheView<KvT> cache;                            // sequences 0..b-1 receive the new tokens
  TensorView<T, 3> y;                                // [b, len, hidden]; may be x itself
  AttentionStats stats;                              // optional, [b, len, kv_heads, group]
  DotPrecision dot_precision = DotPrecision::exact;  // how the attention reads a 16/8-bit cache
  // bf16 weights: storage rounds x to bf16 in prefill products (AMX tiles where the host has
  // them: ops/linear.hpp, linear_tiles); exact widens the weights instead.
  DotPrecision projection_precision = DotPrecision::exact;
  // Packed tokens: x, positions, y and stats hold every sequence's new tokens one after another
  // ([1, total, ...]); sequence s's are rows [cu_seqlens(s), cu_seqlens(s + 1)).
  TensorView<const std::int32_t, 1> maybe_cu_seqlens = {};  // [b + 1], from 0 to total
  ContextParallel<T> context_parallel = {};                 // optional: this process's keys only

  NewTokens tokens() const { return {{x.extents[0], x.extents[1]}, maybe_cu_seqlens}; }
  // Whether this call's cache receives the new tokens.
  bool appends() const {
    return !context_parallel.enabled() || context_parallel.appends_new_tokens;
  }
};

// T: the activations; KvT: the cache's elements (float, bf16, f16 or std::int8_t); W: the
// projections' weights (T, or bf16 with f32 activations: half the bytes each decode step reads).
template <class T, class KvT = T, class W = T>
class GatedMultiHeadAttention {
 public:
  // Phases of run_phase(), in order.
  enum Phase : int {
    kProject = 0,      // q (with the gate), gate (separate layout), k and v projections
    kPrepare = 1,      // q/k norm and RoPE; k and v appended to the cache
    kAttention = 2,    // SDPA with the fused gate (context parallel: this process's part)
    kMergeSplits = 3,  // merges key splits (no work when the plan has none)
    kExchange = 4,     // context parallel: the parts gathered (ContextParallel::exchange)
    kMergeParts = 5,   // context parallel: the parts merged and gated
    kOutput = 6,       // o_proj
    kCommit = 7,       // the cache lengths advance by len
    kNumPhases = 8,
  };

  GatedMultiHeadAttention(const BlockConfig& config, const BlockWeights<T, W>& weights,
                          const LinearHook<T, W>& gemm = {})
      : config_(config), weights_(weights), gemm_(gemm) {}

  const BlockConfig& config() const { return config_; }
  const BlockWeights<T, W>& weights() const { return weights_; }

  Status can_implement(const BlockForwardArgs<T, KvT>& args) const {
    GATED_ATTENTION_RETURN_IF_ERROR(validate_forward(config_, weights_, args.x, args.positions,
                                                     args.cache, args.y, args.maybe_cu_seqlens,
                                                     args.appends()));
    if (args.context_parallel.enabled() && args.stats.enabled()) {
      return Status::error(StatusCode::not_supported,
                           "stats: expected none under context parallelism (each process sees "
                           "part of the keys; compute them from the merged call instead)");
    }
    GATED_ATTENTION_RETURN_IF_ERROR(check_in_place_or_disjoint("y", args.y, "x", args.x));
    GATED_ATTENTION_RETURN_IF_ERROR(
        check_no_overlap("cache.k", args.cache.k, "cache.v", args.cache.v));
    if (gemm_.fn == nullptr && !(std::is_same_v<T, float> && linear_types_supported<T, W>())) {
      return Status::error(StatusCode::not_supported,
                           "block: bf16/f16 activations or weights other than f32/bf16: expected a "
                           "LinearHook for the projections (the default multiplies f32 "
                           "activations by f32 or bf16 weights)");
    }
    return Status::ok();
  }

  // Bytes of workspace for calls with these shapes (x, y, the batch and the cache's capacity and
  // pool), any cached lengths or split of the packed tokens; 0 for arguments can_implement()
  // rejects (forward() then reports why).
  std::size_t workspace_size(const BlockForwardArgs<T, KvT>& args, int num_workers) const {
    if (!can_implement(args).is_ok()) return 0;
    Workspace counting = Workspace::counting();
    carve(counting, args, num_workers);
    return counting.bytes_needed();
  }
  std::size_t workspace_size(const BlockForwardArgs<T, KvT>& args, const Executor& executor) const {
    return workspace_size(args, executor.num_workers);
  }

  static constexpr int num_phases() { return kNumPhases; }

  Status forward(const BlockForwardArgs<T, KvT>& args, Workspace workspace,
                 const Executor& executor = {}) const {
    GATED_ATTENTION_RETURN_IF_ERROR(can_implement(args));
    Workers workers;
    workers.executor = &executor;
    for (int phase = 0; phase < kNumPhases; ++phase) {
      GATED_ATTENTION_RETURN_IF_ERROR(run_checked_phase(args, workspace, phase, workers));
    }
    return Status::ok();
  }

  // Worker ith of nth runs its share of `phase`. Every worker passes the same arguments and
  // workspace; the engine puts a barrier between phases. kCommit does not validate again.
  Status run_phase(const BlockForwardArgs<T, KvT>& args, Workspace workspace, int phase, int ith,
                   int nth) const {
    if (nth < 1 || ith < 0 || ith >= nth) {
      return Status::error(StatusCode::invalid_argument,
                           "ith/nth: expected 0 <= ith < nth, got %d/%d", ith, nth);
    }
    if (phase < 0 || phase >= kNumPhases) {
      return Status::error(StatusCode::invalid_argument, "phase: expected 0..%d, got %d",
                           kNumPhases - 1, phase);
    }
    // Other workers may be in kCommit, writing the lengths that can_implement reads.
    if (phase != kCommit) GATED_ATTENTION_RETURN_IF_ERROR(can_implement(args));
    Workers workers;
    workers.ith = ith;
    workers.nth = nth;
    return run_checked_phase(args, workspace, phase, workers);
  }

 private:
  // Who runs a phase's tasks: forward()'s executor runs them all, or (run_phase()) worker ith of
  // nth runs its share on the calling thread.
  struct Workers {
    const Executor* executor = nullptr;
    int ith = 0, nth = 1;

    int count() const { return executor != nullptr ? executor->num_workers : nth; }

    // Calls task(i, worker) for the tasks i in [0, n) these workers own.
    template <class Task>
    void for_tasks(std::int64_t n, Task&& task) const {
      if (executor != nullptr) {
        parallel_for(*executor, n, task);
        return;
      }
      const TaskRange r = worker_share(n, ith, nth);
      for (std::int64_t i = r.begin; i < r.end; ++i) task(i, ith);
    }
  };

  // The parts ContextParallel::exchange gathered, kept in the workspace for every worker.
  struct ExchangedParts {
    const AttentionPart<T>* parts;
    std::int64_t num_parts;  // -1: the exchange failed, with `error`
    StatusCode error;
  };

  // Scratch carved from the workspace, in this order, identically on every worker.
  struct Buffers {
    T* q_proj_out = nullptr;             // [rows, q_proj_rows] q (and the gate, unless separate)
    T* gate_proj_out = nullptr;          // [rows, gate_width] separate layout only
    T* k_proj_out = nullptr;             // [rows, kv_width]
    T* v_proj_out = nullptr;             // [rows, kv_width]
    T* attn = nullptr;                   // [rows, q_width] gated attention output
    std::int64_t* kv_lens = nullptr;     // [b] cached + new tokens per sequence
    std::int32_t* page_marks = nullptr;  // paged: [workers, num_pages] (check_cache_writes)
    std::byte* sdpa = nullptr;           // SDPA scratch, sized for the cache's capacity
    std::size_t sdpa_bytes = 0;
    float* widened = nullptr;  // bf16 weights widened: [workers, widened_floats]
    std::size_t widened_floats = 0;
    T* part_out = nullptr;                // context parallel: [rows, q_width] this part's output
    float* part_lse = nullptr;            // context parallel: [rows, q_heads] this part's lse
    ExchangedParts* exchanged = nullptr;  // context parallel: what exchange returned
    bool complete = false;
  };

  // A projection out = in W^T + bias, run in panels of output features, over all rows at once or
  // per sequence when the rows of in or out cannot be addressed with a single row stride.
  struct Projection {
    TensorView<const W, 2> weight;  // [out features, hidden]
    const W* maybe_bias = nullptr;  // [out features]
    TensorView<T, 3> out;           // [b, len, out features]
    std::int64_t panel = 0, panels = 0;
  };

  // [b, len, width] rows of a buffer.
  static TensorView<T, 3> rows_of(const BlockForwardArgs<T, KvT>& args, T* data,
                                  std::int64_t width) {
    return TensorView<T, 3>::contiguous(data, {args.x.extents[0], args.x.extents[1], width});
  }

  // The SDPA arguments over the new queries and the cache; kv_len_extent keys of the cache.
  SdpaArgs<T, KvT, KvT> attention_args(const BlockForwardArgs<T, KvT>& args, const Buffers& buf,
                                       std::int64_t kv_len_extent) const {
    const BlockConfig& c = config_;
    const auto q_rows = rows_of(args, buf.q_proj_out, c.q_proj_rows());
    const std::int64_t batch = args.tokens().batch();
    SdpaArgs<T, KvT, KvT> a;
    a.q = q_view(c, q_rows);
    a.maybe_cu_seqlens_q = args.maybe_cu_seqlens;
    a.k = args.cache.k;
    a.v = args.cache.v;
    if constexpr (std::is_same_v<KvT, std::int8_t>) {
      a.maybe_k_scales = args.cache.maybe_k_scales;
      a.maybe_v_scales = args.cache.maybe_v_scales;
    }
    if (args.cache.paged()) {  // the whole pools, the table's first b rows
      a.maybe_page_table = args.cache.maybe_page_table;
      a.maybe_page_table.extents[0] = batch;
    } else {  // the first b sequences, their first kv_len_extent slots
      a.k.extents[0] = a.v.extents[0] = batch;
      a.k.extents[1] = a.v.extents[1] = kv_len_extent;
      if constexpr (std::is_same_v<KvT, std::int8_t>) {
        a.maybe_k_scales.extents[0] = a.maybe_v_scales.extents[0] = batch;
        a.maybe_k_scales.extents[1] = a.maybe_v_scales.extents[1] = kv_len_extent;
      }
    }
    a.scale = c.scale;
    a.maybe_kv_lens = buf.kv_lens;
    a.stats = args.stats;
    a.dot_precision = args.dot_precision;
    if (!args.context_parallel.enabled()) {
      a.out = attention_out(args, buf);
      a.mask = Mask::causal();
      a.gate = gate_spec(args, buf);
      return a;
    }
    // Context parallel, a part: ungated, with its lse. Keys cached before this call precede every
    // new query; the new ones (where this process appends them) are causal.
    a.out = part_out_view(args, buf);
    a.mask = args.appends() ? Mask::causal() : Mask::none();
    a.maybe_lse = part_lse_view(args, buf);
    return a;
  }

  // The attention's output rows, [b, len, kv_heads, group, head_dim] of buf.attn (context
  // parallel: the merged parts), and this process's part's.
  TensorView<T, 5> attention_out(const BlockForwardArgs<T, KvT>& args, const Buffers& buf) const {
    return heads_of(args, buf.attn);
  }
  TensorView<T, 5> part_out_view(const BlockForwardArgs<T, KvT>& args, const Buffers& buf) const {
    return heads_of(args, buf.part_out);
  }
  TensorView<T, 5> heads_of(const BlockForwardArgs<T, KvT>& args, T* data) const {
    const BlockConfig& c = config_;
    return TensorView<T, 5>::contiguous(
        data, {args.x.extents[0], args.x.extents[1], c.num_kv_heads, c.group_size(), c.head_dim});
  }

  // The output gate over the projected gate rows (none with gate_mode none).
  GateSpec<T> gate_spec(const BlockForwardArgs<T, KvT>& args, const Buffers& buf) const {
    const BlockConfig& c = config_;
    GateSpec<T> gate;
    if (c.gate_mode == GateMode::none) return gate;
    gate.values = gate_view(c, c.has_gate_proj() ? rows_of(args, buf.gate_proj_out, c.gate_width())
                                                 : rows_of(args, buf.q_proj_out, c.q_proj_rows()));
    gate.activation = c.gate_activation;
    return gate;
  }

  // Context parallel: this process's part's lse, [b, len, kv_heads, group].
  TensorView<float, 4> part_lse_view(const BlockForwardArgs<T, KvT>& args,
                                     const Buffers& buf) const {
    return TensorView<float, 4>::contiguous(
        buf.part_lse,
        {args.x.extents[0], args.x.extents[1], config_.num_kv_heads, config_.group_size()});
  }

  // The attention's sizes for a forward call: its workspace depends on nothing else.
  SdpaShape attention_shape(const BlockForwardArgs<T, KvT>& args) const {
    const BlockConfig& c = config_;
    const KvCacheView<KvT>& cache = args.cache;
    return {args.tokens().batch(),
            args.x.extents[1],
            cache.capacity(),
            c.num_kv_heads,
            c.group_size(),
            c.head_dim,
            c.head_dim,
            cache.paged() ? cache.k.extents[1] : 0,
            args.tokens().packed()};
  }

  // Whether products of `rows` rows widen bf16 weights into the workspace first (linear_widened):
  // the default backend, many rows.
  bool widens_weights(std::int64_t rows) const {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<W, bf16>) {
      return gemm_.fn == nullptr && rows >= kWidenedWeightMinRows;
    } else {
      return false;
    }
  }

  // Output features per projection task, over `total_width` features of one phase.
  static std::int64_t panel_width(std::int64_t total_width, int num_workers) {
    return linear_panel_width(total_width, num_workers);
  }

  // Floats of widened weights (or AMX tile operands, under storage) one worker needs: its widest
  // panel of either phase.
  std::size_t widened_floats(int num_workers, DotPrecision precision) const {
    const BlockConfig& c = config_;
    const std::int64_t project_width =
        c.q_proj_rows() + (c.has_gate_proj() ? c.gate_width() : 0) + 2 * c.kv_width();
    const std::int64_t widest = std::max({c.q_proj_rows(), c.kv_width(), c.gate_width()});
    const std::int64_t project_panel = std::min(panel_width(project_width, num_workers), widest);
    const std::int64_t output_panel =
        std::min(panel_width(c.hidden_size, num_workers), c.hidden_size);
    const auto floats =
        precision == DotPrecision::storage ? &tile_weight_floats : &widened_weight_floats;
    return std::max(floats(project_panel, c.hidden_size), floats(output_panel, c.q_width()));
  }

  void carve(Workspace& ws, const BlockForwardArgs<T, KvT>& args, int num_workers,
             Buffers* out = nullptr) const {
    const BlockConfig& c = config_;
    const auto rows = static_cast<std::size_t>(args.x.extents[0] * args.x.extents[1]);
    Buffers b;
    b.q_proj_out = ws.allocate<T>(rows * static_cast<std::size_t>(c.q_proj_rows()));
    if (c.has_gate_proj()) {
      b.gate_proj_out = ws.allocate<T>(rows * static_cast<std::size_t>(c.gate_width()));
    }
    b.k_proj_out = ws.allocate<T>(rows * static_cast<std::size_t>(c.kv_width()));
    b.v_proj_out = ws.allocate<T>(rows * static_cast<std::size_t>(c.kv_width()));
    b.attn = ws.allocate<T>(rows * static_cast<std::size_t>(c.q_width()));
    b.kv_lens = ws.allocate<std::int64_t>(static_cast<std::size_t>(args.tokens().batch()));
    if (args.cache.paged()) {
      b.page_marks = ws.allocate<std::int32_t>(static_cast<std::size_t>(num_workers) *
                                               static_cast<std::size_t>(args.cache.k.extents[0]));
    }
    b.sdpa_bytes = gated_attention::workspace_size(attention_shape(args), num_workers);
    b.sdpa = ws.allocate<std::byte>(b.sdpa_bytes);
    if (widens_weights(static_cast<std::int64_t>(rows))) {
      b.widened_floats = widened_floats(num_workers, args.projection_precision);
      b.widened = ws.allocate<float>(static_cast<std::size_t>(num_workers) * b.widened_floats);
    }
    if (args.context_parallel.enabled()) {
      b.part_out = ws.allocate<T>(rows * static_cast<std::size_t>(c.q_width()));
      b.part_lse = ws.allocate<float>(rows * static_cast<std::size_t>(c.num_q_heads));
      b.exchanged = ws.allocate<ExchangedParts>(1);
    }
    b.complete = !ws.is_counting() && !ws.exhausted();
    if (out != nullptr) *out = b;
  }

  // Rows of x (and y) as one [rows, hidden] matrix when a single row stride addresses them.
  template <class U>
  static bool rows_collapse(const TensorView<U, 3>& t) {
    return t.extents[0] <= 1 || t.strides[0] == t.extents[1] * t.strides[1];
  }

  // Validated arguments: carves the workspace and runs `phase` on these workers.
  Status run_checked_phase(const BlockForwardArgs<T, KvT>& args, Workspace workspace, int phase,
                           const Workers& workers) const {
    Buffers buf;
    carve(workspace, args, workers.count(), &buf);
    if (!buf.complete) {
      return Status::error(StatusCode::workspace_too_small,
                           "workspace: expected >= %zu bytes for %d worker(s), got %zu",
                           workspace_size(args, workers.count()), workers.count(),
                           workspace.capacity());
    }
    if (args.x.extents[0] * args.x.extents[1] == 0) return Status::ok();
    switch (phase) {
      case kProject:  // each worker checks the cache writes before any is made
        if (args.cache.paged() && args.appends()) {
          GATED_ATTENTION_RETURN_IF_ERROR(detail::check_cache_writes(
              args.cache, args.tokens(), buf.page_marks + workers.ith * args.cache.k.extents[0]));
        }
        return project_phase(args, buf, workers);
      case kPrepare:
        prepare_phase(args, buf, workers);
        return Status::ok();
      case kAttention:
      case kMergeSplits:
        return attention_phase(args, buf, phase - kAttention, workers);
      case kExchange:
        return exchange_phase(args, buf, workers);
      case kMergeParts:
        return merge_parts_phase(args, buf, workers);
      case kOutput:
        return output_phase(args, buf, workers);
      default:
        commit_phase(args, workers);
        return Status::ok();
    }
  }

  // kProject: q (with the gate unless separate), the separate gate, k and v, from x.
  Status project_phase(const BlockForwardArgs<T, KvT>& args, const Buffers& buf,
                       const Workers& workers) const {
    const BlockConfig& c = config_;
    Projection projs[4];
    int n = 0;
    auto add = [&](const TensorView<const W, 2>& w, const W* bias, T* out, std::int64_t width) {
      projs[n].weight = w;
      projs[n].maybe_bias = bias;
      projs[n++].out = rows_of(args, out, width);
    };
    add(weights_.q_proj, weights_.maybe_q_bias, buf.q_proj_out, c.q_proj_rows());
    if (c.has_gate_proj()) {
      add(weights_.maybe_gate_proj, weights_.maybe_gate_bias, buf.gate_proj_out, c.gate_width());
    }
    if (args.appends()) {  // k and v only where the cache receives them
      add(weights_.k_proj, weights_.maybe_k_bias, buf.k_proj_out, c.kv_width());
      add(weights_.v_proj, weights_.maybe_v_bias, buf.v_proj_out, c.kv_width());
    }
    return run_projections(args.x, projs, n, buf, args.projection_precision, workers);
  }

  // kOutput: y = attn W_o^T (+ bias).
  Status output_phase(const BlockForwardArgs<T, KvT>& args, const Buffers& buf,
                      const Workers& workers) const {
    Projection o_proj;
    o_proj.weight = weights_.o_proj;
    o_proj.maybe_bias = weights_.maybe_o_bias;
    o_proj.out = args.y;
    return run_projections(rows_of(args, buf.attn, config_.q_width()), &o_proj, 1, buf,
                           args.projection_precision, workers);
  }

  // Runs n projections of one input as one task list: panels of output features, all rows at once
  // (or per sequence when the rows do not collapse).
  Status run_projections(const TensorView<const T, 3>& input, Projection* projs, int n,
                         const Buffers& buf, DotPrecision precision, const Workers& workers) const {
    std::int64_t total_width = 0;
    for (int i = 0; i < n; ++i) total_width += projs[i].weight.extents[0];
    const std::int64_t panel = panel_width(total_width, workers.count());
    std::int64_t panels = 0;
    for (int i = 0; i < n; ++i) {
      projs[i].panel = panel;
      projs[i].panels = (projs[i].weight.extents[0] + panel - 1) / panel;
      panels += projs[i].panels;
    }
    const bool one_group = rows_collapse(input) && rows_collapse(projs[0].out);
    Status first_error;
    std::atomic<bool> failed{false};
    workers.for_tasks((one_group ? 1 : input.extents[0]) * panels, [&](std::int64_t task, int w) {
      std::int64_t p = task % panels;
      int i = 0;
      while (p >= projs[i].panels) p -= projs[i++].panels;
      WidenScratch scratch{buf.widened + static_cast<std::size_t>(w) * buf.widened_floats,
                           buf.widened_floats};
      const Status s = project(input, projs[i], task / panels, one_group, p, &scratch, precision);
      if (!s.is_ok() && !failed.exchange(true)) first_error = s;
    });
    return first_error;
  }

  // Panel `p` of a projection for row group `group` (all rows when one_group): out = in W^T + b;
  // bf16 weights are widened into the worker's scratch where widens_weights(rows), or (storage
  // precision) multiplied on AMX tiles with x rounded to bf16.
  Status project(const TensorView<const T, 3>& in, const Projection& proj, std::int64_t group,
                 bool one_group, std::int64_t p, WidenScratch* scratch,
                 DotPrecision precision) const {
    const TensorView<T, 3>& out = proj.out;
    const std::int64_t len = in.extents[1];
    const std::int64_t rows = one_group ? in.extents[0] * len : len;
    LinearArgs<T, W> whole;
    whole.x = TensorView<const T, 2>(in.data + (one_group ? 0 : group * in.strides[0]),
                                     {rows, in.extents[2]}, {in.strides[1], 1});
    whole.weight = proj.weight;
    whole.maybe_bias = proj.maybe_bias;
    whole.y = TensorView<T, 2>(out.data + (one_group ? 0 : group * out.strides[0]),
                               {rows, out.extents[2]}, {out.strides[1], 1});
    const std::int64_t width = proj.weight.extents[0], begin = p * proj.panel;
    const LinearArgs<T, W> panel = linear_panel(whole, begin, std::min(proj.panel, width - begin));
    if constexpr (std::is_same_v<T, float> && std::is_same_v<W, bf16>) {
      if (scratch->data != nullptr && widens_weights(rows)) {
        return precision == DotPrecision::storage ? linear_tiles(scratch, panel)
                                                  : linear_widened(scratch, panel);
      }
    }
    const auto fn = gemm_.fn != nullptr ? gemm_.fn : default_linear_fn<T, W>();
    return fn(gemm_.context, panel);
  }

  // Tokens per task of the prepare phase.
  static constexpr std::int64_t kPrepareTokens = 8;

  // kPrepare: norm and RoPE of q and k, k and v into the cache, in chunks of kPrepareTokens
  // tokens; one more task writes the key lengths the attention reads.
  void prepare_phase(const BlockForwardArgs<T, KvT>& args, const Buffers& buf,
                     const Workers& workers) const {
    const NewTokens new_tokens = args.tokens();
    const std::int64_t tokens = new_tokens.total();
    const std::int64_t chunks = (tokens + kPrepareTokens - 1) / kPrepareTokens;
    const bool appends = args.appends();
    workers.for_tasks(chunks + 1, [&](std::int64_t task, int) {
      if (task == chunks) {
        for (std::int64_t s = 0; s < new_tokens.batch(); ++s) {
          buf.kv_lens[s] = args.cache.lengths[s] + (appends ? new_tokens.count(s) : 0);
        }
        return;
      }
      RopeAngles angles;
      NormWeights norms;
      widen_norm_weights(norms);
      const std::int64_t end = std::min(tokens, (task + 1) * kPrepareTokens);
      for (std::int64_t token = task * kPrepareTokens; token < end; ++token) {
        prepare_token(args, buf, token, norms, angles);
      }
    });
  }

  // The QK norm weights widened to f32 ([head_dim] each; unused when qk_norm is none).
  struct NormWeights {
    float q[kMaxHeadDim], k[kMaxHeadDim];
  };
  void widen_norm_weights(NormWeights& n) const {
    if (config_.qk_norm == QkNorm::none) return;
    for (std::int64_t i = 0; i < config_.head_dim; ++i) {
      n.q[i] = to_float(weights_.maybe_q_norm[i]);
      n.k[i] = to_float(weights_.maybe_k_norm[i]);
    }
  }

  // One head row widened to f32.
  void widen_row(const T* in, float* row) const {
    for (std::int64_t i = 0; i < config_.head_dim; ++i) row[i] = to_float(in[i]);
  }

  // A q or k head row widened to f32, normed and rotated: the norm and RoPE run in f32 whatever
  // T, and each row is rounded once, to T (q) or the cache (k).
  void prepare_row(const T* in, float* row, const float* norm_weight,
                   const RopeAngles& angles) const {
    const BlockConfig& c = config_;
    widen_row(in, row);
    if (c.qk_norm != QkNorm::none) {
      const auto weighting = c.qk_norm == QkNorm::zero_centered_rms ? RmsNormWeight::zero_centered
                                                                    : RmsNormWeight::standard;
      rms_norm_row(row, row, c.head_dim, norm_weight, c.rms_norm_eps, weighting);
    }
    if (c.rotary_dim > 0) rope_row(row, row, c.head_dim, c.rotary_dim, angles);
  }

  // Norm, RoPE and cache append of token `token`: row `token` of x's [rows, hidden] flattening,
  // token t of sequence s.
  void prepare_token(const BlockForwardArgs<T, KvT>& args, const Buffers& buf, std::int64_t token,
                     const NormWeights& norms, RopeAngles& angles) const {
    const BlockConfig& c = config_;
    const std::int64_t len = args.x.extents[1], d = c.head_dim;
    const std::int64_t xb = token / len, xt = token % len;  // the token's row of x
    if (c.rotary_dim > 0) angles.compute(args.positions(xb, xt), c.rope_theta, c.rotary_dim);
    const auto q = q_view(c, rows_of(args, buf.q_proj_out, c.q_proj_rows()));
    float row[kMaxHeadDim];
    for (std::int64_t h = 0; h < c.num_kv_heads; ++h) {
      for (std::int64_t j = 0; j < c.group_size(); ++j) {
        T* q_row = &q(xb, xt, h, j, 0);
        prepare_row(q_row, row, norms.q, angles);
        for (std::int64_t i = 0; i < d; ++i) q_row[i] = T(row[i]);
      }
    }
    if (!args.appends()) return;
    const auto [s, t] = args.tokens().of_row(token);
    const KeyAt slot = args.cache.slot(s, args.cache.lengths[s] + t);
    for (std::int64_t h = 0; h < c.num_kv_heads; ++h) {
      prepare_row(buf.k_proj_out + token * c.kv_width() + h * d, row, norms.k, angles);
      append_row(row, &args.cache.k(slot.index, slot.row, h, 0), args.cache.maybe_k_scales, slot,
                 h);
      widen_row(buf.v_proj_out + token * c.kv_width() + h * d, row);
      append_row(row, &args.cache.v(slot.index, slot.row, h, 0), args.cache.maybe_v_scales, slot,
                 h);
    }
  }

  // One K or V row (f32) into the cache as ops/store_kv stores it. An int8 row holding NaN or Inf
  // gets a NaN scale, which the attention phase refuses naming the row.
  void append_row(const float* row, KvT* cached, const TensorView<float, 3>& maybe_scales,
                  KeyAt slot, std::int64_t h) const {
    const float scale = detail::store_kv_elements(row, config_.head_dim, cached);
    if (maybe_scales.data != nullptr) maybe_scales(slot.index, slot.row, h) = scale;
  }

  // kAttention and kMergeSplits: SDPA phase 0 and 1 over the longest sequence's keys (the kernels
  // follow each sequence's own length). forward() runs the whole op at phase 0.
  Status attention_phase(const BlockForwardArgs<T, KvT>& args, const Buffers& buf, int sdpa_phase,
                         const Workers& workers) const {
    std::int64_t kv_len = 0;  // buf.kv_lens: written by kPrepare
    for (std::int64_t s = 0; s < args.tokens().batch(); ++s) {
      kv_len = std::max(kv_len, buf.kv_lens[s]);
    }
    const SdpaArgs<T, KvT, KvT> sdpa_args = attention_args(args, buf, kv_len);
    const Workspace sdpa_ws(buf.sdpa, buf.sdpa_bytes);
    if (workers.executor != nullptr) {
      return sdpa_phase == 0 ? gated_attention::run(sdpa_args, sdpa_ws, *workers.executor)
                             : Status::ok();
    }
    if (sdpa_phase >= gated_attention::num_phases(sdpa_args, workers.nth)) return Status::ok();
    return gated_attention::run_phase(sdpa_args, sdpa_ws, sdpa_phase, workers.ith, workers.nth);
  }

  // kExchange (context parallel): one worker hands this process's part to the exchange and keeps
  // what it returns for kMergeParts; that worker returns the exchange's error, the others report
  // it in kMergeParts.
  Status exchange_phase(const BlockForwardArgs<T, KvT>& args, const Buffers& buf,
                        const Workers& workers) const {
    if (!args.context_parallel.enabled()) return Status::ok();
    Status status;
    workers.for_tasks(1, [&](std::int64_t, int) {
      const ContextParallel<T>& cp = args.context_parallel;
      const AttentionPart<T> local{part_out_view(args, buf), part_lse_view(args, buf)};
      const AttentionPart<T>* parts = nullptr;
      std::int64_t num_parts = 0;
      status = cp.exchange(cp.context, local, &parts, &num_parts);
      *buf.exchanged = status.is_ok() ? ExchangedParts{parts, num_parts, StatusCode::ok}
                                      : ExchangedParts{nullptr, -1, status.code()};
    });
    return status;
  }

  // kMergeParts (context parallel): the gathered parts merged and gated into the attention output.
  Status merge_parts_phase(const BlockForwardArgs<T, KvT>& args, const Buffers& buf,
                           const Workers& workers) const {
    if (!args.context_parallel.enabled()) return Status::ok();
    const ExchangedParts exchanged = *buf.exchanged;
    if (exchanged.num_parts < 0) {
      return Status::error(exchanged.error,
                           "context_parallel.exchange: failed (the worker that called it "
                           "returned its error)");
    }
    MergeAttentionArgs<T> merge;
    merge.parts = exchanged.parts;
    merge.num_parts = exchanged.num_parts;
    merge.out = attention_out(args, buf);
    merge.gate = gate_spec(args, buf);
    if (workers.executor != nullptr) {
      return gated_attention::run(merge, Workspace(nullptr, 0), *workers.executor);
    }
    return gated_attention::run_phase(merge, Workspace(nullptr, 0), 0, workers.ith, workers.nth);
  }

  // kCommit: each sequence's cache length advances by its new tokens.
  void commit_phase(const BlockForwardArgs<T, KvT>& args, const Workers& workers) const {
    if (!args.appends()) return;
    workers.for_tasks(1, [&](std::int64_t, int) {
      const NewTokens tokens = args.tokens();
      for (std::int64_t s = 0; s < tokens.batch(); ++s) args.cache.lengths[s] += tokens.count(s);
    });
  }

  BlockConfig config_;
  BlockWeights<T, W> weights_;
  LinearHook<T, W> gemm_;
};

}  // namespace gated_attention
