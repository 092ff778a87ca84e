"""max_pool2d and avg_pool2d over NCHW (or CHW) tensors, with backward, as torch.ops.kjit.<name>.

kernel_size, stride (default: kernel_size) and padding are specialized (one compile per distinct
window); the spatial sizes are runtime arguments. Floor mode, no dilation; padding at most half the
window (PyTorch's rule). avg_pool2d counts the padding in the divisor unless count_include_pad=False.
The backward is a gather over the windows covering each input element (max_pool2d recomputes each
window's argmax from the input instead of storing indices).
"""

from __future__ import annotations

import torch

from .. import _C
from . import registry

_kernels = registry.KernelCache("pool")
_BLOCK = 256


def _pair(name: str, what: str, v) -> tuple[int, int]:
    if isinstance(v, int) and not isinstance(v, bool):
        v = (v, v)
    if (not isinstance(v, (tuple, list)) or len(v) not in (1, 2)
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in v)):
        raise _C.TypeError(f"kjit.ops.{name}: {what} must be an int or a pair of ints, got {v!r}")
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _params(name, x, kernel_size, stride, padding):
    registry.check_tensor(name, "x", x)
    if x.dim() not in (3, 4):
        raise _C.ValueError(f"kjit.ops.{name}: x must be NCHW or CHW (4 or 3 dims), got shape {list(x.shape)}")
    kh, kw = _pair(name, "kernel_size", kernel_size)
    sh, sw = _pair(name, "stride", stride if stride not in (None, [], ()) else (kh, kw))
    ph, pw = _pair(name, "padding", padding)
    if kh < 1 or kw < 1 or sh < 1 or sw < 1 or ph < 0 or pw < 0:
        raise _C.ValueError(f"kjit.ops.{name}: kernel_size and stride must be >= 1 and padding >= 0, got kernel_size="
                            f"{(kh, kw)}, stride={(sh, sw)}, padding={(ph, pw)}")
    if ph > kh // 2 or pw > kw // 2:
        raise _C.ValueError(f"kjit.ops.{name}: padding {(ph, pw)} must be at most half the kernel size {(kh, kw)}")
    H, W = x.shape[-2], x.shape[-1]
    if H * W > 2**31 - 1:
        raise _C.ValueError(f"kjit.ops.{name}: planes of {H} x {W} elements are too large (at most 2^31 - 1 per plane)")
    oh, ow = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    if oh < 1 or ow < 1:
        raise _C.ValueError(f"kjit.ops.{name}: the input's spatial size {(H, W)} is too small for kernel_size "
                            f"{(kh, kw)} with padding {(ph, pw)} (the output would be {(oh, ow)})")
    return {"KH": kh, "KW": kw, "SH": sh, "SW": sw, "PH": ph, "PW": pw}, H, W, oh, ow


def _grid(positions: int, planes: int) -> tuple[int, int]:
    """Blocks over the positions of one plane (x) and over the planes (y, looped past 65535)."""
    return (max(1, -(-positions // _BLOCK)), max(1, min(planes, 65535)))


def _forward(name, is_max, x, kernel_size, stride, padding, count_include_pad=True):
    p, H, W, oh, ow = _params(name, x, kernel_size, stride, padding)
    x = x.contiguous()
    y = x.new_empty((*x.shape[:-2], oh, ow))
    if y.numel():
        k = _kernels.get("pool2d_forward", x.device.index, T=x.dtype, **p, MAX=is_max, COUNT_PAD=bool(count_include_pad))
        planes = y.numel() // (oh * ow)
        k.launch(_grid(oh * ow, planes), _BLOCK, x, y, planes, H, W, oh, ow)
    return y


def _check_backward(name, grad, x, kernel_size, stride, padding):
    p, H, W, oh, ow = _params(name, x, kernel_size, stride, padding)
    registry.check_like(name, "grad", grad, "x", x, shape=(*x.shape[:-2], oh, ow))
    return p, H, W, oh, ow


def _backward(name, is_max, grad, x, kernel_size, stride, padding, count_include_pad=True):
    p, H, W, oh, ow = _check_backward(name, grad, x, kernel_size, stride, padding)
    x, grad = x.contiguous(), grad.contiguous()
    dx = torch.empty_like(x)
    if dx.numel():
        k = _kernels.get("pool2d_backward", x.device.index, T=x.dtype, **p, MAX=is_max,
                         COUNT_PAD=bool(count_include_pad))
        planes = dx.numel() // (H * W)
        k.launch(_grid(H * W, planes), _BLOCK, grad, x, dx, planes, H, W, oh, ow)
    return dx


def _fake_forward(name):
    def fake(x, kernel_size, stride=(), padding=0, count_include_pad=True):
        _, _, _, oh, ow = _params(name, x, kernel_size, stride, padding)
        return x.new_empty((*x.shape[:-2], oh, ow))

    return fake


def _fake_backward(name, grad, x, kernel_size, stride, padding):
    _check_backward(name, grad, x, kernel_size, stride, padding)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


max_pool2d_backward = registry.define(
    "max_pool2d_backward(Tensor grad, Tensor x, int[2] kernel_size, int[2] stride=[], int[2] padding=0) -> Tensor",
    lambda grad, x, kernel_size, stride=(), padding=0: _backward("max_pool2d_backward", True, grad, x, kernel_size,
                                                                 stride, padding),
    lambda grad, x, kernel_size, stride=(), padding=0: _fake_backward("max_pool2d_backward", grad, x, kernel_size, stride,
                                                                      padding))
avg_pool2d_backward = registry.define(
    "avg_pool2d_backward(Tensor grad, Tensor x, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
    "bool count_include_pad=True) -> Tensor",
    lambda grad, x, kernel_size, stride=(), padding=0, count_include_pad=True: _backward(
        "avg_pool2d_backward", False, grad, x, kernel_size, stride, padding, count_include_pad),
    lambda grad, x, kernel_size, stride=(), padding=0, count_include_pad=True: _fake_backward(
        "avg_pool2d_backward", grad, x, kernel_size, stride, padding))


def _setup(ctx, inputs, output):
    ctx.args = inputs[1:]
    ctx.save_for_backward(inputs[0])


def _max_grad(ctx, grad):
    (x,) = ctx.saved_tensors
    return (max_pool2d_backward(grad, x, *ctx.args),) + (None,) * len(ctx.args)


def _avg_grad(ctx, grad):
    (x,) = ctx.saved_tensors
    return (avg_pool2d_backward(grad, x, *ctx.args),) + (None,) * len(ctx.args)


max_pool2d = registry.define(
    "max_pool2d(Tensor x, int[2] kernel_size, int[2] stride=[], int[2] padding=0) -> Tensor",
    lambda x, kernel_size, stride=(), padding=0: _forward("max_pool2d", True, x, kernel_size, stride, padding),
    _fake_forward("max_pool2d"),
    backward=_max_grad, setup_context=_setup)
avg_pool2d = registry.define(
    "avg_pool2d(Tensor x, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool count_include_pad=True) -> Tensor",
    lambda x, kernel_size, stride=(), padding=0, count_include_pad=True: _forward(
        "avg_pool2d", False, x, kernel_size, stride, padding, count_include_pad),
    _fake_forward("avg_pool2d"), backward=_avg_grad, setup_context=_setup)

__all__ = ["max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward"]
