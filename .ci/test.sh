#!/usr/bin/env bash
# Set up (if needed) and run every test: C++ (ctest) and Python (pytest, with the environment's Python:
# .venv or the active one, see .ci/python_env.sh). GPU tests run when a CUDA device is present and skip
# with a reason otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh test
source .ci/python_env.sh
# The set-up installed redis-server: the remote tier's tests (a real server on 127.0.0.1) must run.
export KJIT_REQUIRE_REDIS=1
echo "== C++ tests (ctest)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
echo "== Python tests (pytest, $PY)"
# Run from a folder outside the source tree so that the installed package is what gets imported.
(cd tests/python && "$PY" -m pytest -q -p no:cacheprovider .)
