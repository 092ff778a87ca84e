"""The norms: layer_norm and rms_norm (with and without weight / bias), the residual norms add_layer_norm and
add_rms_norm (h = x + residual, then the norm of h), and their backward ops, for rows one block holds; the rows
split over a thread-block cluster are ops/test_long_rows.py's.

Without a GPU: Meta shapes and dtypes, the residual norms' argument errors, and their graph under torch.compile
(fake tensors, autograd) and make_fx. On a GPU (the tests marked gpu): against PyTorch in float64 on the same
inputs (rows of 7 to 50257, misaligned, 3-D, transposed, empty; eps a runtime argument), the backward ops
against torch's autograd in float64 (every weight / bias configuration; dh given or not), the autograd wiring
(exactly the backward op's result), h rounded before the norm as torch's x + residual is, gradcheck in float64.
"""

import pytest
import torch
import torch.nn.functional as F
from family_helpers import DEV, DTYPES, EPS_LN, EPS_RMS, norm_inputs, row_tol, traced_kjit_ops
from op_table import FLOATING
from support import close, dname, meta, misaligned_like, randn, sum_tol

import kjit
from kjit import ops


# ---- Meta tensors: shapes, dtypes and argument errors -----------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATING, ids=dname)
def test_meta_norm_shapes(dtype):
    d = 768
    x, w, b = meta(2, 5, d, dtype=dtype), meta(d, dtype=dtype), meta(d, dtype=dtype)
    for y in (
        ops.layer_norm(x, w, b),
        ops.layer_norm(x, w),
        ops.layer_norm(x),
        ops.layer_norm(x, None, b, 1e-3),
        ops.rms_norm(x, w),
        ops.rms_norm(x),
        ops.rms_norm(x, w, 1e-5),
    ):
        assert y.shape == x.shape and y.dtype == dtype
    dx, dw, db = ops.layer_norm_backward(x, x, w, True, 1e-5)
    assert (dx.shape, dw.shape, db.shape) == (x.shape, (d,), (d,))
    assert dx.dtype == dw.dtype == db.dtype == dtype
    dx, dw, db = ops.layer_norm_backward(x, x, None, False, 1e-5)
    assert (dx.shape, dw.shape, db.shape) == (x.shape, (0,), (0,))
    dx, dw, db = ops.rms_norm_backward(x, x, w, False, 1e-6)
    assert (dx.shape, dw.shape, db.shape) == (x.shape, (d,), (0,))


@pytest.mark.parametrize("dtype", FLOATING, ids=lambda d: str(d).split(".")[-1])
def test_meta_residual_norm_shapes(dtype):
    d = 768
    w = meta(d, dtype=dtype)
    for shape in [(2, 5, d), (7, d), (d,), (0, d), (4, 0)]:
        x, r = meta(*shape, dtype=dtype), meta(*shape, dtype=dtype)
        wd = meta(shape[-1], dtype=dtype)
        for y, h in (
            ops.add_layer_norm(x, r, wd, wd),
            ops.add_layer_norm(x, r),
            ops.add_layer_norm(x, r, None, wd, 1e-3),
            ops.add_rms_norm(x, r, wd),
            ops.add_rms_norm(x, r),
            ops.add_rms_norm(x, r, eps=1e-5),
        ):
            assert y.shape == h.shape == shape and y.dtype == h.dtype == dtype
            assert y.is_contiguous() and h.is_contiguous()
    x = meta(2, 5, d, dtype=dtype)
    # A strided x and residual give contiguous results.
    y, h = ops.add_rms_norm(meta(d, 6, dtype=dtype).t(), meta(d, 6, dtype=dtype).t(), meta(d, dtype=dtype))
    assert y.is_contiguous() and h.is_contiguous() and y.shape == (6, d)
    for gh in (x, None):
        dx, dr, dw, db = ops.add_layer_norm_backward(x, gh, x, w, True, 1e-5)
        assert (dx.shape, dr.shape, dw.shape, db.shape) == (x.shape, x.shape, (d,), (d,))
        assert dx.dtype == dr.dtype == dw.dtype == db.dtype == dtype
        dx, dr, dw, db = ops.add_rms_norm_backward(x, gh, x, w, False, 1e-6)
        assert (dx.shape, dr.shape, dw.shape, db.shape) == (x.shape, x.shape, (d,), (0,))
        dx, dr, dw, db = ops.add_layer_norm_backward(x, gh, x, None, False, 1e-5)
        assert (dx.shape, dr.shape, dw.shape, db.shape) == (x.shape, x.shape, (0,), (0,))


