#!/usr/bin/env bash
# Set up (if needed; the demo's set-up: no test tools, see .ci/setup.sh) and run the demo: on a GPU it compiles, caches and runs the built-in kernels and
# the seed examples with timings; without one it compiles for a named architecture (default sm_90) and
# says so in one line. It ends with what to do next (python/kjit/demo.py). Extra arguments go to `python -m kjit demo`. It runs with the set-up's
# Python environment (.venv or the active one, see .ci/python_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh demo
source .ci/python_env.sh
echo "== demo: $PY -m kjit demo $* (from /tmp)"
cd /tmp && "$PY" -m kjit demo "$@"
