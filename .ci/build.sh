#!/usr/bin/env bash
# The one build of kjit: the C++ core, the Python module and (for the tests) the CLI, the C++ test suites
# and benchmarks, all in build/ (one CMake build tree, Ninja), installed into the Python environment by
# pip (scikit-build-core builds in build/ and keeps it, so a second run compiles only what changed, and
# the test set-up after the demo's compiles only the tests).
#   bash .ci/build.sh [demo|test]     (default test; .ci/setup.sh calls it after making the environment)
# demo: the core and the Python module (what `python -m kjit demo` and every Python use need);
# test: that and the kjit CLI binary (build/kjit), the GoogleTest suites (ctest --test-dir
# build) and the C++ benchmarks. Extra CMake arguments: KJIT_CMAKE_ARGS="-DNAME=VALUE ..." (space-separated).
# Builds for the set-up's environment (python_env.sh), or for the interpreter KJIT_PY names (the GPU
# machine's python3, .ci/gpu.sh); the CUDA toolkit on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/python_env.sh
PY=${KJIT_PY:-$PY}
profile=${1:-test}
case "$profile" in
  demo) extra=OFF ;;
  test) extra=ON ;;
  *) echo "build.sh: unknown set-up '$profile' (allowed: demo, test)" >&2; exit 2 ;;
esac

# A build/ of an older set-up (made by `cmake -B build` with Make) cannot be reused by the Ninja build:
# its CMake cache goes (the rest of build/ is left; `rm -rf build` frees it).
if [ -f build/CMakeCache.txt ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' build/CMakeCache.txt; then
  echo "== build/ was configured with $(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' build/CMakeCache.txt); set-ups build with Ninja: its CMake cache is cleared (the first build is a full one)"
  rm -rf build/CMakeCache.txt build/CMakeFiles
fi

settings=(
  --config-settings=build-dir=build
  --config-settings=cmake.define.KJIT_BUILD_CLI=$extra
  --config-settings=cmake.define.KJIT_BUILD_TESTS=$extra
  --config-settings=cmake.define.KJIT_BUILD_BENCH=$extra
)
# scikit-build-core takes a list of CMake arguments separated by ';'.
[ -z "${KJIT_CMAKE_ARGS:-}" ] || settings+=("--config-settings=cmake.args=$(tr -s ' ' ';' <<<"$KJIT_CMAKE_ARGS")")
# -v: pip shows the build's own output (CMake, then one line per compiled file with its count).
"$PY" -m pip install -v --disable-pip-version-check --no-build-isolation --no-deps "${settings[@]}" .
