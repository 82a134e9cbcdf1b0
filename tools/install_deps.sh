#!/usr/bin/env bash
# Installs what gated_attention needs from Debian/Ubuntu packages, only what is missing.
#   bash tools/install_deps.sh          build, tests, benchmarks
#   bash tools/install_deps.sh --ci     also what CI uses (clang for the second compiler, the
#                                       aarch64 cross compiler and qemu-user for the neon job)
#   bash tools/install_deps.sh --report also what tools/benchmark_report.sh uses (python3 and
#                                       python3-matplotlib for the plot); CI does not need them
# As root it runs apt-get; otherwise it prints the command to run and exits with status 1.
set -euo pipefail

packages=(cmake make g++ libeigen3-dev libopenblas-dev catch2 nlohmann-json3-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin)
for arg in "$@"; do
  case "$arg" in
    --ci) packages+=(clang g++-aarch64-linux-gnu qemu-user) ;;
    --report) packages+=(python3 python3-matplotlib) ;;
    *) echo "install_deps: unknown option $arg (use --ci, --report)" >&2; exit 2 ;;
  esac
done

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install_deps: not a Debian/Ubuntu system. Install these (or your distribution's" >&2
  echo "equivalents: Eigen 3.4, OpenBLAS (optional), Catch2 2.13, nlohmann-json 3.10," >&2
  echo "Google Benchmark 1.7, CMake >= 3.16, an MPI for the tests of the dev preset):" >&2
  echo "  ${packages[*]}" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install_deps: missing packages: ${missing[*]}" >&2
  echo "install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
