"""The sequence ops: causal_conv1d (a depthwise causal conv of width 2 to 4, optional SiLU, with initial and
final states) and linear_scan (h[t] = a[t] * h[t-1] + b[t]), and their backward ops.

Without a GPU: Meta shapes and dtypes, and argument errors. On a GPU (the tests marked gpu): against PyTorch
references computed in float64 from the same inputs (F.conv1d with the padding and slicing of a causal conv; a
Python loop over time for the scan), forward and backward, gradcheck in float64, decoding in chunks through
the states, strided and misaligned inputs, odd lengths (scalar loads) and the vectorized paths, inf / NaN,
the kernels named in the profile and no graph breaks.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from family_helpers import DEV, DTYPES
from op_table import FLOATING
from support import close, dname, meta, misaligned_like, rounding_tol, sum_tol, ulp

import kjit
from kjit import ops


# ---- Meta tensors: shapes, dtypes and argument errors -----------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATING, ids=lambda d: str(d).split(".")[-1])
def test_meta_causal_conv1d_shapes(dtype):
    for shape in [(2, 5, 17), (5, 17), (3, 4, 1), (0, 4, 9), (2, 4, 0)]:
        x = meta(*shape, dtype=dtype)
        d = shape[-2]
        state = (*shape[:-1], 3)
        for w in (meta(d, 4, dtype=dtype), meta(d, 1, 4, dtype=dtype)):
            y, final = ops.causal_conv1d(x, w, meta(d, dtype=dtype), meta(*state, dtype=dtype), "silu")
            assert (y.shape, final.shape) == (shape, state) and y.dtype == final.dtype == dtype
            assert y.is_contiguous() and final.is_contiguous()
            dx, dw, db, dinit = ops.causal_conv1d_backward(x, None, x, w, None, meta(*state, dtype=dtype), "silu")
            assert (dx.shape, dw.shape, db.shape, dinit.shape) == (shape, w.shape, (0,), state)
            assert dx.dtype == dw.dtype == dinit.dtype == dtype
    # Width 2: a state of one step; the Mamba view [B, D, L] of a [L, B, D]-ordered buffer is accepted as it is.
    y, final = ops.causal_conv1d(meta(8, 2, 6, dtype=dtype).permute(1, 2, 0), meta(6, 2, dtype=dtype))
    assert (y.shape, final.shape) == ((2, 6, 8), (2, 6, 1)) and y.is_contiguous()


def test_causal_conv1d_argument_errors():
    x = meta(2, 4, 9)
    with pytest.raises(
        kjit.ValueError, match=r"^kjit\.ops\.causal_conv1d: the filter width must be 2, 3 or 4.*got 5.*conv1d"
    ):
        ops.causal_conv1d(x, meta(4, 5))
    with pytest.raises(kjit.ValueError, match=r"weight must be \[channels, width\].*channels = 4.*got shape \[3, 4\]"):
        ops.causal_conv1d(x, meta(3, 4))
    with pytest.raises(
        kjit.ValueError, match=r"x must be \[batch, channels, length\] or \[channels, length\], got shape \[9\]"
    ):
        ops.causal_conv1d(meta(9), meta(4, 4))
    with pytest.raises(kjit.ValueError, match=r"initial_state has shape \[2, 4, 2\] but must have shape \[2, 4, 3\]"):
        ops.causal_conv1d(x, meta(4, 4), None, meta(2, 4, 2))
    with pytest.raises(kjit.ValueError, match=r"bias has shape \[3\] but must have shape \[4\]"):
        ops.causal_conv1d(x, meta(4, 4), meta(3))
    with pytest.raises(kjit.ValueError, match=r"activation must be None or 'silu', got 'gelu'"):
        ops.causal_conv1d(x, meta(4, 4), activation="gelu")
    with pytest.raises(kjit.TypeError, match=r"weight has dtype torch\.float64 but x has dtype torch\.float32"):
        ops.causal_conv1d(x, meta(4, 4, dtype=torch.float64))
    with pytest.raises(kjit.ValueError, match=r"^kjit\.ops\.causal_conv1d_backward: grad has shape \[2, 4, 8\]"):
        ops.causal_conv1d_backward(meta(2, 4, 8), None, x, meta(4, 4), None, None, None)
    with pytest.raises(kjit.ValueError, match=r"grad_final_state has shape \[2, 4\] but must have shape \[2, 4, 3\]"):
        ops.causal_conv1d_backward(x, meta(2, 4), x, meta(4, 4), None, None, None)


@pytest.mark.parametrize("dtype", FLOATING, ids=lambda d: str(d).split(".")[-1])
def test_meta_linear_scan_shapes(dtype):
    state_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    for shape in [(7,), (3, 33), (2, 5, 17), (0, 8), (4, 0)]:
        a, b = meta(*shape, dtype=dtype), meta(*shape, dtype=dtype)
        for h0 in (None, meta(*shape[:-1], dtype=dtype), meta(*shape[:-1], dtype=torch.float32)):
            h, last = ops.linear_scan(a, b, h0)
            assert (h.shape, h.dtype, last.shape, last.dtype) == (shape, dtype, shape[:-1], state_dtype)
            da, db, dh0 = ops.linear_scan_backward(a, h, a, None, h0)
            assert (da.shape, db.shape) == (shape, shape) and da.dtype == db.dtype == dtype
            assert dh0.shape == (shape[:-1] if h0 is not None else (0,))
            if h0 is not None:
                assert dh0.dtype == h0.dtype
        assert ops.linear_scan_backward(a, a, None, meta(*shape[:-1]), None)[0].shape == shape
    assert ops.linear_scan(meta(6, 4, dtype=dtype).t(), meta(6, 4, dtype=dtype).t())[0].is_contiguous()


def test_linear_scan_argument_errors():
    a = meta(3, 8)
    with pytest.raises(
        kjit.ValueError, match=r"^kjit\.ops\.linear_scan: b has shape \[3, 7\] but must have shape \[3, 8\]"
    ):
        ops.linear_scan(a, meta(3, 7))
    with pytest.raises(kjit.TypeError, match=r"b has dtype torch\.float16 but a has dtype torch\.float32"):
        ops.linear_scan(a, meta(3, 8, dtype=torch.float16))
    with pytest.raises(
        kjit.ValueError, match=r"h0 has shape \[8\] but must have shape \[3\] \(a's shape without its last"
    ):
        ops.linear_scan(a, a, meta(8))
    with pytest.raises(kjit.ValueError, match=r"a must have at least one dim"):
        ops.linear_scan(meta(), meta())
    with pytest.raises(kjit.TypeError, match=r"a has dtype torch\.int32"):
        ops.linear_scan(meta(3, 8, dtype=torch.int32), meta(3, 8, dtype=torch.int32))
    with pytest.raises(kjit.ValueError, match=r"^kjit\.ops\.linear_scan_backward: grad_last has shape \[3, 8\]"):
        ops.linear_scan_backward(a, a, None, a, None)


# ---- on a GPU: causal_conv1d against PyTorch ---------------------------------------------------------------


def out_tol(dtype):
    """One rounding of the output dtype, and float arithmetic's absolute error."""
    return rounding_tol(dtype, f32=(1e-5, 1e-5), half_atol=1e-4, f64=(1e-10, 1e-12))


