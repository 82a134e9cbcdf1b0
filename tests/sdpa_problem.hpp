// One SDPA test problem and its check on every ISA path, shared by test_sdpa.cpp and the
// differential fuzzer (fuzz/sdpa_case.hpp). Nothing here depends on Catch, so the libFuzzer target
// can use it: checks return what failed as text.
//
// A `Case` describes the problem: shape, mask, per-batch kv lengths, sinks, log-sum-exp, output
// gate, statistics, each tensor's memory layout, pointer misalignment, threads and the regime of
// the values. `Problem` builds it; check_every_path() runs reference::sdpa (double arithmetic on
// the same float inputs) once and the kernels under every available ISA limit, and compares.
//
// Tolerance (support.hpp, derived in test_sdpa.cpp), per output element:
//   |got - ref| <= f * (atol * m_v * max(1, |act|) + rtol * |ref|) + m_v * e_act   (multiply)
//   |got - ref| <= f * (atol * m_v + rtol * |ref|) + e_act                          (add)
// f = tol_scale (kSdpaWideLogitsFactor for logits up to ~+-80); m_v = 2^v_exponent, the scale of
// V (scaling V by a power of two scales the attention output and its rounding exactly, and bounds
// |attention|); |act| the multiplicative gate's activation (it scales the attention output's
// error, SiLU up to 1e4); e_act the activation's documented absolute error, kSigmoidAtol (times
// max(1, |g|) for SiLU g * sigmoid(g)); 0 without a gate. Plus (kv_len + 2) * 2^-126 absolute
// (times max(1, |act|) for a multiplying gate): the kernels flush denormal inputs and results to
// zero (kernels/denormals.hpp), each of up to kv_len accumulations and the normalisation may
// lose up to 2^-126. The
// whole output's NMSE <= f^2 * kSdpaMaxNmse (under DotPrecision::storage each reference element
// counted as at least m_v: the rounded weights' bound is a share of max|v|), checked when the
// output's RMS is at least
// 100 * atol * m_v (below that the output is dominated by values near 0, where the per-element
// atol governs), over the error beyond the activation's and the flush's absolute allowance.
// Log-sum-exp: |got - ref| <= kSdpaLseAtol + lse_rtol * |ref|. Statistics: sink share and gate mean
// with support.hpp's tolerances (x f); max |out| before and after the gate with the output's (it is
// one of the output's elements); the fraction of gates below 0.1 within one element (a gate within
// float error of 0.1 may land on either side).
//
// Inputs are adversarial where the API allows: K/V rows past a batch entry's kv length and every
// padding element of q/k/v hold NaN (a kernel that reads them poisons its output), optionally also
// the K/V rows no query of the entry can see, or chosen keys (NaN in K, NaN or +-Inf in V: rows
// that attend them are not compared, every other row must stay finite and right); output, lse and
// statistics padding hold a sentinel that must survive (no stray writes).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "support.hpp"

namespace gated_attention::testing::sdpa {

inline constexpr float kOutSentinel = 777.0f;
inline constexpr float kLseSentinel = 555.0f;
inline const float kNaN = std::numeric_limits<float>::quiet_NaN();
inline const float kInf = std::numeric_limits<float>::infinity();

enum class Layout {
  bshd,      // contiguous [b, len, heads, d]
  bhsd,      // [b, heads, len, d] in memory, addressed through strides
  kv_cache,  // K/V: views into a larger cache (more rows, padded rows); q/out: contiguous
  padded,    // K/V as in kv_cache; q/out rows with padded head and token strides
};

enum class GateKind {
  none,
  elementwise,
  headwise,           // stride 0 over d
  head_shared,        // stride 0 over kv heads and group
  query_independent,  // stride 0 over batch and length
  packed_with_q,      // elementwise, inside q's buffer: per head [q_h (dk) | gate_h (dv)]
};
enum class SinkKind { none, learned, plus_one, some_neg_inf, large };
// The element type K or V is stored in (the float inputs rounded to it, or int8 rows quantised).
// Element types: of K and V (all four), of the activations q, gate and out (f32, bf16, f16).
enum class ElementType { f32, bf16, f16, i8 };

inline const char* to_string(Layout l) {
  switch (l) {
    case Layout::bshd:
      return "bshd";
    case Layout::bhsd:
      return "bhsd";
    case Layout::kv_cache:
      return "kv_cache";
    case Layout::padded:
      return "padded";
  }
  return "?";
}
inline const char* to_string(GateKind g) {
  switch (g) {
    case GateKind::none:
      return "none";
    case GateKind::elementwise:
      return "elementwise";
    case GateKind::headwise:
      return "headwise";
    case GateKind::head_shared:
      return "head_shared";
    case GateKind::query_independent:
      return "query_independent";
    case GateKind::packed_with_q:
      return "packed_with_q";
  }
  return "?";
}
inline const char* to_string(ElementType t) {
  switch (t) {
    case ElementType::f32:
      return "f32";
    case ElementType::bf16:
      return "bf16";
    case ElementType::f16:
      return "f16";
    case ElementType::i8:
      return "i8";
  }
  return "?";
}
inline const char* to_string(SinkKind s) {
  switch (s) {
    case SinkKind::none:
      return "none";
    case SinkKind::learned:
      return "learned";
    case SinkKind::plus_one:
      return "softmax_plus_one";
    case SinkKind::some_neg_inf:
      return "learned, some -inf";
    case SinkKind::large:
      return "learned, large";
  }
  return "?";
}

struct Case {
  std::string name;
  std::uint64_t salt = 0;  // 0: derived from the name
  std::int64_t batch = 1, q_len = 1, kv_len = 1, hq = 1, hkv = 1, dk = 64, dv = 64;
  Mask mask = Mask::none();
  std::vector<std::int64_t> kv_lens;  // empty: every entry has kv_len keys
  SinkKind sinks = SinkKind::none;
  bool lse = false;
  GateKind gate = GateKind::none;
  GateActivation activation = GateActivation::sigmoid;
  GateCombine combine = GateCombine::multiply;
  bool extreme_gate = false;  // pre-activations of +-1e4, +-100, +-88, ... instead of [-4, 4]
  bool stats = false;         // all five AttentionStats views
  std::int64_t n_sink = 1;
  Layout q_layout = Layout::bshd, k_layout = Layout::bshd, v_layout = Layout::bshd,
         out_layout = Layout::bshd;
  int misalign = 0;  // floats added to every data pointer
  int threads = 1;
  bool run_phase = false;           // run_phase() for every (phase, ith) in turn instead of run()
  std::size_t workspace_shift = 0;  // bytes the workspace starts past an allocation
  float scale = 0.0f;               // 0: 1 / sqrt(dk)
  double q_range = 1.0;             // q uniform in [-q_range, q_range]; k, v in [-1, 1]
  double one_hot_logit = 0.0;       // > 0: each row's logit is this for one key, far below
                                    // for the others (k = +-1, q = c * k_target)
  int q_exponent = 0;               // q *= 2^e, k *= 2^-e: the same logits at other magnitudes
  int v_exponent = 0;               // v *= 2^e (m_v in the tolerance)
  bool denormals = false;           // about 1 in 8 of q, k, v replaced by denormal numbers
  bool poison_invisible_keys = false;       // NaN in the K/V rows no query of the entry sees
  std::vector<std::int64_t> poisoned_keys;  // keys whose K rows hold NaN and V rows poison_value
  float poison_value = std::numeric_limits<float>::quiet_NaN();
  ElementType k_type = ElementType::f32, v_type = ElementType::f32;
  ElementType activation_type = ElementType::f32;  // q, gate and out: f32, bf16 or f16
  DotPrecision precision = DotPrecision::exact;
  bool check_standalone_gate = false;  // also ops/output_gate on the ungated reference output
  double lse_rtol = 0.0;               // added to the log-sum-exp tolerance, times |ref|
  double tol_scale = 1.0;              // f in the tolerance
  std::int64_t expect_min_splits = 1;  // the plan must split the keys at least this much
  std::int64_t page_size = 0;          // > 0: the kernels read K/V from shuffled pages
  std::int64_t shared_prefix = 0;      // keys every entry shares with entry 0 (whole pages shared)
  // Packed queries: entry b has q_lens[b] <= q_len queries (its first), passed to the kernels and
  // the reference packed with cu_seqlens_q; empty: every entry has q_len.
  std::vector<std::int64_t> q_lens;

