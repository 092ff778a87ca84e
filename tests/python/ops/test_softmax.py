"""softmax and log_softmax over the last dim, and their backward ops, for rows one block holds (registers) or
streams; the rows split over a thread-block cluster are ops/test_long_rows.py's.

Without a GPU: Meta shapes and dtypes. On a GPU (the tests marked gpu): against PyTorch in float64 (rows of 1
to 50257; misaligned, 3-D, transposed, 1-D, empty and 0-dim inputs; masked and NaN rows), the only-the-last-dim
refusal, the backward ops against their formula on the same output, the autograd wiring, gradcheck in float64.
"""

import pytest
import torch
from family_helpers import (
    DEV,
    DTYPES,
    ROW_SIZES,
    check_softmax_of_masked_rows,
    masked_and_nan_rows,
    row_tol,
    softmax_tol,
)
from op_table import FLOATING
from support import close, dname, meta, misaligned_like, randn, ulp

from kjit import ops


# ---- Meta tensors: shapes and dtypes ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATING, ids=dname)
def test_meta_softmax_shapes(dtype):
    for shape in [(7,), (4, 1000), (2, 3, 50257), (0, 8), (4, 0)]:
        for op in (ops.softmax, ops.log_softmax):
            y = op(meta(*shape, dtype=dtype))
            assert y.shape == shape and y.dtype == dtype
            assert op(meta(*shape, dtype=dtype), -1).shape == shape
        assert ops.softmax_backward(meta(*shape, dtype=dtype), meta(*shape, dtype=dtype)).shape == shape
        assert ops.log_softmax_backward(meta(*shape, dtype=dtype), meta(*shape, dtype=dtype)).shape == shape
    assert ops.softmax(meta(6, 4, dtype=dtype).t()).is_contiguous()


# ---- on a GPU: against PyTorch -----------------------------------------------------------------------------


def softmax_ref(x, log):
    f = torch.log_softmax if log else torch.softmax
    return f(x.double(), -1).to(x.dtype)


def softmax_backward_ref(g, y, log):
    g64, y64 = g.double(), y.double()
    if log:
        return g64 - y64.exp() * g64.sum(-1, keepdim=True)
    return y64 * (g64 - (g64 * y64).sum(-1, keepdim=True))


def softmax_op(log):
    return ops.log_softmax if log else ops.softmax


@pytest.mark.gpu
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize(
    "dtype, d",
    [(t, d) for t in DTYPES for d in ROW_SIZES] + [(torch.float64, 7), (torch.float64, 50257)],
    ids=lambda v: dname(v) if isinstance(v, torch.dtype) else str(v),
)
def test_softmax_forward(dtype, d, log):
    rows = 37 if d <= 1000 else 5
    x = randn(rows, d, dtype=dtype, scale=3.0)
    y = softmax_op(log)(x)
    assert y.dtype == dtype and y.shape == x.shape
    close(y, softmax_ref(x, log), **softmax_tol(dtype, log))
    if not log:  # each element within one rounding: the row sums to 1 within a few roundings
        atol = {torch.float32: 1e-4, torch.float64: 1e-10}.get(dtype, 4 * ulp(dtype))
        close(y.double().sum(-1), torch.ones(rows, dtype=torch.float64, device=DEV), rtol=0, atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_softmax_layouts(dtype, log):
    op = softmax_op(log)
    for x in (
        randn(9, 1000, dtype=dtype, misaligned=True, scale=3.0),  # misaligned rows
        randn(2, 9, 1000, dtype=dtype, misaligned=True, scale=3.0).view(18, 1000),
        randn(4, 6, 768, dtype=dtype, scale=3.0),  # 3-D
        randn(1000, 9, dtype=dtype, scale=3.0).t(),  # transposed
        randn(1000, dtype=dtype, scale=3.0),
    ):  # 1-D
        close(op(x), softmax_ref(x, log), **softmax_tol(dtype, log))
        close(op(x, x.dim() - 1), softmax_ref(x, log), **softmax_tol(dtype, log))
    for shape in [(0, 5), (3, 0), (0,)]:
        y = op(torch.empty(shape, dtype=dtype, device=DEV))
        assert y.shape == shape and y.dtype == dtype
    s = op(torch.tensor(2.0, dtype=dtype, device=DEV))
    assert s.shape == () and s.item() == (0.0 if log else 1.0)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [1000, 50257], ids=["registers", "streamed"])
def test_softmax_masked_and_nan_rows(d):
    # -inf (masked) entries, a row starting with -inf, a fully masked row and a NaN row, as torch.
    check_softmax_of_masked_rows(masked_and_nan_rows(5, d))


@pytest.mark.gpu
def test_softmax_only_the_last_dim():
    with pytest.raises(
        ValueError,
        match=r"kjit\.ops\.softmax: only the last dim is supported, got dim=0 for a tensor "
        r"of 2 dims; move it last with x\.movedim\(0, -1\)",
    ):
        ops.softmax(randn(3, 4), 0)
    with pytest.raises(ValueError, match=r"only the last dim is supported"):
        ops.log_softmax(randn(2, 3, 4), -2)
    with pytest.raises(ValueError, match=r"dim 2 is out of range"):
        ops.softmax(randn(3, 4), 2)


@pytest.mark.gpu
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("d", [1, 7, 1000, 4096, 8192, 50257])
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_softmax_backward(dtype, d, log):
    rows = 37 if d <= 1000 else 5
    x = randn(rows, d, dtype=dtype, scale=3.0).requires_grad_()
    g = randn(rows, d, dtype=dtype)
    y = softmax_op(log)(x)
    bwd = ops.log_softmax_backward if log else ops.softmax_backward
    dx = bwd(g, y.detach())
    # The backward op against its formula on the same (grad, output), in float64.
    close(dx, softmax_backward_ref(g, y.detach(), log).to(dtype), **row_tol(dtype))
    # Autograd runs the backward op.
    y.backward(g)
    assert torch.equal(x.grad, dx)
    if dtype == torch.float32:  # against PyTorch's autograd in float64 (the forward's rounding included)
        x64 = x.detach().double().requires_grad_()
        (torch.log_softmax if log else torch.softmax)(x64, -1).backward(g.double())
        close(x.grad, x64.grad.float(), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_backward_misaligned_and_strided_grad(log):
    y = softmax_op(log)(randn(9, 1000, scale=3.0))
    bwd = ops.log_softmax_backward if log else ops.softmax_backward
    for g, yy in [
        (randn(9, 1000, misaligned=True), y),
        (randn(9, 1000), misaligned_like(y)),
        (randn(1, 1000).expand(9, 1000), y),
    ]:
        close(bwd(g, yy), softmax_backward_ref(g, yy, log).float(), **row_tol(torch.float32))


@pytest.mark.gpu
@pytest.mark.big
def test_softmax_large():
    x = randn(65536, 4096, scale=3.0)
    y = ops.softmax(x)
    close(y, torch.softmax(x.double(), -1).float(), **softmax_tol(torch.float32, False))
    del y
    y = ops.log_softmax(x)
    close(y, torch.log_softmax(x.double(), -1).float(), **softmax_tol(torch.float32, True))


@pytest.mark.gpu
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_gradcheck(log):
    for shape in [(3, 7), (2, 3, 5), (1, 40)]:
        x = torch.randn(*shape, dtype=torch.float64, device=DEV, requires_grad=True)
        assert torch.autograd.gradcheck(softmax_op(log), (x,))
