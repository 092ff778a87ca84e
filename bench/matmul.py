"""Matrix ops of the kernel library (kjit.ops.linear, kjit.ops.linear_swiglu) against cuBLAS, eager PyTorch
and torch.compile, in bfloat16, in the same run; and what their first calls cost to compile.

Three parts, every point checked against the eager result before it is timed:

  plain   kjit.ops.linear(x, w) vs cuBLAS F.linear(x, w) vs torch.compile(F.linear) at 8192^3 and at LLM
          shapes: M in {1, 16, 128, 2048, 8192} x (N, K) in {(4096, 4096), (11008, 4096), (4096, 11008),
          (14336, 4096)} (x [M, K], w [N, K]);
  gelu    kjit.ops.linear(x, w, b, activation="gelu") vs eager F.gelu(F.linear(x, w, b)) vs torch.compile of
          that function, M in {16, 2048, 8192}, the same (N, K);
  swiglu  kjit.ops.linear_swiglu(x, w_gate_up) vs eager F.silu(F.linear(x, wg)) * F.linear(x, wu) (two
          GEMMs) vs torch.compile of that function, M in {16, 2048, 8192}, the same (N, K) with F = N
          (w_gate_up [2F, K] = torch.cat([wg, wu]));
  backward  the backward of kjit.ops.linear(x, w) (dX and dW, torch.autograd.grad of a forward built once,
          its graph retained) vs eager F.linear's (cuBLAS) vs torch.compile(F.linear)'s compiled backward,
          M in {2048, 8192}, the same (N, K).

TFLOP/s = 2 * M * N * K / time (swiglu: 2 * M * 2F * K, both GEMMs; backward: 4 * M * N * K, dX and dW;
epilogues are not counted). Time per
call: CUDA events around INNER back-to-back calls, median over `reps` batches after `warmup` calls (as
stats.gpu_ms). L2: each contender cycles through enough copies of its operands (x, weights, bias) that
they span at least L2_FACTOR times the GPU's L2 cache, so that no call finds its weights in L2 from the
call before (a decode step reads its weights from memory: at M = 1 a [4096, 4096] bf16 weight, 32 MiB,
would otherwise stay in a 50 MiB L2 and be timed at L2 speed). torch.compile: mode default,
dynamic=False, compiled once per point before timing (torch._dynamo.reset() before each), within a
compile budget (COMPILE_BUDGET_S; the rest skip it with that reason).

Ratios are speeds: kjit TFLOP/s over the peer's (above 1: kjit faster). The targets are computed, never
asserted (summary(), verdicts()): vs cuBLAS, over the LLM shapes with M >= 128, median >= 1.0x and none
under 0.92x; at M <= 16 none under 1.0x; the fused gelu none under 1.10x eager and 1.10x torch.compile at
any M; swiglu (median over its points) >= 1.25x eager; the backward none under 1.0x eager.

Compile time (compile_probe): in a fresh process (torch and kjit imported, CUDA up, kjit's first compile of
the process paid by an add_constant before the clock) with KJIT_CACHE_DIR and CUDA_CACHE_PATH at empty
temporary directories (bench/first_call.py's probe): the wall time of the first kjit.ops.linear for a new
(N, K) = (4096, 4096) at M = 16, then at M = 8192 (another tile configuration of the same template), each
with kjit.stats()'s compile count and phase times. Targets <= 1.5 s and <= 0.8 s. A second figure that
compiled nothing (the tile configuration was the same) is reported as such, not as met.

KJIT_TUNE: the section reads the environment as kjit does; run it with KJIT_TUNE=1 to time kjit's tuned
choices (the first call per shape then times a few configurations: the warm-up calls absorb it; the
compile probe inherits the variable and its figures then include tuning). The setting is recorded.
"""

from __future__ import annotations

import os
import statistics
import time

from . import machine, stats
from .small import CompileBudget
from .stats import error_text

