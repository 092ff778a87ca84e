#!/usr/bin/env bash
# CI's main test run (ctest + pytest, once) as a new user would do it: the README's two commands, the
# demo (`bash .ci/demo.sh`: its set-up from nothing, watched for silences over 30 s) then the tests
# (`bash .ci/test.sh`: its set-up adds only the test tools and targets), run by a user who is not root and has no sudo, with Debian's /usr/bin/python3, which is marked
# "externally managed" (PEP 668: pip refuses to install into it), in a copy of this tree owned by that
# user. So the set-up must make and use its own .venv and never write outside the user's files.
# Run as root (it creates the user and installs missing system packages first, since the user cannot).
#   bash .ci/nonroot.sh
# KJIT_CI_USER (default kjit-ci): the user. KJIT_CI_WHEELS (default /var/cache/kjit-ci/wheels): the
# wheels the set-up installs (torch and the build tools), downloaded there once and kept between runs,
# then installed from there only (PIP_FIND_LINKS, PIP_NO_INDEX: with the index too, pip prefers the
# index's copy of the same file). pip's own HTTP cache is not enough: with some indexes, this
# machine's for one, it stays empty, and torch would be downloaded on every run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "nonroot.sh runs as root: it creates the test user (got uid $(id -u))" >&2; exit 1; }
user=${KJIT_CI_USER:-kjit-ci}
wheels=${KJIT_CI_WHEELS:-/var/cache/kjit-ci/wheels}
base=/usr/bin/python3
[ -x "$base" ] || { echo "no $base: this stage tests Debian's python3 (apt-get install python3)" >&2; exit 1; }

# PEP 668: the marker in the interpreter's stdlib directory. Debian ships it; where it is missing it is
# written here, so that the run really meets an externally managed Python.
marker=$("$base" -c 'import os, sysconfig; print(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))')
if [ ! -f "$marker" ]; then
  printf '[externally-managed]\nError=This Python is managed by the system: use a virtual environment.\n' >"$marker"
  echo "== wrote $marker (PEP 668)"
fi
echo "== $base is externally managed ($marker)"

# The demo's set-up needs neither redis-server nor GoogleTest (nor any other test-only package).
test_only=()
demo_packages=$(bash .ci/system_packages.sh --list demo)
for p in $(bash .ci/system_packages.sh --list test); do
  grep -qx "$p" <<<"$demo_packages" || test_only+=("$p")
done
for p in redis-server libgtest-dev; do
  grep -qx "$p" <<<"$(printf '%s\n' "${test_only[@]}")" || { echo "the demo's set-up installs $p: it must not" >&2; exit 1; }
done
echo "== test-only system packages (the demo's set-up installs none of them): ${test_only[*]}"

# The packages the user cannot install (no root, no sudo): the same list and check as the set-up's.
PYTHON=$base bash .ci/system_packages.sh test

if ! id -u "$user" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/bash "$user"
fi
home=$(getent passwd "$user" | cut -d: -f6)
if command -v sudo >/dev/null && sudo -l -U "$user" 2>/dev/null | grep -q "may run"; then
  echo "$user can use sudo: this stage needs a user without it" >&2
  exit 1
fi
mkdir -p "$wheels"
chown "$user:" "$wheels"
chmod 755 "$wheels"

# A copy of the tree as it is (tracked and untracked files, not what .gitignore leaves out: no build/
# and no .venv of root's), owned by the user.
tree=$home/kjit
rm -rf "$tree"
mkdir -p "$tree"
git ls-files -z --cached --others --exclude-standard |
  tar --null --files-from=- --ignore-failed-read -cf - | tar -xf - -C "$tree"
chown -R "$user:" "$tree"

