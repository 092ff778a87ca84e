#!/usr/bin/env bash
# The GPU session: run on the lent GPU machine (see ../shared/device/README.md) from the repo root,
# with .devdeps/ carried (nlohmann_json, CLI11, GoogleTest sources, hiredis: ../shared/device/prepare-deps.sh
# plus `apt-get download libgtest-dev googletest libhiredis-dev libhiredis0.14`). Builds everything, runs every test (GPU ones included) and
# the benchmarks; logs go to $OUT (or ./gpu-out).
#   bash .ci/gpu.sh [build|test|ctest|pytest|pytest1|pytest1a|pytest1b|pytest2|pytest2a|pytest2b|bench|bandwidth|libtest|memcheck|racecheck|tsan|multigpu|all]...
#   (default: all = build test bench bandwidth; test = ctest + pytest)
# libtest: only the op library's tests (tests/python/ops/); memcheck: the GPU tests of the op families whose
# kernels are elementwise or a row at a time, of the op machinery and of kjit.elementwise (not the gigabyte-sized
# ones) under compute-sanitizer memcheck; racecheck: the library's kernels that share memory between threads
# (reductions, softmax, norms, pools) under compute-sanitizer racecheck; multigpu: the tests
# that need two GPUs; tsan: the 8-thread Engine tests (compiling and launching) under ThreadSanitizer (.ci/tsan.sh);
# none of these is part of all.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export CMAKE_PREFIX_PATH=$PWD/.devdeps/root/usr
# hiredis from .devdeps (`apt-get download libhiredis-dev libhiredis0.14`) when the machine has none: the
# build links it, so the tests and the installed module load it from there.
if [ -d .devdeps/root/usr/lib/x86_64-linux-gnu ]; then
  export LD_LIBRARY_PATH=$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
