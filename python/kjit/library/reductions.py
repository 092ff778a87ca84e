"""Reductions over one dim: sum, mean, amax, amin (keepdim), as torch.ops.kjit.<name>.

The input (made contiguous if it is not) is viewed as [outer, R, inner] around the reduced dim. The
last dim (inner == 1) goes to reduce_rows (a row per TPR threads, in registers when it fits, D
specialized up to KJIT_MAX_SPECIALIZATIONS distinct lengths); any other dim to reduce_cols, which
splits R over more blocks (and a second pass) when outer x inner is too small to fill the GPU. Half
types accumulate in float; the result has the input's dtype, as torch.sum / torch.amax give it.
Gradients: sum and mean spread the gradient, amax / amin split it evenly between the extreme
elements (PyTorch's rule), written with PyTorch ops.
"""

from __future__ import annotations

import math

import torch

from .. import _C
from . import registry, rows

_kernels = registry.KernelCache("reduce")
_OPS = {"sum": 0, "mean": 0, "amax": 1, "amin": 2}


def _out_shape(shape, dim: int, keepdim: bool) -> list[int]:
    shape = list(shape)
    if not shape:
        return []
    if keepdim:
        shape[dim] = 1
    else:
        del shape[dim]
    return shape


def _check_reduced(name: str, x: torch.Tensor, dim: int) -> None:
    """The checks of the reduced dim, shared by the CUDA and the fake implementation."""
    R = x.shape[dim] if x.dim() else 1
    if R > 2**31 - 1:
        raise _C.ValueError(f"kjit.ops.{name}: dim {dim} has {R} elements; at most 2^31 - 1 can be reduced in one dim")
    if R == 0 and name in ("amax", "amin") and math.prod(_out_shape(x.shape, dim, False)):
        raise _C.ValueError(f"kjit.ops.{name}: dim {dim} has size 0 and {name} of nothing is undefined; "
                            f"reduce a non-empty dim (torch.{name} raises here too)")


def _reduce(name: str, x: torch.Tensor, dim: int, keepdim: bool) -> torch.Tensor:
    registry.check_tensor(name, "x", x)
    dim = registry.normalize_dim(name, dim, x.dim())
    _check_reduced(name, x, dim)
    shape = list(x.shape) or [1]
    R = shape[dim]
    outer = 1
    for s in shape[:dim]:
        outer *= s
    inner = 1
    for s in shape[dim + 1:]:
        inner *= s
    out = torch.empty(_out_shape(x.shape, dim, keepdim), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    if R == 0:  # sum or mean (_check_reduced rejects amax / amin)
        return out.fill_(0 if name == "sum" else float("nan"))
    x = x.contiguous()
    scale = 1.0 / R if name == "mean" else 1.0
    dev = x.device.index
    if inner == 1:
        g = rows.geometry(R, (x,), max_per_thread=32)
        D = rows.specialized_d("reduce_rows", R) if g.items else 0
        k = _kernels.get("reduce_rows", dev, T=x.dtype, TO=x.dtype, OP=_OPS[name], **g.params(), D=D)
        k.launch(g.blocks_for(outer), g.block(), x, out, outer, R, scale)
        return out
    _reduce_cols(x, out, name, outer, R, inner, scale, dev)
    return out


def _reduce_cols(x, out, name, outer, R, inner, scale, dev) -> None:
    vec = rows.vector_width(inner, (x,), x.element_size())
    col_blocks = -(-(inner // vec) // 32)
    blocks = outer * col_blocks
    target = 4 * registry.sm_count(dev)
    splits = 1
    if blocks < target and R >= 256:
        splits = min(-(-target // blocks), R // 64)
    chunk = -(-R // splits)
    splits = -(-R // chunk)
    grid_x = min(blocks, 2**31 - 1)
    op = _OPS[name]
    if splits == 1:
        k = _kernels.get("reduce_cols", dev, T=x.dtype, TO=x.dtype, OP=op, VEC=vec)
        k.launch((grid_x, 1, 1), (32, 8), x, out, outer, R, inner, chunk, scale)
        return
    acc = registry.acc_dtype(x.dtype)
    partial = torch.empty((outer, splits, inner), dtype=acc, device=x.device)
    k = _kernels.get("reduce_cols", dev, T=x.dtype, TO=acc, OP=op, VEC=vec)
    k.launch((grid_x, 1, splits), (32, 8), x, partial, outer, R, inner, chunk, 1.0)
    vec2 = rows.vector_width(inner, (partial,), partial.element_size())
    k2 = _kernels.get("reduce_cols", dev, T=acc, TO=x.dtype, OP=op, VEC=vec2)
    grid2 = min(outer * -(-(inner // vec2) // 32), 2**31 - 1)
    k2.launch((grid2, 1, 1), (32, 8), partial, out, outer, splits, inner, splits, scale)


def _fake(name):
    def fake(x, dim=-1, keepdim=False):
        registry.check_tensor(name, "x", x)  # as _reduce checks: torch.compile must not trace what CUDA rejects
        d = registry.normalize_dim(name, dim, x.dim())
        _check_reduced(name, x, d)
        return x.new_empty(_out_shape(x.shape, d, keepdim))

    return fake


def _setup(ctx, inputs, output):
    x, dim, keepdim = (list(inputs) + [-1, False])[:3]
    ctx.shape, ctx.dim, ctx.keepdim = x.shape, registry.normalize_dim("reduce", dim, x.dim()), keepdim
    ctx.save_for_backward(x, output)


def _expand(ctx, t):
    if not ctx.keepdim and len(ctx.shape):
        t = t.unsqueeze(ctx.dim)
    return t.expand(ctx.shape)


def _sum_grad(ctx, grad):
    return _expand(ctx, grad), None, None


def _mean_grad(ctx, grad):
    n = ctx.shape[ctx.dim] if len(ctx.shape) else 1
    return _expand(ctx, grad) / n, None, None


def _extreme_grad(ctx, grad):
    x, out = ctx.saved_tensors
    hit = (x == _expand(ctx, out)).to(grad.dtype)
    count = hit.sum(ctx.dim if len(ctx.shape) else None, keepdim=True)
    return _expand(ctx, grad) * hit / count, None, None


def _define(name, grad):
    def impl(x, dim=-1, keepdim=False):
        return _reduce(name, x, dim, keepdim)

    return registry.define(f"{name}(Tensor x, int dim=-1, bool keepdim=False) -> Tensor", impl, _fake(name),
                           backward=grad, setup_context=_setup)


sum = _define("sum", _sum_grad)  # noqa: A001  (torch.ops.kjit.sum, as torch.sum)
mean = _define("mean", _mean_grad)
amax = _define("amax", _extreme_grad)
amin = _define("amin", _extreme_grad)

__all__ = ["sum", "mean", "amax", "amin"]