def conv_ref(x, w, b, init, silu):
    """(y, final_state) in float64: F.conv1d over the input with the initial state (or zeros) before it."""
    W = w.shape[-1]
    x64 = x.double()
    pad = init.double() if init is not None else x64.new_zeros((*x.shape[:-1], W - 1))
    xp = torch.cat([pad, x64], -1)
    y = F.conv1d(xp, w.double().reshape(w.shape[0], 1, W), None if b is None else b.double(), groups=x.shape[-2])
    if silu:
        y = F.silu(y)
    return y, xp[..., xp.shape[-1] - (W - 1) :]


# (shape, W, silu, bias, state): widths 2-4, both activations, with and without bias / state, odd lengths
# (scalar loads), lengths shorter than the state, several chunks.
CONV_CASES = [
    ((2, 33, 1000), 4, True, True, False),
    ((3, 5, 4097), 3, False, True, True),
    ((1, 7, 1), 4, True, False, True),  # shorter than the state: final_state holds part of the initial state
    ((2, 3, 2), 2, False, False, False),
    ((4, 64, 256), 4, False, False, True),
    ((2, 8, 777), 2, True, True, True),
    ((9, 70), 3, True, True, False),  # [channels, length]
    ((2, 4, 3), 4, False, True, False),
]


def conv_inputs(shape, W, bias, state, dtype, misaligned=False):
    D = shape[-2]
    x = torch.randn(shape, dtype=dtype, device=DEV)
    if misaligned:
        x = misaligned_like(x)
    w = torch.randn(D, W, dtype=dtype, device=DEV) * 0.5
    b = torch.randn(D, dtype=dtype, device=DEV) if bias else None
    s = torch.randn((*shape[:-1], W - 1), dtype=dtype, device=DEV) if state else None
    return x, w, b, s


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-w{c[1]}")
def test_causal_conv1d_forward_matches_conv1d(case, dtype):
    shape, W, silu, bias, state = case
    x, w, b, s = conv_inputs(shape, W, bias, state, dtype)
    y, final = ops.causal_conv1d(x, w, b, s, "silu" if silu else None)
    y_ref, f_ref = conv_ref(x, w, b, s, silu)
    close(y, y_ref.to(dtype), **out_tol(dtype))
    assert torch.equal(final, f_ref.to(dtype))  # copies of inputs, exactly


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_causal_conv1d_layouts(dtype):
    B, D, L, W = 2, 48, 520, 4
    w = torch.randn(D, W, dtype=dtype, device=DEV)
    b = torch.randn(D, dtype=dtype, device=DEV)
    # Mamba's view: a [D, B, L] buffer (a projection written as W @ X^T) read as [B, D, L]: no copy.
    x = torch.randn(D, B, L, dtype=dtype, device=DEV).permute(1, 0, 2)
    # A [B, L, D] tensor transposed (no unit stride along L): copied once.
    xt = torch.randn(B, L, D, dtype=dtype, device=DEV).transpose(1, 2)
    # Misaligned rows (scalar loads), and nn.Conv1d's weight layout [D, 1, W].
    xm = misaligned_like(torch.randn(B, D, L, dtype=dtype, device=DEV))
    for xi, wi in ((x, w), (xt, w), (xm, w.unsqueeze(1))):
        y, final = ops.causal_conv1d(xi, wi, b, activation="silu")
        y_ref, f_ref = conv_ref(xi, w, b, None, True)
        close(y, y_ref.to(dtype), **out_tol(dtype))
        assert torch.equal(final, f_ref.to(dtype)) and y.is_contiguous()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dname)
