"""What several op family files (tests/python/ops/test_*.py) share: the targets their kernels compile for, the
dtypes and sizes of their GPU tests, the norms' inputs and eps, the tolerances of the row ops (softmax, norms), the masked rows softmax treats as torch
does, and the kjit operators a traced graph calls. Helpers of every test file are in support.py.
"""

import os
import re

import torch

import kjit
from support import ORIGINS, close, randn, rounding_tol, ulp

DEV = "cuda"
# The compile-only tests' targets. KJIT_TEST_ARCHS (comma-separated, a subset of these) narrows them: CI's wheel
# stage runs the suite again against the installed wheel with sm_90 alone (the nonroot stage compiles all three
# from the same sources; the wheel's run checks its packaged NVRTC and headers, which no architecture changes).
ALL_ARCHS = ("sm_80", "sm_90", "sm_100")


def _test_archs(value: str | None) -> tuple[str, ...]:
    if not value:
        return ALL_ARCHS
    archs = tuple(a.strip() for a in value.split(",") if a.strip())
    unknown = [a for a in archs if a not in ALL_ARCHS]
    if unknown or not archs:
        raise ValueError(f"KJIT_TEST_ARCHS={value!r}: expected a comma-separated subset of {', '.join(ALL_ARCHS)}")
    return archs


ARCHS = _test_archs(os.environ.get("KJIT_TEST_ARCHS"))
DTYPES = [torch.float32, torch.float16, torch.bfloat16]  # on a GPU; float64 where a test says so
SIZES = [1, 7, 1000, 4097]
ROW_SIZES = [1, 7, 768, 1000, 4096, 8192, 50257]  # rows of softmax / reductions: one warp ... streamed
EPS_LN, EPS_RMS = 1e-5, 1e-6


def gemm_mma_shared_bytes(item, bm, bn, bk, wk, stages, swiglu):
    """gemm.cuh's dynamic shared memory (its file comment's formula): the pipeline's stages, or the K groups'
    reduction (WK > 1) where that is larger; `item` bytes per element, B's tile doubled for SwiGLU."""
    sets = 2 if swiglu else 1
    pipe = stages * (bm + bn * sets) * bk * item
    red = (wk - 1) * bm * bn * sets * 4 if wk > 1 else 0
    return max(pipe, red)


def check_floating_templates_compile(kernels, arch, dtype):
    """Each (template, kernel) of `kernels`, a built-in of parameters T and VEC, compiles for `arch` in `dtype`
    with 16-byte vectors."""
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for tmpl, kernel in kernels:
        k = kjit.Template.builtin(tmpl).kernel(kernel).specialize(arch=arch, T=dtype, VEC=vec)
        assert str(k.origin) in ORIGINS, (tmpl, kernel, k.origin)


def norm_inputs(rows, d, dtype, *, misaligned=False):
    """x [rows, d] (N(0, 4) plus a per-row offset: the mean matters), weight near 1 and a small bias [d]."""
    x = randn(rows, d, dtype=dtype, misaligned=misaligned, scale=2.0)
    x.add_(randn(rows, 1, dtype=dtype))  # a per-row offset: the mean matters (in place: keeps the alignment)
    w = (1.0 + 0.5 * randn(d)).to(dtype)
    b = (0.1 * randn(d)).to(dtype)
    return x, w, b


def row_tol(dtype):
    """softmax / norms: float statistics over a row, then one rounding of the output dtype."""
    return rounding_tol(dtype, f32=(3e-5, 1e-5), half_atol=1e-4, f64=(1e-10, 1e-10))


def softmax_tol(dtype, log):
    """softmax: relative (values down to float16 subnormals); log_softmax: absolute near 0."""
    if dtype == torch.float64:
        return dict(rtol=1e-10, atol=1e-12)
    return dict(rtol=3e-5 if dtype == torch.float32 else ulp(dtype), atol=1e-5 if log else 1e-6)


def masked_and_nan_rows(rows, d):
    """[rows, d] float32 logits (rows >= 4): row 0 with -inf (masked) entries, row 1 starting with -inf, row 2
    fully masked, row 3 with a NaN; the others as drawn."""
    x = randn(rows, d, scale=3.0)
    x[0, ::3] = float("-inf")
    x[1, : d // 2] = float("-inf")
    x[2, :] = float("-inf")
    x[3, d // 2] = float("nan")
    return x


def check_softmax_of_masked_rows(x):
    """softmax and log_softmax of x as torch's: NaN where torch's are, equal within float32's rounding elsewhere."""
    for op, ref in ((kjit.ops.softmax, torch.softmax), (kjit.ops.log_softmax, torch.log_softmax)):
        y, want = op(x), ref(x, -1)
        assert torch.equal(torch.isnan(y), torch.isnan(want)), op
        close(y.nan_to_num(0.0, 0.0, 0.0), want.nan_to_num(0.0, 0.0, 0.0), rtol=1e-5, atol=1e-6)


def traced_kjit_ops(f, inputs):
    """The names of the torch.ops.kjit operators in the graph make_fx traces (symbolically) of f(*inputs)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    code = make_fx(f, tracing_mode="symbolic")(*inputs).code
    return set(re.findall(r"torch\.ops\.kjit\.(\w+)\.default", code))
