#!/usr/bin/env bash
# setup.sh: installs hetcomm's system dependencies from Debian's packages (idempotent: only what is missing) and
# builds everything into build/. Run as root or with sudo available. Nothing is downloaded except apt packages.
#   scripts/setup.sh            install + configure + build
#   BUILD_TYPE=Debug scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libboost-dev libssl-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libucx-dev ucx-utils libibverbs-dev rdma-core libhwloc-dev hwloc libopenblas-dev libglpk-dev
  iproute2 procps time
  python3-torch libtorch-dev pybind11-dev python3-matplotlib
  openmpi-bin openssl slurmctld slurmd slurm-client munge
  clang libclang-rt-14-dev
  fortunes
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all system packages present"
fi

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "setup: built into $BUILD_DIR/ (executables in $BUILD_DIR/bin)"
