"""kernel_templates/group_norm.cuh launched directly (kjit.Template.builtin("group_norm")): the forward with
its fused activation (silu, mish), FiLM scale / shift and residual, the statistics it keeps, and the
backward (dx and the per-(batch, channel) sums of dw, db, dscale, dshift), against PyTorch's F.group_norm
composition in float64 on the same (rounded) inputs. No op launches these kernels yet (issue 43's
group_norm): these tests pin them first. Without a GPU: every form compiles for sm_80, sm_90 and sm_100.

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