def test_causal_conv1d_decodes_in_chunks_through_its_state(dtype):
    B, D, L, W = 2, 16, 300, 4
    x, w, b, _ = conv_inputs((B, D, L), W, True, False, dtype)
    y, final = ops.causal_conv1d(x, w, b, None, "silu")
    state, parts = None, []
    for lo, hi in ((0, 1), (1, 2), (2, 130), (130, 131), (131, 300)):  # single steps and blocks
        yi, state = ops.causal_conv1d(x[..., lo:hi].contiguous(), w, b, state, "silu")
        parts.append(yi)
    assert torch.equal(torch.cat(parts, -1), y) and torch.equal(state, final)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("case", CONV_CASES[:6], ids=lambda c: "x".join(map(str, c[0])) + f"-w{c[1]}")
def test_causal_conv1d_backward_matches_autograd(case, dtype):
    shape, W, silu, bias, state = case
    x, w, b, s = conv_inputs(shape, W, bias, state, dtype)
    inputs = [t for t in (x, w, b, s) if t is not None]
    for t in inputs:
        t.requires_grad_(True)
    y, final = ops.causal_conv1d(x, w, b, s, "silu" if silu else None)
    gy, gf = torch.randn_like(y), torch.randn_like(final)
    got = torch.autograd.grad((y, final), inputs, (gy, gf))
    ref_inputs = [t.detach().double().requires_grad_(True) for t in inputs]
    it = iter(ref_inputs)
    xr, wr = next(it), next(it)
    br = next(it) if bias else None
    sr = next(it) if state else None
    yr, fr = conv_ref(xr, wr, br, sr, silu)
    want = torch.autograd.grad((yr, fr), ref_inputs, (gy.double(), gf.double()))
    n = math.prod(shape) // shape[-2]  # terms of a weight's gradient: batch x length
    close(got[0], want[0].to(dtype), **sum_tol(dtype, W))  # dx: W terms
    close(got[1], want[1].to(dtype), **sum_tol(dtype, n))  # dweight
    k = 2
    if bias:
        close(got[k], want[k].to(dtype), **sum_tol(dtype, n))
        k += 1
    if state:
        close(got[k], want[k].to(dtype), **sum_tol(dtype, W))


