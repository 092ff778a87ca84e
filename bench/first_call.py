"""Cold start: what a new process pays before its kernels run, kjit against CuPy RawKernel, Triton and
torch.cuda.jiterator.

Every probe is a fresh Python process with torch imported, kjit imported, the CUDA context up and
torch's autograd engine started (a first backward of torch's own) before the clock starts, and its own empty cache directory (a second process of a pair reuses it):

  kjit, empty cache, in one process, in this order:
    add, first kjit compile of the process  the small add kernel: what only the first compile pays
                                            (loading NVRTC, its builtins) included
    add, new specialization                 the same kernel for another dtype: a compile as any later one
    <op> forward / backward                 the first call of each library op at one shape (softmax,
                                            layer_norm, rms_norm, sum, an elementwise expression), then
                                            the first backward through it
  kjit, warm cache, a new process           the first call of the add kernel, then of softmax
  kjit, no preload                          the add kernel's first compile of a process and a new
                                            specialization with KJIT_PRELOAD_COMPILER=0: NVRTC's start-up
                                            paid by the first compile (by default a background thread pays it
                                            once torch starts CUDA: "compiler preload" in kjit's table)
  peers                                     the first call of the same add kernel, empty and warm cache

Each kjit figure comes with kjit.stats()["phase_ms"]: the time in each step (template: reading and
hashing the template and its headers; key; store lookups; compile: NVRTC; module_load) between the
clock's start and end.

NVRTC 12.9+ keeps a compile cache of its own, in the driver's JIT cache: kjit passes --no-cache to
NVRTC (engine/src/compiler.cpp), and every probe runs with CUDA_CACHE_PATH at an empty directory of its
own, so a figure here is a real compile, never one of NVRTC's or the driver's cache hits
(bench/nvrtc_cache.py measures that cache itself).

Every probe runs under a time limit (PROBE_TIMEOUT_S, or KJIT_BENCH_PROBE_TIMEOUT): one that fails or
hangs is reported as failed with its reason, and the results measured so far are saved after every
probe (the `save` callback): on 2026-11-23 a jiterator probe hung for 200 s and the section wrote nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from . import machine, stats
from .overhead import ADD_SRC, JITERATOR_SRC
from .stats import error_text

PROBE_TIMEOUT_S = float(os.environ.get("KJIT_BENCH_PROBE_TIMEOUT", "120"))

# The library ops at one shape (rows of 4096 float32: an LLM's hidden size), forward then backward.
OPS = ("softmax", "layer_norm", "rms_norm", "sum", "elementwise")

_KJIT_PRELUDE = r"""
import json, time, torch, kjit
from kjit import ops
x = torch.ones(1024, device="cuda"); xd = x.double()
# torch's own first backward starts its autograd device threads, and its first backward given a gradient
# imports sympy (torch.autograd._make_grads -> torch.fx.experimental.symbolic_shapes: 2.4-4.1 s on the
# H100 machine, nothing of kjit's; the probes below give gradients): both done here.
w0 = torch.ones(2, device="cuda", requires_grad=True); (w0 * 2).sum().backward()
(w0 * 2).backward(torch.ones_like(w0))
torch.cuda.synchronize()
kjit.reset_stats()
out = {}
def timed(name, fn):
    kjit.reset_stats()
    t = time.perf_counter(); r = fn(); torch.cuda.synchronize()
    ms = (time.perf_counter() - t) * 1e3
    s = kjit.stats()
    out[name] = {"ms": ms, "phase_ms": s["phase_ms"], "compiles": s["compiles"], "disk_hits": s["disk_hits"]}
    return r
"""

_KJIT_OPS = r"""
h = torch.randn(64, 4096, device="cuda")
w = torch.randn(4096, device="cuda"); b = torch.randn(4096, device="cuda")
silu_mul = kjit.elementwise("x / (1.0f + expf(-x)) * y", ["x", "y"], name="bench_silu_mul")
FORWARD = {
    "softmax": lambda a: ops.softmax(a, -1),
    "layer_norm": lambda a: ops.layer_norm(a, w, b),
    "rms_norm": lambda a: ops.rms_norm(a, w),
    "sum": lambda a: ops.sum(a, -1),
    "elementwise": lambda a: silu_mul(a, h),
}
torch.cuda.synchronize()
for name in OPS:
    a = h.clone().requires_grad_(True)
    y = timed(name + " forward", lambda: FORWARD[name](a))
    g = torch.ones_like(y); torch.cuda.synchronize()
    timed(name + " backward", lambda: y.backward(g))
