// The fused gate reading q and the gate straight from a q_proj output, without copies: the
// Qwen3-Next layout (per query head [q_h | gate_h]), the official repository's grouped layout
// (per KV group [q for g heads | gate for g heads], headwise [q (g*D) | gate (g)]) and a separate
// gate projection. Every path against reference::sdpa over the same views. (The views' index
// formulas themselves are checked independently in test_reference_block.cpp.)
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "support.hpp"

namespace ga = gated_attention;

TEST_CASE("fused gate from q_proj outputs of every layout on every path", "[sdpa][gate][layout]") {
  std::uint64_t salt = 500;
  for (auto layout :
       {ga::QGateLayout::qwen3_next, ga::QGateLayout::grouped, ga::QGateLayout::separate}) {
    for (auto mode : {ga::GateMode::elementwise, ga::GateMode::headwise}) {
      ga::BlockConfig c;
      c.hidden_size = 64;
      c.num_q_heads = 8;
      c.num_kv_heads = 2;
      c.head_dim = 32;
      c.gate_mode = mode;
      c.q_gate_layout = layout;
      REQUIRE(ga::validate(c).is_ok());
      const std::int64_t b = 2, l = 9, kv_len = 40;
      auto rng = ga::testing::make_rng(++salt);
      const auto q_proj = ga::testing::random_vector<float>(rng, b * l * c.q_proj_rows(), -2, 2);
      const auto gate_proj = ga::testing::random_vector<float>(rng, b * l * c.gate_width(), -4, 4);
      const auto k = ga::testing::random_vector<float>(rng, b * kv_len * c.kv_width());
      const auto v = ga::testing::random_vector<float>(rng, b * kv_len * c.kv_width());
      const auto q_rows =
          ga::TensorView<const float, 3>::contiguous(q_proj.data(), {b, l, c.q_proj_rows()});
      const auto gate_rows = c.has_gate_proj() ? ga::TensorView<const float, 3>::contiguous(
                                                     gate_proj.data(), {b, l, c.gate_width()})
                                               : q_rows;

      ga::SdpaArgs<float> args;
      args.q = ga::q_view(c, q_rows);
      args.k = ga::TensorView<const float, 4>::contiguous(k.data(), {b, kv_len, 2, 32});
      args.v = ga::TensorView<const float, 4>::contiguous(v.data(), {b, kv_len, 2, 32});
      args.mask = ga::Mask::causal();
      args.gate.values = ga::gate_view(c, gate_rows);
      std::vector<float> expected(static_cast<std::size_t>(b * l * c.q_width()));
      args.out =
          ga::split_heads(ga::TensorView<float, 4>::contiguous(expected.data(), {b, l, 8, 32}), 2);
      REQUIRE(ga::reference::sdpa(args).is_ok());

      for (ga::Isa isa : ga::testing::available_isas()) {
        ga::set_isa_limit(isa);
        INFO("path " << ga::to_string(isa) << ", layout " << static_cast<int>(layout) << ", mode "
                     << static_cast<int>(mode) << ", seed " << ga::testing::test_seed());
        std::vector<float> out(expected.size(), NAN);
        args.out =
            ga::split_heads(ga::TensorView<float, 4>::contiguous(out.data(), {b, l, 8, 32}), 2);
        std::vector<unsigned char> ws(ga::workspace_size(args, 1));
        const ga::Status s = ga::run(args, ga::Workspace(ws.data(), ws.size()));
        INFO(s.message());
        REQUIRE(s.is_ok());
        CHECK(ga::testing::max_tolerance_ratio(out, expected, 1e-5, 1e-4) <= 1.0);
      }
      ga::clear_isa_limit();
    }
  }
}
