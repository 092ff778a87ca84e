"""Long rows: softmax, log_softmax, layer_norm and rms_norm for rows too long for one block's registers
(kernel_templates/softmax_split.cuh and norm_split.cuh on sm_90 and newer: one row per thread-block cluster,
16-byte vectors whatever the row's alignment). Rows beyond the split's capacity (8 x 512 x 32 elements) keep the
streamed softmax; layer_norm refuses them as before.

Without a GPU: the split kernels are declared as the ops pack their arguments, and refuse sm_80 (no clusters)
with NVRTC's reason. On a GPU (the tests marked gpu): the forward against PyTorch in float64 on the same inputs;
odd lengths (every row starts at another misalignment: the head / tail split), an offset-1 view, -inf / NaN
rows, layer_norm of large-mean rows, that the split kernels really run (torch.profiler), and the gradients
through the unchanged backward. Tolerances as ops/test_softmax.py's and ops/test_norms.py's.
"""

import pytest
import torch
import torch.nn.functional as F
from family_helpers import (
    DEV,
    EPS_LN,
    EPS_RMS,
    check_softmax_of_masked_rows,
    masked_and_nan_rows,
    norm_inputs,
    row_tol,
    softmax_tol,
)
from support import dname, misaligned_like, randn

import kjit
from kjit import ops


# ---- the split kernels' declarations (the kernels the ops compile: ops/test_op_table.py) ---------------------


# The long-row kernels split over a thread-block cluster (softmax_split.cuh, norm_split.cuh): sm_90 and newer
# only (__cluster_dims__ does not compile for sm_80).
SOFTMAX_SPLIT = ("softmax_split", "softmax_split_forward", dict(T=torch.float32, TPR=256, CL=8, VEC=4, ITEMS=7))


NORM_SPLIT = (
    "norm_split",
    "norm_split_forward",
    dict(T=torch.float32, TPR=256, CL=8, VEC=4, ITEMS=7, RMS=False, HAS_W=True, HAS_B=True),
)


def _compile_template(arch, job, **extra):
    tmpl, kernel, params = job
    return (
        kjit.Template.builtin(tmpl)
        .kernel(kernel, **kjit._core.library_compile_options())
        .specialize(arch=arch, **params, **extra)
    )


def test_split_row_kernels_are_declared_as_the_ops_pack_them():
    # python/src/ops/softmax.cpp / norm.cpp pass (x, y, rows, d, chunk) and (x, w, b, y, rows, d, chunk, eps)
    # with exact C++ types (launch_kernel), and the template arguments in this order.
    sm = kjit.Template.builtin("softmax_split").kernel("softmax_split_forward")
    nm = kjit.Template.builtin("norm_split").kernel("norm_split_forward")
    assert [p[0] for p in sm.params] == ["T", "TPR", "CL", "VEC", "ITEMS", "LOG"]
    assert [p[0] for p in nm.params] == ["T", "TPR", "CL", "VEC", "ITEMS", "RMS", "HAS_W", "HAS_B"]
    k = _compile_template("sm_90", SOFTMAX_SPLIT, LOG=False)
    assert [p[2] for p in k.params][2:] == ["long long", "int", "int"]
    assert [p[1] for p in k.params][:2] == ["pointer"] * 2
    k = _compile_template("sm_90", NORM_SPLIT)
    assert [p[2] for p in k.params][4:] == ["long long", "int", "int", "double"]
    assert [p[1] for p in k.params][:4] == ["pointer"] * 4


def test_split_row_kernels_refuse_sm_80_with_nvrtcs_reason():
    with pytest.raises(kjit.CompileError, match="__cluster_dims__"):
        _compile_template("sm_80", SOFTMAX_SPLIT, LOG=False)


# ---- on a GPU: against PyTorch -----------------------------------------------------------------------------


F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


CAPACITY = 8 * 512 * 32  # the split kernels' longest row (and the one-block norm kernel's)


# (dtype, d, rows), pairwise over d in {32769, 50257, 65537, 131072, 200003}, the three dtypes and
# rows in {1, 3, 1335}: every d and dtype, each dtype with each row count.
CASES = [
    (F32, 32769, 3),
    (BF16, 32769, 1335),
    (F16, 32769, 1),
    (F32, 50257, 1335),
    (BF16, 50257, 3),
    (F16, 50257, 1335),
    (F32, 65537, 1),
    (BF16, 65537, 1),
    (F16, 65537, 3),
    (F32, 131072, 3),
    (BF16, 131072, 1),
    (F16, 131072, 1),
    (F32, 200003, 1),
    (BF16, 200003, 3),
    (F16, 200003, 1),
    (torch.float64, 50257, 3),  # 16-byte vectors of two
]


