// Every operation of one path's Simd over float arrays, for tests/test_simd.cpp. Included inside
// namespace simd_test::<path> (with `using S = <path>::Simd;`) and that path's target region, so
// that the operations run as the kernels run them.

// Applies `op` to lanes of a, b, c (each L floats; 4 L for reduce_add_4, 16 L for
// reduce_add_4x4) and writes the result to out. n: the lane count of partial loads and stores,
// the group width of swap_groups, the output stride of reduce_add_4x4.
inline void apply(Op op, const float* a, const float* b, const float* c, int n, float* out) {
  using V = S::V;
  const V x = S::load(a), y = S::load(b), z = S::load(c);
  switch (op) {
    case Op::zero: return S::store(out, S::zero());
    case Op::set1: return S::store(out, S::set1(a[0]));
    case Op::load: return S::store(out, x);
    case Op::load_shared: return S::store(out, S::load_shared(a));
    case Op::load_pinned: return S::store(out, S::load_pinned(a));
    case Op::load_partial: return S::store(out, S::load_partial(a, n));
    case Op::store_partial: return S::store_partial(out, x, n);
    case Op::fma: return S::store(out, S::fma(x, y, z));
    case Op::mul: return S::store(out, S::mul(x, y));
    case Op::add: return S::store(out, S::add(x, y));
    case Op::sub: return S::store(out, S::sub(x, y));
    case Op::max: return S::store(out, S::max(x, y));
    case Op::min: return S::store(out, S::min(x, y));
    case Op::round_nearest: return S::store(out, S::round_nearest(x));
    case Op::scale_pow2: return S::store(out, S::scale_pow2(x, y));
    case Op::select_less: return S::store(out, S::select_less(x, y, z, S::set1(-1.0f)));
    case Op::swap_groups: return S::store(out, S::swap_groups(x, n));
    case Op::reduce_add: out[0] = S::reduce_add(x); return;
    case Op::reduce_max: out[0] = S::reduce_max(x); return;
    case Op::reciprocal: return S::store(out, S::reciprocal(x));
    case Op::reduce_add_4: {
      const V v[4] = {S::load(a), S::load(a + S::kLanes), S::load(a + 2 * S::kLanes),
                      S::load(a + 3 * S::kLanes)};
      return S::reduce_add_4(v, out);
    }
    case Op::reduce_add_4x4: {
      V v[4][4];
      for (int k = 0; k < 4; ++k) {
        for (int r = 0; r < 4; ++r) v[k][r] = S::load(a + (4 * k + r) * S::kLanes);
      }
      return S::reduce_add_4x4(v, out, n);
    }
  }
}

// One vector of 16- or 8-bit elements widened to f32 (`type`: 0 bf16, 1 f16, 2 int8), whole
// (n < 0) or its first n lanes (load_partial).
inline void widen(int type, const void* p, int n, float* out) {
  const auto run = [&](const auto* e) {
    S::store(out, n < 0 ? S::load(e) : S::load_partial(e, n));
  };
  if (type == 0) return run(static_cast<const gated_attention::bf16*>(p));
  if (type == 1) return run(static_cast<const gated_attention::f16*>(p));
  run(static_cast<const std::int8_t*>(p));
}