@pytest.mark.gpu
def test_causal_conv1d_gradient_of_one_output_alone_and_determinism():
    x, w, b, s = conv_inputs((3, 5, 67), 4, True, True, torch.float32)
    for t in (x, w, b, s):
        t.requires_grad_(True)
    # Only final_state used: y's gradient is zero; only y used: final_state's is.
    y, final = ops.causal_conv1d(x, w, b, s)
    gx = torch.autograd.grad(final.sum(), (x, w, s), allow_unused=True)
    xr, sr = x.detach().double().requires_grad_(True), s.detach().double().requires_grad_(True)
    fr = conv_ref(xr, w.detach(), b.detach(), sr, False)[1]
    want = torch.autograd.grad(fr.sum(), (xr, sr))
    close(gx[0], want[0].float(), rtol=0, atol=0)
    close(gx[2], want[1].float(), rtol=0, atol=0)
    assert gx[1] is None or not gx[1].any()
    # The weight's gradient is a fixed-order sum: two runs agree bitwise.
    y, _ = ops.causal_conv1d(x, w, b, s, "silu")
    g1 = torch.autograd.grad(y.sum(), (w, b), retain_graph=True)
    g2 = torch.autograd.grad(y.sum(), (w, b))
    assert all(torch.equal(p, q) for p, q in zip(g1, g2))


@pytest.mark.gpu
@pytest.mark.parametrize("W", [2, 4])
def test_causal_conv1d_gradcheck(W):
    x = torch.randn(2, 3, 11, dtype=torch.float64, device=DEV, requires_grad=True)
    w = torch.randn(3, W, dtype=torch.float64, device=DEV, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, device=DEV, requires_grad=True)
    s = torch.randn(2, 3, W - 1, dtype=torch.float64, device=DEV, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *t: ops.causal_conv1d(*t, "silu"), (x, w, b, s))
    short = torch.randn(2, 3, 1, dtype=torch.float64, device=DEV, requires_grad=True)  # L < W - 1 for W = 4
    assert torch.autograd.gradcheck(lambda *t: ops.causal_conv1d(*t, None), (short, w, b, s))


@pytest.mark.gpu
def test_causal_conv1d_empty_and_registered_op():
    w = torch.randn(4, 3, device=DEV)
    y, final = ops.causal_conv1d(torch.randn(0, 4, 9, device=DEV), w)
    assert y.shape == (0, 4, 9) and final.shape == (0, 4, 2)
    s = torch.randn(2, 4, 2, device=DEV)
    y, final = ops.causal_conv1d(torch.randn(2, 4, 0, device=DEV), w, None, s)
    assert y.shape == (2, 4, 0) and torch.equal(final, s)
    x = torch.randn(2, 4, 9, device=DEV)
    y1 = ops.causal_conv1d(x, w, activation="silu")
    y2 = torch.ops.kjit.causal_conv1d(x, w, activation="silu")
    assert all(torch.equal(p, q) for p, q in zip(y1, y2))


# ---- on a GPU: linear_scan against a float64 loop ------------------------------------------------------------


def scan_ref(a, b, h0=None):
    """(h, h_last) by a float64 Python loop over time."""
    a64, b64 = a.double(), b.double()
    h = h0.double() if h0 is not None else a64.new_zeros(a.shape[:-1])
    out = []
    for t in range(a.shape[-1]):
        h = a64[..., t] * h + b64[..., t]
        out.append(h)
    hs = torch.stack(out, -1) if out else a64.new_zeros(a.shape)
    return hs, h


