"""The 2-D pools: max_pool2d and avg_pool2d (count_include_pad or not) on NCHW / CHW, and their backward ops.

Without a GPU: Meta output sizes against torch's for every kernel size / stride / padding form, the defaults,
dtypes and parameter errors. On a GPU (the tests marked gpu): against PyTorch (max exactly, avg in float64),
the backward against torch's autograd (max on values without ties), the tiled forward at its tiles' edges
(planes smaller than a tile, odd widths, misaligned rows, NaN on tile halos, all -inf windows), more than
65535 planes, the bench's reference shapes running the tiled kernel (torch.profiler), gradcheck in float64.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from family_helpers import DEV, DTYPES
from support import close, dname, meta, misaligned_like, randn, sum_tol

import kjit
from kjit import ops


# ---- Meta tensors: output sizes, defaults, dtypes and parameter errors -------------------------------------


POOL_CONFIGS = [  # kernel_size, stride, padding
    (2, 2, 0),
    (3, 2, 1),
    (3, 1, 1),
    ((2, 3), (1, 2), (1, 1)),
]


# On meta tensors, the forms the GPU tests do not take too.
META_POOL_CONFIGS = POOL_CONFIGS + [
    ((3, 3), (), 0),  # stride defaults to the kernel size
    (5, 3, 2),
    (1, 1, 0),
]


@pytest.mark.parametrize(
    "shape", [(2, 3, 17, 23), (3, 17, 23), (1, 1, 5, 5), (0, 3, 8, 8)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("config", META_POOL_CONFIGS, ids=lambda c: str(c).replace(" ", ""))
def test_meta_pool_output_shapes_follow_torch(shape, config):
    k, s, p = config
    torch_stride = s if s != () else None
    x = meta(*shape)
    want = F.max_pool2d(x, k, torch_stride, p).shape
    assert ops.max_pool2d(x, k, s, p).shape == want
    for cip in (True, False):
        assert ops.avg_pool2d(x, k, s, p, cip).shape == F.avg_pool2d(x, k, torch_stride, p, count_include_pad=cip).shape
    g = meta(*want)
    assert ops.max_pool2d_backward(g, x, k, s, p).shape == shape
    assert ops.avg_pool2d_backward(g, x, k, s, p, False).shape == shape


def test_meta_pool_defaults_and_dtypes():
    x = meta(2, 3, 16, 16, dtype=torch.bfloat16)
    y = ops.max_pool2d(x, 2)
    assert y.shape == (2, 3, 8, 8) and y.dtype == torch.bfloat16
    assert ops.avg_pool2d(x, [4, 4]).shape == (2, 3, 4, 4)
    assert ops.avg_pool2d(x, 3, 1, 1).shape == (2, 3, 16, 16)


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (
            lambda: ops.max_pool2d(meta(1, 1, 8, 8), 2, 2, 2),
            ValueError,
            r"padding \(2, 2\) must be at most half the kernel size \(2, 2\)",
        ),
        (
            lambda: ops.avg_pool2d(meta(1, 1, 8, 8), [3, 2], [1, 1], [1, 2]),
            ValueError,
            r"padding \(1, 2\) must be at most half the kernel size \(3, 2\)",
        ),
        (
            lambda: ops.max_pool2d(meta(1, 1, 8, 8), [2, 2, 2]),
            TypeError,
            r"kernel_size must be an int or a pair of ints, got \[2, 2, 2\]",
        ),
        (lambda: ops.max_pool2d(meta(1, 1, 8, 8), 2, [1, 1, 1]), TypeError, r"stride must be an int or a pair of ints"),
        (lambda: ops.max_pool2d(meta(1, 1, 8, 8), 0), ValueError, r"kernel_size and stride must be >= 1"),
        (lambda: ops.avg_pool2d(meta(1, 1, 8, 8), 2, 0), ValueError, r"kernel_size and stride must be >= 1"),
        (lambda: ops.avg_pool2d(meta(1, 1, 8, 8), 2, 2, -1), ValueError, r"padding >= 0"),
        (
            lambda: ops.max_pool2d(meta(1, 1, 2, 2), 3),
            ValueError,
            r"the input's spatial size \(2, 2\) is too small for kernel_size \(3, 3\)",
        ),
        (
            lambda: ops.max_pool2d(meta(8, 8), 2),
            ValueError,
            r"x must be NCHW or CHW \(4 or 3 dims\), got shape \[8, 8\]",
        ),
        (lambda: ops.avg_pool2d(meta(1, 1, 1, 8, 8), 2), ValueError, r"x must be NCHW or CHW"),
        (
            lambda: ops.max_pool2d(meta(1, 1, 8, 8, dtype=torch.int32), 2),
            TypeError,
            r"x has dtype torch\.int32, which is not supported",
        ),
    ],
)
def test_pool_parameter_errors(call, exc, message):
    with pytest.raises(exc, match=message) as info:
        call()
    assert isinstance(info.value, kjit.Error)


def test_pool_kernel_size_of_the_wrong_type_is_rejected():
    # A float does not match the schema's int[2]: the dispatcher rejects it before kjit sees it.
    with pytest.raises((TypeError, RuntimeError), match="kernel_size"):
        ops.max_pool2d(meta(1, 1, 8, 8), 2.0)
    with pytest.raises((TypeError, RuntimeError)):
        ops.avg_pool2d(meta(1, 1, 8, 8), "2")


# ---- on a GPU: against PyTorch -----------------------------------------------------------------------------


POOL_SHAPES = [(2, 3, 17, 23), (3, 17, 23)]


def distinct(shape, dtype):
    """Values with no ties in dtype (so that max pooling's argmax is unique), of both signs."""
    n = math.prod(shape)
    if dtype in (torch.float16, torch.bfloat16):
        base = 0x3C00 if dtype == torch.float16 else 0x3F80  # 1.0; consecutive bit patterns are increasing
        bits = (torch.randperm(n, device=DEV) + base).to(torch.int16)
        v = bits.view(dtype)
    else:
        v = (torch.randperm(n, device=DEV) + 1).to(dtype)
    sign = torch.randint(0, 2, (n,), device=DEV).to(dtype) * 2 - 1
    return (v * sign).view(shape)


def config_id(c):
    return "k{}_s{}_p{}".format(*c).replace(" ", "")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", POOL_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("config", POOL_CONFIGS, ids=config_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_max_pool2d(dtype, config, shape):
    k, s, p = config
    x = randn(*shape, dtype=dtype)
    y = ops.max_pool2d(x, k, s, p)
    assert torch.equal(y, F.max_pool2d(x, k, s, p))
    # Backward on values without ties, against PyTorch's autograd in float64.
    x = distinct(shape, dtype).requires_grad_()
    y = ops.max_pool2d(x, k, s, p)
    g = randn(*y.shape, dtype=dtype)
    y.backward(g)
    x64 = x.detach().double().requires_grad_()
    F.max_pool2d(x64, k, s, p).backward(g.double())
    close(x.grad, x64.grad.to(dtype), **sum_tol(dtype, 9))
    assert torch.equal(x.grad, ops.max_pool2d_backward(g, x.detach(), k, s, p))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", POOL_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize(
    "config, count_include_pad",
    [(c, True) for c in POOL_CONFIGS] + [(c, False) for c in POOL_CONFIGS if c[2] != 0],  # no padding: the same divisor
    ids=lambda v: ("count_pad" if v else "no_count_pad") if isinstance(v, bool) else config_id(v),
)
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_avg_pool2d(dtype, config, count_include_pad, shape):
    k, s, p = config
    x = randn(*shape, dtype=dtype).requires_grad_()
    y = ops.avg_pool2d(x, k, s, p, count_include_pad)
    x64 = x.detach().double().requires_grad_()
    y64 = F.avg_pool2d(x64, k, s, p, count_include_pad=count_include_pad)
    close(y, y64.to(dtype), **sum_tol(dtype, 9))
    g = randn(*y.shape, dtype=dtype)
    y.backward(g)
    y64.backward(g.double())
    close(x.grad, x64.grad.to(dtype), **sum_tol(dtype, 9))
    assert torch.equal(x.grad, ops.avg_pool2d_backward(g, x.detach(), k, s, p, count_include_pad))