DTYPE = "bfloat16"
NK = ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096))
M_PLAIN = (1, 16, 128, 2048, 8192)
M_FUSED = (16, 2048, 8192)
M_BACKWARD = (2048, 8192)
SQUARE = 8192
KINDS = ("plain", "gelu", "swiglu", "backward")
# Contenders by kind; the first peer is the one of the kind's main ratio.
CONTENDERS = {
    "plain": ("kjit", "cuBLAS", "torch.compile"),
    "gelu": ("kjit", "eager", "torch.compile"),
    "swiglu": ("kjit", "eager", "torch.compile"),
    "backward": ("kjit", "eager", "torch.compile"),
}
RATIO_KEYS = {"cuBLAS": "kjit_over_cublas", "eager": "kjit_over_eager", "torch.compile": "kjit_over_compiled"}
TARGETS = {
    "cublas_median_min": 1.0,
    "cublas_min": 0.92,
    "small_m_min": 1.0,
    "gelu_eager_min": 1.10,
    "gelu_compiled_min": 1.10,
    "swiglu_eager_min": 1.25,
    "backward_eager_min": 1.0,
    "first_call_max_s": 1.5,
    "second_tile_max_s": 0.8,
}
LARGE_M = 128  # "M >= 128": the LLM shapes of the cuBLAS median and minimum
SMALL_M = 16  # "M <= 16": decode
L2_FACTOR = 2
INNER = 10
TIMING = {False: dict(warmup=10, reps=20), True: dict(warmup=5, reps=10)}
COMPILE_BUDGET_S = {False: 300.0, True: 60.0}
PROBE_NK = (4096, 4096)
PROBE_M = (16, 8192)
TOL = dict(rtol=5e-2, atol=5e-2)  # bf16 outputs of magnitude ~1 (w is scaled by 1/sqrt(K))


# -- the points ------------------------------------------------------------------------------------------
def points(quick: bool) -> list[dict]:
    """[{kind, m, n, k}] in the order they are measured (quick: a few only, for a smoke test)."""
    if quick:
        return [{"kind": "plain", "m": m, "n": n, "k": k} for m in (16, 2048) for n, k in NK[:2]] + [
            {"kind": "gelu", "m": 2048, "n": 4096, "k": 4096},
            {"kind": "swiglu", "m": 2048, "n": 11008, "k": 4096},
            {"kind": "backward", "m": 2048, "n": 4096, "k": 4096},
        ]
    out = [{"kind": "plain", "m": SQUARE, "n": SQUARE, "k": SQUARE}]
    out += [{"kind": "plain", "m": m, "n": n, "k": k} for m in M_PLAIN for n, k in NK]
    for kind in ("gelu", "swiglu"):
        out += [{"kind": kind, "m": m, "n": n, "k": k} for m in M_FUSED for n, k in NK]
    out += [{"kind": "backward", "m": m, "n": n, "k": k} for m in M_BACKWARD for n, k in NK]
    return out


def flops(kind: str, m: int, n: int, k: int) -> int:
    """Floating-point operations of one call: 2 M N K (swiglu: N = F, two GEMMs: 2 M 2F K; backward: dX and
    dW, 4 M N K)."""
    return 2 * m * n * k * (2 if kind in ("swiglu", "backward") else 1)


def tflops(nflops: float, ms: float) -> float:
    return nflops / (ms * 1e-3) / 1e12


def is_square(p: dict) -> bool:
    return p["m"] == p["n"] == p["k"] == SQUARE


def where(p: dict) -> str:
    """ "plain M=16 N=4096 K=4096": how a point is named in lists."""
    return f"{p['kind']} M={p['m']} N={p['n']} K={p['k']}"


# -- pure logic (no torch): ratios, summary, verdicts ----------------------------------------------------
def _median_ms(point: dict, name: str):
    v = (point.get("ms") or {}).get(name)
    return v["median"] if isinstance(v, dict) else None


def add_ratios(point: dict) -> dict:
    """Sets point["tflops"] ({contender: median TFLOP/s}) and the ratios kjit / peer of TFLOP/s (peer time
    over kjit time; above 1: kjit faster) where both figures exist; returns the point."""
    nf = flops(point["kind"], point["m"], point["n"], point["k"])
    point["tflops"] = {c: tflops(nf, v["median"]) for c, v in (point.get("ms") or {}).items() if isinstance(v, dict)}
    k = _median_ms(point, "kjit")
    for peer, key in RATIO_KEYS.items():
        r = stats.ratio(_median_ms(point, peer), k)  # peer time / kjit time = kjit speed / peer speed
        if r is None:
            point.pop(key, None)
        else:
            point[key] = r
    return point


