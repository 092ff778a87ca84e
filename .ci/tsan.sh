#!/usr/bin/env bash
# The thread tests under ThreadSanitizer: 8 threads compiling (and, with a GPU, launching) through one
# Engine (tests/cpp/test_engine_threads.cpp; tests/cpp/gpu_test_engine_threads.cpp, which skips without
# a device), the remote tier's store shared by threads and cluster single flight against a real
# redis-server (tests/cpp/test_redis_store.cpp), and the background threads of compiles ahead
# (tests/cpp/test_background_jobs.cpp). Its own build in build-tsan/, only those binaries. Any TSan report fails the run
# (halt_on_error, and the log is searched as well).
#   bash .ci/tsan.sh [extra cmake arguments]     (after .ci/setup.sh has installed the dependencies)
# Suppressions: .ci/tsan.supp when it exists, and only for reports whose every frame is inside NVIDIA's
# closed libraries (libnvrtc*, libcuda), one commented line each saying why. Never for kjit code.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
tests=(test_engine_threads gpu_test_engine_threads test_redis_store test_background_jobs)

cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKJIT_BUILD_PYTHON=OFF -DKJIT_BUILD_BENCH=OFF \
  -DKJIT_SANITIZE=thread "$@" >/dev/null
cmake --build build-tsan -j"$(nproc)" --target "${tests[@]}"

TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 exitcode=66"
[ -f .ci/tsan.supp ] && TSAN_OPTIONS="$TSAN_OPTIONS suppressions=$PWD/.ci/tsan.supp"
export TSAN_OPTIONS
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
for t in "${tests[@]}"; do
  echo "== $t (ThreadSanitizer)"
  rc=0
  build-tsan/tests/cpp/"$t" 2>&1 | tee "$log" || rc=$?
  # A report that did not stop the process (say, one printed while it exits) fails the run too.
  if [ "$rc" -eq 0 ] && grep -Eq "(WARNING|ERROR|FATAL): ThreadSanitizer|ThreadSanitizer: reported" "$log"; then
    rc=66
  fi
  if [ "$rc" -ne 0 ]; then
    echo "== $t FAILED (exit $rc)" >&2
    status=1
  fi
done
exit "$status"
