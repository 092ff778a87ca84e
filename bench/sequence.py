"""The sequence ops: kjit.ops.causal_conv1d and kjit.ops.linear_scan against eager PyTorch, torch.compile and a
device copy of the same bytes, in the same run.

Points (the anchors of issue #32, measured on an H200 on 2026-11-26):
- causal_conv1d + SiLU, width 4, with bias: x [4, 4096, 4096] in bfloat16 and float32. Eager is
  ``F.silu(F.conv1d(x, w.unsqueeze(1), b, padding=3, groups=D)[..., :L])``; torch.compile compiles that
  function. Bytes: one read of x and one write of y. Forward, and forward + backward (the gradients of x,
  weight and bias for a given dy; bytes not counted).
- linear_scan ``h[t] = a[t] h[t-1] + b[t]``: [8, 2048, 4096] in float32 and bfloat16. The peer is the Python
  loop over time (one torch op pair per step, what a user writes without a scan kernel; float32 only, timed
  once per repetition: about 100 ms). torch.compile of a 4096-step Python loop is not attempted (it unrolls
  the loop: minutes of compile). Bytes: reads of a and b, one write of h.
The copy is ``y.copy_(x)`` of a tensor of the same bytes per read + write (GB/s on the same footing: bytes
moved over time). Every contender's result is checked against eager (or the loop) once before timing.

Targets (issue #32), computed, never asserted: causal_conv1d >= 5x eager and >= 80% of copy; the scan
>= 80% of copy and >= 100x the Python loop. verdicts() is the pure function the report renders.
"""

from __future__ import annotations

from . import stats
from .stats import error_text

CONV = dict(B=4, D=4096, L=4096, W=4)
SCAN = dict(B=8, D=2048, L=4096)
CONV_DTYPES = {False: ("bfloat16", "float32"), True: ("bfloat16",)}
SCAN_DTYPES = {False: ("float32", "bfloat16"), True: ("float32",)}
TIMING = {False: dict(warmup=5, reps=15, inner=10), True: dict(warmup=3, reps=7, inner=5)}
TARGETS = {"conv_eager": 5.0, "conv_copy": 0.8, "scan_copy": 0.8, "scan_loop": 100.0}


def where(p: dict) -> str:
    return f"{p['op']} {p['pass']} {p['dtype']} {'x'.join(map(str, p['shape']))}"


def verdicts(sec: dict) -> list[dict]:
    """[{target, met, detail}] for the targets above, from the forward points (a missing figure: not met,
    saying so)."""
    out = []

    def add(target: str, values: list, need: float, fmt: str) -> None:
        vals = [v for v in values if v is not None]
        if not vals:
            out.append(dict(target=target, met=False, detail="not measured"))
            return
        worst = min(v for _, v in vals)
        detail = ", ".join(f"{name} {fmt.format(v)}" for name, v in vals)
        out.append(dict(target=target, met=worst >= need, detail=detail))

    fwd = [p for p in sec.get("points") or [] if p.get("pass") == "forward"]
    conv = [p for p in fwd if p["op"] == "causal_conv1d"]
    scan = [p for p in fwd if p["op"] == "linear_scan"]
    add(
        f"causal_conv1d >= {TARGETS['conv_eager']:.0f}x eager",
        [(p["dtype"], p.get("speedup", {}).get("eager")) if p.get("speedup", {}).get("eager") else None for p in conv],
        TARGETS["conv_eager"],
        "{:.1f}x",
    )
    add(
        f"causal_conv1d >= {TARGETS['conv_copy']:.0%} of copy",
        [(p["dtype"], p.get("of_copy")) if p.get("of_copy") else None for p in conv],
        TARGETS["conv_copy"],
        "{:.0%}",
    )
    add(
        f"linear_scan >= {TARGETS['scan_copy']:.0%} of copy",
        [(p["dtype"], p.get("of_copy")) if p.get("of_copy") else None for p in scan],
        TARGETS["scan_copy"],
        "{:.0%}",
    )
    add(
        f"linear_scan >= {TARGETS['scan_loop']:.0f}x the Python loop",
        [
            (p["dtype"], p.get("speedup", {}).get("python loop"))
            for p in scan
            if p.get("speedup", {}).get("python loop")
        ],
        TARGETS["scan_loop"],
        "{:.0f}x",
    )
    return out


def point(op: str, pas: str, dtype: str, shape: tuple, nbytes: float | None, ms: dict) -> dict:
    """A point from its contenders' millisecond summaries: GB/s, kjit's speedup over each peer (peer time /
    kjit time) and its fraction of the copy's bandwidth (pure arithmetic)."""
    p = dict(op=op, dtype=dtype, shape=list(shape), bytes=nbytes, ms=ms, speedup={})
    p["pass"] = pas
    k = (ms.get("kjit") or {}).get("median")
    for peer, v in ms.items():
        if peer not in ("kjit", "copy") and k and v:
            p["speedup"][peer] = stats.speedup(v["median"], k)
    if nbytes:
        p["gbps"] = {name: stats.gbps(nbytes, v["median"]) for name, v in ms.items() if v}
        if k and ms.get("copy"):
            p["of_copy"] = ms["copy"]["median"] / k
    return p


