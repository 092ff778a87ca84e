"""kjit makes no CUDA API call that fails (issue 40): a user's program run under compute-sanitizer memcheck,
which reports every API error by default, sees none from kjit. Kernel used to count a kernel's parameters by
calling cuKernelGetParamInfo until it answered CUDA_ERROR_INVALID_VALUE: one reported error per kernel
loaded (87 in one test file). It now takes the count from cuKernelGetParamCount (CUDA 13.2 drivers) or from
the loaded image itself (engine/include/kjit/image_params.hpp), and the sizes from cuKernelGetParamInfo.

Run on a GPU machine: `pytest tests/python/test_cuda_api_errors.py` (the sanitizer test is skipped where
compute-sanitizer is neither on PATH nor in the CUDA toolkit's bin/).
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

import kjit

pytestmark = pytest.mark.gpu

# Kernels of 0 to 29 parameters, structs passed by value, __grid_constant__ parameters of a CUtensorMap's size
# and alignment, a parameter list over 8000 bytes, and a template kernel; with each one's parameter sizes.
SOURCE = r"""
struct Big { float v[32]; };
struct alignas(64) TensorMapLike { unsigned long long opaque[16]; };
struct Mixed { char c; double d; int i; };
struct Huge { char b[20000]; };
__global__ void none() {}
__global__ void one(float* x) { x[threadIdx.x] = 1; }
__global__ void unused(float* x, int a, double b, char c) {}
__global__ void structs(Big b, Mixed m, float* out) { out[0] = b.v[3] + m.d; }
__global__ void grid_constant(const __grid_constant__ TensorMapLike t, float* out, int n) {
  out[n] = (float)t.opaque[2];
}
__global__ void huge(Huge h, float* out, int i) { out[i] = h.b[i]; }
__global__ void many(float* a0, float* a1, float* a2, float* a3, float* a4, float* a5, float* a6, float* a7,
                     int b0, int b1, int b2, int b3, int b4, int b5, int b6, int b7, char c0, short c1, long long c2,
                     double c3, float* a8, float* a9, float* a10, float* a11, float* a12, float* a13, float* a14,
                     float* a15, int z) {
  a0[z] = b0 + c2;
}
template <typename T, int N>
__global__ void scaled(T* x, T c, int n) {
  if (threadIdx.x < n) x[threadIdx.x] += c * N;
}
"""
SIZES = {
    "none": [],
    "one": [8],
    "unused": [8, 4, 8, 1],
    "structs": [128, 24, 8],
    "grid_constant": [128, 8, 4],
    "huge": [20000, 8, 4],
    "many": [8] * 8 + [4] * 8 + [1, 2, 8, 8] + [8] * 8 + [4],
}

# Loads every kernel above, launches those kjit can pass arguments to, and runs library ops (the sm_90 GEMM
# takes two CUtensorMap parameters); fails unless each kernel's parameter sizes are known and right.
SCRIPT = rf"""
import torch, kjit
from kjit import ops
t = kjit.Template({SOURCE!r}, name="api_errors.cu")
for name, sizes in {SIZES!r}.items():
    k = t.kernel(name).specialize()
    assert k.param_sizes == sizes, (name, k.param_sizes, sizes)
k = t.kernel("scaled").specialize(T=torch.float32, N=4)
assert k.param_sizes == [8, 4, 4], k.param_sizes
x = torch.zeros(32, device="cuda")
k.launch(1, 32, x, 0.5, 32)
t.kernel("one").specialize().launch(1, 32, x)
t.kernel("none").specialize().launch(1, 1)
torch.cuda.synchronize()
assert torch.all(x == 1), x
a = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
w = torch.randn(96, 128, device="cuda", dtype=torch.bfloat16)
torch.testing.assert_close(ops.linear(a, w).float(), (a.float() @ w.float().T), rtol=2e-2, atol=2e-1)
torch.testing.assert_close(ops.softmax(a.float()), torch.softmax(a.float(), -1))
torch.testing.assert_close(ops.add_constant(a.float(), 2.0), a.float() + 2.0)
torch.cuda.synchronize()
print("OK")
"""


def test_parameter_sizes_of_loaded_kernels():
    """Every kernel's sizes are known and right on this driver, whichever way the count was found."""
    t = kjit.Template(SOURCE, name="api_errors_sizes.cu")
    for name, sizes in SIZES.items():
        assert t.kernel(name).specialize().param_sizes == sizes, name
    assert t.kernel("scaled").specialize(T=torch.float32, N=4).param_sizes == [8, 4, 4]


def _compute_sanitizer():
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (pathlib.Path(home) / "bin" / "compute-sanitizer").is_file():
            return str(pathlib.Path(home) / "bin" / "compute-sanitizer")
    return None


def test_no_api_error_under_compute_sanitizer(tmp_path):
    sanitizer = _compute_sanitizer()
    if sanitizer is None:
        pytest.skip("compute-sanitizer is neither on PATH nor in $CUDA_HOME/bin or /usr/local/cuda/bin")
    script = tmp_path / "api_errors.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, KJIT_CACHE_DIR=str(tmp_path / "cache"))  # every kernel loaded fresh: compiled
    # The sanitizer's defaults: memcheck, and every API error reported (--report-api-errors explicit).
    proc = subprocess.run(
        [sanitizer, "--tool", "memcheck", "--error-exitcode", "99", sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    api_errors = sorted(set(re.findall(r"Program hit .* on CUDA API call to \w+", out)))
    assert not api_errors, f"API errors: {api_errors}\n{out[-6000:]}"
    assert "OK" in proc.stdout and proc.returncode == 0, out[-6000:]
    assert "ERROR SUMMARY: 0 errors" in out, out[-6000:]