def has_clusters():
    return torch.cuda.get_device_capability()[0] >= 9


def case_id(v):
    return dname(v) if isinstance(v, torch.dtype) else str(v)


def check_softmax(x):
    for op, ref, log in ((ops.softmax, torch.softmax, False), (ops.log_softmax, torch.log_softmax, True)):
        y = op(x)
        assert y.dtype == x.dtype and y.shape == x.shape and y.is_contiguous()
        torch.testing.assert_close(y.double(), ref(x.double(), -1).to(x.dtype).double(), **softmax_tol(x.dtype, log))


def check_norms(x, w, b, tol=None):
    d = x.shape[-1]
    tol = tol or row_tol(x.dtype)
    want = F.layer_norm(x.double(), (d,), w.double(), b.double(), EPS_LN).to(x.dtype)
    torch.testing.assert_close(ops.layer_norm(x, w, b).double(), want.double(), **tol)
    want = F.rms_norm(x.double(), (d,), w.double(), EPS_RMS).to(x.dtype)
    torch.testing.assert_close(ops.rms_norm(x, w).double(), want.double(), **tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, d, rows", CASES, ids=case_id)
def test_long_rows_softmax(dtype, d, rows):
    check_softmax(randn(rows, d, dtype=dtype, scale=3.0))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, d, rows", CASES, ids=case_id)
def test_long_rows_norms(dtype, d, rows):
    x, w, b = norm_inputs(rows, d, dtype)
    if d > CAPACITY:  # the norms hold a row in registers: refused as before, with the way out
        with pytest.raises(ValueError, match=r"longer than the kernel holds in registers.*torch\.nn\.functional"):
            ops.layer_norm(x, w, b)
        return
    check_norms(x, w, b)
    if rows == 3:  # the configurations without weight / bias at a few sizes
        d_ = x.shape[-1]
        want = F.layer_norm(x.double(), (d_,), None, None, EPS_LN).to(dtype)
        torch.testing.assert_close(ops.layer_norm(x).double(), want.double(), **row_tol(dtype))
        want = F.layer_norm(x.double(), (d_,), w.double(), None, EPS_LN).to(dtype)
        torch.testing.assert_close(ops.layer_norm(x, w).double(), want.double(), **row_tol(dtype))
        want = F.rms_norm(x.double(), (d_,), None, EPS_RMS).to(dtype)
        torch.testing.assert_close(ops.rms_norm(x).double(), want.double(), **row_tol(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [F32, BF16], ids=dname)
def test_long_rows_misaligned_view(dtype):
    # x one element into its buffer: x and y are not 16 bytes apart, so the split reads one element at a
    # time (VEC = 1); weight and bias misaligned too.
    x, w, b = norm_inputs(7, 50257, dtype, misaligned=True)
    assert x.data_ptr() % 16 != 0
    check_softmax(x)
    check_norms(x, misaligned_like(w), misaligned_like(b))
    # Aligned rows (d a multiple of the vector) read weight and bias as vectors, unless they are misaligned.
    x2, w2, b2 = norm_inputs(3, 65536, dtype)
    check_norms(x2, w2, b2)
    check_norms(x2, misaligned_like(w2), b2)
    # A 3-D view of a misaligned buffer, rows of an even length.
    x3 = randn(2, 3, 65536, dtype=dtype, misaligned=True, scale=3.0)
    check_softmax(x3)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [50257, 200003], ids=["split", "streamed"])
def test_long_rows_masked_and_nan_rows(d):
    # -inf (masked) entries, a row starting with -inf, a fully masked row, a NaN row, a row with one
    # finite element at its end (the tail): as torch.
    x = masked_and_nan_rows(6, d)
    x[4, :-1] = float("-inf")
    check_softmax_of_masked_rows(x)
    # A NaN in the head (first element) and in the tail (last element) of a row.
    x = randn(2, d, scale=3.0)
    x[0, 0] = float("nan")
    x[1, -1] = float("nan")
    assert torch.isnan(ops.softmax(x)).all() and torch.isnan(ops.log_softmax(x)).all()
    if d <= CAPACITY:
        w = torch.ones(d, device=DEV)
        assert torch.isnan(ops.layer_norm(x, w)).all() and torch.isnan(ops.rms_norm(x, w)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, d", [(F32, 50257), (BF16, 65537)], ids=case_id)
def test_long_rows_layer_norm_of_a_large_mean(dtype, d):
    # x = 1000 + randn: the variance from (x - mean)^2, not E[x^2] - mean^2 (which would lose it all).
    x = (1000.0 + torch.randn(5, d, device=DEV)).to(dtype)
    w = (1.0 + 0.5 * randn(d)).to(dtype)
    b = (0.1 * randn(d)).to(dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == F32 else row_tol(dtype)
    check_norms(x, w, b, tol)


def kernel_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return " | ".join(e.key for e in prof.key_averages())


# torch.profiler.profile warns that it "clears events at the end of each cycle" (the events of the one cycle
# this test records are all it reads): expected here, filtered here (":" cannot be written in the filter).
@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events at the end of each cycle:UserWarning")
def test_long_rows_run_the_split_kernels():
    if not has_clusters():
        pytest.skip("thread-block clusters need sm_90 or newer: the one-block kernels run")
    x, w, b = norm_inputs(3, 50257, F32)
    names = kernel_names(lambda: (ops.softmax(x), ops.log_softmax(x), ops.layer_norm(x, w, b), ops.rms_norm(x, w)))
    assert "softmax_split_forward" in names and "norm_split_forward" in names, names
    # Rows one block holds keep the one-block kernels; rows past the capacity the streamed softmax.
    short, longest = randn(3, 4096), randn(2, 200003)
    names = kernel_names(lambda: (ops.softmax(short), ops.layer_norm(short)))
    assert "split" not in names and "softmax_forward" in names and "norm_forward" in names, names
    names = kernel_names(lambda: ops.softmax(longest))
    assert "split" not in names and "softmax_forward" in names, names


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [F32, BF16], ids=dname)
def test_long_rows_gradients_through_the_backward(dtype):
    # The forward splits; the backward ops are the one-block ones. Autograd gives the backward op's result
    # on the forward's output; float32 against PyTorch's autograd in float64 (the forward's rounding included).
    d = 50257
    x, w, b = norm_inputs(3, d, dtype)
    g = randn(3, d, dtype=dtype)
    for op, bwd, ref in (
        (ops.softmax, ops.softmax_backward, torch.softmax),
        (ops.log_softmax, ops.log_softmax_backward, torch.log_softmax),
    ):
        xg = x.detach().clone().requires_grad_()
        y = op(xg)
        y.backward(g)
        assert torch.equal(xg.grad, bwd(g, y.detach()))
        if dtype == F32:
            x64 = x.detach().double().requires_grad_()
            ref(x64, -1).backward(g.double())
            torch.testing.assert_close(xg.grad.double(), x64.grad, rtol=1e-4, atol=1e-4)
    xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))
    ops.layer_norm(xg, wg, bg).backward(g)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    F.layer_norm(x64, (d,), w64, b64, EPS_LN).backward(g.double())
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == F32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(xg.grad.double(), x64.grad, **tol)
    wtol = dict(rtol=1e-3, atol=1e-3) if dtype == F32 else dict(rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(wg.grad.double(), w64.grad, **wtol)
    torch.testing.assert_close(bg.grad.double(), b64.grad, **wtol)


@pytest.mark.gpu
def test_long_rows_gradcheck_float64():
    # Rows of 40001 float64 are split on sm_90 and newer (more than 32 elements per thread in one block;
    # the second row starts one element past a vector boundary: a head and a tail). gradcheck's fast mode
    # (random directions) keeps the Jacobian of 80002 inputs cheap.
    d = 40001
    x = torch.randn(2, d, dtype=torch.float64, device=DEV, requires_grad=True)
    w = (1 + 0.5 * torch.randn(d, dtype=torch.float64, device=DEV)).requires_grad_()
    b = (0.1 * torch.randn(d, dtype=torch.float64, device=DEV)).requires_grad_()
    assert torch.autograd.gradcheck(ops.softmax, (x,), fast_mode=True)
    assert torch.autograd.gradcheck(ops.log_softmax, (x,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda a, c, e: ops.layer_norm(a, c, e), (x, w, b), fast_mode=True)
    assert torch.autograd.gradcheck(lambda a, c: ops.rms_norm(a, c), (x, w), fast_mode=True)
