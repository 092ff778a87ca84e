"""A diffusion policy's 1-D U-Net (Diffusion Policy's ConditionalUnet1D, written from its description) on kjit's
ops, against the same network in plain PyTorch modules with the same parameters.

    python examples/diffusion_policy_kjit.py [--batch 1] [--horizon 16] [--dtype float32] [--no-timing]

The network: Conv1dBlock = Conv1d(k, padding k // 2) -> GroupNorm(8) -> Mish; a conditional residual block is two
of them with FiLM from the condition between (Linear(Mish(cond)) as a [B, 2, C, 1] scale and bias) and a 1x1
Conv1d residual where the channels change; down levels [256, 512, 1024] of two blocks and a Downsample1d
(Conv1d k=3 s=2), two mid blocks, up levels on the skip concatenation with an Upsample1d (ConvTranspose1d k=4
s=2), a final Conv1dBlock and a 1x1 Conv1d to the action dim; the diffusion step through a sinusoidal embedding
(256) and Linear -> Mish -> Linear, concatenated with the global observation condition.

The kjit forward runs each Conv1dBlock as kjit.ops.conv1d and one kjit.ops.group_norm with the Mish, the FiLM
scale / shift (the two halves of one linear's output, read in place) and the residual fused after the norm;
the condition's Mish once for every block; the down / up sampling as kjit.ops.conv1d / conv_transpose1d; the
denoising step as kjit.ops.ddpm_step on a coefficient table on the device, so that one CUDA graph holds all
100 steps. The reference is nn.Conv1d / nn.GroupNorm / nn.Mish / nn.ConvTranspose1d modules.

main() checks the kjit U-Net's output and every parameter's gradient against the reference, then times a
forward in six modes (eager, eager in one CUDA graph, torch.compile default and reduce-overhead, kjit eager,
kjit in one CUDA graph) and a 100-step action, and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

import kjit

DOWN_DIMS = (256, 512, 1024)


class Conv1dBlock(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, groups: int = 8):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, padding=k // 2)
        self.norm = nn.GroupNorm(groups, cout)
        self.groups, self.pad = groups, k // 2

    def forward(self, x):
        return F.mish(self.norm(self.conv(x)))

    def kjit(self, x, scale=None, shift=None, residual=None):
        """The block on kjit: the conv, then one kernel for the norm, the Mish and what follows the block."""
        y = kjit.ops.conv1d(x, self.conv.weight, self.conv.bias, padding=self.pad)
        n = self.norm
        return kjit.ops.group_norm(
            y, self.groups, n.weight, n.bias, n.eps, "mish", scale=scale, shift=shift, residual=residual
        )


class ResidualBlock(nn.Module):
    """ConditionalResidualBlock1D with cond_predict_scale: FiLM scale and bias from the condition."""

    def __init__(self, cin: int, cout: int, cond_dim: int, k: int = 5, groups: int = 8):
        super().__init__()
        self.block0, self.block1 = Conv1dBlock(cin, cout, k, groups), Conv1dBlock(cout, cout, k, groups)
        self.cond = nn.Linear(cond_dim, 2 * cout)
        self.residual = nn.Conv1d(cin, cout, 1) if cin != cout else None
        self.cout = cout

    def forward(self, x, cond):
        embed = self.cond(F.mish(cond)).view(-1, 2, self.cout, 1)
        out = embed[:, 0] * self.block0(x) + embed[:, 1]
        res = self.residual(x) if self.residual is not None else x
        return self.block1(out) + res

    def kjit(self, x, mish_cond):
        """mish_cond: Mish(cond), computed once for every block."""
        e = kjit.ops.linear(mish_cond, self.cond.weight, self.cond.bias).view(-1, 2, self.cout)
        out = self.block0.kjit(x, scale=e[:, 0], shift=e[:, 1])
        res = x if self.residual is None else kjit.ops.conv1d(x, self.residual.weight, self.residual.bias)
        return self.block1.kjit(out, residual=res)


def sinusoidal(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freq = torch.exp(torch.arange(half, device=t.device, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
    arg = t.float()[:, None] * freq[None]
    return torch.cat([arg.sin(), arg.cos()], -1)


class ConditionalUnet1D(nn.Module):
    def __init__(
        self, action_dim: int, global_cond_dim: int, dims=DOWN_DIMS, k: int = 5, groups: int = 8, step_dim=256
    ):
        super().__init__()
        self.step_dim = step_dim
        self.step_in, self.step_out = nn.Linear(step_dim, 4 * step_dim), nn.Linear(4 * step_dim, step_dim)
        cond = step_dim + global_cond_dim
        all_dims = (action_dim, *dims)
        pairs = list(zip(all_dims[:-1], all_dims[1:]))
        self.down = nn.ModuleList()
        for i, (cin, cout) in enumerate(pairs):
            last = i == len(pairs) - 1
            sample = None if last else nn.Conv1d(cout, cout, 3, stride=2, padding=1)
            self.down.append(
                nn.ModuleList(
                    [ResidualBlock(cin, cout, cond, k, groups), ResidualBlock(cout, cout, cond, k, groups), sample]
                )
            )
        mid = dims[-1]
        self.mid = nn.ModuleList([ResidualBlock(mid, mid, cond, k, groups) for _ in range(2)])
        self.up = nn.ModuleList()
        for cin, cout in reversed(pairs[1:]):
            self.up.append(
                nn.ModuleList(
                    [
                        ResidualBlock(2 * cout, cin, cond, k, groups),
                        ResidualBlock(cin, cin, cond, k, groups),
                        nn.ConvTranspose1d(cin, cin, 4, stride=2, padding=1),
                    ]
                )
            )
        self.final_block = Conv1dBlock(dims[0], dims[0], k, groups)
        self.final_conv = nn.Conv1d(dims[0], action_dim, 1)

    def _condition(self, timestep, global_cond, mish):
        emb = sinusoidal(timestep, self.step_dim).to(global_cond.dtype)
        emb = self.step_out(mish(self.step_in(emb)))
        return torch.cat([emb, global_cond], -1)

    def forward(self, sample, timestep, global_cond):
        """sample [B, T, action_dim], timestep [B], global_cond [B, G] -> the predicted noise, sample's shape."""
        cond = self._condition(timestep, global_cond, F.mish)
        x, skips = sample.transpose(1, 2), []
        for block0, block1, down in self.down:
            x = block1(block0(x, cond), cond)
            skips.append(x)
            x = down(x) if down is not None else x
        for block in self.mid:
            x = block(x, cond)
        for block0, block1, up in self.up:
            x = up(block1(block0(torch.cat([x, skips.pop()], 1), cond), cond))
        return self.final_conv(self.final_block(x)).transpose(1, 2)

    def kjit(self, sample, timestep, global_cond):
        """The same network on kjit's ops."""
        m = kjit.ops.mish(self._condition(timestep, global_cond, kjit.ops.mish))
        x, skips = sample.transpose(1, 2), []
        for block0, block1, down in self.down:
            x = block1.kjit(block0.kjit(x, m), m)
            skips.append(x)
            if down is not None:
                x = kjit.ops.conv1d(x, down.weight, down.bias, stride=2, padding=1)
        for block in self.mid:
            x = block.kjit(x, m)
        for block0, block1, up in self.up:
            x = block1.kjit(block0.kjit(torch.cat([x, skips.pop()], 1), m), m)
            x = kjit.ops.conv_transpose1d(x, up.weight, up.bias, stride=2, padding=1)
        x = self.final_block.kjit(x)
        return kjit.ops.conv1d(x, self.final_conv.weight, self.final_conv.bias).transpose(1, 2)


