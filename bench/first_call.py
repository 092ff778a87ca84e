"""First call of the same add kernel: with an empty cache (compile), and in a new process with a warm
disk cache; kjit against CuPy RawKernel, Triton and torch.cuda.jiterator.

Each probe runs in its own process (import and CUDA context creation excluded from the time) with its
cache directory pointed at a fresh temporary directory; the second process of a pair reuses it.
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

# Each probe prints one JSON line: {"ms": ...} (kjit adds its stats()).
PROBES = {
    "kjit": r"""
import json, time, torch, kjit
x = torch.ones(1024, device="cuda"); torch.cuda.synchronize()
t = time.perf_counter(); y = kjit.ops.add_constant(x, 1.0); torch.cuda.synchronize()
ms = (time.perf_counter() - t) * 1e3
assert float(y[0]) == 2.0
print(json.dumps({"ms": ms, "stats": kjit.stats()}))
""",
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
print(json.dumps({"ms": ms}))
""" % ADD_SRC,
    "triton": r"""
import json, time, torch
from kjit.bench._triton_kernels import add_c  # the kernel of the overhead section (imported, not compiled)
x = torch.ones(1024, device="cuda"); y = torch.empty_like(x); torch.cuda.synchronize()
t = time.perf_counter(); add_c[(4,)](x, y, 1.0, 1024, BLOCK=256); torch.cuda.synchronize()
ms = (time.perf_counter() - t) * 1e3
assert float(y[0]) == 2.0
print(json.dumps({"ms": ms}))
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
print(json.dumps({"ms": ms}))
""" % JITERATOR_SRC,
}

# The environment variable that moves each peer's disk cache.
CACHE_ENV = {"kjit": "KJIT_CACHE_DIR", "cupy": "CUPY_CACHE_DIR", "triton": "TRITON_CACHE_DIR",
             "jiterator": "PYTORCH_KERNEL_CACHE_PATH"}


def _probe(script: str, env: dict) -> dict:
    r = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        lines = (r.stderr.strip() or r.stdout.strip() or f"exit code {r.returncode}").splitlines()
        raise RuntimeError(lines[-1][:300])
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(peer: str, repeats: int) -> dict:
    cold, warm = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="kjit-bench-") as cache:
            env = dict(os.environ, **{CACHE_ENV[peer]: cache})
            script = os.path.join(cache, "probe.py")  # a file: Triton reads the kernel's source
            with open(script, "w") as f:
                f.write(PROBES[peer])
            cold.append(_probe(script, env))
            warm.append(_probe(script, env))
    out = {"empty_cache_ms": stats.summarize([c["ms"] for c in cold]),
           "warm_cache_new_process_ms": stats.summarize([w["ms"] for w in warm])}
    if peer == "kjit":
        out["cold_stats"] = cold[-1].get("stats")
        out["warm_stats"] = warm[-1].get("stats")
    return out


def run(quick: bool, peer_versions: dict | None = None, log=None) -> dict:
    peer_versions = peer_versions or machine.peers()
    repeats = 1 if quick else 5
    res: dict = {}
    for peer in PROBES:
        if peer != "kjit" and not machine.available(peer_versions, peer):
            res[peer] = peer_versions.get(peer) or f"skipped: {peer} not detected"
        else:
            try:
                res[peer] = measure(peer, repeats)
            except Exception as e:  # noqa: BLE001
                res[peer] = f"skipped: {error_text(e)}"
        if log:
            v = res[peer]
            log(f"  {peer}: " + (f"empty {v['empty_cache_ms']['median']:.1f} ms, warm "
                                 f"{v['warm_cache_new_process_ms']['median']:.1f} ms" if isinstance(v, dict) else v))
    return {"repeats": repeats, "results": res}
