"""The reductions: sum, mean, amax and amin over one dim (keepdim or not).

Without a GPU: Meta shapes (every dim and keepdim against torch's), dtypes, and dims out of range. On a GPU
(the tests marked gpu): against PyTorch (sum and mean in float64, amax / amin exactly) over the last dim (rows
of 1 to 50257), other dims, the short-and-wide split path, misaligned / transposed / 3-D layouts, NaN
propagation, empty and 0-dim inputs, gradcheck in float64 and the autograd against torch's.
"""

import math

import pytest
import torch
from family_helpers import DEV, DTYPES, ROW_SIZES
from op_table import FLOATING
from support import close, dname, meta, randn, sum_tol

import kjit
from kjit import ops


# ---- Meta tensors: dim / keepdim rules, dtypes, errors ------------------------------------------------------


REDUCE_SHAPES = [(), (5,), (4, 7), (2, 3, 5), (2, 0, 3), (1, 1, 1, 6)]


@pytest.mark.parametrize("shape", REDUCE_SHAPES, ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_meta_reduction_dim_and_keepdim_follow_torch(shape):
    rank = max(len(shape), 1)
    for dim in range(-rank, rank):
        for keepdim in (False, True):
            want = torch.sum(meta(*shape), dim, keepdim).shape
            for name in ("sum", "mean", "amax", "amin"):
                if name in ("amax", "amin") and shape and shape[dim] == 0 and math.prod(want):
                    # as the CUDA implementation (and torch.amax): the extreme of nothing is an error
                    with pytest.raises(kjit.ValueError, match=rf"kjit\.ops\.{name}: dim \d has size 0"):
                        getattr(ops, name)(meta(*shape), dim, keepdim)
                    continue
                got = getattr(ops, name)(meta(*shape), dim, keepdim)
                assert got.shape == want, (name, shape, dim, keepdim, got.shape, want)
    # The defaults: the last dim, keepdim=False.
    assert ops.sum(meta(*shape)).shape == torch.sum(meta(*shape), -1).shape


@pytest.mark.parametrize("dtype", FLOATING, ids=lambda d: str(d).split(".")[-1])
def test_meta_reductions_keep_the_dtype(dtype):
    for name in ("sum", "mean", "amax", "amin"):
        assert getattr(ops, name)(meta(3, 4, dtype=dtype), 0).dtype == dtype


def test_reduction_dim_out_of_range_is_a_value_error():
    for name in ("sum", "mean", "amax", "amin"):
        with pytest.raises(
            ValueError,
            match=rf"kjit\.ops\.{name}: dim 2 is out of range for a tensor of 2 dims "
            r"\(allowed: -2 to 1\)",
        ) as info:
            getattr(ops, name)(meta(3, 4), 2)
        assert isinstance(info.value, kjit.Error)
        with pytest.raises(ValueError, match=r"dim -3 is out of range"):
            getattr(ops, name)(meta(3, 4), -3, True)
    with pytest.raises(ValueError, match=r"dim 1 is out of range for a tensor of 0 dims \(allowed: -1 to 0\)"):
        ops.sum(meta(), 1)


# ---- on a GPU: against PyTorch -----------------------------------------------------------------------------


REDUCE_OPS = ["sum", "mean", "amax", "amin"]


def reduce_ref(name, x, dim, keepdim):
    if name == "sum":
        return torch.sum(x, dim, keepdim, dtype=torch.float64).to(x.dtype)
    if name == "mean":
        return torch.mean(x.double(), dim, keepdim).to(x.dtype)
    return getattr(torch, name)(x, dim, keepdim)


def check_reduction(name, x, dim, keepdim):
    out = getattr(ops, name)(x, dim, keepdim)
    ref = reduce_ref(name, x, dim, keepdim)
    n = x.shape[dim] if x.dim() else 1
    if name in ("amax", "amin"):
        close(out, ref, rtol=0, atol=0, equal_nan=True)
    elif name == "sum":
        close(out, ref, **sum_tol(x.dtype, n))
    else:
        tol = sum_tol(x.dtype, n)
        close(out, ref, rtol=tol["rtol"], atol=tol["atol"] / max(n, 1))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype, d",
    [(t, d) for t in DTYPES for d in ROW_SIZES] + [(torch.float64, 7), (torch.float64, 50257)],
    ids=lambda v: dname(v) if isinstance(v, torch.dtype) else str(v),
)
def test_reduce_last_dim(dtype, d):
    rows = 37 if d <= 1000 else 5
    x = randn(rows, d, dtype=dtype)
    # amin mirrors amax (the same code with the comparison reversed): two sizes suffice.
    names = REDUCE_OPS if d in (7, 50257) else ["sum", "mean", "amax"]
    for name in names:
        for keepdim in (False, True):
            check_reduction(name, x, -1, keepdim)
        check_reduction(name, x, 1, False)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_reduce_last_dim_layouts(dtype):
    x = randn(9, 1000, dtype=dtype, misaligned=True)  # rows not on a 16-byte boundary
    y = randn(1000, 9, dtype=dtype).t()  # transposed: made contiguous first
    z = randn(4, 6, 768, dtype=dtype)  # 3-D
    v = randn(1000, dtype=dtype)  # 1-D
    for name in REDUCE_OPS:
        for t in (x, y, z, v):
            check_reduction(name, t, -1, False)
            check_reduction(name, t, -1, True)


