// The epilogue of one output row, while it is in cache: normalise (with the sink added), write
// the log-sum-exp, apply the output gate, accumulate the row's statistics, and store.
#ifndef GATED_ATTENTION_IN_KERNEL_REGION
#error "internal header: include <gated_attention/gated_attention.hpp>"
#endif

template <class T, class KT, class VT, int kDv>
struct Epilogue {
  using S = Simd;
  using V = S::V;
  static constexpr int L = S::kLanes;

  // A row's softmax total with the head's sink logit (learned, or 0 for softmax+1) added: the
  // factor that normalises the row (0 for a row that saw no key) and its log-sum-exp.
  struct Normalisation {
    float inv, max, sum;  // max and sum in log2 units
    float lse() const {   // natural log
      return sum > 0.0f ? (max + std::log2(sum)) * kLn2 : -std::numeric_limits<float>::infinity();
    }
  };
  static Normalisation normalise(const SdpaArgs<T, KT, VT>& a, std::int64_t head, float max,
                                 float sum) {
    return normalise(a.maybe_sink_logits, a.softmax_plus_one, head, max, sum);
  }
  // sink_logits: [heads] or null; plus_one: a zero sink logit for every head.
  static Normalisation normalise(const float* sink_logits, bool plus_one, std::int64_t head,
                                 float max, float sum) {
    float scale = 1.0f;
    if (sink_logits != nullptr || plus_one) {
      const float sink = (sink_logits ? sink_logits[head] : 0.0f) * kLog2e;
      if (sink != -std::numeric_limits<float>::infinity()) {
        const float new_max = std::max(max, sink);
        scale = std::exp2(max - new_max);
        sum = sum * scale + std::exp2(sink - new_max);
        max = new_max;
      }
    }
    return {sum > 0.0f ? scale / sum : 0.0f, max, sum};
  }

  // The activated gate of one row, a vector at a time; a headwise gate (stride 0 over d) is one
  // value per row, activated once.
  struct RowGate {
    const T* values;
    GateActivation activation;
    bool broadcast;
    V broadcast_activated;

    // row: the row's gate values; null without a gate.
    RowGate(const GateSpec<T>& gate, const T* row)
        : values(row),
          activation(gate.activation),
          broadcast(row != nullptr && gate.values.strides[4] == 0),
          broadcast_activated(broadcast ? activation_lanes(S::set1(to_float(*row)), activation)
                                        : S::zero()) {}
    // Lanes [c, c + n) activated.
    GATED_ATTENTION_ALWAYS_INLINE V activated(std::int64_t c, int n) const {
      if (broadcast) return broadcast_activated;
      return activation_lanes(load_row_part(values + c, n), activation);
    }
  };

  // A row's statistics: max |out| before and after the gate, the activated gate's sum and its
  // count below 0.1.
  struct RowStatistics {
    V max_before_v, max_after_v, gate_sum_v, gate_small_v;  // whole vectors
    float max_before = 0.0f, max_after = 0.0f, gate_sum = 0.0f, gate_small = 0.0f;

    // User-provided, so that it is compiled in the ISA's target region.
    RowStatistics()
        : max_before_v(S::zero()),
          max_after_v(S::zero()),
          gate_sum_v(S::zero()),
          gate_small_v(S::zero()) {}

    // x: normalised output, y: gated output, act: activated gate, of n lanes.
    GATED_ATTENTION_ALWAYS_INLINE void add(V x, V y, V act, int n) {
      const V zero = S::zero(), one = S::set1(1.0f);
      if (n == L) {
        max_before_v = S::max(max_before_v, S::max(x, S::sub(zero, x)));
        max_after_v = S::max(max_after_v, S::max(y, S::sub(zero, y)));
        gate_sum_v = S::add(gate_sum_v, act);
        gate_small_v = S::add(gate_small_v, S::select_less(act, S::set1(0.1f), one, zero));
        return;
      }
      float xs[L], ys[L], as[L];  // the partial last vector, lane by lane
      S::store(xs, x);
      S::store(ys, y);
      S::store(as, act);
      for (int k = 0; k < n; ++k) {
        max_before = std::max(max_before, std::fabs(xs[k]));
        max_after = std::max(max_after, std::fabs(ys[k]));
        gate_sum += as[k];
        gate_small += as[k] < 0.1f ? 1.0f : 0.0f;
      }
    }