"""

# The add kernel: kjit's first compile of a process, then a new specialization (empty cache); its first call in
# a new process (warm cache).
_KJIT_ADD = r"""
y = timed("add, first kjit compile of the process", lambda: ops.add_constant(x, 1.0))
assert float(y[0]) == 2.0
y = timed("add, new specialization", lambda: ops.add_constant(xd, 1.0))
assert float(y[0]) == 2.0
"""
_KJIT_ADD_WARM = r"""
y = timed("add", lambda: ops.add_constant(x, 1.0))
assert float(y[0]) == 2.0 and out["add"]["compiles"] == 0, out
"""

# Each probe prints one JSON line: {"name": {"ms": ..., ...}, ...}.
PROBES = {
    "kjit": {
        "empty": _KJIT_PRELUDE
        + r"""
# The compiler preload (kjit/compiler_preload.hpp) started on a background thread when the prelude started CUDA:
# how long it took, if it ended before the clock (-1: still running at the first call, which then waited for it).
preload = kjit._core._compiler_preload()
out["compiler preload (background, since CUDA started)"] = {"ms": -1.0 if preload is None else preload["ms"]}
"""
        + _KJIT_ADD
        + r"""
OPS = %r
"""
        % (OPS,)
        + _KJIT_OPS
        + r"""
print(json.dumps(out))
""",
        "warm": _KJIT_PRELUDE
        + _KJIT_ADD_WARM
        + r"""
h = torch.randn(64, 4096, device="cuda"); torch.cuda.synchronize()
timed("softmax", lambda: ops.softmax(h, -1))
assert out["softmax"]["compiles"] == 0, out
print(json.dumps(out))
""",
    },
    # The same first compiles with the preload turned off (KJIT_PRELOAD_COMPILER=0, PROBE_ENV): what the first
    # compile of a process costs when NVRTC's start-up is paid by that compile.
    "kjit, no preload": {
        "empty": _KJIT_PRELUDE + _KJIT_ADD + "print(json.dumps(out))\n",
        "warm": _KJIT_PRELUDE + _KJIT_ADD_WARM + "print(json.dumps(out))\n",
    },
    "cupy": r"""
import json, time, torch, cupy
x = torch.ones(1024, device="cuda"); y = torch.empty_like(x); torch.cuda.synchronize()
src = %r
t = time.perf_counter()
k = cupy.RawKernel(src, "add_c")
k((4,), (256,), (x.data_ptr(), y.data_ptr(), cupy.float32(1.0), cupy.int64(1024)))
torch.cuda.synchronize()
ms = (time.perf_counter() - t) * 1e3
assert float(y[0]) == 2.0
print(json.dumps({"add": {"ms": ms}}))
"""
    % ADD_SRC,
    "triton": r"""
import json, time, torch
from kjit.bench._triton_kernels import add_c  # the kernel of the overhead section (imported, not compiled)
x = torch.ones(1024, device="cuda"); y = torch.empty_like(x); torch.cuda.synchronize()
t = time.perf_counter(); add_c[(4,)](x, y, 1.0, 1024, BLOCK=256); torch.cuda.synchronize()
ms = (time.perf_counter() - t) * 1e3
assert float(y[0]) == 2.0
print(json.dumps({"add": {"ms": ms}}))
""",
    "jiterator": r"""