  static Case make(std::string n, std::int64_t b, std::int64_t ql, std::int64_t kl,
                   std::int64_t hq_, std::int64_t hkv_, std::int64_t dk_, std::int64_t dv_) {
    Case c;
    c.name = std::move(n);
    c.batch = b;
    c.q_len = ql;
    c.kv_len = kl;
    c.hq = hq_;
    c.hkv = hkv_;
    c.dk = dk_;
    c.dv = dv_;
    return c;
  }
  Case& with_mask(Mask m) {
    mask = m;
    return *this;
  }
  Case& causal() { return with_mask(Mask::causal()); }
  Case& with_kv_lens(std::vector<std::int64_t> lens) {
    kv_lens = std::move(lens);
    return *this;
  }
  Case& with_sinks(SinkKind s) {
    sinks = s;
    return *this;
  }
  Case& with_lse() {
    lse = true;
    return *this;
  }
  Case& with_gate(GateKind g, GateActivation a = GateActivation::sigmoid,
                  GateCombine c = GateCombine::multiply) {
    gate = g;
    activation = a;
    combine = c;
    return *this;
  }
  Case& with_layout(Layout l) {
    q_layout = k_layout = v_layout = out_layout = l;
    return *this;
  }
  Case& with_misaligned() {
    misalign = 1;
    return *this;
  }
  Case& with_threads(int t) {
    threads = t;
    return *this;
  }
  Case& with_scale(float s) {
    scale = s;
    return *this;
  }
  Case& with_splits(std::int64_t s) {
    expect_min_splits = s;
    return *this;
  }
  Case& with_kv_types(ElementType k, ElementType v) {
    k_type = k;
    v_type = v;
    return *this;
  }
  Case& with_activation_type(ElementType t) {
    activation_type = t;
    return *this;
  }
  Case& with_precision(DotPrecision p) {
    precision = p;
    return *this;
  }
  // K/V copied into shuffled pages of `size` keys; entries share their first `shared` keys'
  // pages with entry 0 (those keys made equal to entry 0's).
  Case& with_pages(std::int64_t size, std::int64_t shared = 0) {
    page_size = size;
    shared_prefix = shared;
    return *this;
  }
  Case& with_shared_prefix(std::int64_t keys) {
    shared_prefix = keys;
    return *this;
  }
  Case& with_packed_queries(std::vector<std::int64_t> lens) {
    q_lens = std::move(lens);
    return *this;
  }
  Case& with_stats(std::int64_t sink_keys) {
    stats = true;
    n_sink = sink_keys;
    return *this;
  }

  std::int64_t group() const { return hkv > 0 ? hq / hkv : 0; }
};

// FNV-1a of the case name: each case draws its own stream from make_rng(salt), so
// GATED_ATTENTION_TEST_SEED replays any single case.
inline std::uint64_t salt_of(const std::string& name) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

inline std::uint64_t salt_of(const Case& c) {
  return c.salt != 0 ? c.salt : salt_of(c.name);
}

inline std::string describe(const Case& c) {
  std::ostringstream os;
  os << "'" << c.name << "': batch " << c.batch << " q_len " << c.q_len << " kv_len " << c.kv_len
     << " hq " << c.hq << " hkv " << c.hkv << " dk " << c.dk << " dv " << c.dv << " mask ("
     << c.mask.window_left << ", " << c.mask.window_right << ") kv_lens [";
  for (std::size_t i = 0; i < c.kv_lens.size(); ++i) os << (i ? " " : "") << c.kv_lens[i];
  os << "] sinks " << to_string(c.sinks) << " lse " << c.lse << " gate " << to_string(c.gate)
     << (c.activation == GateActivation::silu ? "/silu" : "/sigmoid")
     << (c.combine == GateCombine::add ? "/add" : "/multiply") << (c.extreme_gate ? "/extreme" : "")
     << " stats " << c.stats << " n_sink " << c.n_sink << " layouts q " << to_string(c.q_layout)
     << " k " << to_string(c.k_layout) << " v " << to_string(c.v_layout) << " out "
     << to_string(c.out_layout) << " misalign " << c.misalign << " threads " << c.threads
     << (c.run_phase ? " (run_phase)" : "") << " workspace shift " << c.workspace_shift << " scale "
     << c.scale << " q_range " << c.q_range << " one_hot " << c.one_hot_logit << " q_exponent "
     << c.q_exponent << " v_exponent " << c.v_exponent << " denormals " << c.denormals
     << " poison_invisible " << c.poison_invisible_keys << " poisoned keys "
     << c.poisoned_keys.size() << " (" << c.poison_value << ") k " << to_string(c.k_type) << " v "
     << to_string(c.v_type) << " activations " << to_string(c.activation_type)
     << (c.precision == DotPrecision::storage ? " storage" : " exact") << " pages " << c.page_size
     << " shared " << c.shared_prefix << " q_lens [";
  for (std::size_t i = 0; i < c.q_lens.size(); ++i) os << (i ? " " : "") << c.q_lens[i];
  os << "] salt " << salt_of(c) << " (test seed " << test_seed() << ")";
  return os.str();
}

// The tolerance factor DotPrecision::storage needs for a V of type v (derived in
// tests/test_kv_types.cpp): weights rounded to bf16 for a bf16 V, to 8 bits per block for int8.
inline double storage_tol_scale(ElementType v) {
  return v == ElementType::bf16 ? 400.0 : v == ElementType::i8 ? 12800.0 : 1.0;
}

// `c` with q, gate and out in `activations` and the dot precision `precision` (its tolerance
// widened for it), the name saying so where they are not f32 and exact.
inline Case with_typed_activations(Case c, ElementType activations, DotPrecision precision) {
  c.with_activation_type(activations);
  if (activations != ElementType::f32)
    c.name += std::string(" activations ") + to_string(activations);
  if (precision == DotPrecision::storage) {
    c.name += " storage";
    c.with_precision(precision);
    c.tol_scale *= storage_tol_scale(c.v_type);
  }
  return c;
}

// A strided view over its own buffer; every buffer element the view does not address is padding.
template <int Rank>
struct Owned {
  std::vector<float> storage;
  TensorView<float, Rank> view;

  Owned() = default;
  Owned(const std::array<std::int64_t, Rank>& extents,
        const std::array<std::int64_t, Rank>& strides, int misalign, float pad) {
    const auto offset = static_cast<std::size_t>(misalign);
    const std::int64_t span = TensorView<float, Rank>(nullptr, extents, strides).span();
    storage.assign(offset + static_cast<std::size_t>(std::max<std::int64_t>(span, 1)) + 2, pad);
    view = TensorView<float, Rank>(storage.data() + offset, extents, strides);
  }

  // Whether each buffer element is addressed by the view.
  std::vector<bool> addressed() const {
    std::vector<bool> in(storage.size(), false);
    for_each_index(view.extents, [&](const auto& idx) {
      in[static_cast<std::size_t>(&view[idx] - storage.data())] = true;
    });
    return in;
  }
};

// [b, len, heads, d] in `layout`. `kv` selects the K/V flavour of the padded layouts.
inline Owned<4> make_tensor(const std::array<std::int64_t, 4>& e, Layout layout, bool kv,
                            int misalign, float pad) {
  const std::int64_t len = e[1], h = e[2], d = e[3];
  std::array<std::int64_t, 4> s{};
  if (layout == Layout::bhsd) {
    s = {h * len * d, d, len * d, 1};
  } else if (kv && (layout == Layout::kv_cache || layout == Layout::padded)) {
    const std::int64_t capacity = len + 9, pitch = d + 7;  // cache rows beyond len, row padding
    s = {capacity * h * pitch, h * pitch, pitch, 1};
  } else if (!kv && layout == Layout::padded) {
    const std::int64_t pitch = d + 3, token = h * pitch + 5;
    s = {len * token + 11, token, pitch, 1};
  } else {
    s = {len * h * d, h * d, d, 1};
  }
  return Owned<4>(e, s, misalign, pad);
}

// A float buffer's elements in bf16 or f16 (rounded to nearest even, NaN kept) at the same
// offsets; empty for f32.
struct Narrowed {
  std::vector<bf16> bf16s;
  std::vector<f16> f16s;

  Narrowed() = default;
  Narrowed(ElementType type, const std::vector<float>& storage) {
    for (float x : storage) {
      if (type == ElementType::bf16) bf16s.push_back(bf16(x));
      if (type == ElementType::f16) f16s.push_back(f16(x));
    }
  }
  template <class E>
  E* data() {
    if constexpr (std::is_same_v<E, bf16>) return bf16s.data();
    if constexpr (std::is_same_v<E, f16>) return f16s.data();
    return nullptr;
  }
  // `view` of float buffer `storage` as a view of these elements.
  template <class E, class F, int Rank>
  TensorView<E, Rank> view(const TensorView<F, Rank>& view, const std::vector<float>& storage) {
    return TensorView<E, Rank>(data<std::remove_const_t<E>>() + (view.data - storage.data()),
                               view.extents, view.strides);
  }
};

// Each element of a float buffer replaced by its value in E (bf16 or f16; f32: unchanged).
inline void round_to(ElementType type, std::vector<float>& storage) {
  for (float& x : storage) {
    if (type == ElementType::bf16) x = to_float(bf16(x));
    if (type == ElementType::f16) x = to_float(f16(x));
  }
}

// K or V stored in a case's K/V type, at the offsets of the float tensor's buffer: every buffer
// element rounded to bf16 or f16 (NaN padding stays NaN), or each row of the view quantised to
// int8 as ops/store_kv does (scale = max|x| / 127; padding 127). int8 cannot hold the NaN that
// marks keys a kernel must not read: such rows hold 127 with a scale of 1e30 (NaN past the entry's
// kv length, where scales are not validated), which a kernel that reads them cannot hide.
struct StoredKv {
  std::vector<bf16> bf16s;
  std::vector<f16> f16s;
  std::vector<std::int8_t> int8s;
  std::vector<float> scales;  // [b, len, heads], contiguous
  std::array<std::int64_t, 3> scale_extents{};