def _conv_points(name: str, ms, copy_ms) -> list[dict]:
    import torch
    import torch.nn.functional as F

    import kjit

    B, D, L, W = CONV["B"], CONV["D"], CONV["L"], CONV["W"]
    dtype = getattr(torch, name)
    x = torch.randn(B, D, L, device="cuda", dtype=dtype)
    w = torch.randn(D, W, device="cuda", dtype=dtype) * 0.5
    b = torch.randn(D, device="cuda", dtype=dtype)

    def eager(x, w, b):
        return F.silu(F.conv1d(x, w.unsqueeze(1), b, padding=W - 1, groups=D)[..., :L])

    def kj(x, w, b):
        return kjit.ops.causal_conv1d(x, w, b, None, "silu")[0]

    compiled = torch.compile(eager, dynamic=False)
    ref = eager(x, w, b)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype != torch.float32 else dict(rtol=1e-4, atol=1e-4)
    contenders = {"kjit": kj, "eager": eager, "torch.compile": compiled}
    for label, f in contenders.items():
        torch.testing.assert_close(f(x, w, b), ref, **tol, msg=lambda s, label=label: f"{label}: {s}")
    nbytes = 2 * x.numel() * x.element_size()
    fwd = {label: ms(lambda f=f: f(x, w, b)) for label, f in contenders.items()}
    fwd["copy"] = copy_ms(x, nbytes)
    xg, wg, bg = (v.clone().requires_grad_(True) for v in (x, w, b))
    dy = torch.randn_like(x)
    bwd = {
        label: ms(lambda f=f: torch.autograd.grad(f(xg, wg, bg), (xg, wg, bg), dy)) for label, f in contenders.items()
    }
    return [
        point("causal_conv1d", "forward", name, (B, D, L), nbytes, fwd),
        point("causal_conv1d", "forward+backward", name, (B, D, L), None, bwd),
    ]


def _loop(a, b):
    """The recurrence as a user writes it without a scan kernel: a Python loop over time, in float32."""
    import torch

    h = torch.zeros(a.shape[:-1], device=a.device, dtype=torch.float32)
    out = torch.empty(a.shape, device=a.device, dtype=torch.float32)
    for i in range(a.shape[-1]):
        h = a[..., i] * h + b[..., i]
        out[..., i] = h
    return out


def _scan_points(name: str, quick: bool, ms, copy_ms, skipped: list) -> list[dict]:
    import torch

    import kjit

    B, D, L = SCAN["B"], SCAN["D"], SCAN["L"]
    dtype = getattr(torch, name)
    a = (torch.rand(B, D, L, device="cuda") * 0.5 + 0.5).to(dtype)
    b = torch.randn(B, D, L, device="cuda", dtype=dtype)
    h = kjit.ops.linear_scan(a, b)[0]
    nbytes = 3 * a.numel() * a.element_size()
    fwd = {"kjit": ms(lambda: kjit.ops.linear_scan(a, b)), "copy": copy_ms(a, nbytes)}
    if name == "float32":
        torch.testing.assert_close(h, _loop(a, b), rtol=1e-4, atol=1e-4)
        fwd["python loop"] = stats.gpu_ms(lambda: _loop(a, b), 1, 3 if quick else 5, 1)
    else:
        torch.testing.assert_close(h.float(), _loop(a.float(), b.float()), rtol=2e-2, atol=2e-2)
        skipped.append(f"linear_scan {name}: the Python loop is timed in float32 only")
    ag, bg = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    dh = torch.randn_like(a)
    bwd = {"kjit": ms(lambda: torch.autograd.grad(kjit.ops.linear_scan(ag, bg)[0], (ag, bg), dh))}
    # forward + backward bytes: the forward's 3 passes, the backward's reads of dh, a, h and writes of da, db.
    return [
        point("linear_scan", "forward", name, (B, D, L), nbytes, fwd),
        point("linear_scan", "forward+backward", name, (B, D, L), 8 * a.numel() * a.element_size(), bwd),
    ]


def run(quick: bool, peer_versions=None, log=print, save=None) -> dict:
    import torch

    t = TIMING[quick]
    sec: dict = {"conv": CONV, "scan": SCAN, "timing": t, "points": [], "skipped": []}

    def ms(fn):
        return stats.gpu_ms(fn, t["warmup"], t["reps"], t["inner"])

    def copy_ms(like, moved: float) -> dict:
        """ms of a copy moving `moved` bytes (a read and a write of moved / 2), in like's dtype."""
        src = torch.empty(int(moved // 2 // like.element_size()), dtype=like.dtype, device="cuda")
        dst = torch.empty_like(src)
        return ms(lambda: dst.copy_(src))

    for name in CONV_DTYPES[quick]:
        sec["points"] += _conv_points(name, ms, copy_ms)
        log(f"causal_conv1d {name}: {sec['points'][-2]['speedup']}, of copy {sec['points'][-2].get('of_copy')}")
        if save:
            save(sec)
    for name in SCAN_DTYPES[quick]:
        sec["points"] += _scan_points(name, quick, ms, copy_ms, sec["skipped"])
        log(f"linear_scan {name}: {sec['points'][-2]['speedup']}, of copy {sec['points'][-2].get('of_copy')}")
        if save:
            save(sec)
    try:
        sec["verdicts"] = verdicts(sec)
    except Exception as e:  # noqa: BLE001
        sec["verdicts_error"] = error_text(e)
    return sec