def squared_cosine_betas(steps: int) -> torch.Tensor:
    """The schedule Diffusion Policy trains with (betas clipped at 0.999), float64."""
    t = torch.arange(steps + 1, dtype=torch.float64) / steps
    f = torch.cos((t + 0.008) / 1.008 * torch.pi / 2) ** 2
    return (1 - f[1:] / f[:-1]).clamp(max=0.999)


def denoise(unet_fn, x, global_cond, table, noise, timesteps):
    """The DDPM loop: x from pure noise to an action, one kjit.ops.ddpm_step per step (noise[t] is that
    step's sample noise); timesteps[t] a [B] tensor of t. No host work inside: a CUDA graph can hold it all."""
    for t in reversed(range(table.shape[0])):
        eps = unet_fn(x, timesteps[t], global_cond)
        x = kjit.ops.ddpm_step(x, eps, noise[t] if t > 0 else None, table, t)
    return x


def tolerances(dtype: torch.dtype) -> dict:
    """kjit against the reference, scaled by the largest magnitude: TF32 on both sides in float32 (cuDNN's
    convolutions, kjit's GEMMs), 16-bit roundings of every intermediate in bfloat16."""
    return dict(rtol=2e-2, atol=2e-2) if dtype == torch.float32 else dict(rtol=8e-2, atol=8e-2)