  StoredKv() = default;
  StoredKv(ElementType type, const Owned<4>& t, const std::vector<std::int64_t>& valid) {
    const auto& e = t.view.extents;
    switch (type) {
      case ElementType::f32:
        return;
      case ElementType::bf16:
        for (float x : t.storage) bf16s.push_back(bf16(x));
        return;
      case ElementType::f16:
        for (float x : t.storage) f16s.push_back(f16(x));
        return;
      case ElementType::i8:
        break;
    }
    int8s.assign(t.storage.size(), 127);
    scale_extents = {e[0], e[1], e[2]};
    scales.assign(static_cast<std::size_t>(e[0] * e[1] * e[2]), 0.0f);
    for_each_index(scale_extents, [&](const auto& r) {
      const float* row = &t.view(r[0], r[1], r[2], 0);
      std::int8_t* out = int8s.data() + (row - t.storage.data());
      float m = 0.0f;
      bool finite = true;
      for (std::int64_t d = 0; d < e[3]; ++d) {
        finite &= std::isfinite(row[d]);
        m = std::max(m, std::fabs(row[d]));
      }
      float& scale = scales[static_cast<std::size_t>((r[0] * e[1] + r[1]) * e[2] + r[2])];
      if (!finite) {
        scale = r[1] < valid[static_cast<std::size_t>(r[0])] ? 1e30f : kNaN;
        return;
      }
      scale = m / 127.0f;
      for (std::int64_t d = 0; d < e[3]; ++d) {
        out[d] = static_cast<std::int8_t>(m > 0.0f ? std::nearbyint(row[d] * 127.0f / m) : 0.0f);
      }
    });
  }

  // The stored tensor as E (the float buffer's own view for float).
  template <class E>
  TensorView<const E, 4> view(const Owned<4>& t) const {
    const std::ptrdiff_t offset = t.view.data - t.storage.data();
    const E* base = nullptr;
    if constexpr (std::is_same_v<E, float>) base = t.storage.data();
    if constexpr (std::is_same_v<E, bf16>) base = bf16s.data();
    if constexpr (std::is_same_v<E, f16>) base = f16s.data();
    if constexpr (std::is_same_v<E, std::int8_t>) base = int8s.data();
    return TensorView<const E, 4>(base + offset, t.view.extents, t.view.strides);
  }
  TensorView<const float, 3> scale_view() const {
    if (scales.empty()) return {};
    return TensorView<const float, 3>::contiguous(scales.data(), scale_extents);
  }
};

// The element type of a ElementType.
template <ElementType t>
using ElementOf = std::conditional_t<
    t == ElementType::f32, float,
    std::conditional_t<t == ElementType::bf16, bf16,
                       std::conditional_t<t == ElementType::f16, f16, std::int8_t>>>;

inline double activation_of(const Case& c, double g) {
  return reference::gate_activation(c.activation, g);
}

// The statistics views, in AttentionStats order.
inline constexpr int kNumStats = 5;
inline constexpr std::array<const char*, kNumStats> kStatNames = {
    "sink_share", "gate_mean", "gate_below_0_1", "max_abs_before", "max_abs_after"};

inline std::array<TensorView<float, 4>*, kNumStats> stat_views(AttentionStats& st) {
  return {&st.sink_share, &st.gate_mean, &st.gate_below_0_1, &st.max_abs_before, &st.max_abs_after};
}

// K/V (and row scales) copied into a pool of shuffled pages: pages [num_pages, page_size,
// kv_heads, d] addressed through a page table [b, max_pages]. Entries share the pages of their
// first shared_prefix keys (whole pages) with entry 0. Unused pool pages and table entries hold
// garbage a kernel must not read (NaN, or int8 127 with a NaN scale, and page -1).
struct Pages {
  std::int64_t page_size = 0, max_pages = 0, num_pages = 0;
  std::vector<std::int32_t> table;  // [b, max_pages]
  std::vector<std::int64_t> lens;   // [b]
  std::vector<std::byte> k_pool, v_pool;
  std::vector<float> k_scales, v_scales;

  // Assigns pages: entry b's first ceil(len_b / page_size), shuffled, plus two spare pages.
  void plan(const Case& c, const std::vector<std::int64_t>& valid, std::uint64_t salt) {
    page_size = c.page_size;
    max_pages = (c.kv_len + page_size - 1) / page_size + 1;
    // At least one element: a batch of 0 still passes a table (a null one means not paged).
    table.assign(static_cast<std::size_t>(std::max<std::int64_t>(1, c.batch * max_pages)), -1);
    lens = valid;
    const auto used = [&](std::int64_t b) {
      return (valid[static_cast<std::size_t>(b)] + page_size - 1) / page_size;
    };
    // Entry b > 0 shares entry 0's first pages: whole pages of the shared keys both use.
    const auto shared = [&](std::int64_t b) {
      return std::min({c.shared_prefix / page_size, used(0), used(b)});
    };
    std::vector<std::pair<std::int64_t, std::int64_t>> owners;  // (entry, page) of each new page
    for (std::int64_t b = 0; b < c.batch; ++b) {
      for (std::int64_t i = b > 0 ? shared(b) : 0; i < used(b); ++i) owners.emplace_back(b, i);
    }
    num_pages = static_cast<std::int64_t>(owners.size()) + 2;
    std::vector<std::int32_t> order(static_cast<std::size_t>(num_pages));
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
    auto rng = make_rng(salt ^ 0x9a9e5ull);
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i = 0; i < owners.size(); ++i) {
      table[static_cast<std::size_t>(owners[i].first * max_pages + owners[i].second)] = order[i];
    }
    for (std::int64_t b = 1; b < c.batch; ++b) {
      for (std::int64_t i = 0; i < shared(b); ++i) {
        table[static_cast<std::size_t>(b * max_pages + i)] = table[static_cast<std::size_t>(i)];
      }
    }
  }

  template <class E>
  static E poison() {
    if constexpr (std::is_same_v<E, std::int8_t>) {
      return 127;
    } else {
      return E(kNaN);
    }
  }

  // One token's [heads] or [heads, d] elements (raw pointers: cheap in unoptimised builds).
  template <class E, std::size_t Rank>
  static void copy_token(const E* from, const std::array<std::int64_t, Rank>& from_strides, E* to,
                         const std::array<std::int64_t, Rank>& to_strides,
                         const std::array<std::int64_t, Rank>& extents) {
    const std::int64_t inner = Rank == 4 ? extents[Rank - 1] : 1;
    const std::int64_t from_step = Rank == 4 ? from_strides[Rank - 1] : 0;
    const std::int64_t to_step = Rank == 4 ? to_strides[Rank - 1] : 0;
    for (std::int64_t h = 0; h < extents[2]; ++h) {
      const E* src = from + h * from_strides[2];
      E* dst = to + h * to_strides[2];
      for (std::int64_t x = 0; x < inner; ++x) dst[x * to_step] = src[x * from_step];
    }
  }

  // `from` [b, kv_len, heads, d] copied into a pool of E; the written view.
  template <class E, int Rank>
  TensorView<const E, Rank> copy(const TensorView<const E, Rank>& from, std::vector<std::byte>& to,
                                 E garbage) const {
    typename TensorView<E, Rank>::Index e = from.extents;
    e[0] = num_pages;
    e[1] = page_size;
    std::int64_t count = 1;
    for (std::int64_t x : e) count *= x;
    to.assign(static_cast<std::size_t>(count) * sizeof(E), std::byte{0});
    auto pool = TensorView<E, Rank>::contiguous(reinterpret_cast<E*>(to.data()), e);
    std::fill(pool.data, pool.data + count, garbage);
    const std::int64_t batch = from.extents[0];
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t i = 0; i < max_pages; ++i) {
        const std::int32_t page = table[static_cast<std::size_t>(b * max_pages + i)];
        if (page < 0) continue;
        const std::int64_t keys = std::min(page_size, from.extents[1] - i * page_size);
        for (std::int64_t slot = 0; slot < keys; ++slot) {
          copy_token(from.data + b * from.strides[0] + (i * page_size + slot) * from.strides[1],
                     from.strides, pool.data + page * pool.strides[0] + slot * pool.strides[1],
                     pool.strides, e);
        }
      }
    }
    return pool;
  }
  template <class E>
  TensorView<const E, 4> kv(const TensorView<const E, 4>& from, std::vector<std::byte>& to) const {
    return copy<E, 4>(from, to, poison<E>());
  }
  // The row scales of an int8 K or V (`needed`): a pool of NaN where `from` is empty.
  TensorView<const float, 3> scales(const TensorView<const float, 3>& from, bool needed,
                                    std::int64_t heads, std::vector<float>& to) const {
    if (!needed) return {};
    std::vector<std::byte> bytes;
    const float none = 0.0f;
    const TensorView<const float, 3> pool = copy<float, 3>(
        from.data != nullptr ? from : TensorView<const float, 3>(&none, {0, 0, heads}, {0, 0, 0}),
        bytes, kNaN);
    to.resize(bytes.size() / sizeof(float));
    std::memcpy(to.data(), bytes.data(), bytes.size());
    return TensorView<const float, 3>(to.data(), pool.extents, pool.strides);
  }
};