def test_residual_norm_argument_errors():
    x, w = meta(4, 8), meta(8)
    with pytest.raises(
        kjit.ValueError,
        match=r"^kjit\.ops\.add_rms_norm: residual has shape \[4, 7\] but must have "
        r"shape \[4, 8\]",
    ):
        ops.add_rms_norm(x, meta(4, 7), w)
    with pytest.raises(
        kjit.ValueError,
        match=r"^kjit\.ops\.add_layer_norm: residual has shape \[8\] but must have "
        r"shape \[4, 8\]",
    ):
        ops.add_layer_norm(x, meta(8))  # no broadcasting
    with pytest.raises(
        kjit.TypeError,
        match=r"^kjit\.ops\.add_layer_norm: residual has dtype torch\.float16 but x has "
        r"dtype torch\.float32: the dtypes must match; convert with "
        r"residual\.to\(x\.dtype\)",
    ):
        ops.add_layer_norm(x, meta(4, 8, dtype=torch.float16), w, w)
    with pytest.raises(
        kjit.TypeError,
        match=r"^kjit\.ops\.add_rms_norm: residual has dtype torch\.int32, which is not "
        r"supported",
    ):
        ops.add_rms_norm(x, meta(4, 8, dtype=torch.int32))
    with pytest.raises(
        kjit.ValueError,
        match=r"^kjit\.ops\.add_rms_norm: weight has shape \[7\] but must have shape "
        r"\[8\]",
    ):
        ops.add_rms_norm(x, x, meta(7))
    with pytest.raises(kjit.ValueError, match=r"^kjit\.ops\.add_layer_norm: x must have at least one dim"):
        ops.add_layer_norm(meta(), meta())
    with pytest.raises(
        kjit.ValueError,
        match=r"^kjit\.ops\.add_rms_norm_backward: grad_h has shape \[4, 7\] but must "
        r"have shape \[4, 8\]",
    ):
        ops.add_rms_norm_backward(x, meta(4, 7), x, w, False, 1e-6)
    with pytest.raises(
        kjit.TypeError,
        match=r"^kjit\.ops\.add_layer_norm_backward: grad has dtype torch\.float64 but h "
        r"has dtype torch\.float32",
    ):
        ops.add_layer_norm_backward(meta(4, 8, dtype=torch.float64), None, x, None, False, 1e-5)
    with pytest.raises(
        kjit.ValueError,
        match=r"^kjit\.ops\.add_layer_norm_backward: weight has shape \[4\] but must "
        r"have shape \[8\]",
    ):
        ops.add_layer_norm_backward(x, x, x, meta(4), True, 1e-5)


# ---- the residual norms under torch.compile (fake tensors) and make_fx --------------------------------------


def _residual_graph(x, r, w, b, use_h=True, use_y=True):
    # Two residual blocks: the second takes the first's y and h; `use_h` / `use_y` False leave the last
    # h / y without a gradient (the backward then gets None for it).
    y1, h1 = ops.add_rms_norm(x, r, w)
    y2, h2 = ops.add_layer_norm(y1, h1, w, b)
    out = y1.sum()
    if use_y:
        out = out + (y2 * y2).sum()
    if use_h:
        out = out + h2.sum()
    return out


@pytest.mark.parametrize("use_h, use_y", [(True, True), (False, True), (True, False)])
def test_residual_norms_under_torch_compile_on_meta_tensors_with_autograd(use_h, use_y):
    compiled = torch.compile(_residual_graph, fullgraph=True, backend="aot_eager")
    x, r = meta(4, 8).requires_grad_(), meta(4, 8).requires_grad_()
    w, b = meta(8).requires_grad_(), meta(8).requires_grad_()
    compiled(x, r, w, b, use_h, use_y).backward()
    assert x.grad.shape == r.grad.shape == (4, 8) and w.grad.shape == (8,)
    assert b.grad is None or b.grad.shape == (8,)  # b has a gradient through y2 alone


