#!/usr/bin/env bash
# The Debian packages kjit's set-up needs, installed only when missing: as root directly, else through
# sudo; with neither, a message that names the packages and the command an administrator runs.
#   bash .ci/system_packages.sh [demo|test]   (default test)
#   bash .ci/system_packages.sh --list demo|test   (print the packages of that set-up, one per line)
# demo: what building kjit and running the demo need; test: that and GoogleTest (the C++ suites) and
# redis-server (the remote tier's tests start their own server on 127.0.0.1).
# Called by .ci/setup.sh, and by .ci/nonroot.sh as root before it hands the set-up to a user without
# sudo. PYTHON: the interpreter .venv is made from (its python3.X-venv is needed when .venv is not there).
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/python_env.sh

list=0
[ "${1:-}" != --list ] || { list=1; shift; }
profile=${1:-test}
case "$profile" in
  demo) packages=(cmake g++ make nlohmann-json3-dev libssl-dev libcli11-dev libhiredis-dev) ;;
  test) packages=(cmake g++ make nlohmann-json3-dev libssl-dev libcli11-dev libhiredis-dev libgtest-dev redis-server) ;;
  *) echo "system_packages.sh: unknown set-up '$profile' (allowed: demo, test)" >&2; exit 2 ;;
esac
if [ "$list" = 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

if ! command -v dpkg >/dev/null; then
  echo "== no dpkg: not a Debian system; system packages not checked (CMake and venv say what is missing)"
  exit 0
fi
need_apt=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
# Debian's Python has venv's ensurepip in a package of its own, python3.X-venv.
if [ ! -x "$PY" ] && command -v "$KJIT_BASE_PYTHON" >/dev/null &&
   ! "$KJIT_BASE_PYTHON" -c "import ensurepip, venv" >/dev/null 2>&1; then
  need_apt+=("python$("$KJIT_BASE_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv")
fi
[ ${#need_apt[@]} -gt 0 ] || exit 0

how="    apt-get update && apt-get install -y ${need_apt[*]}"
if [ "$(id -u)" = 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null; then
  SUDO=(sudo)
else
  echo "kjit's $profile set-up needs these Debian packages, which are not installed: ${need_apt[*]}" >&2
  echo "This user ($(id -un)) is not root and there is no sudo. Ask an administrator to run, as root:" >&2
  echo "$how" >&2
  echo "then run this again." >&2
  exit 1
fi
echo "== apt: installing ${need_apt[*]}${SUDO:+ (with sudo)}"
if ! { "${SUDO[@]}" apt-get update -qq &&
       DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq "${need_apt[@]}" >/dev/null; }; then
  echo "installing ${need_apt[*]} failed (see above). Install them as root, then run this again:" >&2
  echo "$how" >&2
  exit 1
fi
