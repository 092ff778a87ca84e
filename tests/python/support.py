"""Helpers the test files share: `from support import ...` (a plain module; conftest.py keeps pytest's hooks
and fixtures, and builds its fixtures on these).

Nothing here imports kjit or torch when the module is imported: conftest.py points kjit at this session's
cache before the first `import kjit`, and test_torch_free.py runs where torch is not installed.

- Devices: `no_device_reason()`.
- Processes: `run_python` (a Python child with some environment variables changed), `WAIT_FOR_GO` +
  `start_together` (workers that start at the same instant), `run_together` (start, wait, read their JSON).
- Fresh kernels: `unique_source`, `unique_family`, `unique_kernel` (nothing compiled them before).
- Errors: `error_of` (the message of the exception a call raises); `COMPLEX_HALF_IS_EXPERIMENTAL` (the mark
  that filters torch's warning where a test makes a complex32 tensor on purpose).
- Tensors: `randn` (contiguous or misaligned CUDA tensors), `misaligned_like`, `meta` (shapes only), `dname`.
- Comparisons with PyTorch: `close` (in float64), `ulp`, the tolerances `rounding_tol`, `ew_tol`, `sum_tol`;
  `ORIGINS` (where a kernel came from), `kernel_loads` (kernels loaded so far), `skip_unless_free_gpu_memory`.
- The command line: `compile_add_constant` (`kjit compile` arguments of the built-in add_constant).
"""

import json
import math
import os
import pathlib
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

# ---- devices ------------------------------------------------------------------------------------------


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


# ---- processes ----------------------------------------------------------------------------------------


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


def run_together(script, go, args_by_name, env, timeout=600):
    """Runs `python SCRIPT GO ARGS...` once per (name, ARGS) of `args_by_name`, each worker waiting (WAIT_FOR_GO,
    with its `name`) until all are ready, then all at once; returns the JSON each printed on its last line, in
    order. A worker that fails fails the test with the end of its stderr."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(go), *map(str, args)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in args_by_name.values()
    ]
    start_together(procs, go, list(args_by_name))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err[-4000:]
        results.append(last_json(out))
    return results


def last_json(out: str):
    """The JSON a process printed on its last line."""
    return json.loads(out.strip().splitlines()[-1])


# ---- fresh kernels ------------------------------------------------------------------------------------


def unique_source(body: str) -> str:
    """A template source no other test uses (so its cache key is new)."""
    return f"// {uuid.uuid4()}\n{body}"


def unique_family(name="scale", body="{ x[threadIdx.x] *= s; }", params="T* x, T s"):
    """A kernel family `name`<T> no other test (or process) has compiled: its first specialization compiles."""
    import kjit

    src = unique_source(f"template <typename T> __global__ void {name}({params}) {body}\n")
    return kjit.Template(src, name=f"{name}_{uuid.uuid4().hex[:8]}.cu").kernel(name)


def unique_kernel(prefix="policy_test") -> str:
    """A kernel name no other test (nor an earlier run of this one in the process) has used."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


# ---- errors -------------------------------------------------------------------------------------------


def error_of(exc_type, fn):
    """The message of the `exc_type` that fn() raises (the test fails if it raises none)."""
    with pytest.raises(exc_type) as e:
        fn()
    return str(e.value)


# torch's warning when a test makes a complex32 tensor (to check that kjit refuses it): expected there, so
# filtered there (never globally), not shown in the run's summary as if something were wrong.
COMPLEX_HALF_IS_EXPERIMENTAL = pytest.mark.filterwarnings(
    "ignore:ComplexHalf support is experimental and many operators don't support it yet:UserWarning"
)


# ---- tensors ------------------------------------------------------------------------------------------


def randn(*shape, dtype=None, misaligned=False, scale=1.0):
    """A contiguous CUDA tensor (a leaf, without grad) of normal values times `scale`, float32 unless `dtype`
    says otherwise; `misaligned` makes it a view one element into a larger buffer (its data pointer is then
    not 16-byte aligned)."""
    import torch

    dtype = torch.float32 if dtype is None else dtype
    if not misaligned:
        t = torch.randn(shape, dtype=dtype, device="cuda")
        return t.mul_(scale) if scale != 1.0 else t
    n = math.prod(shape)
    buf = torch.randn(n + 1, dtype=dtype, device="cuda")
    if scale != 1.0:
        buf.mul_(scale)
    view = buf[1:].view(shape)
    assert n == 0 or view.data_ptr() % 16 != 0
    return view


