# Builds and runs tests/consumer as a separate project in WORK_DIR.
#   MODE=find_package     install the library into WORK_DIR/prefix, then find_package it
#   MODE=add_subdirectory / fetchcontent   take the library from SOURCE_DIR
#   EXPECT_BACKEND        the projection backend the consumer must get (openblas or eigen)
#   OPENBLAS              if set, the consumer's GATED_ATTENTION_OPENBLAS option
file(REMOVE_RECURSE "${WORK_DIR}")

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()

set(consumer_args -DMODE=${MODE} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release
    -DEXPECT_BACKEND=${EXPECT_BACKEND})
if(DEFINED OPENBLAS)
  list(APPEND consumer_args -DGATED_ATTENTION_OPENBLAS=${OPENBLAS})
endif()
if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/library"
      -DCMAKE_CXX_COMPILER=${CXX}
      -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix
      -DGATED_ATTENTION_BUILD_TESTS=OFF -DGATED_ATTENTION_BUILD_BENCH=OFF
      -DGATED_ATTENTION_BUILD_EXAMPLES=OFF)
  run(${CMAKE_COMMAND} --install "${WORK_DIR}/library")
  list(APPEND consumer_args -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
else()
  list(APPEND consumer_args -DGATED_ATTENTION_SOURCE_DIR=${SOURCE_DIR})
endif()

run(${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}" -B "${WORK_DIR}/consumer" ${consumer_args})
run(${CMAKE_COMMAND} --build "${WORK_DIR}/consumer")
run("${WORK_DIR}/consumer/consumer")
