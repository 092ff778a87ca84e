"""Memory bandwidth of the kernel library (kjit.ops, kjit.elementwise) against its peers.

For each point, in the same run: a plain device copy of the same bytes (the reference ceiling), PyTorch
eager, torch.compile (Inductor) of the same function, kjit and, for the elementwise ops, a Triton kernel
and a CuPy ElementwiseKernel (float32; both write into a preallocated output). GB/s count the bytes each
op must read once and write once (weights included); GPU time per call is the median over repetitions
(after warm-up) of CUDA-event timings of 10 back-to-back calls (stats.gpu_ms).

Two parts: a size sweep (each op family from 1 MiB to 1 GiB of input) and the reference table (the
shapes of docs/performance.md: 65536x4096, rows of 768 / 1000 / 4096 / 8192 / 50257, the pools), where the
row-shape cases also run kjit's generic variant (row length as a runtime argument, as after
KJIT_MAX_SPECIALIZATIONS distinct lengths) to show what specializing on the row length buys.
"""

from __future__ import annotations

import time

from . import machine, stats
from .stats import error_text

MIB = 1 << 20
SIZES_FULL = [1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, 1024 * MIB]
SIZES_QUICK = [1 * MIB, 32 * MIB, 1024 * MIB]
ROW = 4096  # row length of the sweep's row ops
FAMILIES_QUICK = (
    "x * 0.5",
    "silu(x) * 0.5",
    "relu",
    "softmax",
    "layer_norm",
    "rms_norm",
    "sum(dim=-1)",
    "max_pool2d 3x3 s2 p1",
)
COMPILE_QUICK = ("x * 0.5", "silu(x) * 0.5", "softmax", "layer_norm")  # compiled at the largest size only
CUPY_BODIES = {
    "x + 1 (add_constant)": "y = x + 1.0f",
    "x * 0.5": "y = x * s",
    "silu(x) * 0.5": "y = x / (1.0f + expf(-x)) * s",
    "relu": "y = x > 0.0f ? x : 0.0f",
    "gelu": "y = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f))",
    "sigmoid": "y = 1.0f / (1.0f + expf(-x))",
}


# -- case definitions ------------------------------------------------------------------------------------
def _ln_inputs(dt, shape):
    import torch

    x = torch.randn(shape, device="cuda", dtype=dt)
    w = torch.randn(shape[-1], device="cuda", dtype=dt)
    b = torch.randn(shape[-1], device="cuda", dtype=dt)
    return (x, w, b)


def _add_inputs(dt, shape):
    """x, residual, weight, bias of the residual norms."""
    import torch

    x, w, b = _ln_inputs(dt, shape)
    return (x, torch.randn(shape, device="cuda", dtype=dt), w, b)


def _add_rms_norm_eager(x, r, w, b):
    import torch.nn.functional as F

    h = x + r
    return F.rms_norm(h, (h.shape[-1],), w, 1e-6), h


def _add_layer_norm_eager(x, r, w, b):
    import torch.nn.functional as F

    h = x + r
    return F.layer_norm(h, (h.shape[-1],), w, b, 1e-5), h