SHAPES_3D = [(5, 7, 33), (4, 1000, 12), (3, 768, 64), (6, 9, 1), (2, 8192, 48), (1, 3, 4097)]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype, shape",
    [(t, s) for t in DTYPES for s in SHAPES_3D] + [(torch.float64, (5, 7, 33)), (torch.float64, (2, 8192, 48))],
    ids=lambda v: dname(v) if isinstance(v, torch.dtype) else "x".join(map(str, v)),
)
def test_reduce_other_dims(dtype, shape):
    x = randn(*shape, dtype=dtype)
    for name in REDUCE_OPS:
        for dim in (0, 1, -2):
            for keepdim in (False, True):
                check_reduction(name, x, dim, keepdim)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_reduce_short_and_wide_uses_the_split_path(dtype):
    for shape, dim in [((4096 * 4, 64), 0), ((65536, 8), 0), ((3, 4096, 40), 1)]:
        x = randn(*shape, dtype=dtype)
        for name in REDUCE_OPS:
            check_reduction(name, x, dim, False)
            check_reduction(name, x, dim, True)


@pytest.mark.gpu
@pytest.mark.big
def test_reduce_large():
    x = randn(65536, 4096)
    check_reduction("sum", x, -1, False)
    check_reduction("amax", x, -1, False)
    check_reduction("mean", x, 0, False)  # columns, split over R = 65536
    check_reduction("amin", x, 0, True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_amax_amin_propagate_nan(dtype):
    for shape, dim, where in [
        ((6, 1000), -1, [(1, 17), (4, 999)]),
        ((6, 1000), 0, [(1, 17), (4, 999)]),
        ((16384, 64), 0, [(5000, 3), (16383, 63)]),
        ((7, 50257), -1, [(2, 50000)]),
    ]:
        x = randn(*shape, dtype=dtype)
        for r, c in where:
            x[r, c] = float("nan")
        for name in ("amax", "amin"):
            out = getattr(ops, name)(x, dim)
            ref = getattr(torch, name)(x, dim)
            assert out.isnan().sum().item() == len(where), (name, shape, dim)
            close(out, ref, rtol=0, atol=0, equal_nan=True)
        # sum / mean propagate it as arithmetic does.
        assert ops.sum(x, dim).isnan().sum().item() == len(where)


@pytest.mark.gpu
def test_reduce_empty():
    e = torch.empty(3, 0, device=DEV)
    torch.testing.assert_close(ops.sum(e), torch.zeros(3, device=DEV))
    torch.testing.assert_close(ops.sum(e, -1, True), torch.zeros(3, 1, device=DEV))
    assert ops.mean(e).isnan().all() and ops.mean(e).shape == (3,)
    assert torch.equal(ops.sum(torch.empty(0, 5, device=DEV), 0), torch.zeros(5, device=DEV))
    assert ops.mean(torch.empty(0, 5, device=DEV), 0).isnan().all()
    for name in ("amax", "amin"):
        with pytest.raises(
            ValueError,
            match=rf"kjit\.ops\.{name}: dim 1 has size 0 and {name} of nothing is "
            "undefined",
        ) as info:
            getattr(ops, name)(e)
        assert isinstance(info.value, kjit.Error)
    # An empty result is fine, whatever the reduced dim.
    for name in REDUCE_OPS:
        assert getattr(ops, name)(torch.empty(0, 5, device=DEV)).shape == (0,)
        assert getattr(ops, name)(torch.empty(0, 5, device=DEV), 1, True).shape == (0, 1)
    # 0-dim input.
    s = torch.tensor(2.5, device=DEV)
    for name in REDUCE_OPS:
        out = getattr(ops, name)(s)
        assert out.shape == () and out.item() == 2.5


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
def test_reduce_gradcheck(name):
    x = torch.randn(3, 5, 4, dtype=torch.float64, device=DEV, requires_grad=True)
    op = getattr(ops, name)
    for dim, keepdim in [(-1, False), (0, True), (1, False)]:
        assert torch.autograd.gradcheck(lambda t, dim=dim, keepdim=keepdim: op(t, dim, keepdim), (x,))


@pytest.mark.gpu
def test_reduce_autograd_matches_torch():
    x = randn(8, 300).requires_grad_()
    g = randn(8)
    for name in REDUCE_OPS:
        x.grad = None
        getattr(ops, name)(x).backward(g)
        x64 = x.detach().double().requires_grad_()
        getattr(torch, name)(x64, -1).backward(g.double())
        close(x.grad, x64.grad.float(), rtol=1e-6, atol=1e-7)
