"""kjit.ops.conv1d and conv_transpose1d (python/src/ops/convolution.cpp): dense 1-D convolutions as one GEMM over
the im2col matrix of kernel_templates/im2col.cuh.

On a GPU: both ops against F.conv1d / F.conv_transpose1d in float32 (TF32 on both sides, PyTorch's convolution
default), float16 and bfloat16 at awkward sizes (channels no multiple of 8, horizons 1, 3, 16, 1000, strides,
padding, dilation, output padding, unbatched and strided inputs); their gradients against float64 autograd of
PyTorch's convolution on the same (rounded) inputs (the GEMM kernels have no float64 form, so no gradcheck);
a batch large enough to run in chunks; CUDA graph replay; the TF32 switch. Without a GPU: im2col compiles for
sm_80, sm_90 and sm_100 in both layouts; argument errors on meta tensors. The op table's rows add opcheck, Meta
against the CUDA function, the planned kernels' compiles and the bad-input categories.
"""

import pytest
import torch
import torch.nn.functional as F
from family_helpers import ARCHS, DEV
from support import ORIGINS

import kjit

DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# (B, C, L, O, KW, stride, padding, dilation): the U-Net's Conv1dBlock, Downsample1d and 1x1 projection, and
# the sizes no tile fits.
CONV_CASES = [
    (2, 256, 16, 256, 5, 1, 2, 1),
    (1, 1024, 16, 1024, 5, 1, 2, 1),
    (3, 20, 16, 28, 5, 1, 2, 1),
    (2, 7, 1, 9, 5, 1, 2, 1),
    (2, 13, 3, 11, 3, 2, 1, 1),
    (4, 64, 16, 64, 3, 2, 1, 1),
    (2, 3, 1000, 5, 4, 3, 0, 2),
    (2, 33, 1000, 17, 1, 1, 0, 1),
    (1, 10, 7, 6, 7, 1, 0, 1),
]
# (B, C, L, O, KW, stride, padding, output_padding, dilation): the U-Net's Upsample1d and the odd ones.
TRANSPOSED_CASES = [
    (2, 256, 8, 256, 4, 2, 1, 0, 1),
    (1, 1024, 4, 1024, 4, 2, 1, 0, 1),
    (3, 20, 1, 12, 4, 2, 1, 0, 1),
    (2, 7, 3, 9, 3, 3, 0, 2, 1),
    (2, 5, 16, 3, 3, 1, 2, 1, 2),
    (2, 9, 1000, 4, 5, 1, 2, 0, 1),
]


def _tol(dtype):
    """Of the largest magnitude: exact inputs (16-bit) or TF32's 10-bit rounding, float32 sums, the output
    rounded to its dtype."""
    return {torch.float32: 3e-3, torch.float16: 3e-3, torch.bfloat16: 1.6e-2}[dtype]


