#!/usr/bin/env bash
# The C++ suites under AddressSanitizer + UndefinedBehaviorSanitizer (CPU tests; GPU ones skip without
# a device). A separate build in build-asan/; any sanitizer report fails the test that triggered it.
#   bash .ci/sanitize.sh            (after .ci/setup.sh has installed the dependencies)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
# -O1, as AddressSanitizer's documentation advises: the stage's build (most of its time) takes about half
# of what -O2 takes, and the tests run as they did.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" \
  -DKJIT_BUILD_PYTHON=OFF -DKJIT_BUILD_BENCH=OFF -DKJIT_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j"$(nproc)"
# Leaks inside NVIDIA's closed libraries (NVRTC, the driver) are theirs, not ours: suppressed by name.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$PWD/.ci/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -E '^Trace\.'
# test_trace has NVTX dlopen its injection library (tests/cpp/nvtx_recorder), which the test dlopens too. At
# exit, LeakSanitizer's scan of the main thread's dynamic TLS then reads a stale entry (a range such as
# 0xf66-0x2800002068) and its tracer dies of signal 11 ("LeakSanitizer has encountered a fatal error"), in
# some working directories only (2026-11-27: in build-asan/tests/cpp, where ctest runs it, not elsewhere).
# The test passes; leak checking stays on, without the __tls_get_addr interception that records those ranges.
ASAN_OPTIONS="$ASAN_OPTIONS:intercept_tls_get_addr=0" ctest --test-dir build-asan --output-on-failure -R '^Trace\.'
