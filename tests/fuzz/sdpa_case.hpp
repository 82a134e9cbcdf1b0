// The differential fuzz case of ops/sdpa (with the fused and the standalone output gate): bytes ->
// a Case (tests/sdpa_problem.hpp) -> every ISA path the host supports against reference::sdpa,
// with the tolerance documented there. One place for the decoding and the checks, used by the
// libFuzzer target (fuzz_sdpa.cpp, clang only) and the replay test in the normal test binary
// (test_fuzz_replay.cpp: seeded random bytes plus every file of fuzz/corpus/).
//
// The bytes choose the configuration: shapes within the limits (head dims 1..512 with the
// specialised 64/80/96/128/256, dk != dv), each tensor's layout (BSHD, BHSD, KV-cache views,
// padded rows), misaligned pointers, masks and windows (huge ones too), q_len > kv_len, per-batch
// kv lengths (0 included), GQA ratios up to groups larger than a unit, sinks, softmax+1, lse,
// gate variants (elementwise, headwise, head-shared, query-independent, packed with q; sigmoid or
// SiLU; multiply or add; pre-activations up to +-1e4), statistics, 1-3 threads through run() or
// run_phase(), the workspace's start, the values' regime (logits up to +-80 or of +-1e4,
// q/k/v scaled by powers of two up to 2^+-100, denormal numbers), and K/V in f32, bf16, f16 or
// int8 (bf16 K with int8 V too), paged K/V and packed queries of different lengths. Eight bytes
// seed the values.
// Running out of bytes reads zeros: short inputs decode to simple cases.
//
// About one input in ten instead breaks one argument of a valid case (a wrong extent, an inner
// stride of 2, a negative extent or stride, a null pointer, overlapping outputs, kv_lens out of
// range, ...): can_implement() must name the tensor (and dimension), run() and run_phase() must
// return the same Status and write nothing, and workspace_size()/num_phases() must not fail.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "../sdpa_problem.hpp"

namespace gated_attention::fuzzing {

using testing::sdpa::Case;
using testing::sdpa::ElementType;
using testing::sdpa::GateKind;
using testing::sdpa::Layout;
using testing::sdpa::SinkKind;

// Bounded integers from a byte string; past its end every byte reads 0.
class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  // An integer in [lo, hi] (hi - lo < 2^32) from as many bytes as the range needs.
  std::int64_t range(std::int64_t lo, std::int64_t hi) {
    const auto span = static_cast<std::uint64_t>(hi - lo);
    std::uint64_t x = 0;
    for (std::uint64_t s = span; s != 0; s >>= 8) x = (x << 8) | next();
    return lo + static_cast<std::int64_t>(x % (span + 1));
  }
  // True with probability 1/n for random bytes; false once the bytes run out.
  bool one_in(std::int64_t n) { return range(0, n - 1) == n - 1; }
  template <class T, std::size_t N>
  T pick(const T (&options)[N]) {
    return options[range(0, static_cast<std::int64_t>(N) - 1)];
  }
  std::uint64_t u64() {
    std::uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x = (x << 8) | next();
    return x;
  }