def _targets(sec: dict) -> dict:
    return {**TARGETS, **(sec.get("targets") or {})}


def _spread(pts: list[dict], key: str) -> dict | None:
    vals = [(p[key], p) for p in pts if p.get(key) is not None]
    if not vals:
        return None
    lo, lp = min(vals, key=lambda v: v[0])
    return {"median": statistics.median(v for v, _ in vals), "min": lo, "min_at": where(lp), "n": len(vals)}


def summary(sec: dict) -> dict:
    """The figures of the targets, from the points: {"cublas_large_m": spread of kjit / cuBLAS over the LLM
    shapes with M >= LARGE_M, "cublas_small_m": the same for M <= SMALL_M, "square": kjit / cuBLAS at
    8192^3 or None, "gelu_eager", "gelu_compiled": spreads over every gelu point, "swiglu_eager",
    "swiglu_compiled": spreads over every swiglu point, "backward_eager", "backward_compiled": the same over
    every backward point, "compile": the compile probe's two figures (s) or
    None, "kjit_failed": points without a kjit figure, "points": how many}; a spread is {median, min, min_at,
    n} or None."""
    pts = sec.get("points") or []
    plain = [p for p in pts if p.get("kind") == "plain" and not is_square(p)]
    gelu = [p for p in pts if p.get("kind") == "gelu"]
    swiglu = [p for p in pts if p.get("kind") == "swiglu"]
    backward = [p for p in pts if p.get("kind") == "backward"]
    square = next((p.get("kjit_over_cublas") for p in pts if p.get("kind") == "plain" and is_square(p)), None)
    return {
        "points": len(pts),
        "cublas_large_m": _spread([p for p in plain if p["m"] >= LARGE_M], "kjit_over_cublas"),
        "cublas_small_m": _spread([p for p in plain if p["m"] <= SMALL_M], "kjit_over_cublas"),
        "square": square,
        "gelu_eager": _spread(gelu, "kjit_over_eager"),
        "gelu_compiled": _spread(gelu, "kjit_over_compiled"),
        "swiglu_eager": _spread(swiglu, "kjit_over_eager"),
        "swiglu_compiled": _spread(swiglu, "kjit_over_compiled"),
        "backward_eager": _spread(backward, "kjit_over_eager"),
        "backward_compiled": _spread(backward, "kjit_over_compiled"),
        "compile": compile_figures(sec.get("compile")),
        "kjit_failed": sum(1 for p in pts if _median_ms(p, "kjit") is None),
    }


def compile_figures(probe: dict | None) -> dict | None:
    """{"first_s", "first_compiles", "second_s", "second_compiles"} (medians, seconds) of the compile
    probe's results, or None when it has none."""
    if not isinstance(probe, dict) or not isinstance(probe.get("cases"), dict):
        return None
    cases = probe["cases"]
    out = {}
    for label, case in (("first", probe.get("first_case")), ("second", probe.get("second_case"))):
        e = cases.get(case) if case else None
        ok = isinstance(e, dict) and isinstance(e.get("ms"), dict)
        out[label + "_s"] = e["ms"]["median"] / 1e3 if ok else None
        out[label + "_compiles"] = e.get("compiles") if ok else None
    return out if out["first_s"] is not None or out["second_s"] is not None else None