PY=${PYTHON:-python3}
# The machine's default CXX (/opt/gcc) links libstdc++ statically into shared objects, which breaks a
# PyTorch extension (see python/check_shared_libstdcxx.cmake): use the system compiler.
if [ -x /usr/bin/g++ ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++; fi
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(all)
has() { for s in "${steps[@]}"; do [ "$s" = "$1" ] || { [ "$s" = all ] && [ "$1" != libtest ] && [ "$1" != memcheck ] && [ "$1" != racecheck ] && [ "$1" != multigpu ] && [ "$1" != tsan ] && [ "$1" != pytest1 ] && [ "$1" != pytest1a ] && [ "$1" != pytest1b ] && [ "$1" != pytest2 ] && [ "$1" != pytest2a ] && [ "$1" != pytest2b ]; } ||
  { [ "$s" = test ] && { [ "$1" = ctest ] || [ "$1" = pytest ]; }; } && return 0; done; return 1; }
rc=0

if has build; then
  {
    echo "== $(date -u) build on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
    gt=""
    [ -d .devdeps/root/usr/src/googletest ] && gt="-DKJIT_GTEST_SOURCE_DIR=$PWD/.devdeps/root/usr/src/googletest"
    # The set-up's one build (core, module, CLI, tests, benchmarks in build/), for this machine's python3.
    KJIT_PY=$PY KJIT_CMAKE_ARGS="$gt" bash .ci/build.sh test
  } > "$OUT/build.log" 2>&1 || rc=1
  tail -n 30 "$OUT/build.log"
fi
if has ctest; then
  ctest --test-dir build --output-on-failure -j8 > "$OUT/ctest.log" 2>&1 || rc=1
  tail -n 25 "$OUT/ctest.log"
fi
# pytest: the whole suite (over 10 minutes on an H100, more than one device call's limit); pytest1 + pytest2
# are the same suite in two halves for two calls: the op library (tests/python/ops/, one file per op family
# beside the generic op-table tests), then all the others; and each in two for two calls again (a half under
# about 5 minutes): pytest1a, the families whose kernels are elementwise or a row at a time (the files named
# below), pytest1b, the rest of ops/ (the matrix ops and gemm.cuh launched directly, the op machinery,
# opcheck, the op table's generic tests); pytest2a, the other files whose tests are GPU tests mostly (every
# *gpu* file, and the files named below, where a concept's GPU tests stand beside a few that need none),
# pytest2b, the rest (GPU tests of mostly-CPU files included). The two halves of each are disjoint and
# together are pytest1 / pytest2, whatever the lists say.
run_pytest() {  # LOG ARGS...
  local log=$1
  shift
  (cd tests/python && $PY -m pytest -q -p no:cacheprovider -rs "$@" > "$OUT/$log" 2>&1) || rc=1
  grep -E "^(FAILED|ERROR)" "$OUT/$log" | head -40
  tail -n 3 "$OUT/$log"
}
library_tests=(ops)
row_op_tests=(ops/test_activations.py ops/test_arithmetic.py ops/test_color.py ops/test_long_rows.py ops/test_norms.py
  ops/test_outer.py ops/test_pools.py ops/test_reductions.py ops/test_sequence.py ops/test_softmax.py)
if has pytest; then run_pytest pytest.log .; fi
if has pytest1; then run_pytest pytest1.log "${library_tests[@]}"; fi
if has pytest1a; then run_pytest pytest1a.log "${row_op_tests[@]}"; fi
if has pytest1b; then run_pytest pytest1b.log "${library_tests[@]}" "${row_op_tests[@]/#/--ignore=}"; fi
if has pytest2; then run_pytest pytest2.log . "${library_tests[@]/#/--ignore=}"; fi
other_gpu_tests=(test_arrays.py test_cuda_api_errors.py test_elementwise.py test_elementwise_complex.py test_examples.py test_launch.py)
for f in tests/python/test_*gpu*.py; do
  f=${f#tests/python/}
  [[ " ${library_tests[*]} ${other_gpu_tests[*]} " == *" $f "* ]] || other_gpu_tests+=("$f")
done
if has pytest2a; then run_pytest pytest2a.log "${other_gpu_tests[@]}"; fi
if has pytest2b; then run_pytest pytest2b.log . "${library_tests[@]/#/--ignore=}" "${other_gpu_tests[@]/#/--ignore=}"; fi
if has bench; then
  ./build/bench/launch_overhead 20000 2>&1 | tee "$OUT/bench_launch_overhead.json"
  $PY -m kjit.bench ${BENCH_ARGS:-} --out "$OUT/bench" > "$OUT/bench.log" 2>&1 || rc=1
  tail -n 80 "$OUT/bench.log"
fi
if has libtest; then
  (cd tests/python && $PY -m pytest -q -p no:cacheprovider -rs "${library_tests[@]}" \
    > "$OUT/pytest_library.log" 2>&1) || rc=1
  grep -E "^(FAILED|ERROR)" "$OUT/pytest_library.log" | head -40
  tail -n 3 "$OUT/pytest_library.log"
fi
memcheck_files=(ops/test_activations.py ops/test_reductions.py ops/test_softmax.py ops/test_norms.py ops/test_pools.py
  ops/test_sequence.py ops/test_direct_entries.py test_elementwise.py)
if has memcheck; then
  # Without the caching allocator every tensor is its own allocation, so memcheck sees any overrun. API
  # errors are reported (the sanitizer's default), as a user's run would see them: kjit makes no call that
  # fails (tests/python/test_cuda_api_errors.py).
  (cd tests/python && PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 99 \
    --target-processes all $PY -m pytest -q -p no:cacheprovider -m "not big" -k "${MEMCHECK_K:-not compile and not cuda_graph}" \
    ${MEMCHECK_FILES:-${memcheck_files[*]}} > "$OUT/memcheck.log" 2>&1) || rc=1
  grep -E "^(FAILED|ERROR)|ERROR SUMMARY|Invalid|Program hit" "$OUT/memcheck.log" | sort | uniq -c | head -20
  tail -n 3 "$OUT/memcheck.log"
fi
if has racecheck; then
  # Shared-memory hazards (missing __syncthreads, write-after-read between warps) in the block reductions.
  (cd tests/python && compute-sanitizer --tool racecheck --error-exitcode 99 --target-processes all \
    $PY -m pytest -q -p no:cacheprovider -m "not big" \
    -k "${RACECHECK_K:-test_reduce_last_dim or test_reduce_other_dims or test_reduce_short_and_wide or test_softmax_forward or test_softmax_backward or test_norm_forward or test_norm_backward or test_max_pool2d}" \
    ${RACECHECK_FILES:-ops/test_reductions.py ops/test_softmax.py ops/test_norms.py ops/test_pools.py} \
    > "$OUT/racecheck.log" 2>&1) || rc=1
  grep -E "^(FAILED|ERROR)|RACECHECK SUMMARY|Race reported" "$OUT/racecheck.log" | sort | uniq -c | head -20
  tail -n 3 "$OUT/racecheck.log"
fi
if has multigpu; then
  (cd tests/python && $PY -m pytest -q -p no:cacheprovider -rs test_multi_gpu.py ops/test_direct_entries.py::test_tensors_on_different_devices \
    > "$OUT/multigpu.log" 2>&1) || rc=1
  tail -n 5 "$OUT/multigpu.log"
fi
if has tsan; then
  gt=""
  [ -d .devdeps/root/usr/src/googletest ] && gt="-DKJIT_GTEST_SOURCE_DIR=$PWD/.devdeps/root/usr/src/googletest"
  bash .ci/tsan.sh -G Ninja $gt > "$OUT/tsan.log" 2>&1 || rc=1
  grep -E "^==|PASSED|FAILED|SKIPPED|ThreadSanitizer" "$OUT/tsan.log" | head -20
fi
if has bandwidth; then
  $PY -m kjit.bench --only bandwidth ${BENCH_ARGS:-} --out "$OUT/bench" > "$OUT/bench_bandwidth.log" 2>&1 || rc=1
  tail -n 60 "$OUT/bench_bandwidth.log"
fi
exit $rc