def state_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def scan_inputs(rows, L, dtype, decay=True, misaligned=False):
    if decay:
        a = torch.empty(rows, L, device=DEV).uniform_(0.5, 1.0).to(dtype)
    else:  # sign changes and growth (short sequences only)
        a = torch.empty(rows, L, device=DEV).uniform_(-1.05, 1.05).to(dtype)
    b = torch.randn(rows, L, dtype=dtype, device=DEV)
    if misaligned:
        a, b = misaligned_like(a), misaligned_like(b)
    return a, b


def scan_tol(dtype, L):
    t = out_tol(dtype)
    if dtype == torch.float32:  # reassociated products and sums over up to L steps
        t = dict(rtol=2e-5 * math.sqrt(max(1.0, math.log2(max(L, 2)))), atol=2e-5)
    return t


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES + [torch.float64], ids=dname)
@pytest.mark.parametrize("rows, L", [(1, 1), (7, 2), (3, 31), (300, 32), (7, 33), (5, 257), (7, 4097), (2, 1000)])
def test_linear_scan_matches_a_float64_loop(rows, L, dtype):
    a, b = scan_inputs(rows, L, dtype)
    h0 = torch.randn(rows, device=DEV)
    for init in (None, h0.to(dtype), h0):
        h, last = ops.linear_scan(a, b, init)
        h_ref, last_ref = scan_ref(a, b, init)
        assert h.dtype == dtype and last.dtype == state_dtype(dtype)
        close(h, h_ref.to(dtype), **scan_tol(dtype, L))
        close(last, last_ref.to(last.dtype), **scan_tol(torch.float32 if dtype != torch.float64 else dtype, L))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dname)
def test_linear_scan_sign_changes_misaligned_and_batched_shapes(dtype):
    a, b = scan_inputs(9, 64, dtype, decay=False)
    h, _ = ops.linear_scan(a, b)
    close(h, scan_ref(a, b)[0].to(dtype), **scan_tol(dtype, 64))
    a, b = scan_inputs(6, 1000, dtype, misaligned=True)  # misaligned rows: scalar loads
    h, last = ops.linear_scan(a, b)
    h_ref, last_ref = scan_ref(a, b)
    close(h, h_ref.to(dtype), **scan_tol(dtype, 1000))
    # [B, D, L] with a state per (b, d); a strided a is read through a contiguous copy.
    a3 = a.reshape(2, 3, 1000)
    b3 = b.reshape(2, 3, 1000).transpose(0, 1).contiguous().transpose(0, 1)
    h3, last3 = ops.linear_scan(a3, b3)
    assert h3.shape == (2, 3, 1000) and last3.shape == (2, 3)
    close(h3.reshape(6, 1000), h_ref.to(dtype), **scan_tol(dtype, 1000))


