"""Per-call time of the kernel library at small and medium sizes: kjit against eager PyTorch and
torch.compile of the same eager function, in the same run.

Ops (rows x 4096 elements; max_pool2d on NCHW [rows, 4, 32, 32], the same element count): softmax,
log_softmax, layer_norm (weight and bias), rms_norm (weight), add_rms_norm and add_layer_norm (a residual
of x's shape; eager: ``h = x + r`` then the norm, two kernels), silu, gelu, sum(dim=-1), amax(dim=-1), the
kjit.elementwise function ``silu(x) * s`` called with s=0.5 (eager: ``F.silu(x) * 0.5``, two kernels),
max_pool2d 2x2 stride 2 and linear (x [rows, 4096] @ w [4096, 4096].T against F.linear: at rows 1 and 8 the
cost of a decode GEMM's call). Rows 1, 8, 64, 512, 4096 in bfloat16 and float32 (--quick: rows 1, 64, 4096 in
bfloat16).

Each contender's result is checked against eager PyTorch once, then timed as microseconds per call of
back-to-back calls synchronized at the end (stats.wall_us: the contenders take turns batch by batch,
warm-up calls first so that nothing compiles while timed). torch.compile (mode default, dynamic=False)
is compiled once per point before timing; the compile seconds are recorded, and once they add up to
COMPILE_BUDGET_S the remaining points skip torch.compile with that reason (the section stays near two
minutes on an H100 even with a cold Inductor cache).

Ratios are times: kjit / eager and kjit / torch.compile (below 1: kjit faster). The targets (DESIGN
section 8) are computed, never asserted: kjit <= 1.0x eager at every size with a median <= 0.8x, and
kjit <= 0.7x torch.compile; misses() and summary() are the pure functions the report renders.
"""

from __future__ import annotations

import statistics
import time

from . import machine, stats
from .stats import error_text

COLS = 4096
ROWS_FULL = (1, 8, 64, 512, 4096)
ROWS_QUICK = (1, 64, 4096)
DTYPES_FULL = ("bfloat16", "float32")
DTYPES_QUICK = ("bfloat16",)
OPS = (
    "softmax",
    "log_softmax",
    "layer_norm",
    "rms_norm",
    "add_rms_norm",
    "add_layer_norm",
    "silu",
    "gelu",
    "sum(dim=-1)",
    "amax(dim=-1)",
    "silu(x) * s",
    "max_pool2d 2x2 s2",
    "linear",
)
POOL = "max_pool2d 2x2 s2"
LINEAR = "linear"  # x [rows, COLS] @ w [COLS, COLS].T: at rows 1 and 8 the decode GEMM's per-call cost
CONTENDERS = ("kjit", "eager", "torch.compile")
PEERS = ("eager", "torch.compile")
RATIO_KEYS = {"eager": "kjit_over_eager", "torch.compile": "kjit_over_compiled"}
TARGETS = {"eager_max": 1.0, "eager_median_max": 0.8, "compiled_max": 0.7}
COMPILE_BUDGET_S = {False: 80.0, True: 45.0}  # by quick
TIMING = {False: dict(calls=200, reps=11, warmup=20), True: dict(calls=100, reps=7, warmup=10)}


def input_shape(op: str, rows: int) -> tuple:
    """rows x COLS, or NCHW [rows, 4, 32, 32] (as many elements) for the pool."""
    return (rows, 4, 32, 32) if op == POOL else (rows, COLS)


# -- pure logic (no torch): ratios, misses, summary ------------------------------------------------------
def _median_us(point: dict, name: str):
    v = (point.get("us") or {}).get(name)
    return v["median"] if isinstance(v, dict) else None


def add_ratios(point: dict) -> dict:
    """Sets point["kjit_over_eager"] and point["kjit_over_compiled"] (kjit time / peer time, medians)
    where both figures exist; returns the point."""
    k = _median_us(point, "kjit")
    for peer, key in RATIO_KEYS.items():
        r = stats.ratio(k, _median_us(point, peer))
        if r is None:
            point.pop(key, None)
        else:
            point[key] = r
    return point


def _targets(sec: dict) -> dict:
    return {**TARGETS, **(sec.get("targets") or {})}