@pytest.mark.gpu
def test_pool_defaults_layouts_and_empty():
    x = randn(2, 3, 16, 17)
    torch.testing.assert_close(ops.max_pool2d(x, 2), F.max_pool2d(x, 2), rtol=0, atol=0)
    torch.testing.assert_close(ops.avg_pool2d(x, [3, 3]), F.avg_pool2d(x, 3), rtol=1e-5, atol=1e-5)
    xt = randn(2, 3, 17, 16).transpose(2, 3)  # non-contiguous: made contiguous first
    torch.testing.assert_close(ops.max_pool2d(xt, 3, 2, 1), F.max_pool2d(xt, 3, 2, 1), rtol=0, atol=0)
    xm = misaligned_like(x)
    torch.testing.assert_close(ops.avg_pool2d(xm, 3, 1, 1), F.avg_pool2d(xm, 3, 1, 1), rtol=1e-5, atol=1e-5)
    e = torch.empty(0, 3, 8, 8, device=DEV)
    assert ops.max_pool2d(e, 2).shape == (0, 3, 4, 4)
    assert ops.avg_pool2d(e, 2).shape == (0, 3, 4, 4)
    # A NaN in a window wins, as in PyTorch.
    x = randn(1, 1, 8, 8)
    x[0, 0, 3, 4] = float("nan")
    torch.testing.assert_close(ops.max_pool2d(x, 2), F.max_pool2d(x, 2), rtol=0, atol=0, equal_nan=True)


