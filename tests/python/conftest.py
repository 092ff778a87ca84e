"""Shared pytest setup for the Python tests.

- The `gpu` marker: such tests are skipped, with the reason, when no CUDA device is usable.
- Shared fixtures: `add` (the built-in add_constant kernel family), `cache_dir`, `run_py`, `run_kjit`.
- kjit reads its settings (KJIT_*) once per process. This process uses one fresh cache directory for
  the whole session (set below, before kjit is imported); tests that need a specific cache directory
  or mode run code in a subprocess through the `run_py` fixture, which gets the test's own directory.
"""

import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

# Before any test module imports kjit: this process's cache is a fresh directory, never ~/.cache/kjit.
_SESSION_CACHE = tempfile.mkdtemp(prefix="kjit-pytest-")
os.environ["KJIT_CACHE_DIR"] = _SESSION_CACHE
os.environ.pop("KJIT_CACHE_MODE", None)
os.environ.pop("KJIT_CACHE_PATH", None)
os.environ.pop("KJIT_RECORD", None)


def no_device_reason():
    """None when a CUDA device is usable, else why not."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover
        return f"no CUDA device: torch cannot be imported ({e})"
    if not torch.cuda.is_available():
        return (
            f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"built for CUDA {torch.version.cuda}, torch.cuda.device_count() = {torch.cuda.device_count()})"
        )
    return None


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


class PyResult:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    def __repr__(self):
        return f"<exit {self.returncode}>\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def run_python(args, env=None, check=True, timeout=300, cwd=None) -> PyResult:
    """Runs `python ARGS` with os.environ updated by `env` (a value of None removes the variable)."""
    full_env = dict(os.environ)
    for k, v in (env or {}).items():
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = str(v)
    proc = subprocess.run(
        [sys.executable, *args], env=full_env, capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
    result = PyResult(proc)
    if check and proc.returncode != 0:
        raise AssertionError(f"python {' '.join(args)} failed: {result!r}")
    return result


# A worker started by start_together() runs this before its first step: it says it is ready (creates
# "<go>.ready-<name>"), then waits for the go file (at most 120 s). `go` and `name` are its own variables.
WAIT_FOR_GO = textwrap.dedent(
    """
    open(go + ".ready-" + name, "w").close()
    _deadline = time.time() + 120
    while not os.path.exists(go):  # start together, so that the compiles really race
        if time.time() > _deadline:
            sys.exit("never told to start")
        time.sleep(0.005)
    """
)


def start_together(procs, go, names, timeout=120.0):
    """Creates the file `go` once every worker (Popen) of `procs` has created "<go>.ready-<name>" (see
    WAIT_FOR_GO): a handshake, not a sleep. Fails, after killing them, if one ends or `timeout` passes first."""
    go = pathlib.Path(go)
    waiting = {go.parent / f"{go.name}.ready-{n}" for n in names}
    deadline = time.monotonic() + timeout
    while True:
        waiting = {f for f in waiting if not f.exists()}
        if not waiting:
            go.write_text("")
            return
        ended = [p for p in procs if p.poll() is not None]
        if ended or time.monotonic() > deadline:
            for p in procs:
                p.kill()
            outputs = [p.communicate() for p in (ended or procs)[:1]]
            why = f"a worker ended (exit {ended[0].returncode})" if ended else f"not ready within {timeout} s"
            raise AssertionError(f"{why} before the start: {sorted(f.name for f in waiting)}; {outputs}")
        time.sleep(0.005)


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
