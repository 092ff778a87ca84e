#!/usr/bin/env bash
# kjit's formatter and linter: clang-format (C++ and CUDA, .clang-format) and ruff (Python, pyproject.toml's
# [tool.ruff]), at the versions pinned in .ci/lint-requirements.txt, installed into .lint-venv on first use.
#   bash .ci/lint.sh                   check every tracked source file (CI's lint stage)
#   bash .ci/lint.sh --changed [BASE]  check only the files changed since BASE (default: the upstream of the
#                                      branch, else HEAD), uncommitted and untracked ones included
#   bash .ci/lint.sh --fix [--changed [BASE]]   rewrite the files instead of checking them
# A check prints each file that is not formatted (with clang-format's or ruff's diff) and each lint
# finding, then the command that fixes them, and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0 changed=0 base=
while [ $# -gt 0 ]; do
  case "$1" in
    --fix) fix=1 ;;
    --changed) changed=1
               if [ $# -gt 1 ] && [[ "$2" != --* ]]; then base=$2; shift; fi ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "lint.sh: unknown argument '$1' (allowed: --fix, --changed [BASE], --help)" >&2; exit 2 ;;
  esac
  shift
done

venv=${KJIT_LINT_VENV:-$PWD/.lint-venv}
req=.ci/lint-requirements.txt
# The tools are (re)installed when the venv is missing or the pins changed since it was made.
if ! cmp -s "$req" "$venv/requirements.txt" 2>/dev/null; then
  echo "== lint tools: installing $(grep -v '^#' "$req" | xargs) into ${venv#$PWD/}"
  if ! "${PYTHON:-python3}" -m venv --clear "$venv"; then
    echo "lint.sh: could not make a virtual environment with ${PYTHON:-python3} (on Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  cp "$req" "$venv/requirements.txt"
fi
clang_format=$venv/bin/clang-format
ruff=$venv/bin/ruff

cxx_globs=('*.cpp' '*.hpp' '*.h' '*.cc' '*.cu' '*.cuh')
py_globs=('*.py')
if [ "$changed" = 1 ] && [ -z "$base" ]; then
  base=$(git rev-parse --abbrev-ref --symbolic-full-name '@{upstream}' 2>/dev/null || echo HEAD)
fi
files_of() {  # the tracked (or, with --changed, changed) files matching the globs given
  if [ "$changed" = 1 ]; then
    { git diff --name-only --diff-filter=d "$base" -- "$@"; git ls-files --others --exclude-standard -- "$@"; } | sort -u
  else
    git ls-files -- "$@"
  fi
}
mapfile -t cxx < <(files_of "${cxx_globs[@]}")
mapfile -t py < <(files_of "${py_globs[@]}")
what="${#cxx[@]} C++/CUDA and ${#py[@]} Python files"
[ "$changed" = 1 ] && what="$what changed since $base"

status=0
if [ "$fix" = 1 ]; then
  echo "== formatting $what"
  [ ${#cxx[@]} -eq 0 ] || "$clang_format" -i "${cxx[@]}"
  if [ ${#py[@]} -gt 0 ]; then
    "$ruff" check --fix --quiet "${py[@]}" || status=1
    "$ruff" format --quiet "${py[@]}"
  fi
  [ "$status" = 0 ] || echo "ruff found problems it cannot fix (above): fix them by hand" >&2
  exit "$status"
fi

echo "== checking $what ($("$clang_format" --version | sed 's/.*version //'), ruff $("$ruff" --version | cut -d' ' -f2))"
if [ ${#cxx[@]} -gt 0 ]; then
  unformatted=()
  for f in "${cxx[@]}"; do
    if ! "$clang_format" "$f" | diff -u --label "$f" --label "$f (clang-format)" "$f" - ; then
      unformatted+=("$f")
    fi
  done
  if [ ${#unformatted[@]} -gt 0 ]; then
    echo "not formatted by clang-format: ${unformatted[*]}" >&2
    status=1
  fi
fi
if [ ${#py[@]} -gt 0 ]; then
  "$ruff" format --check --diff "${py[@]}" || status=1
  "$ruff" check --output-format concise "${py[@]}" || status=1
fi
if [ "$status" = 0 ]; then
  echo "== lint: clean"
else
  fix_cmd="bash .ci/lint.sh --fix"
  [ "$changed" = 1 ] && fix_cmd="$fix_cmd --changed $base"
  echo "== lint: the files above are not in kjit's style; '$fix_cmd' formats them (then review and commit)" >&2
fi
exit "$status"
