"""kjit.ops.group_norm (python/src/ops/group_norm.cpp) and its kernels, kernel_templates/group_norm.cuh.

The kernels launched directly (kjit.Template.builtin("group_norm")): the forward with its fused activation
(silu, mish), FiLM scale / shift and residual, the statistics it keeps, and the backward (dx and the
per-(batch, channel) sums of dw, db, dscale, dshift), against PyTorch's F.group_norm composition in float64 on
the same (rounded) inputs. Without a GPU: every form compiles for sm_80, sm_90 and sm_100.

The ops (group_norm, group_norm_forward, group_norm_backward): against the same composition and its autograd
in every dtype at awkward sizes, gradcheck in float64, the U-Net's FiLM as the halves of one embedding, CUDA
graph capture; their argument errors on meta tensors (no GPU). The op table's row adds opcheck, Meta against
the CUDA function, the planned kernels' compiles and the bad-input categories.

Sizes: the U-Net's block (C 256, L 16, 8 groups), channels per group not a multiple of anything (3), a
horizon of 1 and 3, a long one (1000: vectors and several of them per lane), 3 groups.
"""

import pytest
import torch
import torch.nn.functional as F
from family_helpers import ARCHS, DEV
from op_table import FLOATING
from support import ORIGINS, dname

import kjit

ACTS = {0: lambda z: z, 1: F.silu, 2: F.mish}


def family(kernel):
    return kjit.Template.builtin("group_norm").kernel(kernel, **kjit._core.library_compile_options())


def forward_kernel(
    dtype, *, threads=256, vec=1, act=0, w=True, b=True, scale=False, shift=False, res=False, stats=True, arch=None
):
    """group_norm_forward in these forms (arch: compiled for it, else for this GPU)."""
    where = {"arch": arch} if arch else {}
    return family("group_norm_forward").specialize(
        T=dtype,
        THREADS=threads,
        VEC=vec,
        ACT=act,
        HAS_W=w,
        HAS_B=b,
        FILM_SCALE=scale,
        FILM_SHIFT=shift,
        RESIDUAL=res,
        STATS=stats,
        **where,
    )


def backward_kernel(dtype, *, threads=256, vec=1, act=0, w=True, b=True, scale=False, arch=None):
    where = {"arch": arch} if arch else {}
    return family("group_norm_backward").specialize(
        T=dtype, THREADS=threads, VEC=vec, ACT=act, HAS_W=w, HAS_B=b, FILM_SCALE=scale, **where
    )


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", FLOATING, ids=dname)
def test_every_form_compiles(arch, dtype):
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    kernels = [
        forward_kernel(dtype, vec=vec, act=2, scale=True, shift=True, res=True, arch=arch),
        forward_kernel(dtype, threads=128, w=False, b=False, stats=False, arch=arch),
        backward_kernel(dtype, vec=vec, act=2, scale=True, arch=arch),
        backward_kernel(dtype, threads=64, act=1, w=False, b=False, arch=arch),
    ]
    for k in kernels:
        assert str(k.origin) in ORIGINS and k.target == arch


# ---- on a GPU ------------------------------------------------------------------------------------------------

SIZES = [(1, 256, 16, 8), (2, 24, 3, 8), (3, 40, 1, 8), (2, 64, 1000, 8), (1, 12, 5, 3)]
TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _vec(dtype, length):
    v = 16 // torch.empty((), dtype=dtype).element_size()
    return v if length % v == 0 else 1


def _inputs(bsz, c, length, dtype, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)

    def r(*s, scale=1.0, offset=0.0):
        return (torch.randn(*s, device=DEV, generator=g, dtype=torch.float64) * scale + offset).to(dtype)

    # x off zero (the moments are taken around the mean), each group at its own level.
    x = r(bsz, c, length, scale=2.0) + r(bsz, c, 1, scale=3.0, offset=5.0)
    emb = r(bsz, 2, c, scale=0.5, offset=0.5)  # FiLM scale and shift halves of one [B, 2, C] embedding
    return x, r(c, scale=0.3, offset=1.0), r(c, scale=0.3), emb, r(bsz, c, length)


