#!/usr/bin/env bash
# The whole test suite: installs missing dependencies, builds with warnings as errors, runs ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cmake --preset dev
cmake --build --preset dev
ctest --preset dev
