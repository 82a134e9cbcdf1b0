// The two translation units of the ODR check call the library only through these functions:
// odr_native.cpp is compiled with -march=native, odr_default.cpp with the project's flags.
// Each sets the ISA limit, reports the path it dispatched to and runs sdpa (then the output gate
// in place on its output) with its own copy of every inline function the linker did not merge.
#pragma once

#include <gated_attention/gated_attention.hpp>

namespace odr_check {

struct Call {
  const char* path = nullptr;  // sdpa_path() after set_isa_limit()
  gated_attention::Status sdpa;
  gated_attention::Status gate;
};

Call run_in_native_unit(const gated_attention::SdpaArgs<float>& args, gated_attention::Isa isa,
                        int workers);
Call run_in_default_unit(const gated_attention::SdpaArgs<float>& args, gated_attention::Isa isa,
                         int workers);
// Whether the unit was compiled with AVX2 / AVX-512 code generation enabled.
bool native_unit_has_avx512();
bool default_unit_has_avx2();

}  // namespace odr_check