def _reference(x, groups, w, b, act, scale, shift, res, eps):
    z = F.group_norm(x, groups, w, b, eps)
    y = ACTS[act](z)
    if scale is not None:
        y = y * scale[:, :, None]
    if shift is not None:
        y = y + shift[:, :, None]
    return y + res if res is not None else y


def _film_pointers(emb):
    """The scale and shift halves of emb [B, 2, C] as the kernels take them: their first elements, film_ld 2C
    apart (1-D contiguous views at those offsets)."""
    flat = emb.flatten()
    return flat, flat[emb.shape[2] :]


def _launch_forward(k, x, groups, w, b, scale, shift, res, eps, threads):
    """scale / shift: emb's halves (_film_pointers) or None."""
    bsz, c, length = x.shape
    y = torch.empty_like(x)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    mean = torch.empty(bsz * groups, device=DEV, dtype=acc)
    rstd = torch.empty_like(mean)
    k.launch(
        min(bsz * groups, 1024),
        threads,
        x,
        w,
        b,
        scale,
        shift,
        2 * c,
        res,
        y,
        mean,
        rstd,
        bsz * groups,
        groups,
        c // groups,
        length,
        eps,
    )
    return y, mean, rstd


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATING, ids=dname)
@pytest.mark.parametrize("act", [0, 1, 2], ids=["none", "silu", "mish"])
@pytest.mark.parametrize("film", [False, True], ids=["plain", "film+residual"])
def test_forward_matches_the_group_norm_composition(dtype, act, film):
    tol = TOL[dtype]
    for i, (bsz, c, length, groups) in enumerate(SIZES):
        x, w, b, emb, res = _inputs(bsz, c, length, dtype, seed=i)
        scale, shift = (emb[:, 0], emb[:, 1]) if film else (None, None)
        r = res if film else None
        threads = 128 if i % 2 else 256
        k = forward_kernel(dtype, threads=threads, vec=_vec(dtype, length), act=act, scale=film, shift=film, res=film)
        y, mean, rstd = _launch_forward(
            k, x, groups, w, b, *(_film_pointers(emb) if film else (None, None)), r, 1e-5, threads
        )
        d = lambda t: None if t is None else t.double()  # noqa: E731
        want = _reference(x.double(), groups, w.double(), b.double(), act, d(scale), d(shift), d(r), 1e-5)
        torch.testing.assert_close(
            y.double(), want.to(dtype).double(), atol=tol * 4, rtol=tol, msg=str((bsz, c, length))
        )
        xg = x.double().view(bsz, groups, -1)
        torch.testing.assert_close(mean.double(), xg.mean(-1).flatten(), atol=tol, rtol=tol)
        want_rstd = (xg.var(-1, unbiased=False) + 1e-5).rsqrt().flatten()
        torch.testing.assert_close(rstd.double(), want_rstd, atol=tol, rtol=tol)


@pytest.mark.gpu
def test_forward_without_affine_or_statistics():
    x, *_ = _inputs(2, 24, 3, torch.float32, seed=9)
    k = forward_kernel(torch.float32, threads=64, w=False, b=False, stats=False)
    y = torch.empty_like(x)
    k.launch(4, 64, x, None, None, None, None, 0, None, y, None, None, 2 * 8, 8, 3, 3, 1e-6)
    torch.testing.assert_close(y, F.group_norm(x.double(), 8, eps=1e-6).float(), atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=dname)