def check(unet: ConditionalUnet1D, args: tuple) -> dict:
    """The output and every parameter's gradient of the kjit U-Net against the reference (asserts they are
    within tolerances()); returns the largest scaled differences."""
    grads = {}
    for name, fn in (("kjit", unet.kjit), ("reference", unet.forward)):
        unet.zero_grad(set_to_none=True)
        out = fn(*args)
        out.float().pow(2).mean().backward()
        grads[name] = {"out": out.detach()}
        grads[name].update({n: p.grad.detach().clone() for n, p in unet.named_parameters()})
    tol = tolerances(args[0].dtype)
    diffs = {}
    for key, want in grads["reference"].items():
        got = grads["kjit"][key]
        scale = want.abs().max().clamp_min(1e-12)
        torch.testing.assert_close(got / scale, want / scale, **tol, msg=lambda s, key=key: f"{key}: {s}")
        diffs[key] = float((got.float() - want.float()).abs().max() / scale)
    return diffs


def graphed(fn):
    """fn captured once in a CUDA graph (after two warm-up calls, on a side stream): replaying returns its
    output tensor, refreshed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()

    def replay():
        g.replay()
        return out

    return replay


def time_ms(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--horizon", type=int, default=16)
    ap.add_argument("--action-dim", type=int, default=10)
    ap.add_argument("--global-cond", type=int, default=512)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--no-timing", action="store_true", help="check outputs and gradients only")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile modes")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(argv=None) -> dict:
    args = _parser().parse_args(argv)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's convolution default, and kjit's float32 GEMMs
    torch.backends.cuda.matmul.allow_tf32 = True
    dtype = getattr(torch, args.dtype)
    unet = ConditionalUnet1D(args.action_dim, args.global_cond).to("cuda", dtype)
    B = args.batch
    sample = torch.randn(B, args.horizon, args.action_dim, device="cuda", dtype=dtype)
    global_cond = torch.randn(B, args.global_cond, device="cuda", dtype=dtype)
    timestep = torch.randint(0, args.steps, (B,), device="cuda")
    inputs = (sample, timestep, global_cond)
    result = {
        "batch": B,
        "horizon": args.horizon,
        "dtype": args.dtype,
        "parameters": sum(p.numel() for p in unet.parameters()),
    }
    result["max_scaled_diff"] = max(check(unet, inputs).values())
    if not args.no_timing:
        unet.requires_grad_(False)
        modes = {"eager": unet.forward, "kjit eager": unet.kjit}
        modes["eager in one CUDA graph"] = graphed(lambda: unet(*inputs))
        modes["kjit in one CUDA graph"] = graphed(lambda: unet.kjit(*inputs))
        if not args.no_compile:
            modes["torch.compile"] = torch.compile(unet)
            modes["torch.compile reduce-overhead"] = torch.compile(unet, mode="reduce-overhead")
        ms = {}
        for name, fn in modes.items():
            call = fn if "graph" in name else (lambda fn=fn: fn(*inputs))
            ms[name] = time_ms(call)
        result["forward_ms"] = ms
        floor = sum(p.numel() * p.element_size() for p in unet.parameters()) / 4.8e9  # ms at 4.8 TB/s (H200)
        result["weights_over_bandwidth_ms"] = floor
        # A whole action: 100 denoising steps from noise, kjit's loop in one CUDA graph.
        table = kjit.ops.ddpm_coefficients(squared_cosine_betas(args.steps).cuda())
        noise = torch.randn(args.steps, *sample.shape, device="cuda", dtype=dtype)
        steps = [torch.full((B,), t, device="cuda") for t in range(args.steps)]
        action = graphed(lambda: denoise(unet.kjit, sample, global_cond, table, noise, steps))
        result["action_ms"] = {"kjit in one CUDA graph": time_ms(action, reps=3)}
        result["speedup"] = {
            f"kjit graph vs {peer}": ms[peer] / ms["kjit in one CUDA graph"]
            for peer in ("eager", "eager in one CUDA graph", "torch.compile reduce-overhead")
            if peer in ms
        }
        result["gpu"] = torch.cuda.get_device_name()
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
