#!/usr/bin/env bash
# Builds the benchmarks in Release with -march=native, and without it (the block rows a consumer
# with CMake's defaults gets), and prints the gated vs ungated attention report (table; JSON and
# PNG in build/report/).
#   bash tools/benchmark_report.sh           quick mode (about 3 minutes on 2 cores)
#   bash tools/benchmark_report.sh --full    every shape, sweep point and thread count
#   bash tools/benchmark_report.sh --peers F adds the columns of tools/peers.py's JSON F
# Any argument goes to tools/report.py (see its --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh --report
cmake --preset release
cmake --build --preset release --target gated_attention_bench
cmake --preset release-portable
cmake --build --preset release-portable --target gated_attention_bench
# Debian's interpreter: python3-matplotlib is installed for it (a python3 earlier on PATH, e.g. a
# virtualenv, may lack matplotlib; the report then prints its table and JSON without the PNG).
python=/usr/bin/python3
[[ -x "$python" ]] || python=python3
GATED_ATTENTION_REPORT_COMMAND="bash tools/benchmark_report.sh${*:+ $*}" "$python" tools/report.py \
  --portable-bench build/release-portable/bench/gated_attention_bench "$@"
