# Install rules: headers, the exported target and a package config with a version file, so that
# find_package(gated_attention 0.1 CONFIG REQUIRED) works from an install prefix.
include(CMakePackageConfigHelpers)

set(GATED_ATTENTION_CMAKE_DIR "${CMAKE_INSTALL_DATADIR}/cmake/gated_attention")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(TARGETS gated_attention EXPORT gated_attentionTargets)
install(EXPORT gated_attentionTargets
  NAMESPACE gated_attention::
  DESTINATION "${GATED_ATTENTION_CMAKE_DIR}")

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/gated_attentionConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/gated_attentionConfig.cmake"
  INSTALL_DESTINATION "${GATED_ATTENTION_CMAKE_DIR}")
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/gated_attentionConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion
  ARCH_INDEPENDENT)
install(FILES
  "${PROJECT_SOURCE_DIR}/cmake/GatedAttentionOpenBLAS.cmake"
  "${PROJECT_BINARY_DIR}/gated_attentionConfig.cmake"
  "${PROJECT_BINARY_DIR}/gated_attentionConfigVersion.cmake"
  DESTINATION "${GATED_ATTENTION_CMAKE_DIR}")
