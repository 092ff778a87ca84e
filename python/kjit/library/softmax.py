"""softmax and log_softmax over the last dim, with backward, as torch.ops.kjit.<name>.

One kernel per direction (kernel_templates/softmax.cuh): rows up to 32 elements per thread live in
registers (read once, written once), longer rows are streamed. The row length is specialized (D) up
to KJIT_MAX_SPECIALIZATIONS distinct lengths per kernel, then the generic variant takes it at run time.
Half types compute in float. Inputs of any layout are made contiguous first.
"""

from __future__ import annotations

import torch

from .. import _C
from . import registry, rows

_kernels = registry.KernelCache("softmax")
_MAX_PER_THREAD = 32


def _check_dim(name: str, x: torch.Tensor, dim: int) -> None:
    d = registry.normalize_dim(name, dim, x.dim())
    if x.dim() and d != x.dim() - 1:
        raise _C.ValueError(f"kjit.ops.{name}: only the last dim is supported, got dim={dim} for a tensor of "
                            f"{x.dim()} dims; move it last with x.movedim({dim}, -1) (and back on the result)")
    _check_row(name, x)


def _check_row(name: str, x: torch.Tensor) -> None:
    d = x.shape[-1] if x.dim() else 1
    if d > 2**31 - 1:  # the kernels take the row length as an int
        raise _C.ValueError(f"kjit.ops.{name}: rows of {d} elements are too long (at most 2^31 - 1 elements in the "
                            "last dim); use torch.softmax for such rows")


def _forward(name: str, x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    registry.check_tensor(name, "x", x)
    _check_dim(name, x, dim)
    x, n_rows, d = rows.as_rows(x)
    y = torch.empty_like(x)
    if y.numel() == 0:
        return y
    g = rows.geometry(d, (x, y), max_per_thread=_MAX_PER_THREAD, vectors_per_thread=2 if x.element_size() >= 4 else 4)
    D = rows.specialized_d("softmax_forward", d) if g.items else 0
    k = _kernels.get("softmax_forward", x.device.index, T=x.dtype, **g.params(), D=D, LOG=log)
    k.launch(g.blocks_for(n_rows), g.block(), x, y, n_rows, d)
    return y


def _check_backward(name: str, grad: torch.Tensor, y: torch.Tensor) -> None:
    registry.check_tensor(name, "output", y)
    registry.check_like(name, "grad", grad, "output", y)
    _check_row(name, y)


def _backward(name: str, grad: torch.Tensor, y: torch.Tensor, log: bool) -> torch.Tensor:
    _check_backward(name, grad, y)
    grad, n_rows, d = rows.as_rows(grad)
    y = y.contiguous()
    dx = torch.empty_like(y)
    if dx.numel() == 0:
        return dx
    g = rows.geometry(d, (grad, y, dx), max_per_thread=_MAX_PER_THREAD // 2)
    D = rows.specialized_d("softmax_backward", d) if g.items else 0
    k = _kernels.get("softmax_backward", y.device.index, T=y.dtype, **g.params(), D=D, LOG=log)
    k.launch(g.blocks_for(n_rows), g.block(), grad, y, dx, n_rows, d)
    return dx


def _fake(name: str, x: torch.Tensor, dim: int) -> torch.Tensor:
    registry.check_tensor(name, "x", x)
    _check_dim(name, x, dim)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fake_backward(name: str, grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _check_backward(name, grad, y)
    return torch.empty_like(y, memory_format=torch.contiguous_format)


def _define(name: str, log: bool):
    bwd = registry.define(f"{name}_backward(Tensor grad, Tensor output) -> Tensor",
                          lambda grad, output: _backward(f"{name}_backward", grad, output, log),
                          lambda grad, output: _fake_backward(f"{name}_backward", grad, output))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return bwd(grad, y), None

    fwd = registry.define(f"{name}(Tensor x, int dim=-1) -> Tensor",
                          lambda x, dim=-1: _forward(name, x, dim, log),
                          lambda x, dim=-1: _fake(name, x, dim), backward=backward, setup_context=setup_context)
    return fwd, bwd


softmax, softmax_backward = _define("softmax", False)
log_softmax, log_softmax_backward = _define("log_softmax", True)

__all__ = ["softmax", "softmax_backward", "log_softmax", "log_softmax_backward"]
