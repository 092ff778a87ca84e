"""CPU cost per cached call of a small kernel: add a constant to 1024 float32 elements.

kjit.ops.add_constant (allocates its output, like torch's x + c and the jiterator), kjit Kernel.launch,
specialize + launch and kjit.launcher (no allocation), against torch.add(x, c, out=y), x + c,
torch.cuda.jiterator, a CuPy RawKernel launch, a Triton launch and a bare cuLaunchKernel of the same
kernel in the same process (through ctypes, so it includes ctypes' own call cost).

Each peer entry names the kjit entry it is compared with ("vs"): allocating calls against
kjit.ops.add_constant, non-allocating launches against kjit Kernel.launch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os

from . import machine, stats
from .stats import error_text

N = 1024

ADD_SRC = r"""
extern "C" __global__ void add_c(const float* x, float* y, float c, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + c;
}
"""

JITERATOR_SRC = "template <typename T> T add_c(T x, T c) { return x + c; }"

KJIT_OP = "kjit.ops.add_constant(x, c)"
KJIT_LAUNCH = "kjit Kernel.launch"


# -- bare cuLaunchKernel through ctypes ------------------------------------------------------------------
def _nvrtc_candidates() -> list[str]:
    import torch

    site = os.path.dirname(os.path.dirname(torch.__file__))
    major = (torch.version.cuda or "").split(".")[0]
    dirs = [
        os.path.join(site, "nvidia", f"cu{major}", "lib"),
        os.path.join(site, "nvidia", "cu13", "lib"),
        os.path.join(site, "nvidia", "cu12", "lib"),
        os.path.join(site, "nvidia", "cuda_nvrtc", "lib"),
    ]
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            dirs += [os.path.join(os.environ[env], "lib64"), os.path.join(os.environ[env], "lib")]
    dirs += ["/usr/local/cuda/lib64"]
    out = []
    for d in dict.fromkeys(dirs):
        for p in sorted(glob.glob(os.path.join(d, "libnvrtc.so*")), key=len):
            if "builtins" not in p and p not in out:
                out.append(p)
    found = ctypes.util.find_library("nvrtc")
    if found:
        out.append(found)
    return out


def _load_nvrtc():
    errors = []
    for path in _nvrtc_candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
    raise RuntimeError(
        "libnvrtc not found next to torch, in CUDA_HOME or by ctypes.util"
        + (f" ({'; '.join(errors)[:200]})" if errors else "")
    )


def _nvrtc_cubin(src: str, arch: str) -> bytes:
    nvrtc = _load_nvrtc()
    prog = ctypes.c_void_p()
    _check_nvrtc(
        nvrtc,
        nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"add_c.cu", 0, None, None),
        "nvrtcCreateProgram",
    )
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"-default-device"]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        rc = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
        if rc != 0:
            size = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"nvrtcCompileProgram failed ({rc}): {log.value.decode(errors='replace')[:200]}")
        size = ctypes.c_size_t()
        _check_nvrtc(nvrtc, nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
        buf = ctypes.create_string_buffer(size.value)
        _check_nvrtc(nvrtc, nvrtc.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
        return buf.raw
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))


def _check_nvrtc(nvrtc, rc: int, what: str) -> None:
    if rc != 0:
        nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"{what} failed: {nvrtc.nvrtcGetErrorString(rc).decode()}")


def _check_cu(cuda, rc: int, what: str) -> None:
    if rc != 0:
        msg = ctypes.c_char_p()
        cuda.cuGetErrorString(rc, ctypes.byref(msg))
        raise RuntimeError(f"{what} failed: {rc} {(msg.value or b'').decode()}")


def bare_launcher(x, y, c: float, n: int):
    """A zero-argument function doing one cuLaunchKernel of add_c(x, y, c, n) on torch's current stream
    (module loaded with cuModuleLoadData from an NVRTC cubin). Raises with the reason if it cannot."""
    import torch

    cuda = ctypes.CDLL("libcuda.so.1")
    _check_cu(cuda, cuda.cuInit(0), "cuInit")
    ctx = ctypes.c_void_p()
    _check_cu(cuda, cuda.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:  # torch made its primary context current on this thread; if not, do so
        dev = ctypes.c_int()
        _check_cu(cuda, cuda.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()), "cuDeviceGet")
        _check_cu(cuda, cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        _check_cu(cuda, cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    major, minor = torch.cuda.get_device_capability()
    cubin = _nvrtc_cubin(ADD_SRC, f"sm_{major}{minor}")
    module = ctypes.c_void_p()
    _check_cu(cuda, cuda.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
    func = ctypes.c_void_p()
    _check_cu(cuda, cuda.cuModuleGetFunction(ctypes.byref(func), module, b"add_c"), "cuModuleGetFunction")
    launch = cuda.cuLaunchKernel
    launch.restype = ctypes.c_int
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    args = [ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_float(c), ctypes.c_longlong(n)]
    params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    grid = (n + 255) // 256
    fn_ptr = func.value

    def call():
        return launch(fn_ptr, grid, 1, 1, 256, 1, 1, 0, stream, params, None)

    _check_cu(cuda, call(), "cuLaunchKernel")
    torch.cuda.synchronize()
    call.keep_alive = (cuda, module, args, params)  # the argument storage must outlive the calls
    return call


# -- the section -----------------------------------------------------------------------------------------
def _entry(fn, kind: str, vs: str | None, calls: int, reps: int) -> dict | str:
    try:
        us = stats.cpu_us(fn, calls, reps)
    except Exception as e:  # noqa: BLE001  (one broken peer never kills the run)
        return f"skipped: {error_text(e)}"
    return {"kind": kind, "vs": vs, "us": us}


def run(quick: bool, peer_versions: dict | None = None, log=None) -> dict:
    import torch

    import kjit

    peer_versions = peer_versions or machine.peers()
    calls, reps = 1000, (7 if quick else 21)
    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    ref = x + 1.0
    res: dict = {}

    def add(name, make, kind, vs, check_out=True):
        """make() -> the zero-argument call; its result is checked once against x + 1 first."""
        try:
            fn = make()
            y.zero_()
            got = fn()
            torch.cuda.synchronize()
            out = got if isinstance(got, torch.Tensor) and got.shape == x.shape else y
            if check_out:
                torch.testing.assert_close(out, ref)
        except Exception as e:  # noqa: BLE001
            res[name] = f"skipped: {error_text(e)}"
            return
        res[name] = _entry(fn, kind, vs, calls, reps)
        if log:
            log(
                f"  {name}: {res[name]['us']['median']:.2f} us"
                if isinstance(res[name], dict)
                else f"  {name}: {res[name]}"
            )

    add("torch.add(x, c, out=y)", lambda: lambda: torch.add(x, 1.0, out=y), "peer", KJIT_LAUNCH)
    add("torch x + c", lambda: lambda: x + 1.0, "peer", KJIT_OP)
    add(KJIT_OP, lambda: lambda: kjit.ops.add_constant(x, 1.0), "kjit", None)
    grid = (N // 4 + 255) // 256

    def kernel_launch():
        k = kjit.Template.builtin("add_constant").kernel("add_constant").specialize(T=torch.float32, VEC=4)
        return lambda: k.launch(grid, 256, x, y, 1.0, N)

    add(KJIT_LAUNCH, kernel_launch, "kjit", None)

    def specialize_launch():
        fam = kjit.Template.builtin("add_constant").kernel("add_constant")
        return lambda: fam.specialize(T=torch.float32, VEC=4).launch(grid, 256, x, y, 1.0, N)

    add("kjit specialize + launch", specialize_launch, "kjit", None)

    def launcher_call():
        fam = kjit.Template.builtin("add_constant").kernel("add_constant")
        f = kjit.launcher(fam, grid=lambda x, y, c, n: kjit.cdiv(n, 1024), block=256, T=kjit.arg("x").dtype, VEC=4)
        return lambda: f(x, y, 1.0, N)

    add("kjit.launcher call", launcher_call, "kjit", None)

    if machine.available(peer_versions, "jiterator"):

        def jiterator():
            from torch.cuda.jiterator import _create_jit_fn

            jf = _create_jit_fn(JITERATOR_SRC, c=1.0)
            return lambda: jf(x, c=1.0)

        add("torch.cuda.jiterator call", jiterator, "peer", KJIT_OP)
    else:
        res["torch.cuda.jiterator call"] = peer_versions.get("jiterator") or "skipped: jiterator not detected"

    if machine.available(peer_versions, "cupy"):

        def cupy_launch():
            import cupy

            ck = cupy.RawKernel(ADD_SRC, "add_c")
            xp, yp, c, n = x.data_ptr(), y.data_ptr(), cupy.float32(1.0), cupy.int64(N)
            cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream).use()  # launch on torch's stream
            blocks = ((N + 255) // 256,)
            return lambda: ck(blocks, (256,), (xp, yp, c, n))

        add("cupy RawKernel launch", cupy_launch, "peer", KJIT_LAUNCH)
    else:
        res["cupy RawKernel launch"] = peer_versions.get("cupy") or "skipped: cupy not detected"

    if machine.available(peer_versions, "triton"):

        def triton_launch():
            from ._triton_kernels import add_c

            return lambda: add_c[((N + 255) // 256,)](x, y, 1.0, N, BLOCK=256)

        add("triton launch", triton_launch, "peer", KJIT_LAUNCH)
    else:
        res["triton launch"] = peer_versions.get("triton") or "skipped: triton not detected"

    add("bare cuLaunchKernel (ctypes, same process)", lambda: bare_launcher(x, y, 1.0, N), "peer", KJIT_LAUNCH)

    base = res.get("torch.add(x, c, out=y)")
    for v in res.values():
        if isinstance(v, dict) and isinstance(base, dict):
            v["ratio_vs_torch_add_out"] = v["us"]["median"] / base["us"]["median"]
    return {"n": N, "dtype": "float32", "calls": calls, "reps": reps, "results": res}
