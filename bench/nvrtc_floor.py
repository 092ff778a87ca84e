"""What one NVRTC compile costs at least, whoever calls it: the floor under kjit's first-call figures.

In one process (NVRTC loaded and warmed by one compile first), median of 5 compiles, --no-cache:
  - empty:    `extern "C" __global__ void k() {}`, no header;
  - raw add:  the CuPy probe's `add_c` of bench/overhead.py (no header);
  - kjit add: kjit's add_constant<float, 4> with its headers, as kjit compiles it (float: no 16-bit float
              headers), by include path;
each to a cubin (-arch=sm_XX, what kjit and jiterator ask for) under C++17 and C++20, and, with a GPU, to PTX
(-arch=compute_XX) and then loaded by the driver (cuModuleLoadData JIT-compiles the PTX; its own cache off):
whether leaving ptxas to the driver saves anything.

    python bench/nvrtc_floor.py [--arch 90]
"""

import argparse
import ctypes
import os
import statistics
import sys
import time

EMPTY = b'extern "C" __global__ void k() {}\n'


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", type=int, default=None, help="sm_XX (default: the GPU's, else 90)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("CUDA_CACHE_DISABLE", "1")  # the driver's JIT cache: every PTX load compiles
    from kjit import _core
    from kjit.bench.overhead import ADD_SRC

    tk = _core.toolkit()
    nvrtc = ctypes.CDLL(tk["nvrtc_library"])
    kt = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernel_templates")
    if not os.path.isdir(kt):
        import kjit

        kt = os.path.join(os.path.dirname(kjit.__file__), "kernel_templates")
    incs = [b"-I" + kt.encode()] + [b"-I" + d.encode() for d in tk["include_dirs"]]
    driver = None
    try:
        import torch

        if torch.cuda.is_available():
            torch.zeros(1, device="cuda")  # the primary context, current on this thread
            cc = torch.cuda.get_device_capability()
            args.arch = args.arch or cc[0] * 10 + cc[1]
            driver = ctypes.CDLL("libcuda.so.1")
            print(f"# {torch.cuda.get_device_name()}", flush=True)
    except ImportError:
        pass
    arch = args.arch or 90
    # NVRTC 12.9+ caches compiles itself (what kjit turns off too); older ones refuse the flag.
    version = tuple(int(p) for p in str(tk.get("nvrtc_version", "0.0")).split(".")[:2] if p.isdigit())
    no_cache = [b"--no-cache"] if version >= (12, 9) else []

    def compile_once(src: bytes, name: str, expr: str | None, opts: list[bytes], ptx: bool) -> tuple[float, bytes]:
        prog = ctypes.c_void_p()
        assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, name.encode(), 0, None, None) == 0
        if expr:
            nvrtc.nvrtcAddNameExpression(prog, expr.encode())
        t = time.perf_counter()
        st = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        ms = (time.perf_counter() - t) * 1e3
        if st != 0:
            n = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            log = ctypes.create_string_buffer(n.value)
            nvrtc.nvrtcGetProgramLog(prog, log)
            sys.exit(f"{name}: NVRTC failed: {log.value.decode()[:2000]}")
        size = ctypes.c_size_t()
        get_size, get = (
            (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX) if ptx else (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
        )
        get_size(prog, ctypes.byref(size))
        image = ctypes.create_string_buffer(size.value)
        get(prog, image)
        nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
        return ms, image.raw

    def load_ms(image: bytes) -> float:
        mod = ctypes.c_void_p()
        t = time.perf_counter()
        st = driver.cuModuleLoadData(ctypes.byref(mod), image)
        ms = (time.perf_counter() - t) * 1e3
        assert st == 0, f"cuModuleLoadData: {st}"
        driver.cuModuleUnload(mod)
        return ms

    add = open(os.path.join(kt, "add_constant.cuh"), "rb").read()
    cases = {
        "empty": (EMPTY, "empty.cu", None, []),
        "raw add": (ADD_SRC.encode(), "add_c.cu", None, []),
        "kjit add": (
            add,
            "add_constant.cuh",
            "add_constant<float, 4>",
            incs + [b"-DKJIT_USES_HALF=0", b"-DKJIT_USES_BFLOAT16=0"],
        ),
    }
    compile_once(EMPTY, "warmup.cu", None, [f"-arch=sm_{arch}".encode()], False)
    print(f"# NVRTC {tk.get('nvrtc_version', '?')}, sm_{arch}, median of {args.repeats} compiles (ms)", flush=True)
    for label, (src, name, expr, extra) in cases.items():
        row = []
        for std in ("c++17", "c++20"):
            opts = [f"-arch=sm_{arch}".encode(), f"--std={std}".encode()] + no_cache + extra
            ts = [compile_once(src, name, expr, opts, False)[0] for _ in range(args.repeats)]
            row.append(f"cubin {std} {statistics.median(ts):.1f}")
        if driver is not None:
            opts = [f"-arch=compute_{arch}".encode(), b"--std=c++17"] + no_cache + extra
            cs, ls = [], []
            for _ in range(args.repeats):
                ms, image = compile_once(src, name, expr, opts, True)
                cs.append(ms)
                ls.append(load_ms(image))
            row.append(f"ptx c++17 {statistics.median(cs):.1f} + driver load {statistics.median(ls):.1f}")
        print(f"{label}: " + " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