def where(point: dict) -> str:
    """ "softmax bfloat16 rows 64": how a point is named in lists."""
    return f"{point['op']} {point['dtype']} rows {point['rows']}"


def misses(sec: dict) -> list[dict]:
    """Every point above a per-point target: {op, dtype, rows, peer, ratio, limit, kjit_us, peer_us}, in the
    order of the points, eager before torch.compile."""
    t = _targets(sec)
    limits = {"eager": t["eager_max"], "torch.compile": t["compiled_max"]}
    out = []
    for p in sec.get("points") or []:
        for peer in PEERS:
            r = p.get(RATIO_KEYS[peer])
            if r is not None and r > limits[peer]:
                out.append(
                    dict(
                        op=p["op"],
                        dtype=p["dtype"],
                        rows=p["rows"],
                        peer=peer,
                        ratio=r,
                        limit=limits[peer],
                        kjit_us=_median_us(p, "kjit"),
                        peer_us=_median_us(p, peer),
                    )
                )
    return out


def _spread(points: list[dict], key: str) -> dict | None:
    vals = [(p[key], p) for p in points if p.get(key) is not None]
    if not vals:
        return None
    worst, wp = max(vals, key=lambda v: v[0])
    return {"median": statistics.median(v for v, _ in vals), "worst": worst, "worst_at": where(wp), "n": len(vals)}


def summary(sec: dict) -> dict:
    """{"vs_eager", "vs_compiled": {median, worst, worst_at, n} or None, "by_dtype": {dtype: the same vs
    eager}, "misses_vs_eager", "misses_vs_compiled": counts, "median_met": bool or None, "kjit_failed":
    points without a kjit figure, "points": how many}."""
    t = _targets(sec)
    points = sec.get("points") or []
    m = misses(sec)
    eager = _spread(points, "kjit_over_eager")
    dtypes = list(dict.fromkeys(p["dtype"] for p in points))
    return {
        "points": len(points),
        "vs_eager": eager,
        "vs_compiled": _spread(points, "kjit_over_compiled"),
        "by_dtype": {d: _spread([p for p in points if p["dtype"] == d], "kjit_over_eager") for d in dtypes},
        "misses_vs_eager": sum(1 for x in m if x["peer"] == "eager"),
        "misses_vs_compiled": sum(1 for x in m if x["peer"] == "torch.compile"),
        "median_met": None if eager is None else eager["median"] <= t["eager_median_max"],
        "kjit_failed": sum(1 for p in points if _median_us(p, "kjit") is None),
    }