# The tiled forward (pool2d_tiled_forward) at the edges of its tiles: a plane smaller than a tile (several
# planes' bands per block), 257 x 255 (odd W: scalar loads; a partial last row band and column tile),
# 40 x 264 (16-byte vectors, two or three column tiles; misaligned by one element: scalar loads), 6 x 2056
# (the register path's widest rows: 128 threads, 4 rows a block); K == S windows (the register path; 3x3
# s3: R * KW not a power of two) and a window over 8 (the fallback).
POOL_EDGE_CONFIGS = POOL_CONFIGS + [(3, 3, 0), (9, 4, 4)]


POOL_EDGE_SHAPES = [(1, 1, 7, 7), (2, 257, 255), (1, 2, 40, 264), (1, 6, 2056)]


@pytest.mark.gpu
@pytest.mark.parametrize("config", POOL_EDGE_CONFIGS, ids=config_id)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dname)  # float16: bfloat16's tiles
def test_pool2d_tiled_forward_edges(dtype, config):
    k, s, p = config
    for shape in POOL_EDGE_SHAPES:
        x = randn(*shape, dtype=dtype)
        views = [x, misaligned_like(x)] if shape[-1] % 8 == 0 else [x]
        for v in views:
            assert torch.equal(ops.max_pool2d(v, k, s, p), F.max_pool2d(v, k, s, p)), (shape, v.data_ptr() % 16)
            for cip in (True, False) if p != 0 else (True,):
                want = F.avg_pool2d(v.double(), k, s, p, count_include_pad=cip).to(dtype)
                close(ops.avg_pool2d(v, k, s, p, cip), want, **sum_tol(dtype, 81))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_pool2d_nan_on_tile_halos_and_all_minus_inf_windows(dtype):
    # 40 x 264: row bands of 16 (stride 2) or 16 (stride 1) output rows, column tiles of 128 outputs, so
    # input rows 15 / 16 / 31 / 32 and columns 127 / 128 / 255 / 256 sit on the halo two tiles share.
    x = randn(1, 2, 40, 264, dtype=dtype)
    for r, c in [(15, 50), (16, 200), (20, 255), (33, 256), (31, 127), (8, 128), (0, 0), (39, 263)]:
        x[0, 1, r, c] = float("nan")
    x[0, 0, :5, :5] = float("-inf")  # windows all -inf, against the padding corner
    x[0, 0, 20:26, 120:134] = float("-inf")  # and inside, across a column tile's edge
    for k, s, p in [(3, 2, 1), (3, 1, 1), ((2, 3), (1, 2), (1, 1)), (2, 2, 0)]:
        y = ops.max_pool2d(x, k, s, p)
        torch.testing.assert_close(y, F.max_pool2d(x, k, s, p), rtol=0, atol=0, equal_nan=True)
        assert y[0, 0, 0, 0] == float("-inf")
        want = F.avg_pool2d(x.double(), k, s, p).to(dtype)
        close(ops.avg_pool2d(x, k, s, p), want, **sum_tol(dtype, 9), equal_nan=True)
    # The backward of an all -inf window routes the gradient to its first element inside the input, as
    # PyTorch does (the plane without NaN; grads of different windows may add in another order).
    x0 = x[:, :1].clone().requires_grad_()
    y = ops.max_pool2d(x0, 3, 2, 1)
    g = randn(*y.shape, dtype=dtype)
    y.backward(g)
    xr = x0.detach().clone().requires_grad_()
    F.max_pool2d(xr, 3, 2, 1).backward(g)
    close(x0.grad, xr.grad, **sum_tol(dtype, 4))


