#!/usr/bin/env bash
# Set-up of a Debian/Ubuntu machine for kjit, as root or not: the system packages that are missing
# (apt, through sudo when not root), a Python virtual environment (.venv here, or the active one; see
# .ci/python_env.sh) with torch and the build tools, and one build of kjit in build/ installed into that
# environment (.ci/build.sh). Nothing is written into the system Python, so a PEP 668 ("externally
# managed") python3 works. Idempotent: what is there is skipped. Needs the CUDA toolkit (NVRTC + headers).
#   bash .ci/setup.sh [demo|test]                   (default test; demo: what the demo needs, no test tools)
#   PYTHON=/usr/bin/python3.12 bash .ci/setup.sh    (another interpreter makes .venv)
#   KJIT_TORCH="torch==2.15.*" bash .ci/setup.sh    (the torch installed when the environment has none)
# Every phase that can take long says so and prints a line at least every 20 s (.ci/phase.py; the number
# is QUIET_S in .ci/quiet.py, which README.md and docs/install.md state too: tests/python/test_setup_promises.py).
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/python_env.sh
profile=${1:-test}
case "$profile" in
  demo|test) ;;
  *) echo "setup.sh: unknown set-up '$profile' (allowed: demo, test)" >&2; exit 2 ;;
esac
phase() { "$KJIT_BASE_PYTHON" .ci/phase.py "$@"; }
command -v "$KJIT_BASE_PYTHON" >/dev/null || {
  echo "PYTHON=$KJIT_BASE_PYTHON is not a Python interpreter (not found, or not executable): set PYTHON to the python3 that .venv is to be made from" >&2
  exit 1
}

bash .ci/system_packages.sh "$profile"

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
first=""
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  pkgs+=("$KJIT_TORCH_SPEC")
  first="torch and its CUDA libraries: about 2.5 GB to download, 5 GB in $KJIT_VENV; the download takes what your link takes, the install about a minute"
fi
"$PY" -c "import pybind11, scikit_build_core, ninja, tqdm, numpy" >/dev/null 2>&1 || pkgs+=("${KJIT_BUILD_TOOLS[@]}")
[ "$profile" = demo ] || "$PY" -c "import pytest, xdist, matplotlib, redis, cutlass_library" >/dev/null 2>&1 ||
  pkgs+=("${KJIT_TEST_TOOLS[@]}")
if [ ${#pkgs[@]} -gt 0 ]; then
  # Not -q: pip names each package as it downloads and installs it.
  phase pip --what "installing ${pkgs[*]} into $KJIT_VENV" ${first:+--first-time "$first"} -- \
    "$PY" -m pip install --disable-pip-version-check "${pkgs[@]}"
fi
"$PY" -c 'import torch; print("== torch", torch.__version__, "(CUDA", torch.version.cuda, end=")\n")'

first=""
if [ ! -f build/CMakeCache.txt ] || ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' build/CMakeCache.txt; then
  # Measured (docs/install.md): the demo's build 6 min 10 s and 7 min 20 s on 2 CPUs (README.md says 6-8 min
  # too); the tests' set-up from nothing adds the about 3 min of the tests' build below.
  first="$([ "$profile" = demo ] && echo 6-8 || echo 9-11) min on 2 CPUs; later runs compile only what changed"
elif [ "$profile" = test ] && ! grep -q '^KJIT_BUILD_TESTS:BOOL=ON$' build/CMakeCache.txt; then
  first="the C++ tests, CLI and benchmarks on top of the demo's build: about 3 min on 2 CPUs"
fi
phase build --what "kjit ($([ "$profile" = demo ] && echo "core, Python module" || echo "core, Python module, CLI, C++ tests, benchmarks")) in build/, installed into $KJIT_VENV" \
  ${first:+--first-time "$first"} -- bash .ci/build.sh "$profile"
