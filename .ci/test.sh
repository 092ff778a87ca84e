#!/usr/bin/env bash
# Set up (if needed) and run every test: C++ (ctest) and Python (pytest, with the environment's Python:
# .venv or the active one, see .ci/python_env.sh). GPU tests run when a CUDA device is present and skip
# with a reason otherwise. Exits non-zero when either ctest or pytest failed (pytest runs either way).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh test
source .ci/python_env.sh
# The set-up installed redis-server: the remote tier's tests (a real server on 127.0.0.1) must run.
export KJIT_REQUIRE_REDIS=1
# The full output of each run goes to a log (build/ctest.log, build/pytest.log; ctest's per-test results also
# to build/ctest-junit.xml); the terminal gets progress, failures in full, the skip reasons grouped with
# counts (.ci/test_report.py), and last the two summary lines: ctest's, then pytest's.
logs=$PWD/build
echo "== C++ tests (ctest; full log: build/ctest.log)"
ctest_status=0
"$PY" .ci/test_report.py ctest --log "$logs/ctest.log" --junit "$logs/ctest-junit.xml" -- \
  ctest --test-dir build --output-on-failure -j"$(nproc)" --output-junit "$logs/ctest-junit.xml" || ctest_status=$?
# pytest in KJIT_TEST_WORKERS processes (pytest-xdist; default: one per CPU, at most 2, so that GPU tests
# share a GPU two at a time at most; 0 runs them in pytest's own process).
workers=${KJIT_TEST_WORKERS:-$(n=$(nproc); echo $((n < 2 ? n : 2)))}
echo "== Python tests (pytest, $PY, $workers workers; full log: build/pytest.log)"
# Run from a folder outside the source tree so that the installed package is what gets imported.
pytest_status=0
"$PY" .ci/test_report.py pytest --log "$logs/pytest.log" --cwd tests/python -- \
  "$PY" -m pytest -q -p no:cacheprovider -rfEsxX -n "$workers" . || pytest_status=$?
echo "== Summary (full logs: build/ctest.log, build/pytest.log)"
"$PY" .ci/test_report.py summary --ctest-log "$logs/ctest.log" --ctest-status "$ctest_status" \
  --pytest-log "$logs/pytest.log" --pytest-status "$pytest_status"
