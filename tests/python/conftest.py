"""Shared pytest setup for the Python tests.

- The `gpu` marker: such tests are skipped, with the reason, when no CUDA device is usable.
- Shared fixtures: `add` (the built-in add_constant kernel family), `cache_dir`, `run_py`, `run_kjit`.
- Shared helpers (no fixtures) are in support.py; `from conftest import run_python` still works.
- kjit reads its settings (KJIT_*) once per process. This process uses one fresh cache directory for
  the whole session (set below, before kjit is imported); tests that need a specific cache directory
  or mode run code in a subprocess through the `run_py` fixture, which gets the test's own directory.
"""

import os
import sys
import tempfile
import textwrap

import pytest

from support import PyResult, no_device_reason, run_python

# Before any test module imports kjit: this process's cache is a fresh directory, never ~/.cache/kjit.
_SESSION_CACHE = tempfile.mkdtemp(prefix="kjit-pytest-")
os.environ["KJIT_CACHE_DIR"] = _SESSION_CACHE
os.environ.pop("KJIT_CACHE_MODE", None)
os.environ.pop("KJIT_CACHE_PATH", None)
os.environ.pop("KJIT_RECORD", None)


def pytest_collection_modifyitems(config, items):
    reason = no_device_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _background_compiles_end_with_their_test():
    """Kernels a test's forwards compile ahead (an op's backward, on background threads) finish before the
    next test starts, and so does the compiler preload (started when a test first starts CUDA), so that no
    test's counters take in another test's work."""
    yield
    kjit = sys.modules.get("kjit")
    if kjit is not None and hasattr(kjit, "_core"):
        kjit._core._drain_background_jobs()
        kjit._core._wait_for_compiler_preload()


@pytest.fixture(scope="module")
def add():
    """The built-in add_constant kernel family: add_constant<T, VEC>(x, y, c, n) writes y = x + c."""
    import kjit

    return kjit.Template.builtin("add_constant").kernel("add_constant")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """This test's own cache directory (KJIT_CACHE_DIR for the subprocesses it starts)."""
    d = tmp_path / "kjit-cache"
    monkeypatch.setenv("KJIT_CACHE_DIR", str(d))
    return d


@pytest.fixture
def run_py(cache_dir):
    """run_py(code, env=None, check=True) runs a Python snippet in a fresh process using this test's cache."""

    def run(code: str, env=None, check=True, timeout=300) -> PyResult:
        return run_python(["-c", textwrap.dedent(code)], env=env, check=check, timeout=timeout)

    return run


@pytest.fixture
def run_kjit(cache_dir):
    """run_kjit(*args, check=True) runs `python -m kjit ARGS` using this test's cache."""

    def run(*args, env=None, check=True, timeout=300) -> PyResult:
        return run_python(["-m", "kjit", *args], env=env, check=check, timeout=timeout)

    return run
