# Finds OpenBLAS (Debian/Ubuntu: libopenblas-dev) for the block's projections and defines the
# imported target gated_attention::openblas (its headers and library); sets
# GATED_ATTENTION_OPENBLAS_FOUND. Used by the project and by the installed package config.
if(TARGET gated_attention::openblas)
  set(GATED_ATTENTION_OPENBLAS_FOUND TRUE)
  return()
endif()
# openblas_config.h marks OpenBLAS's own cblas.h (other BLAS ship a cblas.h too); Debian keeps it
# per variant, the pthread one (safe for concurrent callers) first.
find_path(GATED_ATTENTION_OPENBLAS_INCLUDE_DIR openblas_config.h
  PATH_SUFFIXES openblas-pthread openblas)
find_library(GATED_ATTENTION_OPENBLAS_LIBRARY openblas PATH_SUFFIXES openblas-pthread)
mark_as_advanced(GATED_ATTENTION_OPENBLAS_INCLUDE_DIR GATED_ATTENTION_OPENBLAS_LIBRARY)
if(GATED_ATTENTION_OPENBLAS_INCLUDE_DIR AND GATED_ATTENTION_OPENBLAS_LIBRARY)
  add_library(gated_attention::openblas INTERFACE IMPORTED GLOBAL)
  set_target_properties(gated_attention::openblas PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${GATED_ATTENTION_OPENBLAS_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${GATED_ATTENTION_OPENBLAS_LIBRARY}")
  set(GATED_ATTENTION_OPENBLAS_FOUND TRUE)
else()
  set(GATED_ATTENTION_OPENBLAS_FOUND FALSE)
endif()