@pytest.mark.parametrize("act", [0, 1, 2], ids=["none", "silu", "mish"])
def test_backward_matches_autograd(dtype, act):
    tol = TOL[dtype] * (4 if dtype != torch.float64 else 1)
    for i, (bsz, c, length, groups) in enumerate(SIZES):
        x, w, b, emb, _ = _inputs(bsz, c, length, dtype, seed=20 + i)
        scale, shift = emb[:, 0], emb[:, 1]
        threads = 128 if i % 2 else 256
        vec = _vec(dtype, length)
        fs, fh = _film_pointers(emb)
        k = forward_kernel(dtype, threads=threads, vec=vec, act=act, scale=True, shift=True)
        _, mean, rstd = _launch_forward(k, x, groups, w, b, fs, fh, None, 1e-5, threads)
        dy = torch.randn(bsz, c, length, device=DEV, dtype=torch.float64).to(dtype)
        acc = mean.dtype
        dx = torch.empty_like(x)
        sums = [torch.full((bsz, c), float("nan"), device=DEV, dtype=acc) for _ in range(4)]
        k = backward_kernel(dtype, threads=threads, vec=vec, act=act, scale=True)
        k.launch(
            min(bsz * groups, 1024),
            threads,
            dy,
            x,
            mean,
            rstd,
            w,
            b,
            fs,
            2 * c,
            dx,
            *sums,
            bsz * groups,
            groups,
            c // groups,
            length,
        )
        leaves = [t.double().requires_grad_() for t in (x, w, b, scale, shift)]
        y = _reference(leaves[0], groups, *leaves[1:3], act, *leaves[3:5], None, 1e-5)
        gx, gw, gb, gscale, gshift = torch.autograd.grad(y, leaves, dy.double())
        where = str((dtype, act, bsz, c, length))
        # dx from the kernel's statistics (rounded to float32 for the 16-bit types) and a 16-bit output.
        scale_x = gx.abs().max().item()
        torch.testing.assert_close(dx.double(), gx, atol=tol * max(scale_x, 1.0), rtol=tol, msg=where)
        for got, want in ((sums[0].sum(0), gw), (sums[1].sum(0), gb), (sums[2], gscale), (sums[3], gshift)):
            big = max(want.abs().max().item(), 1.0)
            torch.testing.assert_close(got.double(), want, atol=tol * big, rtol=tol, msg=where)


# ---- the ops ---------------------------------------------------------------------------------------------------

OP_SIZES = [(1, 256, 16, 8), (2, 24, 3, 8), (3, 40, 1, 8), (2, 64, 1000, 8), (1, 12, 5, 3), (2, 6, 7, 1)]
OP_TOL = {torch.float64: 1e-10, torch.float32: 3e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _op_reference(x, groups, w, b, act, scale, shift, res, eps=1e-5):
    """The composition in float64, on [B, C] or [B, C, 1] FiLM terms."""
    d = lambda t: None if t is None else t.double()  # noqa: E731
    y = ACTS[act](F.group_norm(x.double(), groups, d(w), d(b), eps))
    if scale is not None:
        y = y * d(scale).reshape(*x.shape[:2], 1)
    if shift is not None:
        y = y + d(shift).reshape(*x.shape[:2], 1)
    return y + res.double() if res is not None else y


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATING, ids=dname)
@pytest.mark.parametrize("act", [0, 1, 2], ids=["none", "silu", "mish"])
def test_op_matches_the_composition(dtype, act):
    """y = act(group_norm(x)) * scale + shift + residual at U-Net sizes and awkward ones, the FiLM terms the
    halves of one [B, 2, C, 1] embedding (read in place at batch stride 2C); and the statistics."""
    tol = OP_TOL[dtype]
    name = {0: None, 1: "silu", 2: "mish"}[act]
    for i, (bsz, c, length, groups) in enumerate(OP_SIZES):
        x, w, b, emb, res = _inputs(bsz, c, length, dtype, seed=40 + i)
        e = emb.unsqueeze(-1)  # [B, 2, C, 1]
        scale, shift = e[:, 0], e[:, 1]
        y = kjit.ops.group_norm(x, groups, w, b, activation=name, scale=scale, shift=shift, residual=res)
        want = _op_reference(x, groups, w, b, act, scale, shift, res)
        where = str((dtype, act, bsz, c, length))
        torch.testing.assert_close(y.double(), want.to(dtype).double(), atol=tol * 8, rtol=tol, msg=where)
        y2, mean, rstd = kjit.ops.group_norm_forward(x, groups, w, b, 1e-5, name, scale, shift, res)
        assert torch.equal(y2, y), where
        xg = x.double().view(bsz, groups, -1)
        assert mean.shape == (bsz, groups) and mean.dtype == (
            torch.float64 if dtype == torch.float64 else torch.float32
        )
        torch.testing.assert_close(mean.double(), xg.mean(-1), atol=tol, rtol=tol, msg=where)
        torch.testing.assert_close(rstd.double(), (xg.var(-1, unbiased=False) + 1e-5).rsqrt(), atol=tol, rtol=tol)
        # No affine, no FiLM, no residual: F.group_norm itself; a 4-D x.
        x4 = x.view(bsz, c, 1, length)
        torch.testing.assert_close(
            kjit.ops.group_norm(x4, groups, eps=1e-3).double(),
            F.group_norm(x4.double(), groups, eps=1e-3).to(dtype).double(),
            atol=tol * 8,
            rtol=tol,
            msg=where,
        )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dname)