// One problem: inputs, the kernel's outputs and the reference's.
// Packed queries (Case::q_lens): q and the gate of args over [b, q_len, ...] buffers copied into
// [1, total_q, ...] ones with cu_seqlens_q, entry b's first q_lens[b] positions each; unpack()
// copies the packed outputs back to those positions of the original views.
template <class T>
struct PackedQueries {
  std::vector<std::int32_t> cu;
  std::vector<T> q, gate, out;
  std::vector<float> lse;
  std::array<std::vector<float>, kNumStats> stats;

  // Row (b, i) of `from` to packed row r of `to`, or back (to_packed false).
  template <class E, int R>
  static void copy_row(const TensorView<E, R>& uniform, const TensorView<E, R>& packed,
                       std::int64_t b, std::int64_t i, std::int64_t r, bool to_packed) {
    std::array<std::int64_t, R> e = uniform.extents;
    e[0] = e[1] = 1;
    for_each_index(e, [&](auto at) {
      auto from = at;
      from[0] = b;
      from[1] = i;
      at[1] = r;
      if (to_packed) {
        packed[at] = uniform[from];
      } else {
        uniform[from] = packed[at];
      }
    });
  }
  // Every entry's rows between `uniform` and `packed`.
  template <class E, int R>
  void copy_rows(const TensorView<E, R>& uniform, const TensorView<E, R>& packed,
                 bool to_packed) const {
    for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
      for (std::int32_t r = cu[b]; r < cu[b + 1]; ++r) {
        copy_row(uniform, packed, static_cast<std::int64_t>(b), r - cu[b], r, to_packed);
      }
    }
  }
  template <class E, int R>
  static TensorView<E, R> packed_view(std::vector<std::remove_const_t<E>>& buffer,
                                      const TensorView<E, R>& like, std::int64_t total) {
    std::array<std::int64_t, R> e = like.extents;
    e[0] = 1;
    e[1] = total;
    std::int64_t n = 1;
    for (std::int64_t x : e) n *= x;
    buffer.assign(static_cast<std::size_t>(n), std::remove_const_t<E>{});
    return TensorView<E, R>::contiguous(buffer.data(), e);
  }

  template <class KT, class VT>
  SdpaArgs<T, KT, VT> pack(const SdpaArgs<T, KT, VT>& a, const std::vector<std::int64_t>& q_lens) {
    cu.assign(1, 0);
    for (std::int64_t n : q_lens) cu.push_back(cu.back() + static_cast<std::int32_t>(n));
    const std::int64_t total = cu.back();
    SdpaArgs<T, KT, VT> p = a;
    p.maybe_cu_seqlens_q = TensorView<const std::int32_t, 1>::contiguous(
        cu.data(), {static_cast<std::int64_t>(cu.size())});
    p.q = packed_view(q, a.q, total);
    copy_rows(TensorView<T, 5>(const_cast<T*>(a.q.data), a.q.extents, a.q.strides),
              TensorView<T, 5>(q.data(), p.q.extents, p.q.strides), true);
    if (a.gate.enabled()) {
      p.gate.values = packed_view(gate, a.gate.values, total);
      copy_rows(TensorView<T, 5>(const_cast<T*>(a.gate.values.data), a.gate.values.extents,
                                 a.gate.values.strides),
                TensorView<T, 5>(gate.data(), p.gate.values.extents, p.gate.values.strides), true);
    }
    p.out = packed_view(out, a.out, total);
    if (a.maybe_lse.data != nullptr) p.maybe_lse = packed_view(lse, a.maybe_lse, total);
    const auto from = stat_views(const_cast<AttentionStats&>(a.stats));
    const auto to = stat_views(p.stats);
    for (int s = 0; s < kNumStats; ++s) {
      if (from[s]->data != nullptr) *to[s] = packed_view(stats[s], *from[s], total);
    }
    return p;
  }

  // The outputs of `packed` (pack()'s) into those of `a`, or (to_packed) a's into packed's: the
  // sentinels a reset wrote, so that a row no kernel writes is caught.
  template <class KT, class VT>
  void copy_outputs(const SdpaArgs<T, KT, VT>& packed, const SdpaArgs<T, KT, VT>& a,
                    bool to_packed) const {
    copy_rows(a.out, packed.out, to_packed);
    if (a.maybe_lse.data != nullptr) copy_rows(a.maybe_lse, packed.maybe_lse, to_packed);
    const auto from = stat_views(const_cast<AttentionStats&>(packed.stats));
    const auto to = stat_views(const_cast<AttentionStats&>(a.stats));
    for (int s = 0; s < kNumStats; ++s) {
      if (to[s]->data != nullptr) copy_rows(*to[s], *from[s], to_packed);
    }
  }
  template <class KT, class VT>
  void unpack(const SdpaArgs<T, KT, VT>& packed, const SdpaArgs<T, KT, VT>& a) const {
    copy_outputs(packed, a, false);
  }
};

struct Problem {
  Case c;
  std::uint64_t salt;
  Owned<4> q, k, v, out;
  StoredKv k_stored, v_stored;    // K and V in the case's K/V types (empty for f32)
  Narrowed q_stored, out_stored;  // q (with a packed gate) and out in the activation type
  Narrowed gate_stored;           // a gate with its own buffer, likewise
  Owned<5> gate;                  // for packed_with_q: no storage, the view points into q's
  Owned<4> lse;
  std::array<Owned<4>, kNumStats> stats;
  std::vector<float> sinks;
  std::vector<std::int64_t> kv_lens;
  std::vector<bool> out_addressed, lse_addressed;
  std::array<std::vector<bool>, kNumStats> stats_addressed;
  Pages pages;  // c.page_size > 0: K/V copied into pages
  Tensor<float, 4> ref_out;
  Tensor<float, 4> ref_lse;
  std::array<Tensor<float, 4>, kNumStats> ref_stats;
  mutable std::vector<std::pair<double, double>> activations;  // see activation()

  explicit Problem(const Case& c_)
      : c(c_),
        salt(salt_of(c_)),
        ref_out({c_.batch, c_.q_len, c_.hq, c_.dv}),
        ref_lse({c_.batch, c_.q_len, c_.hkv, c_.group()}),
        ref_stats{stats_tensor(c_), stats_tensor(c_), stats_tensor(c_), stats_tensor(c_),
                  stats_tensor(c_)} {
    auto rng = make_rng(salt);
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    const std::int64_t g = c.group();
    if (c.gate == GateKind::packed_with_q) {
      // Qwen3-Next's q_proj output: per head [q_h | gate_h], q viewed inside it.
      const std::int64_t pitch = c.dk + c.dv;
      q = Owned<4>({c.batch, c.q_len, c.hq, pitch},
                   {c.q_len * c.hq * pitch, c.hq * pitch, pitch, 1}, c.misalign, kNaN);
      q.view.extents[3] = c.dk;
    } else {
      q = make_tensor({c.batch, c.q_len, c.hq, c.dk}, c.q_layout, false, c.misalign, kNaN);
    }
    k = make_tensor({c.batch, c.kv_len, c.hkv, c.dk}, c.k_layout, true, c.misalign, kNaN);
    v = make_tensor({c.batch, c.kv_len, c.hkv, c.dv}, c.v_layout, true, c.misalign, kNaN);
    out =
        make_tensor({c.batch, c.q_len, c.hq, c.dv}, c.out_layout, false, c.misalign, kOutSentinel);
    out_addressed = out.addressed();

    if (c.one_hot_logit > 0.0) {
      std::bernoulli_distribution coin(0.5);
      for_each_index(k.view.extents, [&](const auto& i) { k.view[i] = coin(rng) ? 1.0f : -1.0f; });
    } else {
      for_each_index(k.view.extents,
                     [&](const auto& i) { k.view[i] = static_cast<float>(unit(rng)); });
    }
    for_each_index(v.view.extents,
                   [&](const auto& i) { v.view[i] = static_cast<float>(unit(rng)); });
    for_each_index(q.view.extents,
                   [&](const auto& i) { q.view[i] = static_cast<float>(c.q_range * unit(rng)); });
    kv_lens = c.kv_lens;
    if (c.one_hot_logit > 0.0) make_one_hot(rng);
    scale_values(rng);
    // Keys past an entry's kv length (and, optionally, keys no query sees) are garbage a kernel
    // must not read.
    for (std::int64_t b = 0; b < c.batch; ++b) {
      const std::int64_t valid = valid_keys(b);
      std::int64_t first = valid, last = -1;  // the keys some query of the entry sees
      if (c.poison_invisible_keys) {
        for (std::int64_t i = 0; i < q_len_of(b); ++i) {
          const auto [lo, hi] = visible(b, i);
          if (lo <= hi) {
            first = std::min(first, lo);
            last = std::max(last, hi);
          }
        }
      } else {
        first = 0;
        last = valid - 1;
      }
      for (std::int64_t j = 0; j < c.kv_len; ++j) {
        if (j >= first && j <= last) continue;
        for (std::int64_t h = 0; h < c.hkv; ++h) {
          for (std::int64_t d = 0; d < c.dk; ++d) k.view(b, j, h, d) = kNaN;
          for (std::int64_t d = 0; d < c.dv; ++d) v.view(b, j, h, d) = kNaN;
        }
      }
    }

    if (c.sinks == SinkKind::learned || c.sinks == SinkKind::some_neg_inf ||
        c.sinks == SinkKind::large) {
      const double range = c.sinks == SinkKind::large ? 60.0 : 2.0;
      std::uniform_real_distribution<double> s(-range, range);
      sinks.resize(static_cast<std::size_t>(c.hq));
      for (auto& x : sinks) x = static_cast<float>(s(rng));
      if (c.sinks == SinkKind::some_neg_inf) {
        for (std::size_t h = 0; h < sinks.size(); h += 2) sinks[h] = -kInf;
      }
    }
    for (std::int64_t j : c.poisoned_keys) {
      for (std::int64_t b = 0; b < c.batch; ++b) {
        for (std::int64_t h = 0; h < c.hkv; ++h) {
          for (std::int64_t d = 0; d < c.dk; ++d) k.view(b, j, h, d) = kNaN;
          for (std::int64_t d = 0; d < c.dv; ++d) v.view(b, j, h, d) = c.poison_value;
        }
      }
    }
    share_prefix();
    make_gate(rng);  // last: the same case without a gate draws the same values
    round_to(c.activation_type, q.storage);  // the values a bf16 or f16 q and gate hold
    round_to(c.activation_type, gate.storage);
    q_stored = Narrowed(c.activation_type, q.storage);
    gate_stored = Narrowed(c.activation_type, gate.storage);
    out_stored = Narrowed(c.activation_type, out.storage);
    std::vector<std::int64_t> valid(static_cast<std::size_t>(c.batch));
    for (std::int64_t b = 0; b < c.batch; ++b) valid[static_cast<std::size_t>(b)] = valid_keys(b);
    k_stored = StoredKv(c.k_type, k, valid);
    v_stored = StoredKv(c.v_type, v, valid);
    if (c.lse) {
      lse = Owned<4>({c.batch, c.q_len, c.hkv, g}, {c.q_len * c.hq, c.hq, g, 1}, c.misalign,
                     kLseSentinel);
      lse_addressed = lse.addressed();
    }
    if (c.stats) {
      for (int s = 0; s < kNumStats; ++s) {
        // Row pitch hq + 1: padding between rows to catch stray writes.
        stats[s] = Owned<4>({c.batch, c.q_len, c.hkv, g}, {c.q_len * (c.hq + 1), c.hq + 1, g, 1},
                            c.misalign, kOutSentinel);
        stats_addressed[s] = stats[s].addressed();
      }
    }
  }