def verdicts(sec: dict) -> list[dict]:
    """One entry per target: {target (its text), value (the figure, or None), met (True / False / None: no
    figure), detail}. Ratios are kjit speed over the peer's."""
    t = _targets(sec)
    s = summary(sec)
    out = []

    def add(text, value, met, detail=""):
        out.append({"target": text, "value": value, "met": met, "detail": detail})

    def at_least(text, spread, key, limit):
        v = spread[key] if spread else None
        detail = ""
        if spread:
            detail = f"min {spread['min']:.2f}x at {spread['min_at']}; {spread['n']} points"
        add(text, v, None if v is None else v >= limit, detail)

    big = s["cublas_large_m"]
    at_least(
        f"kjit / cuBLAS median >= {t['cublas_median_min']:.2f}x (LLM shapes, M >= {LARGE_M})",
        big,
        "median",
        t["cublas_median_min"],
    )
    add(
        f"kjit / cuBLAS none under {t['cublas_min']:.2f}x (LLM shapes, M >= {LARGE_M})",
        big["min"] if big else None,
        None if not big else big["min"] >= t["cublas_min"],
        f"at {big['min_at']}" if big else "",
    )
    at_least(
        f"kjit / cuBLAS none under {t['small_m_min']:.2f}x (M <= {SMALL_M})",
        s["cublas_small_m"],
        "min",
        t["small_m_min"],
    )
    at_least(
        f"fused gelu: kjit / eager none under {t['gelu_eager_min']:.2f}x (every M)",
        s["gelu_eager"],
        "min",
        t["gelu_eager_min"],
    )
    at_least(
        f"fused gelu: kjit / torch.compile none under {t['gelu_compiled_min']:.2f}x (every M)",
        s["gelu_compiled"],
        "min",
        t["gelu_compiled_min"],
    )
    at_least(
        f"swiglu: kjit / eager median >= {t['swiglu_eager_min']:.2f}x",
        s["swiglu_eager"],
        "median",
        t["swiglu_eager_min"],
    )
    at_least(
        f"backward (dX + dW): kjit / eager none under {t['backward_eager_min']:.2f}x (every M)",
        s["backward_eager"],
        "min",
        t["backward_eager_min"],
    )
    c = s["compile"] or {}
    first = c.get("first_s")
    add(
        f"first call of kjit.ops.linear, new (N, K), empty cache <= {t['first_call_max_s']:g} s",
        first,
        None if first is None else first <= t["first_call_max_s"],
        "" if c.get("first_compiles") is None else f"{c['first_compiles']} compile(s)",
    )
    second, n2 = c.get("second_s"), c.get("second_compiles")
    if second is not None and n2 == 0:  # nothing compiled: not a measure of a new tile configuration
        add(
            f"another tile configuration of the same (N, K) <= {t['second_tile_max_s']:g} s",
            second,
            None,
            "no compile: the second M ran the first call's kernel, so this figure says nothing of the target",
        )
    else:
        add(
            f"another tile configuration of the same (N, K) <= {t['second_tile_max_s']:g} s",
            second,
            None if second is None else second <= t["second_tile_max_s"],
            "" if n2 is None else f"{n2} compile(s)",
        )
    return out


def verdict_text(v: dict) -> str:
    """ "met (1.02x)" / "missed (0.91x)" / "no figure"; seconds for the compile targets."""
    if v["value"] is None:
        return "no figure"
    fig = f"{v['value']:.3f} s" if v["target"].startswith(("first call", "another tile")) else f"{v['value']:.2f}x"
    if v["met"] is None:
        return f"not measured ({fig})"
    return f"{'met' if v['met'] else 'missed'} ({fig})"


