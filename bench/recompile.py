"""What a changing scalar costs: new compiles and seconds.

kjit.elementwise with a runtime scalar changed 1000 times (expect 0 new compiles, from kjit.stats()
deltas); a specialized scalar over N distinct values (N compiles, and their time). Peers:
torch.compile of the same function with a Python float changing 1000 times (graphs compiled counted
by torch._dynamo's counters), Triton with a plain argument changing 1000 times (0 recompiles) and with a
tl.constexpr over N distinct values (N compiles). Every count excludes the first (warm-up) call.

The distinct values are drawn at random each run, so that no disk cache (kjit's, Triton's) already
holds them: the compiles are real compiles.
"""

from __future__ import annotations

import random
import time

from . import machine
from .stats import error_text

RUNTIME_CHANGES = 1000


def _kjit_counts():
    import kjit

    s = kjit.stats()
    return {k: s.get(k, 0) for k in ("compiles", "disk_hits", "memory_hits", "compile_ms")}


def _delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after}


def kjit_runtime(x, changes: int) -> dict:
    import torch

    import kjit

    f = kjit.elementwise("x * s", "x", "s", name="bench_runtime_scalar")
    f(x, s=0.5)
    torch.cuda.synchronize()
    before = _kjit_counts()
    t = time.perf_counter()
    for i in range(changes):
        f(x, s=0.5 + i * 1e-3)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t
    d = _delta(_kjit_counts(), before)
    return {
        "kind": "kjit",
        "mode": "runtime",
        "changes": changes,
        "distinct_values": changes,
        "compiles": d["compiles"],
        "disk_hits": d["disk_hits"],
        "compile_ms": d["compile_ms"],
        "seconds": secs,
        "expected": "0 compiles",
    }


def kjit_specialized(x, values: list[float]) -> dict:
    import torch

    import kjit

    f = kjit.elementwise("x * s", "x", "s", specialize="s", name="bench_specialized_scalar")
    f(x, s=0.25)  # warm-up (0.25 is not among the values)
    torch.cuda.synchronize()
    before = _kjit_counts()
    t = time.perf_counter()
    for v in values:
        f(x, s=v)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t
    d = _delta(_kjit_counts(), before)
    return {
        "kind": "kjit",
        "mode": "specialized",
        "changes": len(values),
        "distinct_values": len(values),
        "compiles": d["compiles"],
        "disk_hits": d["disk_hits"],
        "compile_ms": d["compile_ms"],
        "seconds": secs,
        "expected": f"{len(values)} compiles",
    }


def torch_compile_float(x, changes: int) -> dict:
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()

    def scale(x, s):
        return x * s

    cf = torch.compile(scale)
    cf(x, 0.5)
    torch.cuda.synchronize()
    before = counters["stats"]["unique_graphs"]
    t = time.perf_counter()
    for i in range(changes):
        cf(x, 0.5 + i * 1e-3)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t
    cfg = torch._dynamo.config
    limit = getattr(cfg, "recompile_limit", getattr(cfg, "cache_size_limit", None))
    out = {
        "kind": "peer",
        "mode": "runtime",
        "changes": changes,
        "distinct_values": changes,
        "compiles": counters["stats"]["unique_graphs"] - before,
        "seconds": secs,
        "recompile_limit": limit,
        "expected": "Python float: specialized or made dynamic",
    }
    torch._dynamo.reset()
    return out


def triton_runtime(x, changes: int) -> dict:
    import torch

    from ._triton_kernels import add_c, cache_size

    y = torch.empty_like(x)
    n = x.numel()
    grid = ((n + 1023) // 1024,)
    add_c[grid](x, y, 0.5, n, BLOCK=1024)
    torch.cuda.synchronize()
    before = cache_size(add_c)
    t = time.perf_counter()
    for i in range(changes):
        add_c[grid](x, y, 0.5 + i * 1e-3, n, BLOCK=1024)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t
    after = cache_size(add_c)
    return {
        "kind": "peer",
        "mode": "runtime",
        "changes": changes,
        "distinct_values": changes,
        "compiles": None if before is None or after is None else after - before,
        "seconds": secs,
        "expected": "0 compiles",
    }


def triton_constexpr(x, values: list[float]) -> dict:
    import torch

    from ._triton_kernels import add_c_constexpr, cache_size

    y = torch.empty_like(x)
    n = x.numel()
    grid = ((n + 1023) // 1024,)
    add_c_constexpr[grid](x, y, n, C=0.25, BLOCK=1024)
    torch.cuda.synchronize()
    before = cache_size(add_c_constexpr)
    t = time.perf_counter()
    for v in values:
        add_c_constexpr[grid](x, y, n, C=v, BLOCK=1024)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t
    after = cache_size(add_c_constexpr)
    return {
        "kind": "peer",
        "mode": "specialized",
        "changes": len(values),
        "distinct_values": len(values),
        "compiles": None if before is None or after is None else after - before,
        "seconds": secs,
        "expected": f"{len(values)} compiles",
    }


def distinct_values(count: int, seed: int | None = None) -> list[float]:
    """`count` distinct floats, exactly representable in float32, different in every run."""
    rng = random.Random(seed)
    base = rng.randrange(1 << 20)
    return [float(base + i) / 1024.0 + 1.0 for i in range(count)]


def run(quick: bool, peer_versions: dict | None = None, log=None) -> dict:
    import torch

    peer_versions = peer_versions or machine.peers()
    n_specialized = 20 if quick else 100
    values = distinct_values(n_specialized)
    x = torch.randn(1 << 16, device="cuda")
    res: dict = {}
    cases = [
        ("kjit runtime scalar", lambda: kjit_runtime(x, RUNTIME_CHANGES), None),
        ("kjit specialized scalar", lambda: kjit_specialized(x, values), None),
        ("torch.compile Python float", lambda: torch_compile_float(x, RUNTIME_CHANGES), "torch.compile"),
        ("triton runtime argument", lambda: triton_runtime(x, RUNTIME_CHANGES), "triton"),
        ("triton tl.constexpr", lambda: triton_constexpr(x, values), "triton"),
    ]
    for name, fn, peer in cases:
        if peer and not machine.available(peer_versions, peer):
            res[name] = peer_versions.get(peer) or f"skipped: {peer} not detected"
        else:
            try:
                res[name] = fn()
            except Exception as e:  # noqa: BLE001
                res[name] = f"skipped: {error_text(e)}"
        if log:
            v = res[name]
            log(f"  {name}: " + (f"{v['compiles']} compiles in {v['seconds']:.2f} s" if isinstance(v, dict) else v))
    return {
        "runtime_changes": RUNTIME_CHANGES,
        "specialized_values": n_specialized,
        "results": res,
        "vs": {
            "torch.compile Python float": "kjit runtime scalar",
            "triton runtime argument": "kjit runtime scalar",
            "triton tl.constexpr": "kjit specialized scalar",
        },
    }
