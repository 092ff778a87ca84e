#!/usr/bin/env bash
# Fuzzes the cache's readers of untrusted bytes with libFuzzer + ASan + UBSan (tests/fuzz): entry files
# (fuzz_entry), entry metadata JSON (fuzz_metadata), KJIT_RECORD manifests (fuzz_manifest), the
# kjit.lock of exported caches (fuzz_lock) and Redis replies as the remote tier bounds them (fuzz_resp),
# each for
# FUZZ_SECONDS (default 60), side by side (one target per CPU), on a copy of the seed corpus in tests/fuzz/corpus/
# (the source tree is never written). Any crash, sanitizer report, timeout (> 10 s on one input) or
# allocation past the limits fails the script; the input that did it is kept in
# build-fuzz/artifacts/<target>/ (reproduce: build-fuzz/tests/fuzz/fuzz_<target> FILE).
#   bash .ci/fuzz.sh                    (after .ci/setup.sh; needs clang with libFuzzer, installed if missing)
#   FUZZ_SECONDS=600 bash .ci/fuzz.sh   (a longer run)
#   bash .ci/fuzz.sh manifest           (some targets only)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(entry metadata manifest lock resp)

# clang with libFuzzer's runtime: a one-line fuzzer must link.
have_libfuzzer() {
  command -v clang++ >/dev/null 2>&1 || return 1
  local tmp rc
  tmp=$(mktemp -d)
  echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' >"$tmp/f.cpp"
  clang++ -fsanitize=fuzzer "$tmp/f.cpp" -o "$tmp/f" >/dev/null 2>&1 && rc=0 || rc=1
  rm -rf "$tmp"
  return $rc
}
if ! have_libfuzzer; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "== apt: installing clang (libFuzzer)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang libclang-rt-dev >/dev/null
  have_libfuzzer || { echo "clang++ -fsanitize=fuzzer does not link even after installing clang" >&2; exit 1; }
fi

echo "== fuzz build (build-fuzz/)"
# Only the fuzz targets are built: the rest of the project is configured but not compiled here.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKJIT_FUZZ=ON \
  -DKJIT_BUILD_TESTS=OFF -DKJIT_BUILD_CLI=OFF -DKJIT_BUILD_BENCH=OFF -DKJIT_BUILD_PYTHON=OFF >/dev/null
start=$SECONDS
cmake --build build-fuzz -j"$(nproc)" --target kjit_fuzz >/dev/null
echo "built in $((SECONDS - start)) s"

max_len() {
  case "$1" in
    metadata) echo 16384 ;;  # real metadata blocks are ~500 bytes
    *) echo 65536 ;;         # entries (header + metadata + a small payload), manifests
  esac
}

# One target: its seeds replayed, then FUZZ_SECONDS of fuzzing from a copy of them; prints its summary and
# returns non-zero when it failed.
fuzz_target() {
  local t=$1 bin=build-fuzz/tests/fuzz/fuzz_$1 corpus=build-fuzz/corpus/$1 artifacts=build-fuzz/artifacts/$1
  local log=build-fuzz/fuzz_$1.log rc=0
  rm -rf "$corpus" "$artifacts"
  mkdir -p "$corpus" "$artifacts"
  local limits=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -artifact_prefix="$artifacts"/)
  # Every seed once, as it is (regression_* included: inputs that once crashed, some larger than
  # -max_len). Files given by name are only executed: nothing is written next to them.
  echo "== fuzz_$t: replaying $(ls tests/fuzz/corpus/"$t" | wc -l) seeds"
  "$bin" "${limits[@]}" tests/fuzz/corpus/"$t"/* >"$log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    # Then fuzz from a copy of the seeds. The regression_* inputs stay out of it: they are pathological
    # (64 KB, nested 30000 deep) and would slow every mutation of them down a hundredfold.
    find tests/fuzz/corpus/"$t" -maxdepth 1 -type f ! -name 'regression_*' -exec cp {} "$corpus"/ \;
    echo "== fuzz_$t: ${FUZZ_SECONDS} s from $(ls "$corpus" | wc -l) seeds"
    "$bin" "$corpus" "${limits[@]}" -dict=tests/fuzz/"$t".dict -max_total_time="$FUZZ_SECONDS" \
      -max_len="$(max_len "$t")" -print_final_stats=1 >>"$log" 2>&1 || rc=$?
  fi
  grep -E '^#[0-9]+[[:space:]]+DONE ' "$log" || true
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$log" || true
  echo "corpus: $(ls "$corpus" | wc -l) files"
  if [ "$rc" != 0 ] || [ -n "$(ls -A "$artifacts")" ]; then
    echo "!! fuzz_$t failed (exit $rc); the last lines of $log:"
    tail -n 60 "$log"
    grep -E '^Running: ' "$log" | tail -n 1 | sed 's/^/!! seed that failed: /' || true
    [ -z "$(ls -A "$artifacts")" ] || echo "!! inputs kept in $artifacts: $(ls "$artifacts" | tr '\n' ' ')"
    return 1
  fi
}

for t in "${targets[@]}"; do
  [ -x build-fuzz/tests/fuzz/fuzz_$t ] || { echo "unknown fuzz target '$t' (entry, metadata, manifest, lock, resp)" >&2; exit 2; }
done
# The targets run side by side, one per CPU (each keeps its FUZZ_SECONDS of one CPU); their summaries
# are printed in order once all are done.
failed=()
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$(nproc)" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  (fuzz_target "$t" >build-fuzz/fuzz_$t.summary 2>&1 && echo 0 >build-fuzz/fuzz_$t.rc || echo 1 >build-fuzz/fuzz_$t.rc) &
  running=$((running + 1))
done
wait
for t in "${targets[@]}"; do
  cat build-fuzz/fuzz_$t.summary
  [ "$(cat build-fuzz/fuzz_$t.rc 2>/dev/null)" = 0 ] || failed+=("$t")
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found problems in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzzing: no crash in ${targets[*]} (${FUZZ_SECONDS} s each)"