import json, time, torch
from torch.cuda.jiterator import _create_jit_fn
x = torch.ones(1024, device="cuda"); torch.cuda.synchronize()
t = time.perf_counter()
f = _create_jit_fn(%r, c=1.0)
y = f(x, c=1.0); torch.cuda.synchronize()
ms = (time.perf_counter() - t) * 1e3
assert float(y[0]) == 2.0
print(json.dumps({"add": {"ms": ms}}))
"""
    % JITERATOR_SRC,
}

# The environment variable that moves each peer's disk cache.
CACHE_ENV = {
    "kjit": "KJIT_CACHE_DIR",
    "kjit, no preload": "KJIT_CACHE_DIR",
    "cupy": "CUPY_CACHE_DIR",
    "triton": "TRITON_CACHE_DIR",
    "jiterator": "PYTORCH_KERNEL_CACHE_PATH",
}
# Further environment of a probe.
PROBE_ENV = {"kjit, no preload": {"KJIT_PRELOAD_COMPILER": "0"}}


class ProbeFailed(RuntimeError):
    pass


def probe(script: str, env: dict, timeout_s: float = PROBE_TIMEOUT_S) -> dict:
    """Runs one probe script in a fresh process; its last line of output, as JSON. ProbeFailed (with the
    reason) when it fails, prints no result, or runs past `timeout_s` (then it is killed)."""
    try:
        r = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ProbeFailed(f"timed out after {timeout_s:g} s (killed)") from None
    if r.returncode != 0:
        lines = (r.stderr.strip() or r.stdout.strip() or f"exit code {r.returncode}").splitlines()
        raise ProbeFailed(f"exit code {r.returncode}: {lines[-1][:300]}")
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ProbeFailed(f"printed no result (stdout: {r.stdout.strip()[-200:]!r})") from None


def _pair(peer: str, cold_src: str, warm_src: str, timeout_s: float) -> tuple[dict, dict]:
    """One empty-cache process, then one warm-cache process on the same cache directory."""
    with (
        tempfile.TemporaryDirectory(prefix="kjit-bench-") as cache,
        tempfile.TemporaryDirectory(prefix="kjit-bench-cuda-cache-") as cuda_cache,
    ):
        env = dict(os.environ, **{CACHE_ENV[peer]: cache}, CUDA_CACHE_PATH=cuda_cache, **PROBE_ENV.get(peer, {}))
        env.pop("KJIT_CACHE_PATH", None)
        env.pop("KJIT_REMOTE_CACHE", None)
        results = []
        for i, src in enumerate((cold_src, warm_src)):
            script = os.path.join(cache, f"probe{i}.py")  # a file: Triton reads the kernel's source
            with open(script, "w") as f:
                f.write(src)
            results.append(probe(script, env, timeout_s))
        return results[0], results[1]


def _summaries(runs: list[dict]) -> dict:
    """{case: {"ms": summary, "phase_ms": {phase: median}}} over repeated runs of one probe."""
    out: dict = {}
    for case in runs[0]:
        vals = [r[case] for r in runs if case in r]
        entry = {"ms": stats.summarize([v["ms"] for v in vals])}
        if "phase_ms" in vals[0]:
            entry["phase_ms"] = {
                p: round(stats.summarize([v["phase_ms"][p] for v in vals])["median"], 3) for p in vals[0]["phase_ms"]
            }
            entry["compiles"] = vals[-1]["compiles"]
        out[case] = entry
    return out


def measure(peer: str, repeats: int, timeout_s: float = PROBE_TIMEOUT_S) -> dict:
    src = PROBES[peer]
    cold_src, warm_src = (src["empty"], src["warm"]) if isinstance(src, dict) else (src, src)
    cold, warm = [], []
    for _ in range(repeats):
        c, w = _pair(peer, cold_src, warm_src, timeout_s)
        cold.append(c)
        warm.append(w)
    return {"empty_cache": _summaries(cold), "warm_cache_new_process": _summaries(warm)}


def _line(peer: str, v) -> str:
    if not isinstance(v, dict):
        return f"  {peer}: {v}"
    parts = [
        f"{case} {e['ms']['median']:.1f} ms"
        for kind in ("empty_cache", "warm_cache_new_process")
        for case, e in v[kind].items()
    ]
    return f"  {peer}: " + "; ".join(parts)


def run(quick: bool, peer_versions: dict | None = None, log=None, save=None) -> dict:
    peer_versions = peer_versions or machine.peers()
    repeats = 1 if quick else 3
    res: dict = {}
    out = {
        "repeats": repeats,
        "probe_timeout_s": PROBE_TIMEOUT_S,
        "method": "each probe a fresh process (torch and kjit imported, CUDA context up before the clock), "
        "its own empty cache directory and empty CUDA_CACHE_PATH; kjit passes --no-cache to NVRTC "
        "12.9+, so every empty-cache figure is a real compile",
        "results": res,
    }
    for peer in PROBES:
        if not peer.startswith("kjit") and not machine.available(peer_versions, peer):
            res[peer] = peer_versions.get(peer) or f"skipped: {peer} not detected"
        else:
            try:
                res[peer] = measure(peer, repeats)
            except Exception as e:  # noqa: BLE001  (a failed or hung probe never loses the others)
                res[peer] = f"failed: {error_text(e)}"
        if log:
            log(_line(peer, res[peer]))
        if save:
            save(out)
    return out
