#!/usr/bin/env bash
# The main job: builds in Release with -march=native and compares gated with ungated attention.
#   bash tools/main_job.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cmake --preset release
cmake --build --preset release --target gated_vs_ungated
./build/release/examples/gated_vs_ungated "$@"
