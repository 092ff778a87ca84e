#!/usr/bin/env bash
# The warm-deployment loop on one GPU machine, without Docker:
#   1. record the demo workload's specializations (KJIT_RECORD) with a scratch cache,
#   2. warm an EMPTY cache for this GPU's target from the manifest (no GPU needed for this step),
#   3. run the workload again with KJIT_CACHE_MODE=strict on the warmed cache: zero compiles,
#   4. compare the results of both runs.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kjit-walk.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
unset KJIT_CACHE_MODE KJIT_CACHE_PATH

ARCH=$($PY -c 'import torch; print("sm_%d%d" % torch.cuda.get_device_capability())')
echo "== 1. record (target $ARCH)"
KJIT_RECORD="$WORK/manifest.json" KJIT_CACHE_DIR="$WORK/record-cache" $PY workload.py "$WORK/first.pt"

echo "== 2. warm an empty cache from the manifest"
KJIT_CACHE_DIR="$WORK/warm-cache" $PY -m kjit warm "$WORK/manifest.json" --arch "$ARCH" -j "$(nproc)"

echo "== 3. run in strict mode on the warmed cache"
out=$(KJIT_CACHE_DIR="$WORK/warm-cache" KJIT_CACHE_MODE=strict $PY workload.py "$WORK/second.pt")
echo "$out"
[ "$out" = "compiles: 0" ] || { echo "walk.sh: the strict run compiled something" >&2; exit 1; }

echo "== 4. compare"
$PY compare.py "$WORK/first.pt" "$WORK/second.pt"
