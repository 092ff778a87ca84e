"""Memory bandwidth of the kernel library (kjit.ops, kjit.elementwise) against PyTorch.

Not a test: run on a GPU machine. For each case, in the same run: a plain device copy of the same
bytes (the reference ceiling), PyTorch eager, torch.compile (Inductor) of the same function, and kjit;
GB/s count the bytes each op must read once and write once (weights included). GPU time per call is
the median over repetitions (after warm-up) of CUDA-event timings of 10 back-to-back calls.

    python bench/bench_bandwidth.py [--quick] [--no-compile] [--json out.json] [--markdown out.md]

Row-shape cases (rows of 768, 1000, 4096, 50257) also run kjit's generic variant (row length as a
runtime argument, as after KJIT_MAX_SPECIALIZATIONS distinct lengths) to show what specializing on the
row length buys.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys

import torch
import torch.nn.functional as F

import kjit
from kjit.library import rows as kjit_rows

GIB = 1 << 30


def gpu_ms(fn, warmup: int, reps: int, inner: int = 10) -> dict:
    """GPU ms per call: CUDA events around `inner` back-to-back calls (so that the CPU cost of launching
    one call overlaps the GPU work of the previous one, as in a real workload, instead of being timed as
    GPU idle time), median / min / max over `reps` such batches."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times)}


def generic_rows(kernels: list[str], d: int):
    """Makes the library run its generic (D = 0) variant for rows of d in these kernels."""
    for k in kernels:
        kjit_rows._admitted[(k, d)] = 0


def specialized_rows(kernels: list[str], d: int):
    for k in kernels:
        kjit_rows._admitted.pop((k, d), None)


