#!/usr/bin/env bash
# Set up (if needed) and run the demo: on a GPU it compiles, caches and runs the built-in kernels and
# the seed examples with timings; without one it compiles for a named architecture (default sm_90) and
# says what it could not run. Extra arguments go to `python -m kjit demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh
PY=${PYTHON:-python3}
cd /tmp && $PY -m kjit demo "$@"
