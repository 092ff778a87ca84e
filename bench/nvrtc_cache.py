"""NVRTC's own compile cache (CUDA 12.9+) against --no-cache, measured without kjit.

NVRTC 12.9+ looks a compile up in the driver's JIT cache (CUDA_CACHE_PATH) before generating PTX and
cubin. kjit caches binaries itself and passes --no-cache, so that every compile it counts and times is a
real one with a full log. This script shows why: the same program compiled in two fresh processes, with
and without --no-cache, each mode in its own empty CUDA_CACHE_PATH; it reports compile times and whether
the log still has ptxas's lines. Needs a GPU machine (the cache needs the driver).

    python bench/nvrtc_cache.py [--out bench/results]
"""

import argparse
import ctypes
import glob
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

PROGRAM = r"""
#include <cuda_fp16.h>
template <typename T, int N> struct Unroll {
  __device__ static T run(const T* x, int i) { return x[i] * T(N) + Unroll<T, N - 1>::run(x, i + 1); }
};
template <typename T> struct Unroll<T, 0> { __device__ static T run(const T*, int) { return T(0); } };
template <typename T> __global__ void k(const T* x, T* y) { y[threadIdx.x] = Unroll<T, 64>::run(x, threadIdx.x); }
"""


def find_nvrtc():
    """(libnvrtc path, the include folder beside it): CUDA_HOME's (default /usr/local/cuda) first, then
    any /usr/local/cuda-*, then NVIDIA's pip packages of this Python (nvidia/cu*/lib)."""
    home = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    found = [home / "lib64" / name for name in ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12")]
    found += [pathlib.Path(p) for p in sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"))]
    found += [
        pathlib.Path(p)
        for p in sorted(
            glob.glob(
                os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cu*", "lib", "libnvrtc.so*")
            )
        )
    ]
    for p in found:
        if p.exists():
            return str(p), str(p.parent.parent / "include")
    raise SystemExit("libnvrtc not found: set CUDA_HOME")


def compile_once(options):
    lib_path, include = find_nvrtc()
    lib = ctypes.CDLL(lib_path)
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), PROGRAM.encode(), b"k.cu", 0, None, None)
    lib.nvrtcAddNameExpression(prog, b"k<float>")
    opts = [f"--include-path={include}", "-arch=sm_90", "-Xptxas", "-v"] + options
    argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    start = time.perf_counter()
    status = lib.nvrtcCompileProgram(prog, len(opts), argv)
    ms = (time.perf_counter() - start) * 1000
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    print(
        json.dumps(
            {
                "status": status,
                "ms": ms,
                "ptxas_lines": "ptxas info" in log.value.decode(errors="replace"),
                "nvrtc": f"{major.value}.{minor.value}",
            }
        )
    )


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return compile_once(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for label, options in (("NVRTC default (its cache on)", []), ("--no-cache (what kjit passes)", ["--no-cache"])):
        with tempfile.TemporaryDirectory() as cache_dir:
            env = dict(os.environ, CUDA_CACHE_PATH=cache_dir)
            for process in (1, 2):
                out = subprocess.run(
                    [sys.executable, __file__, "--child", *options],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append({"mode": label, "process": process, **r})
    try:
        gpu = (
            subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
            .stdout.strip()
            .splitlines()
        )
    except FileNotFoundError:
        gpu = []
    result = {"date": datetime.date.today().isoformat(), "gpu": gpu[0] if gpu else "none", "rows": rows}
    lines = [
        f"NVRTC {rows[0]['nvrtc']} on {result['gpu']}, {result['date']}: one program, two fresh processes "
        "per mode, each mode with an empty CUDA_CACHE_PATH",
        "",
        "| mode | process | compile ms | ptxas lines in the log |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['process']} | {r['ms']:.1f} | {'yes' if r['ptxas_lines'] else 'no'} |")
    print("\n".join(lines))
    if args.out:
        stem = pathlib.Path(args.out) / f"{result['date']}-nvrtc-own-cache"
        stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