  // Every entry's first c.shared_prefix keys made equal to entry 0's.
  void share_prefix() {
    for (std::int64_t b = 1; b < c.batch; ++b) {
      for (std::int64_t j = 0; j < std::min(c.shared_prefix, c.kv_len); ++j) {
        for (std::int64_t h = 0; h < c.hkv; ++h) {
          for (std::int64_t d = 0; d < c.dk; ++d) k.view(b, j, h, d) = k.view(0, j, h, d);
          for (std::int64_t d = 0; d < c.dv; ++d) v.view(b, j, h, d) = v.view(0, j, h, d);
        }
      }
    }
  }

  static Tensor<float, 4> stats_tensor(const Case& c) {
    return Tensor<float, 4>({c.stats ? c.batch : 0, c.q_len, c.hkv, c.group()});
  }

  std::int64_t valid_keys(std::int64_t b) const {
    return kv_lens.empty() ? c.kv_len : kv_lens[static_cast<std::size_t>(b)];
  }
  // Entry b's queries: its first q_len_of(b) positions of the q_len in the buffers.
  std::int64_t q_len_of(std::int64_t b) const {
    return c.q_lens.empty() ? c.q_len : c.q_lens[static_cast<std::size_t>(b)];
  }

  // Visible keys [lo, hi] of query i of entry b (lo > hi: none), by the mask's definition.
  std::pair<std::int64_t, std::int64_t> visible(std::int64_t b, std::int64_t i) const {
    const std::int64_t valid = valid_keys(b);
    const std::int64_t pos = i + valid - q_len_of(b);
    std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = -1;
    for (std::int64_t j = 0; j < valid; ++j) {
      if (c.mask.allows(pos, j)) {
        lo = std::min(lo, j);
        hi = std::max(hi, j);
      }
    }
    return {lo, hi};
  }

  // Rows alternate between a +L one-hot logit and a -L one (every key carries a bias dimension
  // k[0] = 1 and q[0] = -2L shifts all logits by -2L), so logits span about [-3L, L].
  void make_one_hot(std::mt19937_64& rng) {
    const double big = c.one_hot_logit;
    const std::int64_t g = c.group();
    for (std::int64_t b = 0; b < c.batch; ++b) {
      for (std::int64_t j = 0; j < c.kv_len; ++j) {
        for (std::int64_t h = 0; h < c.hkv; ++h) k.view(b, j, h, 0) = 1.0f;
      }
    }
    const double per_dim = big / static_cast<double>(c.dk - 1);
    for (std::int64_t b = 0; b < c.batch; ++b) {
      for (std::int64_t i = 0; i < q_len_of(b); ++i) {
        const auto [lo, hi] = visible(b, i);
        if (lo > hi) continue;
        std::uniform_int_distribution<std::int64_t> pick(lo, hi);
        for (std::int64_t h = 0; h < c.hq; ++h) {
          const std::int64_t target = pick(rng);
          const bool negative = (i + h) % 2 == 1;
          q.view(b, i, h, 0) = negative ? static_cast<float>(-2.0 * big) : 0.0f;
          for (std::int64_t d = 1; d < c.dk; ++d) {
            q.view(b, i, h, d) = static_cast<float>(per_dim * k.view(b, target, h / g, d));
          }
        }
      }
    }
  }

  // Powers of two (exact: the logits do not change) and denormal numbers.
  void scale_values(std::mt19937_64& rng) {
    if (c.q_exponent != 0) {
      for_each_index(q.view.extents,
                     [&](const auto& i) { q.view[i] = std::ldexp(q.view[i], c.q_exponent); });
      for_each_index(k.view.extents,
                     [&](const auto& i) { k.view[i] = std::ldexp(k.view[i], -c.q_exponent); });
    }
    if (c.v_exponent != 0) {
      for_each_index(v.view.extents,
                     [&](const auto& i) { v.view[i] = std::ldexp(v.view[i], c.v_exponent); });
    }
    if (c.denormals) {
      std::uniform_int_distribution<int> one_in_eight(0, 7);
      std::uniform_real_distribution<double> unit(-1.0, 1.0);
      const auto denormal = [&] {
        return static_cast<float>(unit(rng) * std::numeric_limits<float>::min());
      };
      for (Owned<4>* t : {&q, &k, &v}) {
        for_each_index(t->view.extents, [&](const auto& i) {
          if (one_in_eight(rng) == 0) t->view[i] = denormal();
        });
      }
    }
  }

  void make_gate(std::mt19937_64& rng) {
    const std::int64_t g = c.group();
    const std::array<std::int64_t, 5> e = {c.batch, c.q_len, c.hkv, g, c.dv};
    switch (c.gate) {
      case GateKind::none:
        return;
      case GateKind::elementwise:
        gate =
            Owned<5>(e, {c.q_len * c.hq * c.dv, c.hq * c.dv, g * c.dv, c.dv, 1}, c.misalign, kNaN);
        break;
      case GateKind::headwise:
        gate = Owned<5>(e, {c.q_len * c.hq, c.hq, g, 1, 0}, c.misalign, kNaN);
        break;
      case GateKind::head_shared:
        gate = Owned<5>(e, {c.q_len * c.dv, c.dv, 0, 0, 1}, c.misalign, kNaN);
        break;
      case GateKind::query_independent:
        gate = Owned<5>(e, {0, 0, g * c.dv, c.dv, 1}, c.misalign, kNaN);
        break;
      case GateKind::packed_with_q: {
        const std::int64_t pitch = c.dk + c.dv;
        gate.view = TensorView<float, 5>(
            q.view.data + c.dk, e, {c.q_len * c.hq * pitch, c.hq * pitch, g * pitch, pitch, 1});
        break;
      }
    }
    std::uniform_real_distribution<double> wide(-4.0, 4.0);
    std::uniform_int_distribution<int> kind(0, 5);
    for_each_index(gate.view.extents, [&](const auto& i) {
      double x = wide(rng);
      if (c.extreme_gate) {
        const double sign = x < 0 ? -1.0 : 1.0;
        switch (kind(rng)) {
          case 0:
            x = sign * 1e4;
            break;
          case 1:
            x = sign * 100.0;
            break;
          case 2:
            x = sign * 88.0;
            break;
          case 3:
            x = sign * 87.3;
            break;
          case 4:
            x *= 8.0;
            break;
          default:
            break;
        }
      }
      gate.view[i] = static_cast<float>(x);
    });
  }