def _inputs(b, c, length, o, kw, dtype, *, transposed=False, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    r = lambda *s: torch.randn(*s, device=DEV, generator=g).to(dtype)  # noqa: E731
    w = r(c, o, kw) if transposed else r(o, c, kw)
    return r(b, c, length), w / (c * kw) ** 0.5, r(o)


def _close(got, want, tol, what):
    scale = want.abs().max().clamp_min(1.0).item()
    torch.testing.assert_close(got.double(), want, atol=tol * scale, rtol=tol, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("columns", [False, True])
def test_im2col_compiles_for_each_arch(arch, columns):
    for dtype in DTYPES:
        k = kjit.Template.builtin("im2col").kernel("im2col").specialize(arch=arch, T=dtype, COLUMNS=columns)
        assert str(k.origin) in ORIGINS


@pytest.fixture
def tf32():
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    yield
    torch.backends.cudnn.allow_tf32 = saved


def _check_against_pytorch(mine, peer, x, w, bias, dtype, **args):
    """mine(x, w, bias, **args), and dx / dweight / dbias by autograd, against peer (PyTorch's convolution) in
    float64 on the same inputs."""
    xs, ws, bs = (t.detach().requires_grad_() for t in (x, w, bias))
    y = mine(xs, ws, bs, **args)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, bias))
    want = peer(xd, wd, bd, **args)
    assert y.shape == want.shape and y.dtype == dtype and y.is_contiguous()
    _close(y, want, _tol(dtype), "y")
    dy = torch.randn_like(y)
    got = torch.autograd.grad(y, (xs, ws, bs), dy)
    ref = torch.autograd.grad(want, (xd, wd, bd), dy.double())
    for name, g, r in zip(("dx", "dweight", "dbias"), got, ref):
        assert g.shape == r.shape and g.dtype == dtype, name
        _close(g, r, _tol(dtype), name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv1d_matches_pytorch(case, dtype, tf32):
    b, c, length, o, kw, stride, padding, dilation = case
    x, w, bias = _inputs(b, c, length, o, kw, dtype)
    _check_against_pytorch(
        kjit.ops.conv1d, F.conv1d, x, w, bias, dtype, stride=stride, padding=padding, dilation=dilation
    )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", TRANSPOSED_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv_transpose1d_matches_pytorch(case, dtype, tf32):
    b, c, length, o, kw, stride, padding, output_padding, dilation = case
    x, w, bias = _inputs(b, c, length, o, kw, dtype, transposed=True)
    args = dict(stride=stride, padding=padding, output_padding=output_padding, dilation=dilation)
    _check_against_pytorch(kjit.ops.conv_transpose1d, F.conv_transpose1d, x, w, bias, dtype, **args)


@pytest.mark.gpu
def test_strided_unbatched_and_no_bias(tf32):
    """x as a transposed view and unbatched; no bias; a weight whose K is no multiple of 8 (copied, padded)."""
    x = torch.randn(2, 40, 12, device=DEV).transpose(1, 2)  # [2, 12, 40]: channel stride 1
    w = torch.randn(6, 12, 3, device=DEV) / 6
    want = F.conv1d(x.double(), w.double(), padding=1)
    _close(kjit.ops.conv1d(x, w, padding=1), want, _tol(torch.float32), "strided")
    _close(kjit.ops.conv1d(x[1], w, padding=1), want[1], _tol(torch.float32), "unbatched")
    wt = torch.randn(12, 5, 3, device=DEV) / 6
    want = F.conv_transpose1d(x[0].double(), wt.double(), stride=2)
    _close(kjit.ops.conv_transpose1d(x[0], wt, stride=2), want, _tol(torch.float32), "transposed")


@pytest.mark.gpu
def test_a_large_batch_runs_in_chunks():
    """A batch whose im2col matrix passes 512 MB (64 x 1000 positions x 5120 bf16 columns: two chunks) gives
    the one-GEMM result; its weight gradient adds the chunks in float32."""
    x, w, bias = _inputs(64, 1024, 1000, 64, 5, torch.bfloat16, seed=2)
    xs, ws = x.requires_grad_(), w.requires_grad_()
    y = kjit.ops.conv1d(xs, ws, bias, padding=2)
    want = F.conv1d(x.detach().double(), w.detach().double(), bias.double(), padding=2)
    _close(y, want, _tol(torch.bfloat16), "y")
    dy = torch.randn_like(y)
    (dw,) = torch.autograd.grad(y, (ws,), dy)
    wd = w.detach().double().requires_grad_()
    (rw,) = torch.autograd.grad(F.conv1d(x.detach().double(), wd, padding=2), (wd,), dy.double())
    _close(dw, rw, _tol(torch.bfloat16), "dweight")


@pytest.mark.gpu
def test_replays_in_a_cuda_graph(tf32):
    """The U-Net's conv at batch 1 and its upsample captured in one graph, replayed on new inputs."""
    x, w, bias = _inputs(1, 256, 16, 256, 5, torch.bfloat16, seed=4)
    wt = torch.randn(256, 256, 4, device=DEV, dtype=torch.bfloat16) / 32
    run = lambda: kjit.ops.conv_transpose1d(kjit.ops.conv1d(x, w, bias, padding=2), wt, stride=2, padding=1)  # noqa: E731
    run()  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = run()
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, run(), atol=0, rtol=0)


@pytest.mark.gpu
def test_float32_runs_as_tf32_only_where_cudnn_allows_it():
    x, w, _ = _inputs(1, 8, 16, 8, 3, torch.float32)
    saved = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        with pytest.raises(kjit.TypeError, match=r"x is float32.*torch\.backends\.cudnn\.allow_tf32 is False"):
            kjit.ops.conv1d(x, w)
        torch.backends.cudnn.allow_tf32 = True
        assert kjit.ops.conv1d(x, w).shape == (1, 8, 14)
    finally:
        torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.gpu