def misaligned_like(t):
    """A copy of t living one element into a larger buffer (its data pointer is not 16-byte aligned)."""
    import torch

    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buf[1:].view(t.shape)
    view.copy_(t)
    assert view.data_ptr() % 16 != 0
    return view


def meta(*shape, dtype=None):
    """An empty tensor on the meta device (a shape and a dtype, no data: what fake tensors and torch.compile
    see), float32 unless `dtype` says otherwise."""
    import torch

    return torch.empty(shape, dtype=torch.float32 if dtype is None else dtype, device="meta")


def dname(dtype) -> str:
    """A dtype's short name (torch.bfloat16 -> "bfloat16"), as test ids show it."""
    return str(dtype).split(".")[-1]


# ---- comparisons with PyTorch -------------------------------------------------------------------------
# References are computed by PyTorch in float64 from the same inputs and rounded once to the output dtype. The
# kernels compute in float (half types) or in the dtype itself, so a result may differ from its reference by one
# rounding of the output dtype (rtol = 2^-10 for float16, 2^-7 for bfloat16; `close` compares in float64, so the
# tolerance arithmetic is exact), plus a small absolute term for the float arithmetic (cancellations;
# accumulation over R elements: 1e-5 * sqrt(R)). Backward ops that read the forward's rounded output (sigmoid,
# tanh, softmax, log_softmax) are checked against the formula evaluated in float64 on that same output; the
# autograd wiring is then checked to give exactly the backward op's result.

ORIGINS = ("compiled", "disk", "memory")  # where a loaded kernel came from (kjit.Kernel.origin)


def ulp(dtype) -> float:
    """One rounding of `dtype`: the largest relative spacing of its numbers."""
    import torch

    return {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float64: 2.0**-52}[dtype]


def close(actual, expected, *, rtol, atol, equal_nan=False):
    """assert_close after widening both to float64 (the tolerance arithmetic is then exact); the dtypes and
    shapes must be equal."""
    import torch

    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=equal_nan)


def rounding_tol(dtype, *, f32, half_atol, f64):
    """One rounding of the output dtype and an absolute term: float16 / bfloat16 an rtol of one ulp and
    `half_atol`, float32 and float64 their (rtol, atol) pairs `f32` and `f64`."""
    import torch

    if dtype == torch.float32:
        return dict(rtol=f32[0], atol=f32[1])
    if dtype == torch.float64:
        return dict(rtol=f64[0], atol=f64[1])
    return dict(rtol=ulp(dtype), atol=half_atol)


def ew_tol(dtype):
    """Elementwise: one rounding of the output dtype, and float arithmetic's absolute error."""
    return rounding_tol(dtype, f32=(1e-5, 1e-5), half_atol=1e-5, f64=(1e-10, 1e-12))


def sum_tol(dtype, n):
    """A sum of n O(1) terms accumulated in float (double for float64), rounded once to dtype."""
    import torch

    root = math.sqrt(max(n, 1))
    if dtype == torch.float64:
        return dict(rtol=1e-10, atol=1e-12 * root)
    return dict(rtol=1e-5 if dtype == torch.float32 else ulp(dtype), atol=1e-5 * root)


def kernel_loads() -> int:
    """Kernels this process has loaded so far (compiled, or read from the disk cache)."""
    import kjit

    s = kjit.stats()
    return s["compiles"] + s["disk_hits"]


def skip_unless_free_gpu_memory(gib):
    """Skips the running test unless the GPU has `gib` GiB free (once PyTorch's cached blocks are returned)."""
    import torch

    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    if free < gib * 2**30:
        pytest.skip(f"needs {gib} GiB of free GPU memory, {free / 2**30:.1f} GiB free")


# ---- the command line ---------------------------------------------------------------------------------


def compile_add_constant(*extra, dtype="float32", vec=4, arch="sm_90"):
    """The arguments of `kjit compile` for the built-in add_constant<dtype, vec> on `arch`, then `extra`."""
    return [
        "compile",
        "add_constant",
        "--kernel",
        "add_constant",
        "--param",
        f"T={dtype}",
        "--param",
        f"VEC={vec}",
        "--arch",
        arch,
        *extra,
    ]
