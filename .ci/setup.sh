#!/usr/bin/env bash
# One-time set-up of a fresh Debian machine for kjit: system packages, Python packages, the C++ build
# (core, CLI, tests, benchmarks) in build/, and the Python package installed with pip.
# Idempotent: what is already there is skipped. Needs the CUDA toolkit (NVRTC + headers) installed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

need_apt=()
for p in cmake g++ make nlohmann-json3-dev libssl-dev libgtest-dev libcli11-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== apt: installing ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ -z "${CUDA_HOME:-}" ] && [ ! -d /usr/local/cuda ] && ! command -v nvcc >/dev/null; then
  echo "kjit needs the CUDA toolkit (NVRTC and headers): install it or set CUDA_HOME" >&2
  exit 1
fi
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"

if ! $PY -c "import torch, pybind11, scikit_build_core, pytest, tqdm, matplotlib" >/dev/null 2>&1; then
  echo "== pip: installing torch and the build tools"
  $PY -m pip install -q --disable-pip-version-check "torch==2.11.*" "pybind11>=2.12" "scikit-build-core>=0.10" \
    pytest tqdm numpy ninja matplotlib
fi

echo "== C++ build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKJIT_BUILD_PYTHON=OFF >/dev/null
cmake --build build -j"$(nproc)"

echo "== Python package (pip install .)"
$PY -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