def _ops():
    """{family: dict(eager, kjit, n_in, n_out, extra(d, elem) -> bytes, row_kernels, make)}"""
    import torch
    import torch.nn.functional as F

    import kjit

    scale = kjit.elementwise("x * s", "x", "s", name="scale")
    silu_s = kjit.elementwise("silu(x) * s", "x", "s", name="silu_scaled")
    sm, nf, rr = ["softmax_forward"], ["norm_forward"], ["reduce_rows"]

    def op(eager, kjit_fn, n_out=1, extra=None, row_kernels=(), make=None, kind="row", n_in=1):
        return dict(
            eager=eager,
            kjit=kjit_fn,
            n_in=n_in,
            n_out=n_out,
            extra=extra or (lambda d, e: 0),
            row_kernels=list(row_kernels),
            make=make,
            kind=kind,
        )

    return {
        "x + 1 (add_constant)": op(lambda x: x + 1.0, lambda x: kjit.ops.add_constant(x, 1.0), kind="elementwise"),
        "x * 0.5": op(lambda x: x * 0.5, lambda x: scale(x, s=0.5), kind="elementwise"),
        "silu(x) * 0.5": op(lambda x: F.silu(x) * 0.5, lambda x: silu_s(x, s=0.5), kind="elementwise"),
        "relu": op(torch.relu, kjit.ops.relu, kind="elementwise"),
        "gelu": op(F.gelu, kjit.ops.gelu, kind="elementwise"),
        "sigmoid": op(torch.sigmoid, kjit.ops.sigmoid, kind="elementwise"),
        "softmax": op(lambda x: torch.softmax(x, -1), kjit.ops.softmax, row_kernels=sm),
        "log_softmax": op(lambda x: torch.log_softmax(x, -1), kjit.ops.log_softmax, row_kernels=sm),
        "layer_norm": op(
            lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
            lambda x, w, b: kjit.ops.layer_norm(x, w, b, 1e-5),
            extra=lambda d, e: 2 * d * e,
            row_kernels=nf,
            make=_ln_inputs,
        ),
        "rms_norm": op(
            lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
            lambda x, w, b: kjit.ops.rms_norm(x, w, 1e-6),
            extra=lambda d, e: d * e,
            row_kernels=nf,
            make=_ln_inputs,
        ),
        # The residual norms: read x and residual, write y and h = x + residual (eager: the add, then the norm).
        "add_rms_norm": op(
            _add_rms_norm_eager,
            lambda x, r, w, b: kjit.ops.add_rms_norm(x, r, w, 1e-6),
            n_in=2,
            n_out=2,
            extra=lambda d, e: d * e,
            row_kernels=nf,
            make=_add_inputs,
        ),
        "add_layer_norm": op(
            _add_layer_norm_eager,
            lambda x, r, w, b: kjit.ops.add_layer_norm(x, r, w, b, 1e-5),
            n_in=2,
            n_out=2,
            extra=lambda d, e: 2 * d * e,
            row_kernels=nf,
            make=_add_inputs,
        ),
        "sum(dim=-1)": op(lambda x: x.sum(-1), lambda x: kjit.ops.sum(x, -1), n_out=0, row_kernels=rr),
        "sum(dim=0)": op(lambda x: x.sum(0), lambda x: kjit.ops.sum(x, 0), n_out=0),
        "mean(dim=-1)": op(lambda x: x.mean(-1), lambda x: kjit.ops.mean(x, -1), n_out=0, row_kernels=rr),
        "mean(dim=1)": op(lambda x: x.mean(1), lambda x: kjit.ops.mean(x, 1), n_out=0),
        "amax(dim=-1)": op(lambda x: x.amax(-1), lambda x: kjit.ops.amax(x, -1), n_out=0, row_kernels=rr),
        "max_pool2d 3x3 s2 p1": op(
            lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: kjit.ops.max_pool2d(x, 3, 2, 1), n_out=0.25, kind="pool"
        ),
        "avg_pool2d 2x2 s2": op(
            lambda x: F.avg_pool2d(x, 2, 2), lambda x: kjit.ops.avg_pool2d(x, 2, 2), n_out=0.25, kind="pool"
        ),
        "avg_pool2d 3x3 s1 p1": op(
            lambda x: F.avg_pool2d(x, 3, 1, 1), lambda x: kjit.ops.avg_pool2d(x, 3, 1, 1), kind="pool"
        ),
    }


SWEEP_FAMILIES = (
    "x + 1 (add_constant)",
    "x * 0.5",
    "silu(x) * 0.5",
    "relu",
    "gelu",
    "sigmoid",
    "softmax",
    "log_softmax",
    "layer_norm",
    "rms_norm",
    "add_rms_norm",
    "add_layer_norm",
    "sum(dim=-1)",
    "mean(dim=-1)",
    "amax(dim=-1)",
    "max_pool2d 3x3 s2 p1",
    "avg_pool2d 2x2 s2",
)