def test_empty_inputs():
    """No batch, no input channels (y = bias), no output channels; the gradients of a batch of none."""
    w = torch.randn(4, 3, 3, device=DEV, dtype=torch.bfloat16)
    bias = torch.randn(4, device=DEV, dtype=torch.bfloat16)
    assert kjit.ops.conv1d(torch.empty(0, 3, 8, device=DEV, dtype=torch.bfloat16), w).shape == (0, 4, 6)
    y = kjit.ops.conv1d(torch.empty(2, 0, 8, device=DEV, dtype=torch.bfloat16), w[:, :0], bias)
    torch.testing.assert_close(y, bias[None, :, None].expand(2, 4, 6))
    assert kjit.ops.conv1d(torch.randn(2, 3, 8, device=DEV, dtype=torch.bfloat16), w[:0]).shape == (2, 0, 6)
    x = torch.empty(0, 3, 8, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    ws = w.clone().requires_grad_()
    gx, gw = torch.autograd.grad(kjit.ops.conv1d(x, ws, padding=1).sum(), (x, ws))
    assert gx.shape == x.shape and torch.equal(gw, torch.zeros_like(w))


# ---- argument errors (meta tensors: the Meta kernel checks as the CUDA one does) ---------------------------------


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, device="meta", dtype=dtype)


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda: kjit.ops.conv1d(_meta(2, 6), _meta(4, 6)), r"weight must be 3-D \[out_channels, in_channels, width\]"),
        (lambda: kjit.ops.conv1d(_meta(6), _meta(4, 6, 3)), r"x must be \[batch, channels, length\] or \[channels"),
        (
            lambda: kjit.ops.conv1d(_meta(2, 6, 8), _meta(4, 5, 3)),
            r"x has shape \[2, 6, 8\] \(6 channels\) and weight has shape \[4, 5, 3\]",
        ),
        (lambda: kjit.ops.conv1d(_meta(2, 6, 8), _meta(4, 3, 3), groups=2), r"groups must be 1 .*, got 2"),
        (lambda: kjit.ops.conv1d(_meta(2, 6, 8), _meta(4, 6, 3), stride=0), r"stride=0 must be in \[1, 2\^31\)"),
        (lambda: kjit.ops.conv1d(_meta(2, 6, 8), _meta(4, 6, 3), padding=-1), r"padding=-1 must be in \[0, 2\^31\)"),
        (lambda: kjit.ops.conv1d(_meta(2, 6, 8), _meta(4, 6, 3), dilation=0), r"dilation=0 must be in"),
        (lambda: kjit.ops.conv1d(_meta(2, 6, 2), _meta(4, 6, 3)), r"x's length 2 padded by 0 on each side is shorter"),
        (
            lambda: kjit.ops.conv1d(_meta(2, 6, 8), _meta(4, 6, 0)),
            r"weight has shape \[4, 6, 0\]: its width \(dim 2\) must be at least 1",
        ),
        (lambda: kjit.ops.conv1d(_meta(2, 6, 8), _meta(4, 6, 3), _meta(5)), r"bias has shape \[5\]"),
        (
            lambda: kjit.ops.conv_transpose1d(_meta(2, 6, 8), _meta(4, 6, 3)),
            r"x has shape \[2, 6, 8\] \(6 channels\) and weight has shape \[4, 6, 3\]: weight is \[in_channels, out",
        ),
        (
            lambda: kjit.ops.conv_transpose1d(_meta(2, 6, 8), _meta(6, 4, 3), stride=2, output_padding=2),
            r"output_padding=2 must be in \[0, max\(stride, dilation\)\) = \[0, 2\)",
        ),
        (
            lambda: kjit.ops.conv_transpose1d(_meta(2, 6, 1), _meta(6, 4, 1), padding=1),
            r"the output length .* is -1 for L = 1: pad less",
        ),
        # Past one GEMM launch's rows per batch element: refused on meta tensors as on CUDA ones.
        (
            lambda: kjit.ops.conv1d(_meta(1, 2, 2_000_000), _meta(2, 2, 1)),
            r"the output length 2000000 is more than one GEMM launch covers \(1048560 positions\)",
        ),
        (
            lambda: kjit.ops.conv1d_backward(_meta(1, 2, 1000), _meta(1, 2, 2_000_000), _meta(2, 2, 2000), 2000),
            r"x's length 2000000 is more than one GEMM launch covers",
        ),
        (
            lambda: kjit.ops.conv1d_backward(_meta(2, 4, 7), _meta(2, 6, 8), _meta(4, 6, 3)),
            r"grad has shape \[2, 4, 7\] but the forward's output has shape \[2, 4, 6\]",
        ),
    ],
)
def test_argument_errors(call, pattern):
    with pytest.raises(kjit.ValueError, match=r"^kjit\.ops\.conv(_transpose)?1d(_backward)?: " + pattern):
        call()


def test_16_bit_and_float32_only():
    with pytest.raises(kjit.TypeError, match=r"allowed: torch\.bfloat16, torch\.float16, torch\.float32"):
        kjit.ops.conv1d(_meta(2, 6, 8, dtype=torch.float64), _meta(4, 6, 3, dtype=torch.float64))
