# Cross-compiles for aarch64 Linux with Debian's g++-aarch64-linux-gnu; the tests run under
# qemu-user (CMAKE_CROSSCOMPILING_EMULATOR: catch_discover_tests and ctest go through it).
#   cmake --preset aarch64        (apt-get install g++-aarch64-linux-gnu qemu-user)
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(GATED_ATTENTION_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${GATED_ATTENTION_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${GATED_ATTENTION_CROSS_TRIPLE}-g++)

# Debian's cross sysroot: aarch64 libraries and headers.
set(CMAKE_FIND_ROOT_PATH /usr/${GATED_ATTENTION_CROSS_TRIPLE})
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/${GATED_ATTENTION_CROSS_TRIPLE})

# Programs run on the host; libraries and headers come from the sysroot only. Packages may also
# come from the host: the ones this project needs there (Eigen3, Catch2) are header-only and
# architecture-independent (/usr/share/eigen3/cmake, /usr/lib/cmake/Catch2).
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