def test_op_gradients_match_autograd(dtype):
    """Every input's gradient through kjit.ops.group_norm (Mish, FiLM halves of one embedding, residual)
    against autograd of the composition in float64."""
    tol = OP_TOL[dtype] * 4
    for i, (bsz, c, length, groups) in enumerate(OP_SIZES):
        x, w, b, emb, res = _inputs(bsz, c, length, dtype, seed=60 + i)
        leaves = [t.clone().requires_grad_() for t in (x, w, b, emb, res)]
        xl, wl, bl, el, rl = leaves
        e = el.unsqueeze(-1)
        y = kjit.ops.group_norm(xl, groups, wl, bl, activation="mish", scale=e[:, 0], shift=e[:, 1], residual=rl)
        dy = torch.randn_like(y)
        got = torch.autograd.grad(y, leaves, dy)
        wide = [t.detach().double().requires_grad_() for t in (x, w, b, emb, res)]
        ew = wide[3].unsqueeze(-1)
        want = torch.autograd.grad(
            _op_reference(wide[0], groups, wide[1], wide[2], 2, ew[:, 0], ew[:, 1], wide[4]), wide, dy.double()
        )
        for n, g, r in zip(("x", "weight", "bias", "emb", "residual"), got, want, strict=True):
            big = max(r.abs().max().item(), 1.0)
            assert g.dtype == dtype and g.shape == r.shape, n
            torch.testing.assert_close(g.double(), r, atol=tol * big, rtol=tol, msg=f"{n} {(bsz, c, length)}")


@pytest.mark.gpu
@pytest.mark.parametrize("act", [None, "silu", "mish"])
def test_op_gradcheck_float64(act):
    g = torch.Generator(device=DEV).manual_seed(3)
    r = lambda *s: torch.randn(*s, device=DEV, dtype=torch.float64, generator=g).requires_grad_()  # noqa: E731
    x, w, b, scale, shift, res = r(2, 6, 5), r(6), r(6), r(2, 6), r(2, 6, 1), r(2, 6, 5)
    f = lambda *a: kjit.ops.group_norm(a[0], 3, a[1], a[2], activation=act, scale=a[3], shift=a[4], residual=a[5])  # noqa: E731
    assert torch.autograd.gradcheck(f, (x, w, b, scale, shift, res))
    # Without the optional inputs (no affine: no dweight / dbias asked of the backward).
    assert torch.autograd.gradcheck(lambda t: kjit.ops.group_norm(t, 2, activation=act), (r(3, 4, 1, 3),))