def sweep_shape(kind: str, nbytes: int, elem: int) -> tuple:
    """The input shape of about `nbytes` for an op of this kind (flat, rows of ROW, NCHW planes of 256x256)."""
    n = max(nbytes // elem, 1)
    if kind == "elementwise":
        return (n,)
    if kind == "pool":
        return (1, max(n // 65536, 1), 256, 256)
    return (max(n // ROW, 1), ROW)


def reference_cases(quick: bool) -> list[dict]:
    """The reference table: [(family, dtype, shape)] as dicts."""
    import torch

    f32, bf16 = torch.float32, torch.bfloat16
    big = (65536, 4096)  # 1 GiB in float32
    out = []

    def add(family, dt, shape):
        out.append({"family": family, "dtype": dt, "shape": shape})

    if quick:
        add("x * 0.5", bf16, big)
        add("silu(x) * 0.5", bf16, big)
        add("softmax", bf16, big)
        add("layer_norm", f32, big)
        for d in (768, 50257):
            shape = ((64 << 20) // d, d)
            add("softmax", f32, shape)
            add("layer_norm", f32, shape)
        add("max_pool2d 3x3 s2 p1", f32, (64, 64, 256, 256))
        return out
    for dt in (f32, bf16):
        add("x + 1 (add_constant)", dt, big)
        add("x * 0.5", dt, big)
        add("relu", dt, big)
        add("silu(x) * 0.5", dt, big)
    add("gelu", f32, big)
    add("sigmoid", bf16, big)
    add("softmax", f32, big)
    add("softmax", bf16, big)
    add("log_softmax", f32, big)
    add("layer_norm", f32, big)
    add("rms_norm", bf16, big)
    add("rms_norm", f32, big)
    add("add_rms_norm", bf16, big)
    add("add_rms_norm", f32, big)
    add("add_layer_norm", f32, big)
    add("sum(dim=-1)", f32, big)
    add("sum(dim=0)", f32, big)
    add("amax(dim=-1)", bf16, big)
    add("mean(dim=1)", f32, (4096, 64, 1024))
    for d in (768, 1000, 4096, 8192, 50257):  # rows where specialization may pay (about 256 MiB each)
        shape = ((64 << 20) // d, d)
        add("softmax", f32, shape)
        add("layer_norm", f32, shape)
        add("sum(dim=-1)", f32, shape)
    # Long rows, split over a thread-block cluster on sm_90 and newer (a vocabulary of 50257; the split's
    # longest row, 131072 float32), about 256 MiB of float32 / 128 MiB of bfloat16 each.
    for dt, d in ((bf16, 50257), (f32, 131072)):
        shape = ((64 << 20) // d, d)
        add("softmax", dt, shape)
        add("log_softmax", dt, shape)
        add("layer_norm", dt, shape)
    add("max_pool2d 3x3 s2 p1", f32, (64, 64, 256, 256))
    add("max_pool2d 3x3 s2 p1", bf16, (64, 64, 256, 256))
    add("avg_pool2d 2x2 s2", bf16, (64, 64, 256, 256))
    add("avg_pool2d 3x3 s1 p1", f32, (64, 64, 256, 256))
    return out


# -- kjit's generic row variant --------------------------------------------------------------------------
def generic_rows(kernels: list[str], d: int):
    """Makes the library run its generic (D = 0) variant for rows of d in these kernels."""
    import kjit

    for k in kernels:
        kjit._core.pin_generic_shape(k, "D", d)


def specialized_rows(kernels: list[str], d: int):
    import kjit

    for k in kernels:
        kjit._core.pin_generic_shape(k, "D", d, pinned=False)


# -- peers of the elementwise ops ------------------------------------------------------------------------
def _triton_fn(family, x):
    import torch

    from ._triton_kernels import unary_fn

    y = torch.empty_like(x)
    return unary_fn(family, x.view(-1), y.view(-1)), y


def _cupy_fn(family, x):
    import cupy
    import torch

    if x.dtype != torch.float32:
        raise TypeError(f"the CuPy peer runs float32 only, not {x.dtype}")
    k = cupy.ElementwiseKernel(
        "float32 x, float32 s",
        "float32 y",
        CUPY_BODIES[family],
        "kjit_bench_" + "".join(ch if ch.isalnum() else "_" for ch in family),
    )
    y = torch.empty_like(x)
    xc, yc, s = cupy.asarray(x), cupy.asarray(y), cupy.float32(0.5)
    cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream).use()  # launch on torch's stream
    return (lambda: k(xc, s, yc)), y


# -- measuring one point ---------------------------------------------------------------------------------
def measure(
    family: str,
    op: dict,
    dtype,
    shape,
    *,
    warmup: int,
    reps: int,
    compile_: bool,
    peer_versions: dict,
    generic: bool = False,
) -> dict:
    import torch

    inputs = op["make"](dtype, shape) if op["make"] else (torch.randn(shape, device="cuda", dtype=dtype),)
    x = inputs[0]
    elem = x.element_size()
    nbytes = int(x.numel() * elem * (op["n_in"] + op["n_out"])) + op["extra"](shape[-1], elem)
    ref = op["eager"](*inputs)
    if op["n_out"] == 0:  # reductions: the output is small but counted
        nbytes += int(ref.numel() * elem)
    row = {
        "op": family,
        "dtype": str(dtype).replace("torch.", ""),
        "shape": list(shape),
        "bytes": nbytes,
        "ms": {},
        "errors": {},
    }
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    summed = family.startswith(("sum", "mean"))  # long float sums differ in the last bits

    def check(got):
        for g, r in zip(got, ref, strict=True) if isinstance(ref, tuple) else ((got, ref),):  # (y, h) or y
            torch.testing.assert_close(
                g.float(), r.float(), rtol=tol * (10 if summed else 1), atol=1e-2 if summed else tol
            )

    def timed(name, fn, result=None):
        """Checks the result (a benchmark of a wrong result is worthless) then times; errors are kept."""
        try:
            out = fn()
            check(result if result is not None else out)
            row["ms"][name] = stats.gpu_ms(fn, warmup, reps)
        except Exception as e:  # noqa: BLE001  (a peer that fails is reported, never fatal)
            row["errors"][name] = error_text(e)

    # A copy of the same number of bytes (half read, half written) in the same run.
    src = torch.empty(max(nbytes // 2 // 4, 1), device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    row["ms"]["copy"] = stats.gpu_ms(lambda: dst.copy_(src), warmup, reps)
    src = dst = None  # frees them (the closure above holds the variables, not the tensors)
    timed("eager", lambda: op["eager"](*inputs))
    compiled = None
    if compile_:
        try:
            import torch._dynamo

            torch._dynamo.reset()  # one function object is compiled for many shapes: no recompile limit
            compiled = torch.compile(op["eager"], dynamic=False)
            timed("torch.compile", lambda: compiled(*inputs))
        except Exception as e:  # noqa: BLE001
            row["errors"]["torch.compile"] = error_text(e)
    timed("kjit", lambda: op["kjit"](*inputs))
    if generic and op["row_kernels"]:
        generic_rows(op["row_kernels"], shape[-1])
        try:
            timed("kjit generic", lambda: op["kjit"](*inputs))
        finally:
            specialized_rows(op["row_kernels"], shape[-1])
    if op["kind"] == "elementwise":
        for peer, make in (("triton", _triton_fn), ("cupy", _cupy_fn)):
            if not machine.available(peer_versions, peer):
                continue
            try:
                fn, out = make(family, x)
            except Exception as e:  # noqa: BLE001
                row["errors"][peer] = error_text(e)
                continue
            timed(peer, fn, out)
            del out
    row["gbps"] = {k: stats.gbps(nbytes, v["median"]) for k, v in row["ms"].items()}
    g = row["gbps"]
    if "kjit" in g:
        row["kjit_vs_copy"] = g["kjit"] / g["copy"]
        for peer in g:
            if peer not in ("kjit", "copy"):
                key = "specialized_vs_generic" if peer == "kjit generic" else f"kjit_vs_{peer}"
                row[key] = g["kjit"] / g[peer]
    if not row["errors"]:
        del row["errors"]
    inputs = x = ref = compiled = None
    torch.cuda.empty_cache()
    return row


def run(quick: bool, peer_versions: dict | None = None, log=None) -> dict:
    import torch

    peer_versions = peer_versions or machine.peers()
    compile_ok = machine.available(peer_versions, "torch.compile")
    warmup, reps = (3, 10) if quick else (5, 30)
    sizes = SIZES_QUICK if quick else SIZES_FULL
    families = [f for f in SWEEP_FAMILIES if not quick or f in FAMILIES_QUICK]
    ops = _ops()
    sweep, reference = [], []
    t0 = time.perf_counter()
    for family in families:
        for size in sizes:
            op = ops[family]
            shape = sweep_shape(op["kind"], size, 4)
            compile_ = compile_ok and (not quick or (family in COMPILE_QUICK and size == sizes[-1]))
            try:
                r = measure(
                    family,
                    op,
                    torch.float32,
                    shape,
                    warmup=warmup,
                    reps=reps,
                    compile_=compile_,
                    peer_versions=peer_versions,
                )
                r["size_bytes"] = size
            except Exception as e:  # noqa: BLE001  (e.g. kjit wrong or out of memory: the point is reported)
                r = {"op": family, "dtype": "float32", "shape": list(shape), "size_bytes": size, "error": error_text(e)}
                torch.cuda.empty_cache()
            sweep.append(r)
            if log:
                log(
                    f"  sweep {family} {size // MIB} MiB: "
                    + (
                        f"kjit {r['gbps'].get('kjit', float('nan')):.0f} GB/s, copy {r['gbps']['copy']:.0f}"
                        if "gbps" in r
                        else r["error"]
                    )
                    + f" ({time.perf_counter() - t0:.0f} s)"
                )
    for c in reference_cases(quick):
        try:
            r = measure(
                c["family"],
                ops[c["family"]],
                c["dtype"],
                c["shape"],
                warmup=warmup,
                reps=reps,
                compile_=compile_ok and not quick,
                peer_versions=peer_versions,
                generic=True,
            )
        except Exception as e:  # noqa: BLE001
            r = {
                "op": c["family"],
                "dtype": str(c["dtype"]).replace("torch.", ""),
                "shape": list(c["shape"]),
                "error": error_text(e),
            }
            torch.cuda.empty_cache()
        reference.append(r)
        if log:
            log(
                f"  reference {r['op']} {r['dtype']} {'x'.join(map(str, r['shape']))}: "
                + (f"kjit {r['gbps'].get('kjit', float('nan')):.0f} GB/s" if "gbps" in r else r["error"])
                + f" ({time.perf_counter() - t0:.0f} s)"
            )
    return {"warmup": warmup, "reps": reps, "inner": 10, "sizes": sizes, "sweep": sweep, "reference": reference}