 private:
  std::uint8_t next() { return pos_ < size_ ? data_[pos_++] : 0; }

  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// The argument a rejection case breaks.
enum class Corruption : std::uint8_t {
  none,
  k_dim,
  v_length,
  out_dim,
  gate_batch,
  lse_group,
  stats_length,
  q_inner_stride,
  k_negative_stride,
  v_null,
  q_null,
  out_negative_extent,
  kv_lens_entry,
  mask_window,
  scale_nan,
  out_overlaps_k,
  out_overlaps_gate,
  lse_overlaps_out,
  head_dim_limit,
  group_zero,
  sinks_exclusive,
  n_sink_negative,
  extent_overflow,
  workspace_too_small,
  count,
};

struct FuzzCase {
  Case c;
  Corruption corruption = Corruption::none;
};

// Multiply-adds of the reference (and of each path): cases above this are shrunk.
inline constexpr std::int64_t kMaxWork = 1'500'000;

inline std::int64_t work_of(const Case& c) {
  return c.batch * c.q_len * c.hq * c.kv_len * (c.dk + c.dv);
}

inline FuzzCase decode_case(const std::uint8_t* data, std::size_t size) {
  ByteReader r(data, size);
  FuzzCase f;
  Case& c = f.c;
  c.name = "fuzz";
  bool want_splits = false;
  switch (r.range(0, 9)) {
    case 5:  // edges: empty batches, lengths 0..3
      c.batch = r.range(0, 3);
      c.q_len = r.range(0, 3);
      c.kv_len = r.range(0, 3);
      break;
    case 6:  // decode
      c.batch = r.range(1, 3);
      c.q_len = r.range(1, 2);
      c.kv_len = r.range(1, 700);
      break;
    case 7:  // long decode: keys split across workers
      c.batch = r.range(1, 2);
      c.q_len = r.range(1, 3);
      c.kv_len = r.range(512, 1100);
      want_splits = true;
      break;
    case 8:  // prefill: several query blocks
      c.batch = 1;
      c.q_len = r.range(20, 200);
      c.kv_len = c.q_len + r.range(0, 60);
      break;
    case 9:  // more queries than keys: leading rows see no key
      c.batch = r.range(1, 2);
      c.q_len = r.range(5, 60);
      c.kv_len = r.range(0, c.q_len - 1);
      break;
    default:  // small
      c.batch = r.range(1, 2);
      c.q_len = r.range(1, 20);
      c.kv_len = r.range(1, 70);
      break;
  }
  c.hkv = r.range(1, 4);
  std::int64_t group = r.pick({1, 1, 2, 2, 3, 4, 5, 8, 16});
  if (r.one_in(40)) {  // a group larger than a unit's rows: one query position per unit
    group = r.pick({kernels::kTargetRows + 4, std::int64_t{300}});
    c.hkv = 1;
    c.q_len = std::min<std::int64_t>(c.q_len, 3);
  }
  const std::int64_t dims[] = {1,   2,   3,   4,   7,   8,   15,  16,  17,  20, 24,
                               31,  32,  33,  40,  48,  63,  64,  65,  80,  96, 100,
                               127, 128, 129, 160, 200, 256, 300, 384, 511, 512};
  if (r.range(0, 1) == 1) {
    c.dk = c.dv = r.pick({64, 80, 96, 128, 256});
  } else {
    c.dk = r.pick(dims);
    c.dv = r.range(0, 1) == 1 ? c.dk : r.pick(dims);
  }
  c.hq = c.hkv * group;
  // Shrink to the work limit, queries and heads first so long-key cases keep their keys.
  while (work_of(c) > kMaxWork) {
    if (c.q_len > 8) {
      c.q_len /= 2;
    } else if (group > 4) {
      group /= 2;
    } else if (c.dk + c.dv > 128) {
      c.dk = std::max<std::int64_t>(1, c.dk / 2);
      c.dv = std::max<std::int64_t>(1, c.dv / 2);
    } else if (c.hkv > 1) {
      --c.hkv;
    } else if (c.batch > 1) {
      --c.batch;
    } else {
      c.kv_len /= 2;
    }
    c.hq = c.hkv * group;
  }

  const std::int64_t span = c.kv_len + c.q_len;
  const std::int64_t huge[] = {std::numeric_limits<std::int64_t>::max(),
                               std::numeric_limits<std::int64_t>::max() - 1,
                               std::int64_t{1} << 62,
                               std::int64_t{1} << 31,
                               span,
                               -1};
  switch (r.range(0, 9)) {
    case 3:
    case 4:
      c.mask = Mask::causal();
      break;
    case 5:
      c.mask = Mask::causal_window(r.range(1, span + 1));
      break;
    case 6:
      c.mask = Mask::window(r.range(0, span), r.range(0, span));
      break;
    case 7:
      c.mask =
          r.range(0, 1) == 1 ? Mask::window(-1, r.range(0, 5)) : Mask::window(r.range(0, 5), -1);
      break;
    case 8:
      c.mask = Mask::window(r.range(0, 2), r.range(0, 2));
      break;
    case 9:
      c.mask = Mask::window(r.pick(huge), r.range(0, 1) == 1 ? r.pick(huge) : 0);
      break;
    default:
      c.mask = Mask::none();
      break;
  }
  if (r.range(0, 2) == 2) {
    for (std::int64_t b = 0; b < c.batch; ++b) {
      switch (r.range(0, 3)) {
        case 0:
          c.kv_lens.push_back(0);
          break;
        case 1:
          c.kv_lens.push_back(c.kv_len);
          break;
        default:
          c.kv_lens.push_back(r.range(0, c.kv_len));
          break;
      }
    }
  }
  c.sinks = r.pick({SinkKind::none, SinkKind::none, SinkKind::none, SinkKind::learned,
                    SinkKind::plus_one, SinkKind::some_neg_inf, SinkKind::large});
  c.lse = r.range(0, 1) == 1;
  c.gate = r.pick({GateKind::none, GateKind::none, GateKind::elementwise, GateKind::headwise,
                   GateKind::head_shared, GateKind::query_independent, GateKind::packed_with_q});
  c.activation = r.range(0, 1) == 1 ? GateActivation::silu : GateActivation::sigmoid;
  c.combine = r.one_in(4) ? GateCombine::add : GateCombine::multiply;
  c.extreme_gate = r.one_in(6);
  c.check_standalone_gate = c.gate != GateKind::none && r.one_in(3);  // a second reference run
  if (r.one_in(4)) c.with_stats(r.one_in(4) ? c.kv_len + 1 : r.pick({0, 1, 2, 4}));
  const Layout layouts[] = {Layout::bshd, Layout::bhsd, Layout::kv_cache, Layout::padded};
  c.q_layout = r.pick(layouts);
  c.k_layout = r.pick(layouts);
  c.v_layout = r.pick(layouts);
  c.out_layout = r.pick(layouts);
  c.misalign = static_cast<int>(r.range(0, 3));
  c.threads = want_splits ? static_cast<int>(r.range(2, 3)) : static_cast<int>(r.range(1, 3));
  c.run_phase = r.one_in(3);
  c.workspace_shift = static_cast<std::size_t>(r.range(0, 63));
  const double inv_sqrt_dk = 1.0 / std::sqrt(static_cast<double>(c.dk));
  switch (r.range(0, 3)) {
    case 1:
      c.scale = static_cast<float>(static_cast<double>(r.range(1, 40)) / 20.0 * inv_sqrt_dk);
      break;
    case 2:
      c.scale = static_cast<float>(-inv_sqrt_dk);
      break;
    default:
      break;
  }
  switch (r.range(0, 9)) {
    case 6:  // logits with a standard deviation of ~12, up to ~+-80 (test_sdpa's wide logits)
      c.scale = static_cast<float>(36.0 * inv_sqrt_dk);
      c.tol_scale = testing::kSdpaWideLogitsFactor;
      break;
    case 7:  // one-hot logits of +-1e4
      if (c.dk >= 2) {
        c.scale = 1.0f;
        c.one_hot_logit = 1e4;
        // The documented rtol covers the rounding of 64-term dot products; an n-term f32 sum is
        // off by up to n * 2^-24 relative, so it grows with dk.
        c.lse_rtol =
            testing::kSdpaHugeLogitsLseRtol * std::max(1.0, static_cast<double>(c.dk) / 64.0);
      }
      break;
    case 8:  // the same logits at other magnitudes
      c.q_exponent = static_cast<int>(r.range(-60, 60));
      c.v_exponent = static_cast<int>(r.range(-100, 100));
      break;
    case 9:  // denormal inputs (read as 0); small V
      c.denormals = true;
      if (r.range(0, 1) == 1) c.v_exponent = -100;
      break;
    default:
      break;
  }
  c.poison_invisible_keys = r.range(0, 1) == 1;
  if (r.one_in(10)) {
    f.corruption =
        static_cast<Corruption>(r.range(1, static_cast<std::int64_t>(Corruption::count) - 1));
  }
  c.salt = r.u64() | 1;  // nonzero: an explicit salt
  // K/V types last, so that inputs written before them keep decoding to the same f32 cases.
  const ElementType kv_types[][2] = {{ElementType::bf16, ElementType::bf16},
                                     {ElementType::f16, ElementType::f16},
                                     {ElementType::i8, ElementType::i8},
                                     {ElementType::bf16, ElementType::i8}};
  const std::int64_t kv = r.range(0, 7);
  if (kv < 4 && f.corruption == Corruption::none) {
    c.with_kv_types(kv_types[kv][0], kv_types[kv][1]);
    if (c.k_type == ElementType::f16 ||
        c.v_type == ElementType::f16) {  // within f16's exponent range
      c.q_exponent = std::clamp(c.q_exponent, -8, 8);
      c.v_exponent = std::clamp(c.v_exponent, -8, 8);
    }
    // The storage dot precision (not with denormal inputs: the kernels quantise q with them
    // flushed, the reference does not), with its tolerance (tests/test_kv_types.cpp).
    if (!c.denormals && r.range(0, 1) == 1) {
      c.with_precision(DotPrecision::storage);
      c.tol_scale *= testing::sdpa::storage_tol_scale(c.v_type);
    }
    // q, gate and out in the cache's type too (bf16 and f16 caches), drawn last likewise.
    if (c.k_type == c.v_type && c.k_type != ElementType::i8 && r.range(0, 1) == 1) {
      c.with_activation_type(c.k_type);
    }
  }
  // Paged K/V, drawn last likewise: shuffled pages, entries sharing the pages of a prefix all of
  // them hold (not with one-hot logits, whose queries target their own entry's keys, nor with NaN
  // in the keys an entry does not see, which another entry may).
  if (f.corruption == Corruption::none && r.one_in(3)) {
    std::int64_t shortest = c.kv_len;
    for (std::int64_t n : c.kv_lens) shortest = std::min(shortest, n);
    const std::int64_t page = r.pick({1, 3, 7, 16, 32, 256});
    const std::int64_t shared = r.range(0, std::max<std::int64_t>(shortest, 0));
    const bool can_share = c.one_hot_logit == 0.0 && !c.poison_invisible_keys;
    c.with_pages(page, can_share ? shared : 0);
  }
  // Packed queries, drawn last likewise: each entry its first 0..q_len queries, no more than its
  // keys under a right-bounded (causal) mask.
  if (f.corruption == Corruption::none && r.one_in(3)) {
    for (std::int64_t b = 0; b < c.batch; ++b) {
      const std::int64_t keys =
          c.kv_lens.empty() ? c.kv_len : c.kv_lens[static_cast<std::size_t>(b)];
      const std::int64_t most = c.mask.window_right >= 0 ? std::min(c.q_len, keys) : c.q_len;
      c.q_lens.push_back(r.range(0, most));
    }
  }
  return f;
}

// check_every_path() for the case's K/V types.
inline testing::sdpa::PathCheck check_every_kv_type(const Case& c) {
  using testing::sdpa::check_every_path_as;
  if (c.activation_type == ElementType::bf16) return check_every_path_as<bf16, bf16, bf16>(c);
  if (c.activation_type == ElementType::f16) return check_every_path_as<f16, f16, f16>(c);
  if (c.k_type == ElementType::bf16 && c.v_type == ElementType::bf16) {
    return check_every_path_as<bf16, bf16>(c);
  }
  if (c.k_type == ElementType::f16) return check_every_path_as<f16, f16>(c);
  if (c.k_type == ElementType::i8) return check_every_path_as<std::int8_t, std::int8_t>(c);
  if (c.k_type == ElementType::bf16) return check_every_path_as<bf16, std::int8_t>(c);
  return testing::sdpa::check_every_path(c);
}

// Breaks one argument of a valid case. Returns false when the case cannot show it (for example a
// null pointer into an empty view, which is allowed); otherwise sets what the message must contain.
inline bool corrupt(Corruption what, const testing::sdpa::Problem& p, SdpaArgs<float>& a,
                    std::vector<std::int64_t>& kv_lens, std::vector<float>& sink_logits,
                    std::string* expected) {
  const Case& c = p.c;
  const auto mutable_data = [](const float* x) { return const_cast<float*>(x); };
  switch (what) {
    case Corruption::k_dim:
      a.k.extents[3] += 1;
      *expected = "k: dim 3";
      return true;
    case Corruption::v_length:
      a.v.extents[1] += 1;
      *expected = "v: dim 1";
      return true;
    case Corruption::out_dim:
      a.out.extents[4] += 1;
      *expected = "out: dim 4";
      return true;
    case Corruption::gate_batch:
      if (!a.gate.enabled()) return false;
      a.gate.values.extents[0] += 1;
      *expected = "gate: dim 0";
      return true;
    case Corruption::lse_group:
      if (!c.lse) return false;
      a.maybe_lse.extents[3] += 1;
      *expected = "lse: dim 3";
      return true;
    case Corruption::stats_length:
      if (!c.stats) return false;
      a.stats.gate_mean.extents[1] += 1;
      *expected = "stats.gate_mean: dim 1";
      return true;
    case Corruption::q_inner_stride:
      if (a.q.empty() || c.dk < 2) return false;
      a.q.strides[4] = 2;
      *expected = "q: dim 4";
      return true;
    case Corruption::k_negative_stride:
      a.k.strides[1] = -1;
      *expected = "k: dim 1";
      return true;
    case Corruption::v_null:
      if (a.v.empty()) return false;
      a.v.data = nullptr;
      *expected = "v: null";
      return true;
    case Corruption::q_null:
      if (a.q.empty()) return false;
      a.q.data = nullptr;
      *expected = "q: null";
      return true;
    case Corruption::out_negative_extent:
      a.out.extents[0] = -1;
      *expected = "out: dim 0";
      return true;
    case Corruption::kv_lens_entry:
      if (c.batch == 0) return false;
      kv_lens.assign(static_cast<std::size_t>(c.batch), 0);
      kv_lens.back() = (c.salt & 2) ? c.kv_len + 1 : -1;
      a.maybe_kv_lens = kv_lens.data();
      *expected = "kv_lens: entry";
      return true;
    case Corruption::mask_window:
      a.mask.window_right = -2;
      *expected = "mask:";
      return true;
    case Corruption::scale_nan:
      a.scale = std::numeric_limits<float>::quiet_NaN();
      *expected = "scale:";
      return true;
    case Corruption::out_overlaps_k:
      if (a.k.empty() || a.out.empty()) return false;
      a.out.data = mutable_data(a.k.data);
      *expected = "overlaps";  // out, or a statistics view, against out's new place
      return true;
    case Corruption::out_overlaps_gate:
      if (!a.gate.enabled() || a.gate.values.empty() || a.out.empty()) return false;
      a.out.data = mutable_data(a.gate.values.data);
      *expected = "overlaps";
      return true;
    case Corruption::lse_overlaps_out:
      if (!c.lse || a.maybe_lse.empty()) return false;
      a.maybe_lse.data = a.out.data;
      *expected = "lse: overlaps out";
      return true;
    case Corruption::head_dim_limit:
      a.q.extents[4] = kMaxHeadDim + 1;
      a.k.extents[3] = kMaxHeadDim + 1;
      *expected = "q: dim 4";
      return true;
    case Corruption::group_zero:
      a.q.extents[3] = 0;
      *expected = "q: dim 3";
      return true;
    case Corruption::sinks_exclusive:
      sink_logits.assign(static_cast<std::size_t>(c.hq), 0.0f);
      a.maybe_sink_logits = sink_logits.data();
      a.softmax_plus_one = true;
      *expected = "sinks:";
      return true;
    case Corruption::n_sink_negative:
      if (!c.stats) return false;
      a.stats.n_sink = -1;
      *expected = "stats.n_sink";
      return true;
    case Corruption::extent_overflow:
      if (a.k.extents[0] == 0) return false;
      a.k.extents[1] = std::int64_t{1} << 62;
      *expected = "k: dim 1";
      return true;
    case Corruption::workspace_too_small:
      *expected = "workspace:";
      return true;
    case Corruption::none:
    case Corruption::count:
      break;
  }
  return false;
}

// Checks a rejection case; returns what went wrong, empty when all is well.
inline std::string check_rejection(const FuzzCase& f) {
  testing::sdpa::Problem p(f.c);
  SdpaArgs<float> a = p.args();
  std::vector<std::int64_t> kv_lens;
  std::vector<float> sink_logits;
  std::string expected;
  if (!corrupt(f.corruption, p, a, kv_lens, sink_logits, &expected)) return "";
  const std::string where = "rejection '" + expected + "': ";
  const bool workspace_case = f.corruption == Corruption::workspace_too_small;
  const StatusCode code =
      workspace_case ? StatusCode::workspace_too_small : StatusCode::invalid_argument;
  const int workers = std::max(1, f.c.threads);
  // Neither may fail on any argument.
  const std::size_t bytes = workspace_size(a, workers);
  const int phases = num_phases(a, workers);
  if (phases < 1 || phases > 2) return where + "num_phases() = " + std::to_string(phases);
  const Status checked = can_implement(a);
  if (!workspace_case) {
    if (checked.code() != code ||
        std::string(checked.message()).find(expected) == std::string::npos) {
      return where + "can_implement() returned '" + checked.message() + "'";
    }
  } else if (!checked.is_ok() || bytes == 0) {
    return where + "the case itself is not valid: " + checked.message();
  }
  std::vector<std::byte> workspace(bytes + 64);
  const std::size_t given = workspace_case ? bytes - 1 : workspace.size();
  const Workspace ws(workspace.data(), given);
  testing::sdpa::PathGuard guard;
  for (Isa isa : testing::available_isas()) {
    set_isa_limit(isa);
    p.reset_outputs();
    const Executor executor =
        f.c.threads > 1 ? testing::sdpa::shared_pool(f.c.threads).executor() : Executor{};
    const Status by_run = run(a, ws, executor);
    const Status by_phase = run_phase(a, ws, 0, 0, workers);
    for (const Status* s : {&by_run, &by_phase}) {
      if (s->code() != code || std::string(s->message()).find(expected) == std::string::npos ||
          (!workspace_case && std::string(s->message()) != checked.message())) {
        return where + "run()/run_phase() on " + to_string(isa) + " returned '" + s->message() +
               "', can_implement() '" + checked.message() + "'";
      }
    }
    const auto written = [](const std::vector<float>& storage, float sentinel) {
      for (float x : storage) {
        if (!(x == sentinel)) return true;
      }
      return false;
    };
    bool any = written(p.out.storage, testing::sdpa::kOutSentinel) ||
               written(p.lse.storage, testing::sdpa::kLseSentinel);
    for (const auto& s : p.stats) any = any || written(s.storage, testing::sdpa::kOutSentinel);
    if (any) return where + "a rejected call wrote output on " + to_string(isa);
  }
  return "";
}

inline std::string hex(const std::uint8_t* data, std::size_t size) {
  std::string s;
  char buf[4];
  for (std::size_t i = 0; i < size; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", data[i]);
    s += buf;
  }
  return s;
}

// Decodes and checks one input; returns what went wrong (with the case and the input bytes),
// empty when every path agrees with the reference.
inline std::string check_input(const std::uint8_t* data, std::size_t size) {
  const FuzzCase f = decode_case(data, size);
  std::string failure =
      f.corruption == Corruption::none ? check_every_kv_type(f.c).failure : check_rejection(f);
  if (failure.empty()) return failure;
  if (f.corruption != Corruption::none) failure += "\n  case " + testing::sdpa::describe(f.c);
  return failure + "\n  input (hex) " + hex(data, size);
}

}  // namespace gated_attention::fuzzing