    // Writes the requested statistics of row (at, kv, j); sink_share: its first keys' share.
    void store(const AttentionStats& st, QueryAt at, std::int64_t kv, std::int64_t j, bool gated,
               float sink_share, std::int64_t dv) {
      const std::int64_t b = at.index, i = at.row;
      max_before = std::max(max_before, S::reduce_max(max_before_v));
      max_after = std::max(max_after, S::reduce_max(max_after_v));
      if (gated) {
        gate_sum += S::reduce_add(gate_sum_v);
        gate_small += S::reduce_add(gate_small_v);
      }
      const float d = static_cast<float>(dv);
      if (st.sink_share.data) st.sink_share(b, i, kv, j) = sink_share;
      if (st.gate_mean.data) st.gate_mean(b, i, kv, j) = gated ? gate_sum / d : 1.0f;
      if (st.gate_below_0_1.data) st.gate_below_0_1(b, i, kv, j) = gated ? gate_small / d : 0.0f;
      if (st.max_abs_before.data) st.max_abs_before(b, i, kv, j) = max_before;
      if (st.max_abs_after.data) st.max_abs_after(b, i, kv, j) = max_after;
    }
  };

  // Finishes row r of `rows` from its unnormalised output o, running max and sum (log2 units) and
  // its unnormalised probability mass on keys [0, n_sink).
  static void finalize_row(const HeadRows<T, KT, VT>& rows, std::int64_t r, const float* o,
                           float max, float sum, float sink_mass, std::int64_t dv) {
    const SdpaArgs<T, KT, VT>& a = rows.args;
    const QueryAt at = rows.query(r);
    const std::int64_t kv = rows.kv_head, j = rows.head(r);
    const Normalisation norm = normalise(a, kv * a.q.extents[3] + j, max, sum);
    if (a.maybe_lse.data != nullptr) a.maybe_lse(at.index, at.row, kv, j) = norm.lse();
    const bool gated = a.gate.enabled();
    const bool stats = a.stats.enabled();
    RowStatistics row_stats;
    // A compile-time dv unrolls the loop, so that a row's vectors overlap their activations.
    dv = head_dim<kDv>(dv);
    store_row(&a.out(at.index, at.row, kv, j, 0), a.gate,
              gated ? &a.gate.values(at.index, at.row, kv, j, 0) : nullptr, o, norm.inv, dv,
              stats ? &row_stats : nullptr);
    if (stats) row_stats.store(a.stats, at, kv, j, gated, sink_mass * norm.inv, dv);
  }

  // Stores combine(o * inv, act(gate)) to out [dv] (o * inv without a gate: gate_row null) and
  // adds the row to stats where not null; o holds dv floats padded to whole vectors.
  GATED_ATTENTION_ALWAYS_INLINE static void store_row(T* out, const GateSpec<T>& spec,
                                                      const T* gate_row, const float* o,
                                                      float inv_sum, std::int64_t dv,
                                                      RowStatistics* stats) {
    const RowGate gate(spec, gate_row);
    const V inv = S::set1(inv_sum), one = S::set1(1.0f);
    GATED_ATTENTION_UNROLL_PARTLY
    for (std::int64_t c = 0; c < dv; c += L) {
      const int n = dv - c < L ? static_cast<int>(dv - c) : L;
      const V x = S::mul(S::load(o + c), inv);
      V y = x, act = one;
      if (gate_row != nullptr) {
        act = gate.activated(c, n);
        y = combine_lanes(x, act, spec.combine);
      }
      if (stats != nullptr) stats->add(x, y, act, n);
      store_row_part(out + c, y, n);
    }
  }

  // Rows ahead of the one being finalised whose gate (read) and output (written) lines are
  // fetched: both are strided by the heads, which the hardware prefetcher does not follow.
  static constexpr std::int64_t kPrefetchRows = 4;

  GATED_ATTENTION_ALWAYS_INLINE static void prefetch_row(const HeadRows<T, KT, VT>& rows,
                                                         std::int64_t r, std::int64_t dv) {
    const SdpaArgs<T, KT, VT>& a = rows.args;
    const QueryAt at = rows.query(r);
    const std::int64_t kv = rows.kv_head, j = rows.head(r);
    const auto row_bytes = static_cast<std::int64_t>(dv * sizeof(T));
    if (a.gate.enabled()) {
      prefetch_rows(&a.gate.values(at.index, at.row, kv, j, 0), 0, 1,
                    a.gate.values.strides[4] == 0 ? 1 : row_bytes);
    }
    prefetch_rows<true>(&a.out(at.index, at.row, kv, j, 0), 0, 1, row_bytes);
  }

  // Called before finalising row r of `count` rows: fetches row r + kPrefetchRows, and at r = 0
  // the rows before it too.
  GATED_ATTENTION_ALWAYS_INLINE static void prefetch(const HeadRows<T, KT, VT>& rows,
                                                     std::int64_t count, std::int64_t r,
                                                     std::int64_t dv) {
    const std::int64_t last = std::min(count - 1, r + kPrefetchRows);
    for (std::int64_t ahead = r == 0 ? 0 : r + kPrefetchRows; ahead <= last; ++ahead) {
      prefetch_row(rows, ahead, dv);
    }
  }
};