def cases(quick: bool):
    """(name, dtype, make inputs, eager fn, kjit fn, bytes, row-kernels for the generic variant, d)."""
    big = (65536, 4096)  # 1 GiB in float32
    out = []

    def add(name, dtype, shape, eager, kjit_fn, n_in=1, n_out=1, extra_bytes=0, row_kernels=(), make=None):
        out.append(dict(name=name, dtype=dtype, shape=shape, eager=eager, kjit=kjit_fn, n_in=n_in, n_out=n_out,
                        extra_bytes=extra_bytes, row_kernels=list(row_kernels), make=make))

    scale = kjit.elementwise("x * s", "x", "s", name="scale")
    silu_s = kjit.elementwise("silu(x) * s", "x", "s", name="silu_scaled")
    for dt in (torch.float32, torch.bfloat16):
        add("x * 0.5", dt, big, lambda x: x * 0.5, lambda x: scale(x, s=0.5))
        add("relu", dt, big, torch.relu, kjit.ops.relu)
        add("silu(x) * 0.5", dt, big, lambda x: F.silu(x) * 0.5, lambda x: silu_s(x, s=0.5))
    if not quick:
        add("gelu", torch.float32, big, F.gelu, kjit.ops.gelu)
        add("sigmoid", torch.bfloat16, big, torch.sigmoid, kjit.ops.sigmoid)
    sm = ["softmax_forward"]
    add("softmax", torch.float32, big, lambda x: torch.softmax(x, -1), kjit.ops.softmax, row_kernels=sm)
    add("softmax", torch.bfloat16, big, lambda x: torch.softmax(x, -1), kjit.ops.softmax, row_kernels=sm)
    add("log_softmax", torch.float32, big, lambda x: torch.log_softmax(x, -1), kjit.ops.log_softmax,
        row_kernels=sm)
    d = big[1]

    def ln_inputs(dt, shape):
        x = torch.randn(shape, device="cuda", dtype=dt)
        w = torch.randn(shape[-1], device="cuda", dtype=dt)
        b = torch.randn(shape[-1], device="cuda", dtype=dt)
        return (x, w, b)

    nf = ["norm_forward"]
    add("layer_norm", torch.float32, big, lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
        lambda x, w, b: kjit.ops.layer_norm(x, w, b, 1e-5), n_in=1, extra_bytes=2 * d * 4, row_kernels=nf,
        make=ln_inputs)
    add("rms_norm", torch.bfloat16, big, lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
        lambda x, w, b: kjit.ops.rms_norm(x, w, 1e-6), n_in=1, extra_bytes=d * 2, row_kernels=nf, make=ln_inputs)
    add("rms_norm", torch.float32, big, lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
        lambda x, w, b: kjit.ops.rms_norm(x, w, 1e-6), n_in=1, extra_bytes=d * 4, row_kernels=nf, make=ln_inputs)
    rr = ["reduce_rows"]
    add("sum(dim=-1)", torch.float32, big, lambda x: x.sum(-1), lambda x: kjit.ops.sum(x, -1), n_out=0,
        row_kernels=rr)
    add("sum(dim=0)", torch.float32, big, lambda x: x.sum(0), lambda x: kjit.ops.sum(x, 0), n_out=0)
    if not quick:
        add("amax(dim=-1)", torch.bfloat16, big, lambda x: x.amax(-1), lambda x: kjit.ops.amax(x, -1), n_out=0,
            row_kernels=rr)
        add("mean(dim=1)", torch.float32, (4096, 64, 1024), lambda x: x.mean(1), lambda x: kjit.ops.mean(x, 1),
            n_out=0)
    # Row shapes where specialization may pay (about 256 MiB of float32 each).
    for d in (768, 1000, 50257) if quick else (768, 1000, 4096, 8192, 50257):
        shape = ((64 << 20) // d, d)
        add("softmax", torch.float32, shape, lambda x: torch.softmax(x, -1), kjit.ops.softmax, row_kernels=sm)
        add("layer_norm", torch.float32, shape, lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
            lambda x, w, b: kjit.ops.layer_norm(x, w, b, 1e-5), extra_bytes=2 * d * 4, row_kernels=nf,
            make=ln_inputs)
        add("sum(dim=-1)", torch.float32, shape, lambda x: x.sum(-1), lambda x: kjit.ops.sum(x, -1), n_out=0,
            row_kernels=rr)
    add("max_pool2d 3x3 s2 p1", torch.float32, (64, 64, 256, 256),
        lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: kjit.ops.max_pool2d(x, 3, 2, 1), n_out=0.25)
    add("avg_pool2d 2x2 s2", torch.bfloat16, (64, 64, 256, 256),
        lambda x: F.avg_pool2d(x, 2, 2), lambda x: kjit.ops.avg_pool2d(x, 2, 2), n_out=0.25)
    return out


def run(quick: bool, compile_peers: bool, warmup: int, reps: int) -> list[dict]:
    results = []
    for c in cases(quick):
        dt, shape = c["dtype"], c["shape"]
        inputs = c["make"](dt, shape) if c["make"] else (torch.randn(shape, device="cuda", dtype=dt),)
        x = inputs[0]
        elem = x.element_size()
        nbytes = int(x.numel() * elem * (c["n_in"] + c["n_out"])) + c["extra_bytes"]
        if c["n_out"] == 0:  # reductions: the output is small but counted
            nbytes += int(c["eager"](*inputs).numel() * elem)
        row = {"case": c["name"], "dtype": str(dt).replace("torch.", ""), "shape": list(shape), "bytes": nbytes}
        # Correctness first: a benchmark of a wrong result is worthless.
        ref, got = c["eager"](*inputs), c["kjit"](*inputs)
        tol = 1e-4 if dt == torch.float32 else 2e-2
        summed = c["name"].startswith(("sum", "mean"))  # long float sums differ in the last bits
        torch.testing.assert_close(got.float(), ref.float(), rtol=tol * (10 if summed else 1),
                                   atol=1e-2 if summed else tol)
        # A copy of the same number of bytes (half read, half written) in the same run.
        src = torch.empty(nbytes // 2 // 4, device="cuda", dtype=torch.float32)
        dst = torch.empty_like(src)
        timings = {"copy": gpu_ms(lambda: dst.copy_(src), warmup, reps)}
        del src, dst
        timings["eager"] = gpu_ms(lambda: c["eager"](*inputs), warmup, reps)
        if compile_peers:
            try:
                compiled = torch.compile(c["eager"], dynamic=False)
                timings["torch.compile"] = gpu_ms(lambda: compiled(*inputs), warmup, reps)
            except Exception as e:  # a peer that fails is reported, never fatal
                row["torch.compile_error"] = f"{type(e).__name__}: {e}"[:200]
        timings["kjit"] = gpu_ms(lambda: c["kjit"](*inputs), warmup, reps)
        if c["row_kernels"]:
            generic_rows(c["row_kernels"], shape[-1])
            try:
                timings["kjit generic"] = gpu_ms(lambda: c["kjit"](*inputs), warmup, reps)
            finally:
                specialized_rows(c["row_kernels"], shape[-1])
        row["timings"] = timings
        row["gbps"] = {k: nbytes / (v["median_ms"] * 1e-3) / 1e9 for k, v in timings.items()}
        g = row["gbps"]
        row["kjit_vs_copy"] = g["kjit"] / g["copy"]
        row["kjit_vs_eager"] = g["kjit"] / g["eager"]
        if "torch.compile" in g:
            row["kjit_vs_compile"] = g["kjit"] / g["torch.compile"]
        if "kjit generic" in g:
            row["specialized_vs_generic"] = g["kjit"] / g["kjit generic"]
        results.append(row)
        print(markdown_row(row), flush=True)
        del inputs, x, ref, got
        torch.cuda.empty_cache()
    return results


HEADER = ("| case | dtype | shape | copy GB/s | eager | torch.compile | kjit | kjit / copy | kjit / eager | "
          "kjit / compile | specialized / generic |\n|---|---|---|---|---|---|---|---|---|---|---|")


def markdown_row(r: dict) -> str:
    g = r["gbps"]

    def f(key, fmt="{:.0f}"):
        return fmt.format(g[key]) if key in g else "-"

    def ratio(key):
        return f"{r[key]:.2f}x" if key in r else "-"

    shape = "x".join(str(s) for s in r["shape"])
    return (f"| {r['case']} | {r['dtype']} | {shape} | {f('copy')} | {f('eager')} | {f('torch.compile')} | "
            f"{f('kjit')} | {r['kjit_vs_copy']:.0%} | {ratio('kjit_vs_eager')} | {ratio('kjit_vs_compile')} | "
            f"{ratio('specialized_vs_generic')} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer cases and repetitions")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (Inductor) peers")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--markdown", help="write the table here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_bandwidth: no CUDA device; nothing measured", file=sys.stderr)
        sys.exit(0)
    warmup, reps = (3, 10) if args.quick else (5, 30)
    print(HEADER, flush=True)
    results = run(args.quick, not args.no_compile, warmup, reps)
    props = torch.cuda.get_device_properties(0)
    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": props.name,
        "driver": torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "kjit": kjit.__version__,
        "quick": args.quick,
        "warmup": warmup,
        "reps": reps,
        "results": results,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"{props.name}, {doc['date']}, torch {torch.__version__}\n\n{HEADER}\n")
            f.write("\n".join(markdown_row(r) for r in results) + "\n")


if __name__ == "__main__":
    main()
