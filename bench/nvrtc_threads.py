"""Does NVRTC compile in parallel on the threads of one process? N compiles of distinct
specializations of the built-in rgb_to_gray (sm_90, --no-cache), on 1 thread, on T threads of this
process and on T processes (forked after NVRTC is loaded), without kjit: the reason `kjit warm -j N`
compiles in child processes. Needs no GPU.

    python bench/nvrtc_threads.py [--count 64] [--workers T (default: every CPU)] [--json out.json]
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import multiprocessing
import os
import threading
import time

try:  # as kjit.bench.nvrtc_threads, or as a script beside nvrtc_cache.py
    from .nvrtc_cache import find_nvrtc
except ImportError:
    from nvrtc_cache import find_nvrtc

SRC_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernel_templates", "rgb_to_gray.cuh")


def compile_one(lib, source: bytes, i: int) -> int:
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), source, b"rgb_to_gray.cu", 0, None, None)
    lib.nvrtcAddNameExpression(prog, f"rgb_to_gray<{64 + i}, {96 + 2 * i}>".encode())
    opts = [b"-arch=sm_90", b"--std=c++17", b"--no-cache"]
    status = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return status


def _in_process(args) -> list[int]:
    path, source, ids = args
    lib = ctypes.CDLL(path)
    return [compile_one(lib, source, i) for i in ids]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    n, t = args.count, args.workers
    path, _ = find_nvrtc()
    with open(SRC_PATH, "rb") as f:
        source = f.read()
    lib = ctypes.CDLL(path)  # ctypes releases the GIL around each call: the threads run NVRTC at once
    assert compile_one(lib, source, 100000) == 0  # NVRTC's first compile (its builtins) out of the timings

    start = time.perf_counter()
    assert {compile_one(lib, source, i) for i in range(n)} == {0}
    one = time.perf_counter() - start

    chunks = [list(range(n, 2 * n))[k::t] for k in range(t)]
    start = time.perf_counter()
    statuses: list[int] = []  # list.extend is atomic under the GIL
    threads = [
        threading.Thread(target=lambda c=c: statuses.extend(compile_one(lib, source, i) for i in c)) for c in chunks
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    on_threads = time.perf_counter() - start
    assert set(statuses) == {0} and len(statuses) == n

    chunks = [list(range(2 * n, 3 * n))[k::t] for k in range(t)]
    with multiprocessing.get_context("fork").Pool(t) as pool:
        pool.map(_in_process, [(path, source, [200000 + k]) for k in range(t)])  # each worker's first compile
        start = time.perf_counter()
        parts = pool.map(_in_process, [(path, source, c) for c in chunks])
        on_processes = time.perf_counter() - start
    assert {s for part in parts for s in part} == {0}

    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "nvrtc": path,
        "compiles": n,
        "workers": t,
        "seconds": {"1 thread": one, f"{t} threads": on_threads, f"{t} processes": on_processes},
        "speedup": {f"{t} threads": one / on_threads, f"{t} processes": one / on_processes},
    }
    print(
        f"NVRTC {path}, {os.cpu_count()} CPUs, {n} compiles: 1 thread {one:.2f} s ({1e3 * one / n:.1f} ms each); "
        f"{t} threads {on_threads:.2f} s ({one / on_threads:.2f}x); {t} processes {on_processes:.2f} s "
        f"({one / on_processes:.2f}x)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