@pytest.mark.gpu
def test_linear_scan_inf_and_nan_propagate_as_in_the_loop():
    a, b = scan_inputs(5, 300, torch.float32)
    b[0, 5] = math.inf
    b[1, 200] = math.nan
    a[3, 0] = math.nan
    a[2, 7] = math.inf
    h, last = ops.linear_scan(a, b)
    h_ref, last_ref = scan_ref(a, b)
    # NaN / inf in b and NaN in a: the loop's values exactly where they are special.
    rows = [0, 1, 3, 4]
    torch.testing.assert_close(h[rows].double(), h_ref[rows], rtol=1e-4, atol=1e-5, equal_nan=True)
    torch.testing.assert_close(last[rows].double(), last_ref[rows], rtol=1e-4, atol=1e-5, equal_nan=True)
    # An infinite a: the reassociated products give NaN where the loop has +-inf (documented); what is
    # finite in one is finite in the other.
    assert torch.equal(h[2].isfinite(), h_ref[2].isfinite())
    close(h[2, :7], h_ref[2, :7].float(), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
# (8, 100): float32 chunks of 2 x 128 whose second slice lies past the end.
@pytest.mark.parametrize("rows, L", [(3, 1), (7, 33), (8, 100), (5, 257), (2, 1000)])
def test_linear_scan_backward_matches_autograd_of_the_loop(rows, L, dtype):
    a, b = scan_inputs(rows, L, dtype)
    h0 = torch.randn(rows, device=DEV)
    a.requires_grad_(True)
    b.requires_grad_(True)
    h0.requires_grad_(True)
    h, last = ops.linear_scan(a, b, h0)
    gh, gl = torch.randn_like(h), torch.randn_like(last)
    got = torch.autograd.grad((h, last), (a, b, h0), (gh, gl), retain_graph=True)
    ar, br, h0r = (t.detach().double().requires_grad_(True) for t in (a, b, h0))
    hr, lr = scan_ref(ar, br, h0r)
    want = torch.autograd.grad((hr, lr), (ar, br, h0r), (gh.double(), gl.double()), retain_graph=True)
    # db = g sums up to L decaying terms; da = g * h[t-1] (16-bit: h rounded to the dtype).
    t = sum_tol(dtype, L) if dtype == torch.float32 else dict(rtol=4 * ulp(dtype), atol=1e-2)
    close(got[1], want[1].to(dtype), **t)
    close(got[0], want[0].to(dtype), **t)
    close(got[2], want[2].float(), **(t if dtype == torch.float32 else dict(rtol=4 * ulp(dtype), atol=1e-2)))
    # One output alone: h_last's gradient only, then h's only.
    ga = torch.autograd.grad(last.sum(), (a, b), retain_graph=True)
    wa = torch.autograd.grad(lr.sum(), (ar, br), retain_graph=True)
    close(ga[1], wa[1].to(dtype), **t)
    close(ga[0], wa[0].to(dtype), **t)


@pytest.mark.gpu
def test_linear_scan_gradcheck():
    a = torch.empty(3, 37, dtype=torch.float64, device=DEV).uniform_(-1, 1).requires_grad_(True)
    b = torch.randn(3, 37, dtype=torch.float64, device=DEV, requires_grad=True)
    h0 = torch.randn(3, dtype=torch.float64, device=DEV, requires_grad=True)
    assert torch.autograd.gradcheck(ops.linear_scan, (a, b, h0))
    assert torch.autograd.gradcheck(lambda a, b: ops.linear_scan(a, b)[0], (a, b))


@pytest.mark.gpu
def test_linear_scan_empty_and_zero_length():
    h0 = torch.randn(3, device=DEV)
    h, last = ops.linear_scan(torch.randn(3, 0, device=DEV), torch.randn(3, 0, device=DEV), h0)
    assert h.shape == (3, 0) and torch.equal(last, h0)
    h, last = ops.linear_scan(torch.randn(0, 5, device=DEV), torch.randn(0, 5, device=DEV))
    assert h.shape == (0, 5) and last.shape == (0,)


# ---- on a GPU: both in one graph ----------------------------------------------------------------------------


# torch.profiler.profile warns that it "clears events at the end of each cycle" (the events of the one cycle
# this test records are all it reads): expected here, filtered here (":" cannot be written in the filter).
@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events at the end of each cycle:UserWarning")
def test_kernels_named_in_the_profile_and_no_graph_breaks():
    a, b = scan_inputs(128, 512, torch.float32)
    x, w, bias, _ = conv_inputs((2, 64, 512), 4, True, False, torch.float32)

    def block(a, b, x):
        y, _ = ops.causal_conv1d(x, w, bias, None, "silu")
        h, _ = ops.linear_scan(a, b + y.reshape(a.shape))
        return h

    explain = torch._dynamo.explain(block)(a, b, x)
    assert explain.graph_break_count == 0
    compiled = torch.compile(block, fullgraph=True)
    torch.testing.assert_close(compiled(a, b, x), block(a, b, x))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        block(a, b, x)
        torch.cuda.synchronize()
    names = " ".join(e.name for e in prof.events())
    assert "causal_conv1d_forward" in names and "linear_scan_forward" in names
    assert kjit.stats()["op_calls"]