@pytest.mark.gpu
def test_op_replays_in_a_cuda_graph():
    """The U-Net block's norm (Mish, FiLM, residual) captured in a CUDA graph and replayed on new inputs."""
    x, w, b, emb, res = _inputs(2, 256, 16, torch.bfloat16, seed=7)
    e = emb.unsqueeze(-1)
    run = lambda: kjit.ops.group_norm(x, 8, w, b, activation="mish", scale=e[:, 0], shift=e[:, 1], residual=res)  # noqa: E731
    run()  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = run()
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, run(), atol=0, rtol=0)


@pytest.mark.gpu
def test_op_empty_groups():
    """No batch, no channels or no elements per channel: empty outputs, the statistics of an empty group NaN
    (a mean of nothing), zero weight gradients."""
    for shape in ((0, 4, 3), (2, 0, 3), (2, 4, 0)):
        x = torch.randn(shape, device=DEV, requires_grad=True)
        w = torch.ones(shape[1], device=DEV, requires_grad=True)
        y = kjit.ops.group_norm(x, 2, w)
        assert y.shape == x.shape
        (gx, gw) = torch.autograd.grad(y.sum(), (x, w))
        assert gx.shape == x.shape and torch.equal(gw, torch.zeros_like(w))
    _, mean, rstd = kjit.ops.group_norm_forward(torch.randn(2, 4, 0, device=DEV), 2)
    assert mean.shape == (2, 2) and mean.isnan().all() and rstd.isnan().all()


# ---- argument errors (meta tensors: the Meta kernel checks as the CUDA one does) ---------------------------------


def _meta(*shape, dtype=torch.float32):
    return torch.empty(shape, device="meta", dtype=dtype)


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda: kjit.ops.group_norm(_meta(2, 6, 3), 4), r"x has 6 channels, which 4 groups do not divide"),
        (lambda: kjit.ops.group_norm(_meta(2, 6, 3), 0), r"num_groups must be positive, got 0"),
        (
            lambda: kjit.ops.group_norm(_meta(6), 2),
            r"x must be \[batch, channels, \*\] \(at least 2 dims\), got shape \[6\]",
        ),
        (
            lambda: kjit.ops.group_norm(_meta(2, 6, 3), 2, activation="gelu"),
            r"activation must be None, 'silu' or 'mish', got 'gelu'",
        ),
        (
            lambda: kjit.ops.group_norm(_meta(2, 6, 3), 2, scale=_meta(2, 6, 3)),
            r"scale has shape \[2, 6, 3\] but must have shape \[2, 6\] or \[2, 6, 1\]",
        ),
        (
            lambda: kjit.ops.group_norm(_meta(2, 6, 3), 2, shift=_meta(1, 6)),
            r"shift has shape \[1, 6\] but must have shape",
        ),
        (lambda: kjit.ops.group_norm(_meta(2, 6, 3), 2, _meta(5)), r"weight has shape \[5\] but must have shape \[6\]"),
        (lambda: kjit.ops.group_norm(_meta(2, 6, 3), 2, residual=_meta(2, 6, 1)), r"residual has shape \[2, 6, 1\]"),
        (
            lambda: kjit.ops.group_norm_backward(_meta(2, 6, 3), _meta(2, 6, 3), _meta(2, 3), _meta(2, 3), 2),
            r"mean has shape \[2, 3\] but must have shape \[2, 2\]",
        ),
        (
            lambda: kjit.ops.group_norm_backward(
                _meta(2, 6, 3, dtype=torch.bfloat16),
                _meta(2, 6, 3, dtype=torch.bfloat16),
                _meta(2, 2, dtype=torch.bfloat16),
                _meta(2, 2),
                2,
            ),
            r"mean has dtype BFloat16 but must have dtype Float for x of dtype BFloat16",
        ),
    ],
)
def test_op_argument_errors(call, pattern):
    with pytest.raises(kjit.ValueError, match=r"^kjit\.ops\.group_norm(_backward)?: " + pattern):
        call()