# -- measuring -------------------------------------------------------------------------------------------
def copies_for_l2(nbytes: int, l2_bytes: int, factor: int = L2_FACTOR) -> int:
    """How many copies of operands of `nbytes` span at least `factor` times an L2 of `l2_bytes` (>= 1)."""
    if nbytes <= 0:
        return 1
    return max(1, -(-factor * max(l2_bytes, 0) // nbytes))


def gpu_ms_rotating(fn, copies: int, warmup: int, reps: int, inner: int = INNER) -> dict:
    """GPU milliseconds per call of fn(i), i cycling over range(copies) (each call on other operands than
    the one before): CUDA events around `inner` back-to-back calls, summary over `reps` batches."""
    import torch

    i = 0
    for _ in range(max(warmup, copies)):
        fn(i % copies)
        i += 1
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn(i % copies)
            i += 1
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return stats.summarize(times)


def backward_of(forward):
    """fn(x, w, dy) -> (dX, dW): the backward alone of forward(x, w) (built on the first call for these
    operands, its graph retained, so that every later call times torch.autograd.grad only)."""
    import torch

    graphs: dict = {}

    def run(x, w, dy):
        y = graphs.get(id(x))
        if y is None:
            y = graphs[id(x)] = forward(x, w)
        return torch.autograd.grad(y, (x, w), dy, retain_graph=True)

    return run


def _functions():
    """{kind: (kjit(*ops), eager(*ops), compiled(torch_compile))}: ops are (x, w, b) for plain / gelu,
    (x, w_gate_up, wg, wu) for swiglu (wg and wu are views of w_gate_up's halves), (x, w, dy) for backward;
    compiled(torch.compile) makes the torch.compile contender (of the eager function; for backward, of the
    forward, whose compiled backward is timed)."""
    import torch.nn.functional as F

    import kjit

    def swiglu_eager(x, w_gate_up, wg, wu):
        return F.silu(F.linear(x, wg)) * F.linear(x, wu)

    def compiled_of(fn):
        return lambda torch_compile: torch_compile(fn, dynamic=False)

    plain = lambda x, w, b: F.linear(x, w)  # noqa: E731
    gelu = lambda x, w, b: F.gelu(F.linear(x, w, b))  # noqa: E731
    return {
        "plain": (lambda x, w, b: kjit.ops.linear(x, w), plain, compiled_of(plain)),
        "gelu": (lambda x, w, b: kjit.ops.linear(x, w, b, activation="gelu"), gelu, compiled_of(gelu)),
        "swiglu": (
            lambda x, w_gate_up, wg, wu: kjit.ops.linear_swiglu(x, w_gate_up),
            swiglu_eager,
            compiled_of(swiglu_eager),
        ),
        "backward": (
            backward_of(kjit.ops.linear),
            backward_of(F.linear),
            lambda torch_compile: backward_of(torch_compile(F.linear, dynamic=False)),
        ),
    }


def parts(out) -> list:
    """A contender's result as float tensors to compare one by one (the backward's dX and dW each against
    its own reference, so that neither hides in the other's scale)."""
    return [t.float() for t in out] if isinstance(out, (tuple, list)) else [out.float()]


def _operands(kind: str, m: int, n: int, k: int, copies: int) -> list[tuple]:
    import torch

    dt = getattr(torch, DTYPE)
    out = []
    for _ in range(copies):
        x = torch.randn(m, k, device="cuda", dtype=dt)
        if kind == "swiglu":
            w = torch.randn(2 * n, k, device="cuda", dtype=dt) * k**-0.5
            out.append((x, w, w[:n], w[n:]))
        elif kind == "backward":  # leaves that want gradients; dy of O(1), so dX is O(1) and dW O(sqrt(M))
            w = (torch.randn(n, k, device="cuda", dtype=dt) * k**-0.5).requires_grad_()
            out.append((x.requires_grad_(), w, torch.randn(m, n, device="cuda", dtype=dt)))
        else:
            w = torch.randn(n, k, device="cuda", dtype=dt) * k**-0.5
            out.append((x, w, torch.randn(n, device="cuda", dtype=dt) * 0.1))
    return out


def _operand_bytes(kind: str, m: int, n: int, k: int) -> int:
    """Bytes one call reads and writes (x, weights, bias, output; backward: dy, x and w, dX and dW), bf16."""
    if kind == "backward":
        return 2 * (m * n + 2 * m * k + 2 * n * k)
    nw = 2 * n if kind == "swiglu" else n
    return 2 * (m * k + nw * k + m * n + (0 if kind == "swiglu" else n))


def measure(
    p: dict, fns: dict, *, timing: dict, compile_skip: str | None, budget: CompileBudget, l2_bytes: int
) -> dict:
    """One point: checks kjit and torch.compile against eager (cuBLAS) once, then times each contender."""
    import torch

    kind, m, n, k = p["kind"], p["m"], p["n"], p["k"]
    copies = copies_for_l2(_operand_bytes(kind, m, n, k), l2_bytes)
    ops = _operands(kind, m, n, k, copies)
    kjit_fn, eager_fn, compiled_fn = fns[kind]
    point: dict = {**p, "dtype": DTYPE, "copies": copies, "ms": {}, "skipped": {}}
    ref = parts(eager_fn(*ops[0]))

    def admit(contender, fn) -> bool:
        try:
            got = parts(fn(*ops[0]))
            assert len(got) == len(ref), f"{len(got)} results, eager has {len(ref)}"
            for g, r in zip(got, ref):
                torch.testing.assert_close(g, r, **TOL)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001  (a contender that fails is reported, never fatal)
            point["skipped"][contender] = f"failed: {error_text(e)}"
            return False
        return True

    contenders = {"kjit": kjit_fn, CONTENDERS[kind][1]: eager_fn}
    reason = compile_skip or budget.reason()
    if reason:
        point["skipped"]["torch.compile"] = reason
    else:
        t = time.perf_counter()
        try:
            import torch._dynamo

            torch._dynamo.reset()  # a fresh compile per point: no recompile limit, no stale guards
            compiled = compiled_fn(torch.compile)
            compiled(*ops[0])  # compiles here, outside the timed region
            torch.cuda.synchronize()
            contenders["torch.compile"] = compiled
        except Exception as e:  # noqa: BLE001
            point["skipped"]["torch.compile"] = f"skipped: torch.compile failed: {error_text(e)}"
        spent = time.perf_counter() - t
        budget.spent_s += spent
        point["compile_s"] = round(spent, 3)
    for name, fn in contenders.items():
        if name != CONTENDERS[kind][1] and not admit(name, fn):
            continue
        try:
            point["ms"][name] = gpu_ms_rotating(lambda i, fn=fn: fn(*ops[i]), copies, timing["warmup"], timing["reps"])
        except Exception as e:  # noqa: BLE001
            point["skipped"][name] = f"failed: {error_text(e)}"
    if not point["skipped"]:
        del point["skipped"]
    # The backward's functions keep their graphs (and the operands they saved): all of it goes before the
    # cache is emptied.
    ops = ref = contenders = fns = kjit_fn = eager_fn = compiled_fn = compiled = None
    torch.cuda.empty_cache()
    return add_ratios(point)


# -- compile time of the first calls (a fresh process, an empty cache) -----------------------------------
PROBE_FIRST = "linear, new (N, K), M={m}"
PROBE_SECOND = "linear, same (N, K), M={m} (another tile configuration)"


def probe_script(n: int = PROBE_NK[0], k: int = PROBE_NK[1], ms: tuple = PROBE_M) -> str:
    """The compile probe: one JSON line {case: {"ms", "compiles", "phase_ms"}}."""
    from .first_call import _KJIT_PRELUDE

    first, second = PROBE_FIRST.format(m=ms[0]), PROBE_SECOND.format(m=ms[1])
    return (
        _KJIT_PRELUDE
        + f"""
# kjit's first compile of the process (NVRTC's start-up): paid here, before the clock.
y = ops.add_constant(x, 1.0); torch.cuda.synchronize()
w = torch.randn({n}, {k}, device="cuda", dtype=torch.bfloat16) * {k} ** -0.5
a = torch.randn({ms[0]}, {k}, device="cuda", dtype=torch.bfloat16)
b = torch.randn({ms[1]}, {k}, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
y = timed({first!r}, lambda: ops.linear(a, w))
torch.testing.assert_close(y.float(), torch.nn.functional.linear(a, w).float(), rtol=5e-2, atol=5e-2)
y = timed({second!r}, lambda: ops.linear(b, w))
torch.testing.assert_close(y.float(), torch.nn.functional.linear(b, w).float(), rtol=5e-2, atol=5e-2)
print(json.dumps(out))
"""
    )


def compile_probe(repeats: int, timeout_s: float | None = None) -> dict:
    """The compile probe `repeats` times, each in a fresh process with empty kjit and CUDA caches."""
    import tempfile

    from . import first_call

    runs = []
    src = probe_script()
    for _ in range(repeats):
        with (
            tempfile.TemporaryDirectory(prefix="kjit-bench-matmul-") as cache,
            tempfile.TemporaryDirectory(prefix="kjit-bench-cuda-cache-") as cuda_cache,
        ):
            env = dict(os.environ, KJIT_CACHE_DIR=cache, CUDA_CACHE_PATH=cuda_cache)
            env.pop("KJIT_CACHE_PATH", None)
            env.pop("KJIT_REMOTE_CACHE", None)
            script = os.path.join(cache, "probe.py")
            with open(script, "w") as f:
                f.write(src)
            runs.append(first_call.probe(script, env, timeout_s or first_call.PROBE_TIMEOUT_S))
    return {
        "repeats": repeats,
        "n": PROBE_NK[0],
        "k": PROBE_NK[1],
        "m": list(PROBE_M),
        "first_case": PROBE_FIRST.format(m=PROBE_M[0]),
        "second_case": PROBE_SECOND.format(m=PROBE_M[1]),
        "cases": first_call._summaries(runs),
    }


# -- the section -----------------------------------------------------------------------------------------
def _log_line(p: dict) -> str:
    tf = p.get("tflops") or {}
    parts = [f"{c} {tf[c]:.1f}" for c in CONTENDERS[p["kind"]] if c in tf]
    ratios = [f"kjit/{peer} {p[key]:.2f}x" for peer, key in RATIO_KEYS.items() if p.get(key) is not None]
    return (
        f"  matmul {where(p)}: TFLOP/s "
        + ", ".join(parts + ratios)
        + (f" ({'; '.join(f'{k}: {v}' for k, v in p['skipped'].items())})" if p.get("skipped") else "")
    )


def run(quick: bool, peer_versions: dict | None = None, log=None, save=None) -> dict:
    import torch

    peer_versions = peer_versions or machine.peers()
    compile_skip = (
        None
        if machine.available(peer_versions, "torch.compile")
        else (peer_versions.get("torch.compile") or "skipped: torch.compile not detected")
    )
    timing = TIMING[quick]
    budget = CompileBudget(COMPILE_BUDGET_S[quick])
    l2 = int(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0) or 50 << 20)
    pts: list[dict] = []
    sec: dict = {
        "dtype": DTYPE,
        **timing,
        "inner": INNER,
        "l2_bytes": l2,
        "l2_factor": L2_FACTOR,
        "kjit_tune": os.environ.get("KJIT_TUNE", ""),
        "targets": dict(TARGETS),
        "compile_budget_s": budget.limit_s,
        "points": pts,
    }
    import kjit

    missing = [name for name in ("linear", "linear_swiglu") if not hasattr(kjit.ops, name)]
    if missing:  # a kjit without the matrix ops: the section says so
        sec["error"] = f"this kjit has no kjit.ops.{', kjit.ops.'.join(missing)}"
        return sec
    t0 = time.perf_counter()
    for p in points(quick):
        try:
            # Functions made anew per point: the backward's keep the graphs they built (freed with them).
            r = measure(p, _functions(), timing=timing, compile_skip=compile_skip, budget=budget, l2_bytes=l2)
        except Exception as e:  # noqa: BLE001  (e.g. out of memory: the point is reported)
            r = {**p, "dtype": DTYPE, "ms": {}, "error": error_text(e)}
            torch.cuda.empty_cache()
        pts.append(r)
        if log:
            log(
                (_log_line(r) if "error" not in r else f"  matmul {where(r)}: error: {r['error']}")
                + f" ({time.perf_counter() - t0:.0f} s)"
            )
        if save:
            save(sec)
    try:
        import torch._dynamo

        torch._dynamo.reset()
    except Exception:  # noqa: BLE001
        pass
    sec["compile_s"] = round(budget.spent_s, 2)
    try:
        sec["compile"] = compile_probe(1 if quick else 3)
    except Exception as e:  # noqa: BLE001  (a failed or hung probe keeps the timings)
        sec["compile"] = {"error": error_text(e)}
    if log:
        c = compile_figures(sec["compile"])
        log(
            "  matmul compile probe: "
            + (
                sec["compile"].get("error")
                or (
                    f"first call {c['first_s']:.3f} s ({c['first_compiles']} compiles), another tile configuration "
                    f"{c['second_s']:.3f} s ({c['second_compiles']} compiles)"
                    if c and c["first_s"] is not None and c["second_s"] is not None
                    else "no figure"
                )
            )
        )
    sec["summary"] = summary(sec)
    sec["verdicts"] = verdicts(sec)
    return sec