# -- the ops ---------------------------------------------------------------------------------------------
def _rms_norm_ref(x, w, eps):
    import torch

    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _ops() -> dict:
    """{op: dict(kjit(*inputs), eager(*inputs) or None, eager_missing: reason, ref(*inputs), weights: how
    many [COLS] weight tensors follow x, residual: whether a residual of x's shape follows x first)}."""
    import torch
    import torch.nn.functional as F

    import kjit

    silu_s = kjit.elementwise("silu(x) * s", "x", "s", name="bench_small_silu_scaled")
    has_rms = hasattr(F, "rms_norm")
    rms_eager = (lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)) if has_rms else None

    def op(kjit_fn, eager, weights=0, ref=None, missing=None, residual=False, weight_shape=(COLS,), dtypes=None):
        return dict(
            kjit=kjit_fn,
            eager=eager,
            weights=weights,
            ref=ref or eager,
            eager_missing=missing,
            residual=residual,
            weight_shape=weight_shape,
            dtypes=dtypes,
        )

    def add_rms_eager(x, r, w):
        h = x + r
        return F.rms_norm(h, (h.shape[-1],), w, 1e-6), h

    def add_rms_ref(x, r, w):
        h = x + r
        return _rms_norm_ref(h, w, 1e-6), h

    def add_ln_eager(x, r, w, b):
        h = x + r
        return F.layer_norm(h, (h.shape[-1],), w, b, 1e-5), h

    return {
        "softmax": op(lambda x: kjit.ops.softmax(x, -1), lambda x: torch.softmax(x, -1)),
        "log_softmax": op(lambda x: kjit.ops.log_softmax(x, -1), lambda x: F.log_softmax(x, -1)),
        "layer_norm": op(
            lambda x, w, b: kjit.ops.layer_norm(x, w, b, 1e-5),
            lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
            weights=2,
        ),
        "rms_norm": op(
            lambda x, w: kjit.ops.rms_norm(x, w, 1e-6),
            rms_eager,
            weights=1,
            ref=None if has_rms else (lambda x, w: _rms_norm_ref(x, w, 1e-6)),
            missing=None
            if has_rms
            else f"torch.nn.functional.rms_norm needs torch >= 2.4 (this is torch {torch.__version__})",
        ),
        "add_rms_norm": op(
            lambda x, r, w: kjit.ops.add_rms_norm(x, r, w, 1e-6),
            add_rms_eager if has_rms else None,
            weights=1,
            residual=True,
            ref=None if has_rms else add_rms_ref,
            missing=None
            if has_rms
            else f"torch.nn.functional.rms_norm needs torch >= 2.4 (this is torch {torch.__version__})",
        ),
        "add_layer_norm": op(
            lambda x, r, w, b: kjit.ops.add_layer_norm(x, r, w, b, 1e-5), add_ln_eager, weights=2, residual=True
        ),
        "silu": op(kjit.ops.silu, F.silu),
        "gelu": op(kjit.ops.gelu, F.gelu),
        "sum(dim=-1)": op(lambda x: kjit.ops.sum(x, -1), lambda x: torch.sum(x, -1)),
        "amax(dim=-1)": op(lambda x: kjit.ops.amax(x, -1), lambda x: torch.amax(x, -1)),
        "silu(x) * s": op(lambda x: silu_s(x, s=0.5), lambda x: F.silu(x) * 0.5),
        POOL: op(lambda x: kjit.ops.max_pool2d(x, 2, 2), lambda x: F.max_pool2d(x, 2, 2)),
        # 16-bit only: float32 runs as TF32 only where the user allows it (docs/ops.md).
        LINEAR: op(kjit.ops.linear, F.linear, weights=1, weight_shape=(COLS, COLS), dtypes=("bfloat16",)),
    }


# -- measuring one point ---------------------------------------------------------------------------------
class CompileBudget:
    """Seconds spent compiling with torch.compile in this section, against a limit."""

    def __init__(self, limit_s: float):
        self.limit_s, self.spent_s = limit_s, 0.0

    def reason(self) -> str | None:
        if self.spent_s < self.limit_s:
            return None
        return (
            f"skipped: the section's torch.compile budget of {self.limit_s:.0f} s is spent "
            f"({self.spent_s:.0f} s of compiles so far)"
        )


def measure(
    name: str, op: dict, dtype_name: str, rows: int, *, timing: dict, compile_skip: str | None, budget: CompileBudget
) -> dict:
    """One point: checks each contender against the reference, then times them together. A contender that
    cannot run is in point["skipped"] with the reason; kjit's failure is kept there too."""
    import torch

    dtype = getattr(torch, dtype_name)
    shape = input_shape(name, rows)
    x = torch.randn(shape, device="cuda", dtype=dtype)
    residual = (torch.randn(shape, device="cuda", dtype=dtype),) if op.get("residual") else ()
    # Weights of [COLS] (norms), or the [COLS, COLS] weight of linear, scaled so that outputs are O(1).
    shape_w = op.get("weight_shape", (COLS,))
    w_scale = COLS**-0.5 if len(shape_w) == 2 else 1.0
    inputs = (
        (x,)
        + residual
        + tuple(torch.randn(shape_w, device="cuda", dtype=dtype) * w_scale for _ in range(op["weights"]))
    )
    point: dict = {"op": name, "dtype": dtype_name, "rows": rows, "shape": list(shape), "us": {}, "skipped": {}}
    ref = op["ref"](*inputs)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    summed = name.startswith("sum")  # sums of 4096 values differ in the last bits

    def check(got):
        for g, r in zip(got, ref, strict=True) if isinstance(ref, tuple) else ((got, ref),):  # (y, h) or y
            torch.testing.assert_close(
                g.float(), r.float(), rtol=tol * (10 if summed else 1), atol=1e-2 if summed else tol
            )

    fns: dict = {}

    def admit(contender, fn):
        try:
            check(fn())
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001  (a contender that fails is reported, never fatal)
            point["skipped"][contender] = f"failed: {error_text(e)}"
            return
        fns[contender] = fn

    admit("kjit", lambda: op["kjit"](*inputs))
    if op["eager"] is None:
        point["skipped"]["eager"] = f"skipped: {op['eager_missing']}"
        point["skipped"]["torch.compile"] = f"skipped: no eager function to compile ({op['eager_missing']})"
    else:
        eager = op["eager"]
        admit("eager", lambda: eager(*inputs))
        reason = compile_skip or budget.reason()
        if reason:
            point["skipped"]["torch.compile"] = reason
        else:
            t = time.perf_counter()
            try:
                import torch._dynamo

                torch._dynamo.reset()  # a fresh compile per point: no recompile limit, no stale guards
                compiled = torch.compile(eager, dynamic=False)
                compiled(*inputs)  # compiles here, outside the timed region
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                point["skipped"]["torch.compile"] = f"skipped: torch.compile failed: {error_text(e)}"
                compiled = None
            spent = time.perf_counter() - t
            budget.spent_s += spent
            point["compile_s"] = round(spent, 3)
            if compiled is not None:
                admit("torch.compile", lambda: compiled(*inputs))
    if fns:
        point["us"] = stats.wall_us(fns, timing["calls"], timing["reps"], timing["warmup"])
    if not point["skipped"]:
        del point["skipped"]
    return add_ratios(point)


