#!/usr/bin/env bash
# Set-up of a Debian/Ubuntu machine for kjit, as root or not: the system packages that are missing
# (apt, through sudo when not root), a Python virtual environment (.venv here, or the active one; see
# .ci/python_env.sh) with torch and the build tools, the C++ build (core, CLI, tests, benchmarks) in
# build/, and the Python package installed into that environment. Nothing is written into the system
# Python, so a PEP 668 ("externally managed") python3 works. Idempotent: what is there is skipped.
# Needs the CUDA toolkit (NVRTC + headers) installed.
#   bash .ci/setup.sh                               (python3 on PATH makes .venv)
#   PYTHON=/usr/bin/python3.12 bash .ci/setup.sh    (another interpreter makes .venv)
#   KJIT_TORCH="torch==2.15.*" bash .ci/setup.sh    (the torch installed when the environment has none)
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/python_env.sh

bash .ci/system_packages.sh

if [ -z "${CUDA_HOME:-}" ] && [ ! -d /usr/local/cuda ] && ! command -v nvcc >/dev/null; then
  echo "kjit needs the CUDA toolkit (NVRTC and headers): install it or set CUDA_HOME" >&2
  exit 1
fi
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"

# ---- the Python environment ----------------------------------------------------------------------
if [ ! -x "$PY" ]; then
  if [ -n "${VIRTUAL_ENV:-}" ]; then
    echo "VIRTUAL_ENV is $VIRTUAL_ENV but $PY does not exist: activate a working environment or deactivate" >&2
    exit 1
  fi
  command -v "$KJIT_BASE_PYTHON" >/dev/null || {
    echo "PYTHON=$KJIT_BASE_PYTHON is not a Python interpreter (not found, or not executable): set PYTHON to the python3 that .venv is to be made from" >&2
    exit 1
  }
  echo "== venv: $KJIT_VENV (from $("$KJIT_BASE_PYTHON" -c 'import sys; print(sys.executable, sys.version.split()[0])'))"
  "$KJIT_BASE_PYTHON" -m venv "$KJIT_VENV"
elif [ -n "${PYTHON:-}" ] && [ -z "${VIRTUAL_ENV:-}" ]; then
  want=$("$KJIT_BASE_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  have=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ "$want" != "$have" ]; then
    echo "PYTHON=$KJIT_BASE_PYTHON is Python $want but $KJIT_VENV was made with Python $have." >&2
    echo "Remove it (rm -rf $KJIT_VENV) to make it again from $KJIT_BASE_PYTHON, or unset PYTHON to keep it." >&2
    exit 1
  fi
fi
echo "== Python: $PY"
# torch only when the environment has none: an active environment's torch is what kjit is built for.
pkgs=()
"$PY" -c "import torch" >/dev/null 2>&1 || pkgs+=("$KJIT_TORCH_SPEC")
"$PY" -c "import pybind11, scikit_build_core, pytest, tqdm, numpy, matplotlib, ninja" >/dev/null 2>&1 ||
  pkgs+=("${KJIT_TOOLS[@]}")
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "== pip: installing ${pkgs[*]} into $KJIT_VENV"
  "$PY" -m pip install -q --disable-pip-version-check "${pkgs[@]}"
fi
"$PY" -c 'import torch; print("== torch", torch.__version__, "(CUDA", torch.version.cuda, end=")\n")'

echo "== C++ build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKJIT_BUILD_PYTHON=OFF >/dev/null
cmake --build build -j"$(nproc)"

echo "== Python package (pip install . into $KJIT_VENV)"
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