def test_residual_norm_backward_traces_to_the_library_backward_ops():
    def f(x, r, w, b):
        return torch.autograd.grad(_residual_graph(x, r, w, b), (x, r, w, b))

    inputs = (
        torch.randn(4, 8, requires_grad=True),
        torch.randn(4, 8, requires_grad=True),
        torch.randn(8, requires_grad=True),
        torch.randn(8, requires_grad=True),
    )
    found = traced_kjit_ops(f, inputs)
    for name in ("add_rms_norm", "add_layer_norm", "add_rms_norm_backward", "add_layer_norm_backward"):
        assert name in found, (name, sorted(found))


# ---- on a GPU: layer_norm and rms_norm against PyTorch -------------------------------------------------------


def layer_norm_ref(x, w, b):
    d = x.shape[-1]
    return F.layer_norm(
        x.double(), (d,), None if w is None else w.double(), None if b is None else b.double(), EPS_LN
    ).to(x.dtype)


def rms_norm_ref(x, w):
    return F.rms_norm(x.double(), (x.shape[-1],), None if w is None else w.double(), EPS_RMS).to(x.dtype)


NORM_SIZES = [7, 768, 1000, 4096, 8192, 50257]


@pytest.mark.gpu
@pytest.mark.parametrize("d", NORM_SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)  # float64: test_norm_gradcheck
def test_norm_forward(dtype, d):
    rows = 33 if d <= 1000 else 5
    x, w, b = norm_inputs(rows, d, dtype)
    tol = row_tol(dtype)
    close(ops.layer_norm(x, w, b), layer_norm_ref(x, w, b), **tol)
    close(ops.rms_norm(x, w), rms_norm_ref(x, w), **tol)
    if d == 1000:  # the other configurations at one size
        close(ops.layer_norm(x, w), layer_norm_ref(x, w, None), **tol)
        close(ops.layer_norm(x), layer_norm_ref(x, None, None), **tol)
        close(ops.rms_norm(x), rms_norm_ref(x, None), **tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_norm_layouts_and_eps(dtype):
    tol = row_tol(dtype)
    x, w, b = norm_inputs(9, 1000, dtype, misaligned=True)
    close(ops.layer_norm(x, w, b), layer_norm_ref(x, w, b), **tol)
    close(ops.rms_norm(x, misaligned_like(w)), rms_norm_ref(x, w), **tol)
    x3 = randn(2, 3, 768, dtype=dtype)
    w3 = (1 + 0.5 * randn(768)).to(dtype)
    close(ops.layer_norm(x3, w3), F.layer_norm(x3.double(), (768,), w3.double(), None, EPS_LN).to(dtype), **tol)
    xt = randn(768, 6, dtype=dtype).t()
    close(ops.rms_norm(xt, w3), rms_norm_ref(xt, w3), **tol)
    # eps is a runtime argument: a large one changes the result as PyTorch's does.
    y = ops.layer_norm(x, w, b, eps=0.5)
    close(y, F.layer_norm(x.double(), (1000,), w.double(), b.double(), 0.5).to(dtype), **tol)
    y = ops.rms_norm(x, None, 0.25)
    close(y, F.rms_norm(x.double(), (1000,), None, 0.25).to(dtype), **tol)
    for shape in [(0, 8), (3, 0)]:
        e = torch.empty(shape, dtype=dtype, device=DEV)
        assert ops.layer_norm(e).shape == shape and ops.rms_norm(e).shape == shape


@pytest.mark.gpu
@pytest.mark.big
def test_norm_large():
    x, w, b = norm_inputs(65536, 4096, torch.float32)
    y = ops.layer_norm(x, w, b)
    close(y, layer_norm_ref(x, w, b), **row_tol(torch.float32))
    del y
    y = ops.rms_norm(x, w)
    close(y, rms_norm_ref(x, w), **row_tol(torch.float32))


@pytest.mark.gpu
def test_norm_errors_on_cuda():
    x = randn(4, 8)
    with pytest.raises(ValueError, match=r"kjit\.ops\.layer_norm: weight has shape \[7\] but must have shape \[8\]"):
        ops.layer_norm(x, randn(7))
    with pytest.raises(TypeError, match=r"kjit\.ops\.rms_norm: weight has dtype torch\.float16 but x has dtype"):
        ops.rms_norm(x, randn(8, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"x must have at least one dim"):
        ops.layer_norm(torch.tensor(1.0, device=DEV))


def leaf(t):
    """A detached copy of t that requires grad (None for None: an optional weight or bias left out)."""
    return None if t is None else t.detach().requires_grad_()


def check_weight_and_bias_grads(dtype, rows, tol, *pairs):
    """Each (gradient, reference) of the weight and the bias: within `tol` or the tolerance of a sum over `rows`,
    whichever is wider; an empty gradient where the reference is None (the op had no weight / bias)."""
    sums = sum_tol(dtype, rows)
    wide = dict(rtol=max(tol["rtol"], sums["rtol"]), atol=max(tol["atol"], sums["atol"]))
    for got, want in pairs:
        if want is None:
            assert got.shape == (0,)
        else:
            close(got, want, **wide)


def check_leaf_grads(*pairs):
    """Autograd ran the backward op: each (leaf, the op's gradient) with a leaf (not None) is exactly that."""
    for t, grad in pairs:
        if t is not None:
            assert torch.equal(t.grad, grad)


NORM_CONFIGS = [  # (rms, has_w, has_b)
    (False, True, True),
    (True, True, False),
    (False, True, False),
    (False, False, False),
    (True, False, False),
]


def norm_grads_ref(x, w, b, g, rms):
    x64 = x.detach().double().requires_grad_()
    w64 = None if w is None else w.detach().double().requires_grad_()
    b64 = None if b is None else b.detach().double().requires_grad_()
    d = x.shape[-1]
    y = F.rms_norm(x64, (d,), w64, EPS_RMS) if rms else F.layer_norm(x64, (d,), w64, b64, EPS_LN)
    y.backward(g.double())
    return (
        x64.grad.to(x.dtype),
        None if w is None else w64.grad.to(x.dtype),
        None if b is None else b64.grad.to(x.dtype),
    )


def _norm_backward_cases():
    # layer_norm(w, b) and rms_norm(w) at every size (rows of 50257: layer_norm only), the rest at one size.
    for d in (7, 1000, 4096, 50257):
        for config in NORM_CONFIGS:
            if (config in NORM_CONFIGS[:2] and (d != 50257 or config == NORM_CONFIGS[0])) or d == 1000:
                yield d, config


@pytest.mark.gpu
@pytest.mark.parametrize(
    "d, config",
    list(_norm_backward_cases()),
    ids=lambda v: str(v) if isinstance(v, int) else ("rms" if v[0] else "ln") + "_w" * v[1] + "_b" * v[2],
)
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_norm_backward(dtype, d, config):
    rms, has_w, has_b = config
    rows = 33 if d <= 1000 else 6
    x, w, b = norm_inputs(rows, d, dtype)
    w = w if has_w else None
    b = b if has_b else None
    g = randn(rows, d, dtype=dtype)
    eps = EPS_RMS if rms else EPS_LN
    bwd = ops.rms_norm_backward if rms else ops.layer_norm_backward
    dx, dw, db = bwd(g, x, w, has_b, eps)
    rdx, rdw, rdb = norm_grads_ref(x, w, b, g, rms)
    tol = row_tol(dtype)
    close(dx, rdx, **tol)
    check_weight_and_bias_grads(dtype, rows, tol, (dw, rdw), (db, rdb))
    # Autograd runs the backward op.
    xr, wr, br = (leaf(t) for t in (x, w, b))
    y = ops.rms_norm(xr, wr, eps) if rms else ops.layer_norm(xr, wr, br, eps)
    y.backward(g)
    assert torch.equal(xr.grad, dx)
    check_leaf_grads((wr, dw), (br, db))


@pytest.mark.gpu
def test_norm_backward_many_rows():
    # More rows than partial-sum slots: each slot accumulates many rows.
    x, w, b = norm_inputs(20000, 256, torch.float32)
    g = randn(20000, 256)
    dx, dw, db = ops.layer_norm_backward(g, x, w, True, EPS_LN)
    rdx, rdw, rdb = norm_grads_ref(x, w, b, g, False)
    close(dx, rdx, **row_tol(torch.float32))
    close(dw, rdw, **sum_tol(torch.float32, 20000))
    close(db, rdb, **sum_tol(torch.float32, 20000))


@pytest.mark.gpu
def test_norm_gradcheck():
    for shape in [(3, 8), (2, 3, 5)]:
        d = shape[-1]
        x = torch.randn(*shape, dtype=torch.float64, device=DEV, requires_grad=True)
        w = (1 + 0.5 * torch.randn(d, dtype=torch.float64, device=DEV)).requires_grad_()
        b = torch.randn(d, dtype=torch.float64, device=DEV, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x, w, b: ops.layer_norm(x, w, b), (x, w, b))
        assert torch.autograd.gradcheck(lambda x, w: ops.layer_norm(x, w), (x, w))
        assert torch.autograd.gradcheck(lambda x: ops.layer_norm(x), (x,))
        assert torch.autograd.gradcheck(lambda x, w: ops.rms_norm(x, w), (x, w))
        assert torch.autograd.gradcheck(lambda x: ops.rms_norm(x), (x,))


# ---- on a GPU: the residual norms (add_*_norm) against PyTorch -----------------------------------------------
# h = x + residual (one rounding of the dtype, exactly torch's x + residual), y = norm(h) of that rounded h.


ADD_SIZES = [1, 7, 1000, 4097]


def add_norm_inputs(rows, d, dtype, *, misaligned=False):
    x, w, b = norm_inputs(rows, d, dtype, misaligned=misaligned)
    r = randn(rows, d, dtype=dtype, scale=1.5)
    return x, r, w, b


def add_norm_call(rms, x, r, w, b, eps=None):
    if rms:
        return ops.add_rms_norm(x, r, w, EPS_RMS if eps is None else eps)
    return ops.add_layer_norm(x, r, w, b, EPS_LN if eps is None else eps)


def add_norm_ref(rms, x, r, w, b, eps=None):
    """(y, h) of PyTorch: h = x + r in x's dtype, y the norm of that h in float64, rounded once."""
    h = x + r
    d = h.shape[-1]
    w64 = None if w is None else w.double()
    if rms:
        y = F.rms_norm(h.double(), (d,), w64, EPS_RMS if eps is None else eps)
    else:
        y = F.layer_norm(h.double(), (d,), w64, None if b is None else b.double(), EPS_LN if eps is None else eps)
    return y.to(x.dtype), h


def check_add_norm(rms, x, r, w, b, eps=None):
    y, h = add_norm_call(rms, x, r, w, b, eps)
    ry, rh = add_norm_ref(rms, x, r, w, b, eps)
    assert torch.equal(h, rh)  # the residual sum is exactly torch's
    close(y, ry, **row_tol(x.dtype))
    assert y.is_contiguous() and h.is_contiguous()
    if y.numel():  # fresh outputs: never an input, never each other
        ptrs = {y.data_ptr(), h.data_ptr()}
        assert len(ptrs) == 2 and not ptrs & {x.data_ptr(), r.data_ptr()}
    return y, h


@pytest.mark.gpu
@pytest.mark.parametrize("d", ADD_SIZES)
@pytest.mark.parametrize("rows", ADD_SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)  # float64: test_add_norm_gradcheck
@pytest.mark.parametrize("rms", [True, False], ids=["add_rms_norm", "add_layer_norm"])
def test_add_norm_forward(rms, dtype, rows, d):
    x, r, w, b = add_norm_inputs(rows, d, dtype)
    check_add_norm(rms, x, r, w, b)
    if rows == 7:  # without weight / bias, at every row length
        check_add_norm(rms, x, r, None, None)
        if not rms:
            check_add_norm(rms, x, r, w, None)
            check_add_norm(rms, x, r, None, b)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_add_norm_rounds_h_before_the_norm(dtype):
    """x + r loses bits in the dtype (large x, small r): the norm reads the rounded h, as torch does."""
    x = randn(33, 1000, dtype=dtype, scale=1000.0)
    r = randn(33, 1000, dtype=dtype, scale=0.01)
    w = (1.0 + 0.5 * randn(1000)).to(dtype)
    for rms in (True, False):
        y, h = check_add_norm(rms, x, r, w, None)
        if dtype != torch.float32:  # the sum of wider values differs from the rounded one: the check means something
            assert not torch.equal(h.double(), x.double() + r.double())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_add_norm_layouts_and_eps(dtype):
    for rms in (True, False):
        # misaligned x, residual and weight (vector width 1)
        x, r, w, b = add_norm_inputs(9, 1000, dtype, misaligned=True)
        check_add_norm(rms, x, misaligned_like(r), misaligned_like(w), b)
        # only the residual misaligned; the others aligned
        x, r, w, b = add_norm_inputs(9, 1024, dtype)
        check_add_norm(rms, x, misaligned_like(r), w, b)
        # 3-D, and a transposed (non-contiguous) x and residual
        x3, r3 = randn(2, 3, 768, dtype=dtype), randn(2, 3, 768, dtype=dtype)
        w3 = (1 + 0.5 * randn(768)).to(dtype)
        check_add_norm(rms, x3, r3, w3, None)
        xt, rt = randn(768, 6, dtype=dtype).t(), randn(768, 6, dtype=dtype).t()
        check_add_norm(rms, xt, rt, w3, None)
        check_add_norm(rms, xt, randn(6, 768, dtype=dtype), w3, None)  # one strided, one contiguous
        # 1-D: one row
        check_add_norm(rms, randn(4097, dtype=dtype), randn(4097, dtype=dtype), None, None)
        # eps is a runtime argument
        x, r, w, b = add_norm_inputs(9, 1000, dtype)
        check_add_norm(rms, x, r, w, b, eps=0.5)
        for shape in [(0, 8), (3, 0)]:
            e, f = torch.empty(shape, dtype=dtype, device=DEV), torch.empty(shape, dtype=dtype, device=DEV)
            y, h = add_norm_call(rms, e, f, None, None)
            assert y.shape == h.shape == shape and y is not h


@pytest.mark.gpu
def test_add_norm_errors_on_cuda():
    x = randn(4, 8)
    with pytest.raises(
        ValueError,
        match=r"kjit\.ops\.add_rms_norm: residual has shape \[4, 7\] but must have shape "
        r"\[4, 8\]",
    ):
        ops.add_rms_norm(x, randn(4, 7))
    with pytest.raises(
        TypeError, match=r"kjit\.ops\.add_layer_norm: residual has dtype torch\.float16 but x has dtype"
    ):
        ops.add_layer_norm(x, randn(4, 8, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"kjit\.ops\.add_rms_norm: expected all tensors on one CUDA device"):
        ops.add_rms_norm(x, torch.randn(4, 8))


def add_norm_grads_ref(rms, x, r, w, b, dy, dh):
    """float64 gradients (dx, dresidual, dweight, dbias) of y.dy + h.dh, at the rounded h; rounded to the dtype."""
    h64 = (x + r).double().requires_grad_()
    w64 = None if w is None else w.detach().double().requires_grad_()
    b64 = None if b is None else b.detach().double().requires_grad_()
    d = x.shape[-1]
    y = F.rms_norm(h64, (d,), w64, EPS_RMS) if rms else F.layer_norm(h64, (d,), w64, b64, EPS_LN)
    outs, grads = [y], [dy.double()]
    if dh is not None:
        outs.append(h64)
        grads.append(dh.double())
    torch.autograd.backward(outs, grads)
    dx = h64.grad.to(x.dtype)
    return (dx, dx, None if w is None else w64.grad.to(x.dtype), None if b is None else b64.grad.to(x.dtype))


# NORM_CONFIGS in another order: add_rms_norm(w), add_layer_norm(w, b), add_rms_norm(), add_layer_norm(w),
# add_layer_norm().
ADD_NORM_CONFIGS = [NORM_CONFIGS[i] for i in (1, 0, 4, 2, 3)]


@pytest.mark.gpu
@pytest.mark.parametrize("with_dh", [True, False], ids=["dh", "no_dh"])
@pytest.mark.parametrize(
    "config", ADD_NORM_CONFIGS, ids=lambda v: ("add_rms" if v[0] else "add_ln") + "_w" * v[1] + "_b" * v[2]
)
@pytest.mark.parametrize("d", ADD_SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_add_norm_backward(dtype, d, config, with_dh):
    rms, has_w, has_b = config
    rows = 33 if d <= 1000 else 7
    x, r, w, b = add_norm_inputs(rows, d, dtype)
    w = w if has_w else None
    b = b if has_b else None
    dy, dh = randn(rows, d, dtype=dtype), randn(rows, d, dtype=dtype) if with_dh else None
    eps = EPS_RMS if rms else EPS_LN
    _, h = add_norm_call(rms, x, r, w, b)
    bwd = ops.add_rms_norm_backward if rms else ops.add_layer_norm_backward
    dx, dres, dw, db = bwd(dy, dh, h, w, has_b, eps)
    rdx, rdres, rdw, rdb = add_norm_grads_ref(rms, x, r, w, b, dy, dh)
    tol = row_tol(dtype)
    if d == 1 and not rms and dtype == torch.float32:
        # A row of one element: dx is 0 in exact arithmetic, and rstd = 1 / sqrt(eps) ~ 316 scales float32's
        # rounding of the row's terms into about 3e-5 (layer_norm_backward gives the same values for this h).
        tol = dict(tol, atol=1e-4)
    close(dx, rdx, **tol)
    assert torch.equal(dres, dx) and dres.data_ptr() != dx.data_ptr()  # two tensors of the same values
    check_weight_and_bias_grads(dtype, rows, tol, (dw, rdw), (db, rdb))
    # Autograd runs the backward op (dh None when h has no gradient).
    xr, rr, wr, br = (leaf(t) for t in (x, r, w, b))
    y, hr = add_norm_call(rms, xr, rr, wr, br)
    assert torch.equal(hr, h)
    torch.autograd.backward([y, hr] if with_dh else [y], [dy, dh] if with_dh else [dy])
    assert torch.equal(xr.grad, dx) and torch.equal(rr.grad, dres)
    assert xr.grad.data_ptr() != rr.grad.data_ptr()
    check_leaf_grads((wr, dw), (br, db))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_add_norm_backward_with_only_h_used(dtype):
    """y without a gradient: the gradient of x and of residual is dh (two tensors); weight and bias get none."""
    for rms in (True, False):
        x, r, w, b = add_norm_inputs(7, 1000, dtype)
        xr, rr, wr, br = (t.detach().requires_grad_() for t in (x, r, w, b))
        y, h = add_norm_call(rms, xr, rr, wr, br)
        dh = randn(7, 1000, dtype=dtype)
        h.backward(dh)
        assert torch.equal(xr.grad, dh) and torch.equal(rr.grad, dh)
        assert len({xr.grad.data_ptr(), rr.grad.data_ptr(), dh.data_ptr()}) == 3
        assert wr.grad is None and br.grad is None


@pytest.mark.gpu
def test_add_norm_matches_the_two_ops_it_fuses():
    """Two residual blocks chained as a transformer does (the next block's residual is this block's h)."""
    x, r, w, b = add_norm_inputs(64, 1024, torch.float32)
    x2 = randn(64, 1024)
    y1, h1 = ops.add_rms_norm(x, r, w)
    y2, h2 = ops.add_layer_norm(x2, h1, w, b)
    close(y1, ops.rms_norm(x + r, w), rtol=1e-5, atol=1e-5)
    close(y2, ops.layer_norm(x2 + (x + r), w, b), rtol=1e-5, atol=1e-5)
    assert torch.equal(h2, x2 + (x + r))


@pytest.mark.gpu
def test_add_norm_gradcheck():
    for shape in [(3, 8), (2, 3, 5), (1, 7)]:
        d = shape[-1]
        x = torch.randn(*shape, dtype=torch.float64, device=DEV, requires_grad=True)
        r = torch.randn(*shape, dtype=torch.float64, device=DEV, requires_grad=True)
        w = (1 + 0.5 * torch.randn(d, dtype=torch.float64, device=DEV)).requires_grad_()
        b = torch.randn(d, dtype=torch.float64, device=DEV, requires_grad=True)
        # Both outputs; y alone (dh None); h alone (dy None). check_undefined_grad also runs the backward with
        # undefined gradients.
        assert torch.autograd.gradcheck(lambda x, r, w, b: ops.add_layer_norm(x, r, w, b), (x, r, w, b))
        assert torch.autograd.gradcheck(lambda x, r, w: ops.add_layer_norm(x, r, w), (x, r, w))
        assert torch.autograd.gradcheck(lambda x, r: ops.add_layer_norm(x, r)[0], (x, r))
        assert torch.autograd.gradcheck(lambda x, r, w: ops.add_rms_norm(x, r, w), (x, r, w))
        assert torch.autograd.gradcheck(lambda x, r, w: ops.add_rms_norm(x, r, w)[0], (x, r, w))
        assert torch.autograd.gradcheck(lambda x, r, w: ops.add_rms_norm(x, r, w)[1], (x, r, w))
        assert torch.autograd.gradcheck(lambda x, r: ops.add_rms_norm(x, r), (x, r))
        # Only x requires grad (residual a constant).
        rc = r.detach()
        assert torch.autograd.gradcheck(lambda x, w, rc=rc: ops.add_rms_norm(x, rc, w), (x, w))
        # Second-order is not supported (the backward op has no autograd), as for the other norms.
