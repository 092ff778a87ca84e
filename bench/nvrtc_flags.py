"""NVRTC compile time of some library kernels (fp32, rows of 4096) under candidate flags: median of 3
compiles in one process, sm_90, --no-cache, the kjit templates and CUDA headers by include path (not in
memory as kjit hands them). A measurement for choosing flags: a flag that saves compile time must also
be measured for the kernels' speed (bench/bandwidth.py) before kjit uses it. Needs no GPU.

    python bench/nvrtc_flags.py
"""
import ctypes, time, sys, os, json
import kjit


def main() -> None:
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
        opts = [b"-arch=sm_90", b"--std=c++20", b"--no-cache", b"-DKJIT_USES_HALF=0", b"-DKJIT_USES_BFLOAT16=0"] + incs + extra
        t = time.perf_counter()
        st = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        dt = (time.perf_counter() - t) * 1e3
        if st != 0:
            n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)); b = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, b); print(b.value.decode()[:2000])
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        return st, dt
    comp("add_constant.cuh", "add_constant<float, 1>", [])
    variants = {"base": [], "Ofc=min": [b"--Ofast-compile=min"], "Ofc=mid": [b"--Ofast-compile=mid"], "Ofc=max": [b"--Ofast-compile=max"], "minimal": [b"--minimal"], "min+Ofc=max": [b"--minimal", b"--Ofast-compile=max"]}
    for fname, expr in cases:
        row = []
        for name, extra in variants.items():
            ts = []
            for r in range(3):
                st, dt = comp(fname, expr + "" , extra)
                ts.append(dt if st == 0 else float('nan'))
            row.append(f"{name} {sorted(ts)[1]:.0f}")
        print(expr, " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