# What such a user gets when system packages are missing, in a private mount namespace with a dpkg
# database that lacks some: the set-up must stop, name the package and the command to run as root; and
# the demo's set-up must not want a test-only package.
without() {  # a copy of dpkg's status without the packages named
  local status
  status=$(mktemp)
  awk -v drop="$*" 'BEGIN { RS = ""; ORS = "\n\n"; n = split(drop, d, " "); for (i = 1; i <= n; i++) gone["Package: " d[i]] = 1 }
                    { split($0, l, "\n"); if (!(l[1] in gone)) print }' /var/lib/dpkg/status >"$status"
  chmod 644 "$status"
  echo "$status"
}
as_user_without() {  # as_user_without "PACKAGES" PROFILE: system_packages.sh PROFILE as the user, those packages missing
  local status rc=0 out
  status=$(without "$1")
  out=$(unshare -m bash -c 'mount --bind "$1" /var/lib/dpkg/status &&
    runuser -u "$2" -- env -i PATH=/usr/bin:/bin PYTHON=/usr/bin/python3 bash "$3/.ci/system_packages.sh" "$4"' \
    missing "$status" "$user" "$tree" "$2" 2>&1) || rc=$?
  rm -f "$status"
  printf '%s\n' "$out"
  return "$rc"
}
rc=0
msg=$(as_user_without libcli11-dev demo) || rc=$?
if [ "$rc" = 0 ] || ! grep -q "apt-get install -y libcli11-dev" <<<"$msg"; then
  echo "with libcli11-dev missing, the set-up as $user (no sudo) must stop and say what to run; it said (exit $rc):" >&2
  echo "$msg" >&2
  exit 1
fi
echo "== a missing package as $user without sudo:"
sed 's/^/   | /' <<<"$msg"
rc=0
msg=$(as_user_without "${test_only[*]}" demo) || rc=$?
if [ "$rc" != 0 ] || [ -n "$msg" ]; then
  echo "without ${test_only[*]}, the demo's set-up as $user must need nothing; it said (exit $rc):" >&2
  echo "$msg" >&2
  exit 1
fi
rc=0
msg=$(as_user_without "${test_only[*]}" test) || rc=$?
if [ "$rc" = 0 ] || ! grep -q "apt-get install -y ${test_only[*]}" <<<"$msg"; then
  echo "without ${test_only[*]}, the test set-up as $user must stop and name them; it said (exit $rc):" >&2
  echo "$msg" >&2
  exit 1
fi
echo "== without ${test_only[*]}: the demo's set-up needs nothing, the tests' names them"

# A clean environment of the user's own: nothing of root's (PATH to pyenv, VIRTUAL_ENV) leaks in; only
# what pip needs to reach the index here (proxy, certificates) is passed on.
envs=(HOME="$home" USER="$user" LOGNAME="$user" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8
      PYTHON="$base" PIP_DISABLE_PIP_VERSION_CHECK=1)
[ -z "${CUDA_HOME:-}" ] || envs+=(CUDA_HOME="$CUDA_HOME")
while IFS='=' read -r name value; do
  case "$name" in
    PIP_FIND_LINKS|PIP_NO_INDEX) ;;
    PIP_*|http_proxy|https_proxy|no_proxy|HTTP_PROXY|HTTPS_PROXY|NO_PROXY|SSL_CERT_FILE|REQUESTS_CA_BUNDLE)
      envs+=("$name=$value") ;;
  esac
done < <(env)

# PEP 668 in force: pip refuses to install into the system Python for this user (where it has pip).
if "$base" -m pip --version >/dev/null 2>&1; then
  if out=$(runuser -u "$user" -- env -i "${envs[@]}" "$base" -m pip install --dry-run tqdm 2>&1) ||
     ! grep -q "externally-managed-environment" <<<"$out"; then
    echo "pip as $user was expected to refuse installing into $base (PEP 668); it said:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "== pip refuses to install into $base (externally-managed-environment)"
fi

# The wheels, as the user (pip download writes only into $wheels, and skips what is there already).
(source .ci/python_env.sh
 runuser -u "$user" -- env -i "${envs[@]}" "$base" -m pip download -q -d "$wheels" "$KJIT_TORCH_SPEC" "${KJIT_BUILD_TOOLS[@]}" "${KJIT_TEST_TOOLS[@]}")
echo "== wheels for the set-up in $wheels: $(du -sh "$wheels" | cut -f1)"

echo "== bash .ci/demo.sh as $user (uid $(id -u "$user"), no sudo), PYTHON=$base: from nothing, never silent longer than .ci/quiet.py's QUIET_S"
start=$SECONDS
runuser -u "$user" -- env -i "${envs[@]}" PIP_FIND_LINKS="$wheels" PIP_NO_INDEX=1 \
  "$base" "$tree/.ci/phase.py" --watch -- bash -c 'cd "$1" && bash .ci/demo.sh' demo.sh "$tree"
echo "== non-root demo (set-up from nothing, then the demo): $((SECONDS - start)) s"
echo "== bash .ci/test.sh as $user, never silent longer than .ci/quiet.py's QUIET_S"
start=$SECONDS
runuser -u "$user" -- env -i "${envs[@]}" PIP_FIND_LINKS="$wheels" PIP_NO_INDEX=1 \
  "$base" "$tree/.ci/phase.py" --watch -- bash -c 'cd "$1" && bash .ci/test.sh' test.sh "$tree"
echo "== non-root test run (the tests' set-up on top of the demo's, then the tests): $((SECONDS - start)) s"
# The tests ran with the environment the set-up made, not with a Python of root's.
runuser -u "$user" -- "$tree/.venv/bin/python" -c 'import kjit, sys; assert sys.prefix != sys.base_prefix; print("== kjit", kjit.__version__, "from", kjit.__file__)'
