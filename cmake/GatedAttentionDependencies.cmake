# Finds the dependencies; a missing one stops configuration with the Debian package to install.
set(GATED_ATTENTION_INSTALL_HINT
  "Run 'sudo bash tools/install_deps.sh' (Debian/Ubuntu) or install the package by hand.")

macro(gated_attention_require package version debian_package)
  find_package(${package} ${version} CONFIG QUIET)
  if(NOT ${package}_FOUND)
    message(FATAL_ERROR
      "gated_attention needs ${package} ${version} or newer, which was not found.\n"
      "Debian/Ubuntu package: ${debian_package}  (apt-get install ${debian_package})\n"
      "${GATED_ATTENTION_INSTALL_HINT}")
  endif()
endmacro()

gated_attention_require(Eigen3 3.4 libeigen3-dev)
if(GATED_ATTENTION_BUILD_TESTS)
  gated_attention_require(Catch2 2.13 catch2)
endif()
if(GATED_ATTENTION_BUILD_TESTS OR GATED_ATTENTION_BUILD_EXAMPLES)
  # The safetensors reader (include/gated_attention/io/) of the tests and the qwen3_next_attention
  # example; not a dependency of the library.
  gated_attention_require(nlohmann_json 3.10 nlohmann-json3-dev)
endif()
if(GATED_ATTENTION_BUILD_BENCH)
  gated_attention_require(benchmark 1.7 libbenchmark-dev)
endif()
