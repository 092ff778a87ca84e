"""Python-level benchmarks of kjit against PyTorch, CuPy RawKernel and Triton (where installed).

Not a test: run on a GPU machine, read the ratios measured in the same run.

    python bench/bench_python.py [--quick] [--json out.json]

1. CPU cost per cached call on 1024 float32 elements: kjit.ops.add_constant(x, c) (allocates its
   output, like torch's x + c), kjit Kernel.launch and kjit.launcher (no allocation), against
   torch.add(x, c, out=y), x + c, a CuPy RawKernel launch and a Triton launch of the same add.
2. First call with an empty cache, and first call of a new process with a warm cache, for the same
   add kernel: kjit, CuPy RawKernel, Triton (each in fresh subprocesses, import and CUDA context
   creation excluded).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

N = 1024

CUPY_SRC = r"""
extern "C" __global__ void add_c(const float* x, float* y, float c, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + c;
}
"""

# Each first-call probe runs in its own process; it prints one JSON line.
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
""" % CUPY_SRC,
    "triton": r"""
import json, time, torch, triton, triton.language as tl
@triton.jit
def add_c(x_ptr, y_ptr, c, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) + c, mask=m)
x = torch.ones(1024, device="cuda"); y = torch.empty_like(x); torch.cuda.synchronize()
t = time.perf_counter(); add_c[(4,)](x, y, 1.0, 1024, BLOCK=256); torch.cuda.synchronize()
ms = (time.perf_counter() - t) * 1e3
assert float(y[0]) == 2.0
print(json.dumps({"ms": ms}))
""",
}

CACHE_ENV = {"kjit": "KJIT_CACHE_DIR", "cupy": "CUPY_CACHE_DIR", "triton": "TRITON_CACHE_DIR"}


def have(module: str) -> bool:
    try:
        __import__(module)
        return True
    except Exception:  # noqa: BLE001  (a broken install counts as missing)
        return False


def per_call_us(fn, calls: int, reps: int) -> dict:
    """Median/min/max CPU time per call (perf_counter around `calls` calls, synchronized between reps)."""
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t) * 1e6 / calls)
    torch.cuda.synchronize()
    return {"median_us": statistics.median(samples), "min_us": min(samples), "max_us": max(samples)}


def call_overhead(calls: int, reps: int) -> dict:
    import kjit

    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    out: dict = {}
    out["torch.add(x, c, out=y)"] = per_call_us(lambda: torch.add(x, 1.0, out=y), calls, reps)
    out["torch x + c"] = per_call_us(lambda: x + 1.0, calls, reps)
    out["kjit.ops.add_constant(x, c)"] = per_call_us(lambda: kjit.ops.add_constant(x, 1.0), calls, reps)
    k = kjit.Template.builtin("add_constant").kernel("add_constant").specialize(T=torch.float32, VEC=4)
    grid = (N // 4 + 255) // 256
    out["kjit Kernel.launch"] = per_call_us(lambda: k.launch(grid, 256, x, y, 1.0, N), calls, reps)
    fam = kjit.Template.builtin("add_constant").kernel("add_constant")
    out["kjit specialize + launch"] = per_call_us(
        lambda: fam.specialize(T=torch.float32, VEC=4).launch(grid, 256, x, y, 1.0, N), calls, reps)
    add = kjit.launcher(fam, grid=lambda x, y, c, n: kjit.cdiv(n, 1024), block=256, T=kjit.arg("x").dtype, VEC=4)
    out["kjit.launcher call"] = per_call_us(lambda: add(x, y, 1.0, N), calls, reps)
    if have("cupy"):
        import cupy

        ck = cupy.RawKernel(CUPY_SRC, "add_c")
        xp, yp, c, n = x.data_ptr(), y.data_ptr(), cupy.float32(1.0), cupy.int64(N)
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        with stream:
            out["cupy RawKernel launch"] = per_call_us(lambda: ck((4,), (256,), (xp, yp, c, n)), calls, reps)
    else:
        out["cupy RawKernel launch"] = "skipped: cupy not installed"
    if have("triton"):
        import triton
        import triton.language as tl

        @triton.jit
        def add_c(x_ptr, y_ptr, c, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) + c, mask=m)

        out["triton launch"] = per_call_us(lambda: add_c[(4,)](x, y, 1.0, N, BLOCK=256), calls, reps)
    else:
        out["triton launch"] = "skipped: triton not installed"
    base = out["torch.add(x, c, out=y)"]["median_us"]
    for name, v in out.items():
        if isinstance(v, dict):
            v["ratio_vs_torch_add_out"] = v["median_us"] / base
    return out


def first_calls(repeats: int) -> dict:
    out: dict = {}
    for peer, code in PROBES.items():
        if peer != "kjit" and not have(peer):
            out[peer] = f"skipped: {peer} not installed"
            continue
        cold, warm = [], []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, **{CACHE_ENV[peer]: cache})
                script = os.path.join(cache, "probe.py")  # a file: Triton reads the kernel's source
                with open(script, "w") as f:
                    f.write(code)
                for bucket in (cold, warm):
                    r = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
                    if r.returncode != 0:
                        out[peer] = "failed: " + r.stderr.strip().splitlines()[-1]
                        break
                    bucket.append(json.loads(r.stdout.strip().splitlines()[-1]))
        if peer in out:
            continue
        out[peer] = {
            "empty_cache_ms": statistics.median(c["ms"] for c in cold),
            "empty_cache_ms_all": [round(c["ms"], 2) for c in cold],
            "warm_cache_new_process_ms": statistics.median(w["ms"] for w in warm),
            "warm_cache_ms_all": [round(w["ms"], 3) for w in warm],
        }
        if peer == "kjit":
            out[peer]["cold_stats"] = cold[-1]["stats"]
            out[peer]["warm_stats"] = warm[-1]["stats"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device"}))
        return
    import kjit

    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "kjit": kjit.__version__,
        "call_overhead_1024_fp32": call_overhead(calls=1000, reps=7 if args.quick else 21),
        "first_call": first_calls(repeats=2 if args.quick else 5),
    }
    for peer in ("cupy", "triton"):
        if have(peer):
            result[peer] = __import__(peer).__version__
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