  SdpaArgs<float> args() const {
    SdpaArgs<float> a;
    a.q = split_heads(TensorView<const float, 4>(q.view), c.hkv);
    a.k = k.view;
    a.v = v.view;
    a.out = split_heads(out.view, c.hkv);
    a.scale = c.scale;
    a.mask = c.mask;
    a.maybe_kv_lens = kv_lens.empty() ? nullptr : kv_lens.data();
    a.maybe_sink_logits = sinks.empty() ? nullptr : sinks.data();
    a.softmax_plus_one = c.sinks == SinkKind::plus_one;
    a.dot_precision = c.precision;
    if (c.lse) a.maybe_lse = lse.view;
    if (c.gate != GateKind::none) {
      a.gate.values = gate.view;
      a.gate.activation = c.activation;
      a.gate.combine = c.combine;
    }
    if (c.stats) {
      a.stats.n_sink = c.n_sink;
      const auto views = stat_views(a.stats);
      for (int s = 0; s < kNumStats; ++s) *views[s] = stats[s].view;
    }
    return a;
  }

  // args() with K and V as stored in the case's types KT and VT.
  template <class KT, class VT>
  SdpaArgs<float, KT, VT> typed_args(const SdpaArgs<float>& f) const {
    return with_kv(f, k_stored.view<KT>(k), v_stored.view<VT>(v), k_stored.scale_view(),
                   v_stored.scale_view());
  }
  template <class KT, class VT>
  SdpaArgs<float, KT, VT> typed_args() const {
    return typed_args<KT, VT>(args());
  }

  // typed_args<KT, VT>() with q, gate and out in T (the case's activation type's element).
  template <class T, class KT, class VT>
  SdpaArgs<T, KT, VT> args_as() {
    const SdpaArgs<float, KT, VT> f = typed_args<KT, VT>();
    if constexpr (std::is_same_v<T, float>) {
      return f;
    } else {
      TensorView<const T, 5> gate_values;
      if (f.gate.enabled()) {
        const bool packed = gate.storage.empty();  // the gate's elements sit in q's buffer
        gate_values = packed ? q_stored.view<const T>(f.gate.values, q.storage)
                             : gate_stored.view<const T>(f.gate.values, gate.storage);
      }
      return with_activations(f, q_stored.view<const T>(f.q, q.storage),
                              out_stored.view<T>(f.out, out.storage), gate_values);
    }
  }

  template <class E>
  static constexpr bool kInt8 = std::is_same_v<E, std::int8_t>;

  // `a` reading K/V from shuffled pages (pages.plan() and copies on every call).
  template <class T, class KT, class VT>
  SdpaArgs<T, KT, VT> paged(const SdpaArgs<T, KT, VT>& a) {
    std::vector<std::int64_t> valid(static_cast<std::size_t>(c.batch));
    for (std::int64_t b = 0; b < c.batch; ++b) valid[static_cast<std::size_t>(b)] = valid_keys(b);
    pages.plan(c, valid, salt);
    SdpaArgs<T, KT, VT> p =
        with_kv(a, pages.kv(a.k, pages.k_pool), pages.kv(a.v, pages.v_pool),
                pages.scales(a.maybe_k_scales, kInt8<KT>, c.hkv, pages.k_scales),
                pages.scales(a.maybe_v_scales, kInt8<VT>, c.hkv, pages.v_scales));
    p.maybe_kv_lens = pages.lens.data();
    p.maybe_page_table = TensorView<const std::int32_t, 2>::contiguous(pages.table.data(),
                                                                       {c.batch, pages.max_pages});
    return p;
  }

  // The outputs a kernel wrote in T copied into the float buffer that compare() reads (the
  // sentinel, which bf16 cannot hold exactly, mapped back).
  template <class T>
  void widen_outputs() {
    if constexpr (!std::is_same_v<T, float>) {
      const T* typed = out_stored.data<T>();
      const float sentinel = to_float(T(kOutSentinel));
      for (std::size_t i = 0; i < out.storage.size(); ++i) {
        const float x = to_float(typed[i]);
        out.storage[i] = x == sentinel ? kOutSentinel : x;
      }
    }
  }

  // The reference reads the activations widened from T: a q of K's type is not rounded under
  // DotPrecision::storage (rounds_query_v), as exact.
  template <class KT = float, class VT = KT, class T = float>
  Status run_reference() {
    SdpaArgs<float> a = args();
    if (!rounds_query_v<T, KT>) a.dot_precision = DotPrecision::exact;
    a.out = split_heads(ref_out.view(), c.hkv);
    a.maybe_lse = ref_lse.view();
    if (c.stats) {
      const auto views = stat_views(a.stats);
      for (int s = 0; s < kNumStats; ++s) *views[s] = ref_stats[s].view();
    }
    if (c.q_lens.empty()) return reference::sdpa(typed_args<KT, VT>(a));
    PackedQueries<float> packing;
    const SdpaArgs<float, KT, VT> uniform = typed_args<KT, VT>(a);
    const SdpaArgs<float, KT, VT> packed = packing.pack(uniform, c.q_lens);
    GATED_ATTENTION_RETURN_IF_ERROR(reference::sdpa(packed));
    packing.unpack(packed, uniform);
    return Status::ok();
  }

  void reset_outputs() {
    std::fill(out.storage.begin(), out.storage.end(), kOutSentinel);
    std::fill(out_stored.bf16s.begin(), out_stored.bf16s.end(), bf16(kOutSentinel));
    std::fill(out_stored.f16s.begin(), out_stored.f16s.end(), f16(kOutSentinel));
    std::fill(lse.storage.begin(), lse.storage.end(), kLseSentinel);
    for (auto& s : stats) std::fill(s.storage.begin(), s.storage.end(), kOutSentinel);
  }

  // The output gate's activation for output element (b, i, head h, d) and its documented
  // absolute error in the kernels; 1 and 0 without a gate.
  std::pair<double, double> activation(std::int64_t b, std::int64_t i, std::int64_t h,
                                       std::int64_t d) const {
    if (c.gate == GateKind::none) return {1.0, 0.0};
    if (activations.empty()) {  // computed once, on the first comparison
      const std::int64_t g = c.group();
      for_each_index(ref_out.extents, [&](const auto& e) {
        const double x = gate.view(e[0], e[1], e[2] / g, e[2] % g, e[3]);
        const double error =
            kSigmoidAtol *
            (c.activation == GateActivation::silu ? std::max(1.0, std::fabs(x)) : 1.0);
        activations.emplace_back(activation_of(c, x), error);
      });
    }
    return activations[static_cast<std::size_t>(((b * c.q_len + i) * c.hq + h) * c.dv + d)];
  }
};

struct Comparison {
  double worst_ratio = 0.0;  // max |got - ref| / tolerance
  std::string worst_at;
  double nmse = 0.0;
  bool nmse_checked = false;        // the output's RMS is large enough (see the top)
  std::int64_t non_finite = 0;      // NaN/Inf outputs where the reference is finite
  std::int64_t masked_nonzero = 0;  // rows without keys (no additive gate) that are not exactly 0
  std::int64_t stray_writes = 0;    // padding of out/lse/statistics that changed
  double lse_worst = 0.0;           // max |lse - ref| / (lse_atol + lse_rtol |ref|)
  std::string lse_worst_at;
  std::int64_t lse_unwritten = 0;
  double stats_worst = 0.0;  // max over the statistics of |got - ref| / tolerance
  std::string stats_worst_at;
};

// Tracks the worst ratio and where it occurred.
inline void note_worst(double ratio, double* worst, std::string* at, const char* what,
                       std::int64_t b, std::int64_t i, std::int64_t h, double got, double ref) {
  if (!(ratio <= *worst)) {  // NaN ratios are recorded too
    *worst = std::isnan(ratio) ? INFINITY : ratio;
    std::ostringstream os;
    os << what << "(" << b << ", " << i << ", head " << h << ") = " << got << ", reference " << ref;
    *at = os.str();
  }
}

