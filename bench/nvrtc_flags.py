"""NVRTC compile time of some library kernels (fp32, rows of 4096) under candidate flags: the median of
--repeats compiles in one process, the variants taking turns (one compile of each per round, so that a
drift of the machine reaches every variant alike), sm_90, --no-cache, the kjit templates and CUDA headers by
include path (not in memory as kjit hands them). A measurement for choosing flags: a flag that saves
compile time and changes the binary must also be measured for the kernels' speed (bench/bandwidth.py,
bench/fast_compile_ab.py) before kjit uses it (--minimal does not change it:
tests/cpp/test_builtin_templates.cpp; --Ofast-compile makes the library kernels 1.1-14x slower:
bench/results/2026-11-26-H200-fast_compile_ab.md). Needs no GPU.

    python bench/nvrtc_flags.py [--variants base,minimal] [--repeats 9]
"""

import argparse
import ctypes
import os
import statistics
import time

import kjit  # noqa: F401  (the toolkit kjit found)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="base,Ofc=min,Ofc=mid,Ofc=max,minimal,min+Ofc=max")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from kjit import _core

    tk = _core.toolkit()
    lib = ctypes.CDLL(tk["nvrtc_library"])
    KT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernel_templates")
    cases = [
        ("softmax.cuh", "softmax_forward<float, 256, 1, 4, 4, 4096, false>"),
        ("softmax.cuh", "softmax_backward<float, 256, 1, 4, 4, 4096, false>"),
        ("norm.cuh", "norm_forward<float, 256, 1, 4, 4, 4096, false, true, true>"),
        ("norm.cuh", "norm_backward<float, 256, 1, 4, 4, 4096, false, true, true>"),
        ("add_constant.cuh", "add_constant<float, 4>"),
    ]
    incs = [b"-I" + KT.encode()] + [b"-I" + d.encode() for d in tk["include_dirs"]]

    def comp(fname, expr, extra):
        src = open(os.path.join(KT, fname), "rb").read()
        prog = ctypes.c_void_p()
        assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, fname.encode(), 0, None, None) == 0
        lib.nvrtcAddNameExpression(prog, expr.encode())
        opts = (
            [b"-arch=sm_90", b"--std=c++20", b"--no-cache", b"-DKJIT_USES_HALF=0", b"-DKJIT_USES_BFLOAT16=0"]
            + incs
            + extra
        )
        t = time.perf_counter()
        st = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        dt = (time.perf_counter() - t) * 1e3
        if st != 0:
            n = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            b = ctypes.create_string_buffer(n.value)
            lib.nvrtcGetProgramLog(prog, b)
            print(b.value.decode()[:2000])
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        return st, dt

    comp("add_constant.cuh", "add_constant<float, 1>", [])
    variants = {
        "base": [],
        "Ofc=min": [b"--Ofast-compile=min"],
        "Ofc=mid": [b"--Ofast-compile=mid"],
        "Ofc=max": [b"--Ofast-compile=max"],
        "minimal": [b"--minimal"],
        "min+Ofc=max": [b"--minimal", b"--Ofast-compile=max"],
        "min+Ofc=min": [b"--minimal", b"--Ofast-compile=min"],
        "min+Ofc=mid": [b"--minimal", b"--Ofast-compile=mid"],
        "min+ptxO1": [b"--minimal", b"-Xptxas", b"-O1"],
        "min+ptxO2": [b"--minimal", b"-Xptxas", b"-O2"],
        "min+Ofc=mid+ptxO1": [b"--minimal", b"--Ofast-compile=mid", b"-Xptxas", b"-O1"],
    }
    chosen = args.variants.split(",")
    for name in chosen:
        if name not in variants:
            ap.error(f"--variants: {name!r} is not one of {', '.join(variants)}")
    for fname, expr in cases:
        times = {name: [] for name in chosen}
        for _ in range(args.repeats):
            for name in chosen:
                st, dt = comp(fname, expr, variants[name])
                times[name].append(dt if st == 0 else float("nan"))
        print(expr, " | ".join(f"{name} {statistics.median(ts):.1f}" for name, ts in times.items()), flush=True)


if __name__ == "__main__":
    main()
