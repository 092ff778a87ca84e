# Sourced by .ci/setup.sh, .ci/test.sh and .ci/demo.sh (from the repository root): which Python
# environment kjit is set up in and tested with. Never the system Python: a distribution's python3 is
# "externally managed" (PEP 668) and pip refuses to write into it, and writing there needs root anyway.
#   - the active virtual environment ($VIRTUAL_ENV), when there is one;
#   - else .venv in the repository, made (by setup.sh) from $PYTHON (default: python3 on PATH).
# Sets KJIT_VENV (the environment's directory), KJIT_BASE_PYTHON (what .venv is made from), PY (the
# environment's interpreter, what builds and tests use), and what setup.sh installs there when missing:
# KJIT_TORCH_SPEC (KJIT_TORCH, default the torch CI and the GPU machine test), KJIT_BUILD_TOOLS (what
# building kjit and running the demo need) and KJIT_TEST_TOOLS (what the tests add).
KJIT_BASE_PYTHON=${PYTHON:-python3}
if [ -n "${VIRTUAL_ENV:-}" ]; then
  KJIT_VENV=$VIRTUAL_ENV
else
  KJIT_VENV=$PWD/.venv
fi
PY=$KJIT_VENV/bin/python
KJIT_TORCH_SPEC=${KJIT_TORCH:-torch==2.11.*}
# tqdm: kjit's one runtime dependency besides torch (the set-up installs kjit with --no-deps); numpy: torch
# warns without it.
KJIT_BUILD_TOOLS=("pybind11>=2.12" "scikit-build-core>=0.10" ninja tqdm numpy)
# pytest-xdist: the tests run in KJIT_TEST_WORKERS processes (.ci/test.sh).
# nvidia-cutlass: CUTLASS / CuTe headers (cutlass_library/source/include) for the kernels and tests that use them.
KJIT_TEST_TOOLS=(pytest pytest-xdist matplotlib redis nvidia-cutlass)