inline Comparison compare(const Problem& p) {
  const Case& c = p.c;
  Comparison r;
  const std::int64_t g = c.group();
  const double m_v = std::ldexp(1.0, c.v_exponent);
  const double atol = kSdpaAtol * m_v;
  const double flush = static_cast<double>(c.kv_len + 2) * std::numeric_limits<float>::min();
  // A bf16 or f16 output is the kernel's f32 value rounded to nearest: within the unit roundoff
  // (2^-8, 2^-11) of it, relative to the stored value (f16: plus half its smallest step, 2^-25).
  const double out_unit_roundoff = c.activation_type == ElementType::bf16  ? 0x1p-8
                                   : c.activation_type == ElementType::f16 ? 0x1p-11
                                                                           : 0.0;
  const double out_step = c.activation_type == ElementType::f16 ? 0x1p-25 : 0.0;
  const bool storage = c.precision == DotPrecision::storage;
  double diff2 = 0.0, ref2 = 0.0;
  std::int64_t compared = 0;
  const bool multiply = c.combine == GateCombine::multiply;
  const bool zero_when_masked = c.gate == GateKind::none || multiply;
  for (std::int64_t b = 0; b < c.batch; ++b) {
    for (std::int64_t i = 0; i < p.q_len_of(b); ++i) {
      const auto [lo, hi] = p.visible(b, i);
      const bool masked = lo > hi;
      for (std::int64_t h = 0; h < c.hq; ++h) {
        double max_gain = 1.0, max_act_error = 0.0;  // over the row
        for (std::int64_t d = 0; d < c.dv; ++d) {
          const double got = p.out.view(b, i, h, d);
          const double ref = p.ref_out.cview()(b, i, h, d);
          const auto [act, act_error] = p.activation(b, i, h, d);
          const double gain = multiply ? std::max(1.0, std::fabs(act)) : 1.0;
          const double gate_error = multiply ? (m_v * act_error + flush * gain) : act_error + flush;
          max_gain = std::max(max_gain, gain);
          max_act_error = std::max(max_act_error, gate_error);
          if (!std::isfinite(got)) {
            // An f16 output overflows to +-Inf from 65520 on (values the reference holds in f32).
            const bool f16_overflow = c.activation_type == ElementType::f16 && std::isinf(got) &&
                                      (got > 0) == (ref > 0) &&
                                      std::fabs(ref) * (1.0 + 1e-3) >= 65520.0;
            if (std::isfinite(ref) && !f16_overflow) ++r.non_finite;
            continue;
          }
          if (masked && zero_when_masked && got != 0.0) ++r.masked_nonzero;
          const double rounding = out_unit_roundoff * std::fabs(got) + out_step;
          const double ratio =
              std::fabs(got - ref) /
              (c.tol_scale * (atol * gain + kSdpaRtol * std::fabs(ref)) + gate_error + rounding);
          if (ratio > r.worst_ratio) {
            r.worst_ratio = ratio;
            std::ostringstream os;
            os << "out(" << b << ", " << i << ", head " << h << ", " << d << ") = " << got
               << ", reference " << ref;
            r.worst_at = os.str();
          }
          // The NMSE measures the attention's error: the activation's, the flush's and the output
          // rounding's allowances (documented separately) are taken off first.
          const double excess = std::max(0.0, std::fabs(got - ref) - gate_error - rounding);
          diff2 += excess * excess;
          // Under storage the rounded weights move an output by a share of max|v| (<= m_v), not
          // of |ref| (which cancellation can make small): measured against that scale.
          ref2 += storage ? std::max(ref * ref, m_v * m_v) : ref * ref;
          ++compared;
        }
        const std::int64_t kv = h / g, j = h % g;
        if (c.lse) {
          const double got = p.lse.view(b, i, kv, j);
          const double ref = p.ref_lse.cview()(b, i, kv, j);
          if (got == static_cast<double>(kLseSentinel)) ++r.lse_unwritten;
          double ratio = 0.0;
          if (std::isnan(ref)) {  // the row attends non-finite inputs: nothing to compare
            ratio = 0.0;
          } else if (std::isinf(ref) || std::isinf(got) || std::isnan(got)) {
            ratio = got == ref ? 0.0 : INFINITY;
          } else {
            ratio = std::fabs(got - ref) / (kSdpaLseAtol + c.lse_rtol * std::fabs(ref));
          }
          note_worst(ratio, &r.lse_worst, &r.lse_worst_at, "lse", b, i, h, got, ref);
        }
        if (c.stats) {
          const auto stat = [&](int s) {
            return std::pair<double, double>(p.stats[s].view(b, i, kv, j),
                                             p.ref_stats[s].cview()(b, i, kv, j));
          };
          const auto check = [&](int s, double tol_abs, double tol_rel) {
            const auto [got, ref] = stat(s);
            if (!std::isfinite(ref)) return;  // the row attends non-finite inputs
            const double ratio = std::fabs(got - ref) / (tol_abs + tol_rel * std::fabs(ref));
            note_worst(ratio, &r.stats_worst, &r.stats_worst_at, kStatNames[s], b, i, h, got, ref);
          };
          const double f = c.tol_scale;
          check(0, f * kStatsShareAtol, f * kStatsShareRtol);
          check(1, kStatsGateMeanAtol, kStatsGateMeanRtol);
          check(2, 1.01 / static_cast<double>(c.dv), 0.0);
          check(3, f * atol + flush, f * kSdpaRtol);
          check(4, f * atol * max_gain + max_act_error, f * kSdpaRtol);  // includes the flush
        }
      }
    }
  }
  const double rms_floor = 100.0 * atol;
  r.nmse_checked = compared > 0 && ref2 >= static_cast<double>(compared) * rms_floor * rms_floor;
  r.nmse = ref2 > 0.0 ? diff2 / ref2 : (diff2 == 0.0 ? 0.0 : INFINITY);
  const auto count_stray = [&](const std::vector<float>& storage, const std::vector<bool>& in,
                               float sentinel) {
    for (std::size_t i = 0; i < storage.size(); ++i) {
      if (!in[i] && !(storage[i] == sentinel)) ++r.stray_writes;
    }
  };
  count_stray(p.out.storage, p.out_addressed, kOutSentinel);
  count_stray(p.lse.storage, p.lse_addressed, kLseSentinel);
  for (int s = 0; s < kNumStats; ++s) {
    count_stray(p.stats[s].storage, p.stats_addressed[s], kOutSentinel);
  }
  return r;
}

// What is wrong in a comparison; empty when it passes.
inline std::string failures(const Problem& p, const Comparison& r) {
  std::ostringstream os;
  if (r.non_finite != 0)
    os << r.non_finite << " non-finite outputs where the reference is finite; ";
  if (r.masked_nonzero != 0) os << r.masked_nonzero << " outputs of rows without keys not 0; ";
  if (r.stray_writes != 0) os << r.stray_writes << " writes outside the output views; ";
  if (!(r.worst_ratio <= 1.0)) {
    os << "worst element " << r.worst_at << " (" << r.worst_ratio << " x tolerance); ";
  }
  const double max_nmse = kSdpaMaxNmse * p.c.tol_scale * p.c.tol_scale;
  if (r.nmse_checked && !(r.nmse <= max_nmse)) {
    os << "NMSE " << r.nmse << " > " << max_nmse << "; ";
  }
  if (p.c.lse) {
    if (r.lse_unwritten != 0) os << r.lse_unwritten << " lse entries not written; ";
    if (!(r.lse_worst <= 1.0)) {
      os << "worst lse " << r.lse_worst_at << " (" << r.lse_worst << " x tolerance); ";
    }
  }
  if (p.c.stats && !(r.stats_worst <= 1.0)) {
    os << "worst statistic " << r.stats_worst_at << " (" << r.stats_worst << " x tolerance); ";
  }
  return os.str();
}

// Largest |scale * q.k| over the visible (query, key) pairs.
inline double max_abs_logit(const Problem& p) {
  const Case& c = p.c;
  const double scale = c.scale != 0.0f ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.dk));
  const std::int64_t g = c.group();
  double reach = 0.0;
  for (std::int64_t b = 0; b < c.batch; ++b) {
    for (std::int64_t i = 0; i < p.q_len_of(b); ++i) {
      const auto [lo, hi] = p.visible(b, i);
      for (std::int64_t h = 0; h < c.hq; ++h) {
        for (std::int64_t j = lo; j <= hi; ++j) {
          double dot = 0.0;
          for (std::int64_t d = 0; d < c.dk; ++d) {
            dot += static_cast<double>(p.q.view(b, i, h, d)) * p.k.view(b, j, h / g, d);
          }
          reach = std::max(reach, std::fabs(scale * dot));
        }
      }
    }
  }
  return reach;
}

// Restores the default path however the caller's scope ends.
struct PathGuard {
  PathGuard() = default;
  PathGuard(const PathGuard&) = delete;
  PathGuard& operator=(const PathGuard&) = delete;
  ~PathGuard() {
    clear_isa_limit();
    clear_dot_instructions();
    set_amx_tiles(amx_tiles_before);
  }
  bool amx_tiles_before = detail::amx_tiles_setting().load();
};

// A thread pool of n workers kept for the whole program (starting threads per case would
// dominate small cases).
inline ThreadPool& shared_pool(int n) {
  static std::vector<std::unique_ptr<ThreadPool>> pools(9);
  auto& pool = pools.at(static_cast<std::size_t>(n));
  if (!pool) pool = std::make_unique<ThreadPool>(n);
  return *pool;
}

// Runs the kernels once under the current ISA limit, by run() or by run_phase() for every phase
// and worker in turn (as an engine's workers would, with a barrier between phases).
template <class T, class KT, class VT>
Status run_kernels(const Case& c, const SdpaArgs<T, KT, VT>& args,
                   std::vector<std::byte>& workspace) {
  const Executor executor = c.threads > 1 ? shared_pool(c.threads).executor() : Executor{};
  const Workspace ws(workspace.data() + c.workspace_shift, workspace.size() - c.workspace_shift);
  if (!c.run_phase) return run(args, ws, executor);
  const int nth = std::max(1, c.threads);
  for (int phase = 0; phase < num_phases(args, nth); ++phase) {
    for (int ith = 0; ith < nth; ++ith) {
      GATED_ATTENTION_RETURN_IF_ERROR(run_phase(args, ws, phase, ith, nth));
    }
  }
  return Status::ok();
}

