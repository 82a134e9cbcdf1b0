# Flags for this project's own executables (tests, benches, examples); never for consumers.
function(gated_attention_project_options target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
    if(GATED_ATTENTION_WERROR)
      target_compile_options(${target} PRIVATE -Werror)
    endif()
    if(GATED_ATTENTION_NATIVE)
      target_compile_options(${target} PRIVATE -march=native)
      # GCC 12's AVX-512 intrinsics warn about their own undefined-value idiom (GCC bug 105593)
      # wherever they are inlined, here into Eigen's GEMM packing.
      if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
        target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
      endif()
    endif()
  endif()
endfunction()

# Adds to `target` the f32 kernels as one generated unit per ISA path
# (gated_attention/instantiate_kernels.hpp), which build in parallel; a path the platform lacks
# compiles to nothing. Units linking `target` then define GATED_ATTENTION_EXTERN_KERNELS.
function(gated_attention_add_kernel_units target)
  foreach(path SCALAR AVX2 AVX512 NEON)
    string(TOLOWER ${path} name)
    set(unit ${CMAKE_CURRENT_BINARY_DIR}/${target}_${name}.cpp)
    file(GENERATE OUTPUT ${unit} CONTENT
      "#define GATED_ATTENTION_INSTANTIATE_ONLY_${path} 1\n#include <gated_attention/instantiate_kernels.hpp>\n")
    target_sources(${target} PRIVATE ${unit})
  endforeach()
endfunction()
