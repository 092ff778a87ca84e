"""A small Mamba-style block written with kjit's sequence ops, against its PyTorch reference.

    python examples/mamba_kjit.py [--batch 4] [--length 2048] [--model 512] [--inner 1024] [--dtype bfloat16]

The block (a gated linear recurrence in the style of Mamba / Hawk: in_proj, a causal depthwise conv1d with
SiLU, a gated linear scan, out_proj, a residual):

    x, g, z = in_proj(u).chunk(3)                      # [B, L, inner] each
    x = silu(causal_conv1d(x))                         # over time, per channel (width 4)
    a = sigmoid(g);  h[t] = a[t] h[t-1] + (1 - a[t]) x[t]
    out = u + out_proj(h * silu(z))

kjit runs the convolution (kjit.ops.causal_conv1d, reading the projection's output as [B, inner, L] without
a copy) and the recurrence (kjit.ops.linear_scan, parallel over time); the reference runs F.conv1d and a
Python loop over time, as a user writes it without a scan kernel. The projections and the gating are the
same PyTorch code in both. main() checks the outputs and every parameter's gradient against the reference,
then times forward and forward + backward of both (CUDA events) and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch import nn

import kjit


class MambaStyleBlock(nn.Module):
    def __init__(self, model: int, inner: int, width: int = 4, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.in_proj = nn.Linear(model, 3 * inner, bias=False, **kw)
        self.conv_weight = nn.Parameter(torch.randn(inner, width, **kw) / width**0.5)
        self.conv_bias = nn.Parameter(torch.zeros(inner, **kw))
        self.out_proj = nn.Linear(inner, model, bias=False, **kw)
        self.inner = inner

    def _project(self, u: torch.Tensor):
        """x, g, z as [B, inner, L] views of one projection [3 * inner, B * L] (unit stride along L)."""
        B, L, _ = u.shape
        xgz = (self.in_proj.weight @ u.reshape(B * L, -1).T).view(3, self.inner, B, L).permute(0, 2, 1, 3)
        return xgz[0], xgz[1], xgz[2]

    def _out(self, u: torch.Tensor, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        y = (h * F.silu(z)).transpose(1, 2)  # [B, L, inner]
        return u + self.out_proj(y)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """The block with kjit's causal_conv1d and linear_scan."""
        x, g, z = self._project(u)
        x, _ = kjit.ops.causal_conv1d(x, self.conv_weight, self.conv_bias, None, "silu")
        a = torch.sigmoid(g)
        h, _ = kjit.ops.linear_scan(a, (1 - a) * x)
        return self._out(u, h, z)

    def reference(self, u: torch.Tensor) -> torch.Tensor:
        """The same block in PyTorch: F.conv1d, and the recurrence as a Python loop over time (float32 state)."""
        x, g, z = self._project(u)
        W, L = self.conv_weight.shape[-1], u.shape[1]
        x = F.silu(
            F.conv1d(x, self.conv_weight.unsqueeze(1), self.conv_bias, padding=W - 1, groups=self.inner)[..., :L]
        )
        a = torch.sigmoid(g)
        b = (1 - a) * x
        state = torch.zeros(a.shape[:-1], device=u.device, dtype=torch.float32)
        hs = []
        for t in range(L):
            state = a[..., t].float() * state + b[..., t].float()
            hs.append(state)
        h = torch.stack(hs, -1).to(u.dtype)
        return self._out(u, h, z)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--model", type=int, default=512)
    ap.add_argument("--inner", type=int, default=1024)
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--no-timing", action="store_true", help="check outputs and gradients only")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def tolerances(dtype: torch.dtype) -> dict:
    """Outputs and gradients of kjit against the reference: float32 tight; 16-bit types differ by the
    roundings of the intermediate tensors (the reference rounds h once per step only at the end, too)."""
    return dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=5e-2, atol=5e-2)


def check(block: MambaStyleBlock, u: torch.Tensor) -> dict:
    """Outputs and the gradients of u and every parameter, kjit against the reference; returns the largest
    differences (asserts they are within tolerances())."""
    grads = {}
    for name, fn in (("kjit", block.forward), ("reference", block.reference)):
        block.zero_grad(set_to_none=True)
        ui = u.detach().clone().requires_grad_(True)
        out = fn(ui)
        out.float().pow(2).mean().backward()
        grads[name] = {"out": out.detach(), "u": ui.grad}
        grads[name].update({n: p.grad.detach().clone() for n, p in block.named_parameters()})
    tol = tolerances(u.dtype)
    diffs = {}
    for key, want in grads["reference"].items():
        got = grads["kjit"][key]
        scale = want.abs().max().clamp_min(1e-12)
        torch.testing.assert_close(got / scale, want / scale, **tol, msg=lambda s, key=key: f"{key}: {s}")
        diffs[key] = float((got.float() - want.float()).abs().max() / scale)
    return diffs


def time_ms(fn, reps: int = 10) -> float:
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main(argv=None) -> dict:
    args = _parser().parse_args(argv)
    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    block = MambaStyleBlock(args.model, args.inner, device="cuda", dtype=dtype)
    u = torch.randn(args.batch, args.length, args.model, device="cuda", dtype=dtype)
    result = {"shape": [args.batch, args.length, args.model, args.inner], "dtype": args.dtype}
    result["max_scaled_diff"] = check(block, u)
    if not args.no_timing:
        ug = u.clone().requires_grad_(True)

        def train(fn):
            return lambda: fn(ug).float().pow(2).mean().backward()

        with torch.no_grad():
            fk, fr = time_ms(lambda: block(u)), time_ms(lambda: block.reference(u), reps=2)
        bk, br = time_ms(train(block.forward)), time_ms(train(block.reference), reps=2)
        result["ms"] = {"kjit forward": fk, "reference forward": fr, "kjit train step": bk, "reference train step": br}
        result["speedup"] = {"forward": fr / fk, "train step": br / bk}
        result["gpu"] = torch.cuda.get_device_name()
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