def _log_line(p: dict) -> str:
    us = p.get("us") or {}
    parts = [f"{c} {us[c]['median']:.1f} us" for c in CONTENDERS if c in us]
    ratios = [f"kjit/{peer} {p[RATIO_KEYS[peer]]:.2f}x" for peer in PEERS if p.get(RATIO_KEYS[peer]) is not None]
    return (
        f"  small {where(p)}: "
        + ", ".join(parts + ratios)
        + (f" ({'; '.join(f'{k}: {v}' for k, v in p['skipped'].items())})" if p.get("skipped") else "")
    )


def run(quick: bool, peer_versions: dict | None = None, log=None) -> dict:
    import torch

    peer_versions = peer_versions or machine.peers()
    compile_skip = (
        None
        if machine.available(peer_versions, "torch.compile")
        else (peer_versions.get("torch.compile") or "skipped: torch.compile not detected")
    )
    rows_list = ROWS_QUICK if quick else ROWS_FULL
    dtypes = DTYPES_QUICK if quick else DTYPES_FULL
    timing = TIMING[quick]
    budget = CompileBudget(COMPILE_BUDGET_S[quick])
    ops = _ops()
    points = []
    t0 = time.perf_counter()
    # Rows outermost: if the compile budget runs out, the largest inputs lose torch.compile first.
    for rows in rows_list:
        for dtype_name in dtypes:
            for name in OPS:
                if dtype_name not in (ops[name]["dtypes"] or dtypes):
                    continue
                try:
                    p = measure(
                        name, ops[name], dtype_name, rows, timing=timing, compile_skip=compile_skip, budget=budget
                    )
                except Exception as e:  # noqa: BLE001  (e.g. out of memory: the point is reported)
                    p = {
                        "op": name,
                        "dtype": dtype_name,
                        "rows": rows,
                        "shape": list(input_shape(name, rows)),
                        "us": {},
                        "error": error_text(e),
                    }
                    torch.cuda.empty_cache()
                points.append(p)
                if log:
                    log(
                        (_log_line(p) if "error" not in p else f"  small {where(p)}: error: {p['error']}")
                        + f" ({time.perf_counter() - t0:.0f} s)"
                    )
    try:
        import torch._dynamo

        torch._dynamo.reset()
    except Exception:  # noqa: BLE001
        pass
    sec = {
        "cols": COLS,
        "rows": list(rows_list),
        "dtypes": list(dtypes),
        "ops": list(OPS),
        **timing,
        "targets": dict(TARGETS),
        "compile_budget_s": budget.limit_s,
        "compile_s": round(budget.spent_s, 2),
        "points": points,
    }
    sec["summary"] = summary(sec)
    return sec
