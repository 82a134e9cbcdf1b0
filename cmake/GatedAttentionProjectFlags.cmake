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

# A library `name` holding the kernels (OBJECT, or SHARED with GATED_ATTENTION_KERNELS_SHARED),
# generated units that build in parallel
# (gated_attention/instantiate_kernels.hpp): one per ISA path for the f32 kernels, and with
# `typed` one per path and group of type combinations (GATED_ATTENTION_TYPED_KERNELS_<n>), so that
# no unit takes long; a path the platform lacks compiles to nothing. Targets linking it define
# GATED_ATTENTION_EXTERN_KERNELS, and with `typed` GATED_ATTENTION_EXTERN_TYPED_KERNELS.
function(gated_attention_add_kernels_library name typed)
  if(GATED_ATTENTION_KERNELS_SHARED)
    add_library(${name} SHARED)
  else()
    add_library(${name} OBJECT)
  endif()
  foreach(path SCALAR AVX2 AVX512 NEON)
    string(TOLOWER ${path} isa)
    set(unit ${CMAKE_CURRENT_BINARY_DIR}/${name}_${isa}.cpp)
    file(GENERATE OUTPUT ${unit} CONTENT
      "#define GATED_ATTENTION_INSTANTIATE_ONLY_${path} 1\n#include <gated_attention/instantiate_kernels.hpp>\n")
    target_sources(${name} PRIVATE ${unit})
  endforeach()
  if(typed)
    target_compile_definitions(${name} INTERFACE GATED_ATTENTION_EXTERN_TYPED_KERNELS)
    foreach(path SCALAR AVX2 AVX512 AVX512_BF16 NEON)
      string(TOLOWER ${path} isa)
      set(groups 0 1 2 3)
      if(path STREQUAL "AVX512_BF16")
        set(groups 1 2 3)  # those the storage dot reads
      endif()
      foreach(n ${groups})
        set(unit ${CMAKE_CURRENT_BINARY_DIR}/${name}_${isa}_group${n}.cpp)
        file(GENERATE OUTPUT ${unit} CONTENT
          "#define GATED_ATTENTION_INSTANTIATE_ONLY_${path} 1\n#define GATED_ATTENTION_INSTANTIATE_GROUP ${n}\n#include <gated_attention/instantiate_kernels.hpp>\n")
        target_sources(${name} PRIVATE ${unit})
      endforeach()
    endforeach()
  endif()
  target_link_libraries(${name} PUBLIC gated_attention::gated_attention)
  gated_attention_project_options(${name})
  target_compile_definitions(${name} INTERFACE GATED_ATTENTION_EXTERN_KERNELS)
endfunction()
