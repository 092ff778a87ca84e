#!/usr/bin/env bash
# Part of .ci/wheel.sh, run there inside `unshare -m` (a private mount namespace, as root): the
# installed wheel, in a venv with torch and no compiler, no development headers, no CUDA toolkit.
#   unshare -m bash .ci/wheel_check.sh VENV_PYTHON NOTORCH_VENV_PYTHON DIR_TO_HIDE...
# Each DIR is covered by an empty read-only tmpfs (only in this namespace). Then: import (from the
# venv, not the source tree), `python -m kjit info`, a compile-only compile for sm_90, the libcrypto
# loaded being the wheel's grafted copy, CCCL and CUTLASS found in the pip packages, the `kjit` command, and the CPU pytest suite (tests/python).
# Then the same wheel in a venv without torch (NOTORCH_VENV_PYTHON): import, info, compile-only with a
# numpy dtype, the CLI, kjit.ops's ImportError and tests/python/test_torch_free.py.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
tpy=$1
npy=$2
shift 2
mount --make-rprivate /
for d in "$@"; do mount -t tmpfs -o ro,size=1m none "$d"; done
echo "== hidden: $*"
if echo 'int main() { return 0; }' | c++ -x c++ - -o /dev/null >/dev/null 2>&1; then
  echo "a C++ compiler still works in the namespace: the check would not prove anything" >&2
  exit 1
fi
export PATH=$(dirname "$tpy"):/usr/bin:/bin
export PATH_WITHOUT_VENV=/usr/bin:/bin
unset CUDA_HOME KJIT_CUDA_HOME KJIT_NVRTC_LIBRARY
export KJIT_CACHE_DIR=$(mktemp -d)
trap 'rm -rf "$KJIT_CACHE_DIR"' EXIT

cd /tmp
"$tpy" -m kjit info
"$tpy" - <<'PY'
import os, sys
import kjit
venv = os.path.dirname(os.path.dirname(sys.executable))
assert kjit.__file__.startswith(venv), f"kjit imported from {kjit.__file__}, not from the wheel in {venv}"
k = kjit.Template.builtin("rgb_to_gray").kernel("rgb_to_gray").specialize(H=1080, W=1920, arch="sm_90")
print("== compile-only sm_90:", k.origin, k.target, k.key[:16])
# kjit's module needs the grafted copy, renamed by auditwheel (libcrypto-<hash>.so.3) so that it never
# clashes with the system's, which Python's own _hashlib/_ssl may load next to it.
crypto = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libcrypto" in line})
print("== libcrypto loaded:", crypto, "(_hashlib loaded)" if "_hashlib" in sys.modules else "")
assert any("/kjit.libs/libcrypto-" in p for p in crypto), f"the wheel's grafted libcrypto is not loaded: {crypto}"
# The toolkit is hidden: CCCL from the pip package the wheel depends on, CUTLASS from nvidia-cutlass.
tk = kjit._core.toolkit()
assert tk["cccl"] and tk["cccl"]["include_dir"].startswith(venv), f"CCCL not from the pip nvidia packages: {tk}"
assert tk["cutlass"] and tk["cutlass"]["from"] == "pip nvidia-cutlass", f"nvidia-cutlass not found: {tk}"
print("== CCCL", tk["cccl"]["version"], "from", tk["cccl"]["include_dir"], "; CUTLASS", tk["cutlass"]["version"])
PY
kjit --version
kjit compile rgb_to_gray --kernel rgb_to_gray --param H=64 --param W=64 --arch sm_80,sm_90
kjit ls

echo "== CPU pytest against the installed wheel"
cd "$src/tests/python"
# pytest puts tests/python on sys.path, never python/: the wheel's kjit is what the tests import.
"$tpy" -c 'import kjit, sys, os; d = os.path.dirname(os.path.dirname(sys.executable)); assert kjit.__file__.startswith(d), kjit.__file__; print("== tests import", kjit.__file__)'
# The docs' code blocks (test_docs.py, test_readme.py) test the text, not the package: the nonroot stage
# runs them; here they would only add minutes. test_test_report.py tests .ci/test.sh's report by building a
# GoogleTest project, which needs the compiler this environment hides: the nonroot stage runs it.
# test_setup_promises.py tests the set-up scripts' heartbeats (real clocks, about a minute), not the package.
# The compile-only tests target sm_90 alone here (KJIT_TEST_ARCHS, ops/family_helpers.py): the nonroot stage
# compiles the same sources for sm_80, sm_90 and sm_100; this run checks the packaged compiler and headers.
# In two processes, as .ci/test.sh runs them (pytest-xdist).
workers=${KJIT_TEST_WORKERS:-$(n=$(nproc); echo $((n < 2 ? n : 2)))}
KJIT_TEST_ARCHS=sm_90 "$tpy" -m pytest -q -p no:cacheprovider -rs -n "$workers" . --ignore=test_docs.py \
  --ignore=test_readme.py --ignore=test_test_report.py --ignore=test_setup_promises.py

echo "== without torch: the wheel (--no-deps), numpy and torch's nvidia CUDA packages; no torch installed"
cd /tmp
export PATH=$(dirname "$npy"):$PATH_WITHOUT_VENV
"$npy" -c 'import importlib.util as u; assert u.find_spec("torch") is None, "torch is installed here"'
"$npy" -m kjit info
"$npy" - <<'PY'
import os, sys
import numpy as np
import kjit
venv = os.path.dirname(os.path.dirname(sys.executable))
assert kjit.__file__.startswith(venv), f"kjit imported from {kjit.__file__}, not from the wheel in {venv}"
assert "torch" not in sys.modules and "kjit._C" not in sys.modules, sorted(sys.modules)
k = kjit.Template.builtin("add_constant").kernel("add_constant").specialize(T=np.float16, VEC=8, arch="sm_90")
print("== compile-only sm_90 without torch:", k.origin, k.target, k.args)
tk = kjit._core.toolkit()
assert tk["cccl"] and tk["cccl"]["include_dir"].startswith(venv), f"CCCL not from the pip nvidia packages: {tk}"
try:
    kjit.ops
except ImportError as e:
    print("== kjit.ops without torch:", e)
else:
    raise SystemExit("kjit.ops was available without torch")
PY
kjit compile add_constant --kernel add_constant --param T=float32 --param VEC=4 --arch sm_90
cd "$src/tests/python"
"$npy" -m pytest -q -p no:cacheprovider -rs test_torch_free.py
