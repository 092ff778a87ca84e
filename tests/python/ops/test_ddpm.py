"""kjit.ops.ddpm_step and ddpm_coefficients (python/src/ops/ddpm.cpp, kernel_templates/ddpm_step.cuh).

On a GPU: a full denoising loop (100 steps, the policy's action sample) against the diffusers DDPMScheduler's
arithmetic written out in float64 in every dtype; the loop captured in one CUDA graph replays the same result
with a new schedule copied into the table (no recapture); gradients against autograd of the composition.
Without a GPU: the kernel compiles for sm_80, sm_90 and sm_100; argument errors on meta tensors.
"""

import pytest
import torch
from family_helpers import ARCHS, DEV
from support import ORIGINS

import kjit

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def _betas(steps=100):
    """The squared-cosine schedule Diffusion Policy trains with (betas clipped at 0.999)."""
    t = torch.arange(steps + 1, dtype=torch.float64) / steps
    f = torch.cos((t + 0.008) / 1.008 * torch.pi / 2) ** 2
    return (1 - f[1:] / f[:-1]).clamp(max=0.999).to(DEV)


def _reference_step(x, eps, noise, betas, t, clip=1.0):
    """DDPMScheduler.step (epsilon prediction, clip_sample, fixed_small variance) in float64."""
    abar = torch.cumprod(1 - betas.double(), 0)
    ab_t, ab_prev = abar[t], abar[t - 1] if t > 0 else torch.ones((), dtype=torch.float64, device=betas.device)
    alpha_t, beta_t = ab_t / ab_prev, 1 - ab_t / ab_prev
    x0 = ((x - (1 - ab_t).sqrt() * eps) / ab_t.sqrt()).clamp(-clip, clip)
    mean = ab_prev.sqrt() * beta_t / (1 - ab_t) * x0 + alpha_t.sqrt() * (1 - ab_prev) / (1 - ab_t) * x
    if t == 0:
        return mean
    return mean + ((1 - ab_prev) / (1 - ab_t) * beta_t).clamp_min(1e-20).sqrt() * noise


@pytest.mark.parametrize("arch", ARCHS)
def test_compiles_for_each_arch(arch):
    for clip in (False, True):
        for noise in (False, True):
            k = kjit.Template.builtin("ddpm_step").kernel("ddpm_step")
            k = k.specialize(arch=arch, T=torch.bfloat16, CT=torch.float32, VEC=8, CLIP=clip, NOISE=noise)
            assert str(k.origin) in ORIGINS


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_loop_matches_the_scheduler(dtype):
    """100 steps from noise, with a stand-in model (eps = tanh(x) * 0.5): each step of kjit's loop against the
    scheduler's arithmetic in float64 applied to the same rounded inputs."""
    g = torch.Generator(device=DEV).manual_seed(0)
    betas = _betas()
    table = kjit.ops.ddpm_coefficients(betas)
    assert table.shape == (100, 5) and table.dtype == torch.float32
    x = torch.randn(8, 16, 10, device=DEV, generator=g).to(dtype)
    tol = {torch.float64: 1e-6, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    for t in reversed(range(100)):
        eps = (torch.tanh(x.float()) * 0.5).to(dtype)
        z = torch.randn(x.shape, device=DEV, generator=g).to(dtype)
        want = _reference_step(x.double(), eps.double(), z.double(), betas, t)
        x = kjit.ops.ddpm_step(x, eps, z if t > 0 else None, table, t)
        torch.testing.assert_close(x.double(), want, atol=tol * 4, rtol=tol, msg=lambda m, t=t: f"step {t}: {m}")


@pytest.mark.gpu
def test_a_graph_of_the_loop_replays_with_a_new_schedule():
    """The whole loop in one CUDA graph: replayed after a new schedule is copied into the table, it gives the
    eager loop's result under that schedule (the coefficients are read on the device)."""
    g = torch.Generator(device=DEV).manual_seed(1)
    table = kjit.ops.ddpm_coefficients(_betas())
    x0 = torch.randn(4, 16, 10, device=DEV, generator=g)
    noise = torch.randn(100, 4, 16, 10, device=DEV, generator=g)
    x = x0.clone()

    def loop(x):
        for t in reversed(range(100)):
            x = kjit.ops.ddpm_step(x, torch.tanh(x) * 0.5, noise[t] if t > 0 else None, table, t)
        return x

    loop(x)  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = loop(x)
    linear = kjit.ops.ddpm_coefficients(torch.linspace(1e-4, 0.02, 100, device=DEV, dtype=torch.float64))
    table.copy_(linear)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, loop(x0.clone()), atol=0, rtol=0)


@pytest.mark.gpu
def test_gradients_match_the_composition():
    """Gradients to x, eps and noise against autograd of the same arithmetic in float64 (the clamp's mask)."""
    g = torch.Generator(device=DEV).manual_seed(2)
    table = kjit.ops.ddpm_coefficients(_betas())
    x, eps, z = (torch.randn(3, 16, 10, device=DEV, dtype=torch.float64, generator=g) * 3 for _ in range(3))
    for clip in (True, False):
        ins = [t.clone().requires_grad_() for t in (x, eps, z)]
        out = kjit.ops.ddpm_step(*ins, table, 40, clip_sample=clip, clip_sample_range=0.8)
        refs = [t.clone().requires_grad_() for t in (x, eps, z)]
        r, q, a, b, s = table[40].double()
        x0 = refs[0] * r - refs[1] * q
        if clip:
            x0 = x0.clamp(-0.8, 0.8)
        want = a * x0 + b * refs[0] + s * refs[2]
        torch.testing.assert_close(out, want)
        dy = torch.randn_like(out)
        for got, ref in zip(torch.autograd.grad(out, ins, dy), torch.autograd.grad(want, refs, dy)):
            torch.testing.assert_close(got, ref)


def _meta(*shape, dtype=torch.float32):
    return torch.empty(shape, device="meta", dtype=dtype)


@pytest.mark.parametrize(
    "call, pattern",
    [
        (
            lambda: kjit.ops.ddpm_step(_meta(2, 3), _meta(2, 3), None, _meta(10, 4), 0),
            r"coefficients must be \[T, 5\] \(kjit\.ops\.ddpm_coefficients\), got shape \[10, 4\]",
        ),
        (
            lambda: kjit.ops.ddpm_step(_meta(2, 3), _meta(2, 3), None, _meta(10, 5), 10),
            r"t=10 is not a row of the coefficients \(allowed: 0 to 9\)",
        ),
        (
            lambda: kjit.ops.ddpm_step(_meta(2, 3), _meta(2, 3), None, _meta(10, 5), 1, True, 0.0),
            r"clip_sample_range must be positive, got 0",
        ),
        (lambda: kjit.ops.ddpm_coefficients(_meta(10, 2)), r"betas must be 1-D \[T\], got shape \[10, 2\]"),
        (lambda: kjit.ops.ddpm_coefficients(_meta(10), 0), r"step must be at least 1, got 0"),
    ],
)
def test_argument_errors(call, pattern):
    with pytest.raises(kjit.ValueError, match=r"^kjit\.ops\.ddpm_(step|coefficients): " + pattern):
        call()


def test_the_table_is_float32_or_float64():
    with pytest.raises(
        kjit.TypeError, match=r"coefficients has dtype torch\.float16.*allowed: torch\.float32, torch\.float64"
    ):
        kjit.ops.ddpm_step(_meta(2, 3), _meta(2, 3), None, _meta(10, 5, dtype=torch.float16), 0)