@pytest.mark.gpu
def test_pool2d_many_planes():
    # More than 65535 planes (N * C), in tiles of several planes each.
    x = randn(3, 30000, 5, 6)
    for k, s, p in [(2, 2, 0), (3, 2, 1), (3, 1, 1)]:
        assert torch.equal(ops.max_pool2d(x, k, s, p), F.max_pool2d(x, k, s, p))
        close(ops.avg_pool2d(x, k, s, p), F.avg_pool2d(x.double(), k, s, p).float(), **sum_tol(torch.float32, 9))


# torch.profiler.profile warns that it "clears events at the end of each cycle" (the events of the one cycle
# this test records are all it reads): expected here, filtered here (":" cannot be written in the filter).
@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events at the end of each cycle:UserWarning")
def test_pool2d_reference_shapes_run_the_tiled_kernel():
    # The bench's reference rows (bench/bandwidth.py: reference_cases) on fewer planes: same tiles.
    cases = [
        (ops.max_pool2d, F.max_pool2d, torch.float32, (3, 2, 1), True),
        (ops.max_pool2d, F.max_pool2d, torch.bfloat16, (3, 2, 1), True),
        (ops.avg_pool2d, F.avg_pool2d, torch.bfloat16, (2, 2, 0), True),
        (ops.avg_pool2d, F.avg_pool2d, torch.float32, (3, 1, 1), True),
    ]
    for op, ref, dtype, (k, s, p), tiled in cases:
        x = randn(2, 8, 256, 256, dtype=dtype)
        op(x, k, s, p)  # compiled outside the trace
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            y = op(x, k, s, p)
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if "pool2d" in e.name]
        fallback = any("pool2d_forward" in n.replace("pool2d_tiled_forward", "") for n in names)
        assert any("pool2d_tiled_forward" in n for n in names) == tiled and fallback != tiled, (dtype, k, s, p, names)
        close(y, ref(x.double(), k, s, p).to(dtype), **sum_tol(dtype, 9))


@pytest.mark.gpu
def test_pool_gradcheck():
    x = distinct((2, 2, 7, 9), torch.float64).requires_grad_()
    for k, s, p in POOL_CONFIGS:
        assert torch.autograd.gradcheck(lambda t, k=k, s=s, p=p: ops.max_pool2d(t, k, s, p), (x,))
        for cip in (True, False):
            assert torch.autograd.gradcheck(lambda t, k=k, s=s, p=p, cip=cip: ops.avg_pool2d(t, k, s, p, cip), (x,))