// ops/output_gate on the ungated reference attention output of `p`, in place or not, against
// reference::output_gate. Tolerance: kGateAtol * |attn| (the sigmoid's absolute error scales
// with the attention value it multiplies; 1 for the additive combine) + kGateRtol * |ref|, plus
// 2^-126 (denormal results are flushed to zero) and, for a denormal attention value (read as 0),
// the difference that makes.
inline std::string check_standalone_gate(const Problem& p, bool in_place) {
  const Case& c = p.c;
  if (c.gate == GateKind::none) return "";
  Case ungated = c;
  ungated.gate = GateKind::none;
  ungated.stats = false;
  ungated.k_type = ungated.v_type = ElementType::f32;  // the gate's input: any attention output
  Problem plain(ungated);                              // the same salt: the same q, k, v
  if (const Status s = plain.run_reference(); !s.is_ok()) {
    return std::string("reference without the gate: ") + s.message();
  }
  OutputGateArgs<float> args;
  args.attn = split_heads(plain.ref_out.cview(), c.hkv);
  args.gate.values = p.gate.view;
  args.gate.activation = c.activation;
  args.gate.combine = c.combine;
  Tensor<float, 4> expected(plain.ref_out.extents);
  args.out = split_heads(expected.view(), c.hkv);
  if (const Status s = reference::output_gate(args); !s.is_ok()) {
    return std::string("reference::output_gate: ") + s.message();
  }
  PathGuard guard;
  for (Isa isa : available_isas()) {
    set_isa_limit(isa);
    Tensor<float, 4> got = plain.ref_out;
    OutputGateArgs<float> a = args;
    if (in_place) {
      a.attn = split_heads(got.cview(), c.hkv);
    }
    a.out = split_heads(got.view(), c.hkv);
    if (!in_place) std::fill(got.data.begin(), got.data.end(), kOutSentinel);
    const Executor executor = c.threads > 1 ? shared_pool(c.threads).executor() : Executor{};
    const Status s = run(a, Workspace(nullptr, 0), executor);
    if (!s.is_ok()) {
      return std::string("output_gate on ") + to_string(isa) + " failed: " + s.message();
    }
    for (std::size_t e = 0; e < got.data.size(); ++e) {
      const double attn = plain.ref_out.data[e], ref = expected.data[e], x = got.data[e];
      // A denormal attention value reads as 0: the result is combine(0, act).
      const bool multiply = c.combine == GateCombine::multiply;
      const double read_as_zero = std::fabs(attn) < std::numeric_limits<float>::min()
                                      ? (multiply ? std::fabs(ref) : std::fabs(attn))
                                      : 0.0;
      const double tol = kGateAtol * (multiply ? std::fabs(attn) : 1.0) +
                         kGateRtol * std::fabs(ref) + std::numeric_limits<float>::min() +
                         read_as_zero;
      if (!(std::fabs(x - ref) <= tol)) {
        std::ostringstream os;
        os << "output_gate on " << to_string(isa) << (in_place ? " (in place)" : "") << ": element "
           << e << " = " << x << ", reference " << ref << " (attn " << attn << ")";
        return os.str();
      }
    }
  }
  return "";
}

struct PathChoice {
  Isa isa;
  DotInstructions dot;
  bool amx_tiles = true;
};

// Every available path for `args`: each ISA, and on avx512 where the call can run the storage dot,
// both the dot instructions and K/V widened to f32, and with a bf16 K on an AMX host, prefill
// blocks both on tiles and on panels.
template <class T, class KT, class VT>
std::vector<PathChoice> path_choices(const SdpaArgs<T, KT, VT>& args) {
  std::vector<PathChoice> choices;
  PathGuard guard;
  for (Isa isa : available_isas()) {
    choices.push_back({isa, DotInstructions::always});
    set_isa_limit(isa);
    set_dot_instructions(DotInstructions::always);
    // Under `always` the plan does not matter: no prefill units passed.
    if (!detail::runs_storage_dot(args, isa, false)) continue;
    choices.push_back({isa, DotInstructions::never});
    if (std::is_same_v<KT, bf16> && amx_bf16_ready()) {
      choices.push_back({isa, DotInstructions::always, false});
    }
  }
  return choices;
}

struct PathCheck {
  std::string failure;             // empty: every path agrees with the reference
  std::vector<float> last_output;  // the output of the last path, in index order
};

// Runs `args` (p's problem, its reference computed) on every available path and compares: empty,
// or what failed.
template <class KT, class VT, class T>
std::string check_paths(Problem& p, SdpaArgs<T, KT, VT> args) {
  const Case& c = p.c;
  const auto fail = [&](const std::string& what) { return what + "\n  case " + describe(c); };
  const SdpaArgs<T, KT, VT> uniform = args;
  PackedQueries<T> packing;
  if (!c.q_lens.empty()) args = packing.pack(uniform, c.q_lens);
  if (const Status s = can_implement(args); !s.is_ok()) {
    return fail(std::string("can_implement: ") + s.message());
  }
  const int workers = std::max(1, c.threads);
  const kernels::SdpaPlan plan = kernels::make_sdpa_plan(args, workers);
  std::ostringstream plan_text;
  const kernels::UnitGeometry& geometry = plan.geometry(plan.regime);
  plan_text << " (plan: q_block " << geometry.q_block << " rows " << geometry.rows << " heads "
            << geometry.heads << " units " << plan.units << " splits " << plan.splits << " tasks "
            << plan.tasks() << ")";
  if (plan.splits < c.expect_min_splits) {
    return fail("the plan splits the keys less than expected" + plan_text.str());
  }
  std::vector<std::byte> workspace(workspace_size(args, workers) + c.workspace_shift);

  PathGuard guard;
  for (const PathChoice& path : path_choices(args)) {
    set_isa_limit(path.isa);
    set_dot_instructions(path.dot);
    set_amx_tiles(path.amx_tiles);
    const std::string where = std::string("path ") + sdpa_path(args) + plan_text.str() + ": ";
    if (active_isa() != path.isa || std::string(sdpa_path()) != to_string(path.isa)) {
      return fail(where + "set_isa_limit did not select the path");
    }
    p.reset_outputs();
    if (!c.q_lens.empty()) packing.copy_outputs(args, uniform, true);
    const Status s = run_kernels(c, args, workspace);
    if (!s.is_ok())
      return fail(where + "run() failed after can_implement() passed: " + s.message());
    if (!c.q_lens.empty()) packing.unpack(args, uniform);
    p.widen_outputs<T>();
    const std::string wrong = failures(p, compare(p));
    if (!wrong.empty()) return fail(where + wrong);
  }
  return "";
}

// Builds `c`, runs the reference once and the kernels on every available path, and compares; K
// and V stored as KT and VT, q, gate and out as T (c.k_type's, c.v_type's and
// c.activation_type's elements). With `page_sizes`, the same problem and reference once more for
// each page size (K/V copied into pages of that size; 0: contiguous) instead of c.page_size.
template <class KT, class VT, class T = float>
PathCheck check_every_path_as(const Case& c, const std::vector<std::int64_t>& page_sizes = {}) {
  PathCheck result;
  Problem p(c);
  if (const Status s = p.run_reference<KT, VT, T>(); !s.is_ok()) {
    result.failure = std::string("reference::sdpa: ") + s.message() + "\n  case " + describe(c);
    return result;
  }
  for (std::int64_t page :
       page_sizes.empty() ? std::vector<std::int64_t>{c.page_size} : page_sizes) {
    p.c.page_size = page;
    SdpaArgs<T, KT, VT> args = p.args_as<T, KT, VT>();
    if (page > 0) args = p.paged(args);
    result.failure = check_paths(p, args);
    if (!result.failure.empty()) return result;
  }
  if (c.check_standalone_gate) {
    const std::string wrong = check_standalone_gate(p, (salt_of(c) & 1) != 0);
    if (!wrong.empty()) {
      result.failure = wrong + "\n  case " + describe(c);
      return result;
    }
  }
  for_each_index(p.out.view.extents,
                 [&](const auto& i) { result.last_output.push_back(p.out.view[i]); });
  return result;
}

// Each of `cases` with K/V of types k and v and activations of type `activations`
// (with_typed_activations) through check_every_path_as over `page_sizes`: every failure, empty
// where all agree.
template <ElementType k, ElementType v, ElementType activations = ElementType::f32>
std::string typed_case_failures(const std::vector<Case>& cases, DotPrecision precision,
                                const std::vector<std::int64_t>& page_sizes = {}) {
  std::string failures;
  for (Case c : cases) {
    c.with_kv_types(k, v).name += std::string(" k ") + to_string(k) + " v " + to_string(v);
    c = with_typed_activations(c, activations, precision);
    const PathCheck r =
        check_every_path_as<ElementOf<k>, ElementOf<v>, ElementOf<activations>>(c, page_sizes);
    if (!r.failure.empty()) failures += r.failure + "\n";
  }
  return failures;
}

// The same for a case whose K and V are f32.
inline PathCheck check_every_path(const Case& c) {
  if (c.k_type != ElementType::f32 || c.v_type != ElementType::f32) {
    return {"check_every_path: f32 K/V only (check_every_path_as for the others)", {}};
  }
  return check_every_path_as<float, float>(c);
}

}  // namespace gated_attention::testing::sdpa
