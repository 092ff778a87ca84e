"""layer_norm and rms_norm over the last dim, with optional weight (and bias), with backward.

torch.ops.kjit.layer_norm(x, weight, bias, eps) and rms_norm(x, weight, eps) return the normalized
tensor; no statistics are stored for the backward: norm_backward recomputes mean and rstd from the
row it holds in registers anyway. The backward writes dx and per-block partial sums of dweight /
dbias, reduced by torch.ops.kjit.sum over dim 0. Rows live in registers (up to 128 elements per
thread: rows of up to 131072 elements); the row length is specialized (D) up to
KJIT_MAX_SPECIALIZATIONS distinct lengths per kernel. weight and bias have the input's dtype and
shape [d]. Half types compute in float.
"""

from __future__ import annotations

import torch

from .. import _C
from . import reductions, registry, rows

_kernels = registry.KernelCache("norm")
_MAX_PER_THREAD = 128


def _geometry(name, d, tensors, rms):
    wide = tensors[0].element_size() >= 4 and not rms
    g = rows.geometry(d, tensors, max_per_thread=_MAX_PER_THREAD, vectors_per_thread=8 if wide else 4)
    if g.items == 0:
        raise _C.ValueError(f"kjit.ops.{name}: rows of {d} elements are longer than the kernel holds in registers "
                            f"(at most {1024 * _MAX_PER_THREAD} elements at this alignment); use "
                            "torch.nn.functional for such rows")
    return g


def _check(name, x, weight, bias):
    registry.check_tensor(name, "x", x)
    if x.dim() == 0:
        raise _C.ValueError(f"kjit.ops.{name}: x must have at least one dim (the normalized last dim), got a 0-dim tensor")
    d = x.shape[-1]
    if weight is not None:
        registry.check_like(name, "weight", weight, "x", x, shape=(d,))
    if bias is not None:
        registry.check_like(name, "bias", bias, "x", x, shape=(d,))
    return d


def _forward(name, rms, x, weight, bias, eps):
    d = _check(name, x, weight, bias)
    x, n_rows, d = rows.as_rows(x)
    y = torch.empty_like(x)
    if y.numel() == 0:
        return y
    w = weight.contiguous() if weight is not None else None
    b = bias.contiguous() if bias is not None else None
    g = _geometry(name, d, [t for t in (x, y, w, b) if t is not None], rms)
    D = rows.specialized_d("norm_forward", d)
    k = _kernels.get("norm_forward", x.device.index, T=x.dtype, **g.params(), D=D, RMS=rms, HAS_W=w is not None,
                     HAS_B=b is not None)
    k.launch(g.blocks_for(n_rows), g.block(), x, w, b, y, n_rows, d, float(eps))
    return y


def _check_backward(name, grad, x, weight):
    d = _check(name, x, weight, None)
    registry.check_like(name, "grad", grad, "x", x)
    return d


def _backward(name, rms, grad, x, weight, has_bias, eps):
    _check_backward(name, grad, x, weight)
    grad, n_rows, d = rows.as_rows(grad)
    x = x.contiguous()
    w = weight.contiguous() if weight is not None else None
    dx = torch.empty_like(x)
    acc = registry.acc_dtype(x.dtype)
    g = _geometry(name, d, [t for t in (grad, x, dx, w) if t is not None], rms)
    slots_blocks = min(g.blocks_for(n_rows), 2 * registry.sm_count(x.device.index))
    slots = slots_blocks * g.rows_per_block
    alloc = torch.empty if n_rows and d else torch.zeros  # every slot writes its whole partial row
    dw_partial = alloc((slots, d), dtype=acc, device=x.device) if w is not None else None
    db_partial = alloc((slots, d), dtype=acc, device=x.device) if has_bias else None
    if n_rows and d:
        D = rows.specialized_d("norm_backward", d)
        k = _kernels.get("norm_backward", x.device.index, T=x.dtype, **g.params(), D=D, RMS=rms, HAS_W=w is not None,
                         HAS_B=has_bias)
        k.launch(slots_blocks, g.block(), grad, x, w, dx, dw_partial, db_partial, n_rows, d, float(eps))
    empty = x.new_empty((0,))
    dw = reductions.sum(dw_partial, 0).to(x.dtype) if w is not None else empty
    db = reductions.sum(db_partial, 0).to(x.dtype) if has_bias else empty
    return dx, dw, db


def _fake(name, x, weight, bias):
    _check(name, x, weight, bias)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fake_backward(name, grad, x, weight, has_bias):
    d = _check_backward(name, grad, x, weight)
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            x.new_empty((d,) if weight is not None else (0,)), x.new_empty((d,) if has_bias else (0,)))


layer_norm_backward = registry.define(
    "layer_norm_backward(Tensor grad, Tensor x, Tensor? weight, bool has_bias, float eps) -> (Tensor, Tensor, Tensor)",
    lambda grad, x, weight, has_bias, eps: _backward("layer_norm_backward", False, grad, x, weight, has_bias, eps),
    lambda grad, x, weight, has_bias, eps: _fake_backward("layer_norm_backward", grad, x, weight, has_bias))
rms_norm_backward = registry.define(
    "rms_norm_backward(Tensor grad, Tensor x, Tensor? weight, bool has_bias, float eps) -> (Tensor, Tensor, Tensor)",
    lambda grad, x, weight, has_bias, eps: _backward("rms_norm_backward", True, grad, x, weight, has_bias, eps),
    lambda grad, x, weight, has_bias, eps: _fake_backward("rms_norm_backward", grad, x, weight, has_bias))


def _layer_norm_setup(ctx, inputs, output):
    x, weight, bias, eps = inputs
    ctx.has_w, ctx.has_b, ctx.eps = weight is not None, bias is not None, eps
    ctx.save_for_backward(x, weight)


def _layer_norm_grad(ctx, grad):
    x, weight = ctx.saved_tensors
    dx, dw, db = layer_norm_backward(grad, x, weight, ctx.has_b, ctx.eps)
    return dx, dw if ctx.has_w else None, db if ctx.has_b else None, None


def _rms_norm_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.has_w, ctx.eps = weight is not None, eps
    ctx.save_for_backward(x, weight)


def _rms_norm_grad(ctx, grad):
    x, weight = ctx.saved_tensors
    dx, dw, _ = rms_norm_backward(grad, x, weight, False, ctx.eps)
    return dx, dw if ctx.has_w else None, None


layer_norm = registry.define(
    "layer_norm(Tensor x, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor",
    lambda x, weight=None, bias=None, eps=1e-5: _forward("layer_norm", False, x, weight, bias, eps),
    lambda x, weight=None, bias=None, eps=1e-5: _fake("layer_norm", x, weight, bias),
    backward=_layer_norm_grad, setup_context=_layer_norm_setup)
rms_norm = registry.define(
    "rms_norm(Tensor x, Tensor? weight=None, float eps=1e-06) -> Tensor",
    lambda x, weight=None, eps=1e-6: _forward("rms_norm", True, x, weight, None, eps),
    lambda x, weight=None, eps=1e-6: _fake("rms_norm", x, weight, None),
    backward=_rms_norm_grad, setup_context=_rms_norm_setup)

__all__ = ["layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward"]
