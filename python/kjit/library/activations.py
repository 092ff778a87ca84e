"""Activations and their backward, built on kjit.elementwise: relu, gelu (erf and tanh), silu, sigmoid, tanh.

Each is one kjit.elementwise function (the device math is in kernel_templates/math.cuh), registered as
torch.ops.kjit.<name> with a fake implementation and autograd through torch.ops.kjit.<name>_backward.
Inputs of any shape and layout (strided views are read through their strides); the result is
contiguous, of the input's dtype. relu, sigmoid and tanh differentiate through their output, gelu and
silu through their input, as PyTorch's kernels do.
"""

from __future__ import annotations

import torch

from .. import _C
from ..elementwise import Elementwise
from . import registry

_FORWARD = {
    "relu": Elementwise("relu(x)", "x", name="relu"),
    "sigmoid": Elementwise("sigmoid(x)", "x", name="sigmoid"),
    "tanh": Elementwise("tanh_(x)", "x", name="tanh"),
    "silu": Elementwise("silu(x)", "x", name="silu"),
    "gelu": Elementwise("gelu(x)", "x", name="gelu"),
    "gelu_tanh": Elementwise("gelu_tanh(x)", "x", name="gelu_tanh"),
}
_BACKWARD = {
    "relu": Elementwise("relu_backward(g, y)", "g, y", name="relu_backward"),
    "sigmoid": Elementwise("sigmoid_backward(g, y)", "g, y", name="sigmoid_backward"),
    "tanh": Elementwise("tanh_backward(g, y)", "g, y", name="tanh_backward"),
    "silu": Elementwise("silu_backward(g, x)", "g, x", name="silu_backward"),
    "gelu": Elementwise("gelu_backward(g, x)", "g, x", name="gelu_backward"),
    "gelu_tanh": Elementwise("gelu_tanh_backward(g, x)", "g, x", name="gelu_tanh_backward"),
}
_THROUGH_OUTPUT = {"relu", "sigmoid", "tanh"}
_APPROXIMATE = {"none": "gelu", "tanh": "gelu_tanh"}


def _gelu_kind(approximate: str, op: str = "gelu") -> str:
    kind = _APPROXIMATE.get(approximate)
    if kind is None:
        raise _C.ValueError(f"kjit.ops.{op}: approximate={approximate!r} is not supported; allowed: 'none', 'tanh'")
    return kind


def _fake_like(name, x):
    registry.check_tensor(name, "x", x)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fake_backward(name, g, saved, saved_arg="saved"):
    registry.check_like(name, "grad", g, saved_arg, saved)  # as the CUDA implementation checks
    return torch.empty_like(saved, memory_format=torch.contiguous_format)


def _define_unary(name: str):
    def forward(x):
        registry.check_tensor(name, "x", x)
        return _FORWARD[name](x)

    def backward_impl(g, saved):
        registry.check_like(f"{name}_backward", "grad", g, "saved", saved)
        return _BACKWARD[name](g, saved)

    bwd = registry.define(f"{name}_backward(Tensor grad, Tensor saved) -> Tensor", backward_impl,
                          lambda g, saved: _fake_backward(f"{name}_backward", g, saved))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output if name in _THROUGH_OUTPUT else inputs[0])

    def backward(ctx, grad):
        (saved,) = ctx.saved_tensors
        return bwd(grad, saved)

    return registry.define(f"{name}(Tensor x) -> Tensor", forward, lambda x: _fake_like(name, x), backward=backward,
                           setup_context=setup_context), bwd


relu, relu_backward = _define_unary("relu")
sigmoid, sigmoid_backward = _define_unary("sigmoid")
tanh, tanh_backward = _define_unary("tanh")
silu, silu_backward = _define_unary("silu")


def _gelu(x, approximate="none"):
    registry.check_tensor("gelu", "x", x)
    return _FORWARD[_gelu_kind(approximate)](x)


def _gelu_backward(g, x, approximate="none"):
    registry.check_like("gelu_backward", "grad", g, "x", x)
    return _BACKWARD[_gelu_kind(approximate, "gelu_backward")](g, x)


def _fake_gelu_backward(g, x, approximate="none"):
    _gelu_kind(approximate, "gelu_backward")
    return _fake_backward("gelu_backward", g, x, "x")


gelu_backward = registry.define("gelu_backward(Tensor grad, Tensor x, str approximate='none') -> Tensor", _gelu_backward,
                                lambda g, x, approximate="none": _fake_gelu_backward(g, x, approximate))


def _gelu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.approximate = inputs[1] if len(inputs) > 1 else "none"


def _gelu_grad(ctx, grad):
    (x,) = ctx.saved_tensors
    return gelu_backward(grad, x, ctx.approximate), None


def _gelu_fake(x, approximate="none"):
    out = _fake_like("gelu", x)
    _gelu_kind(approximate)
    return out


gelu = registry.define("gelu(Tensor x, str approximate='none') -> Tensor", _gelu, _gelu_fake,
                       backward=_gelu_grad, setup_context=_gelu_setup)

FUNCTIONS = dict(_FORWARD)  # the Elementwise objects, for compile-only checks

__all__ = ["relu", "relu_backward", "sigmoid", "sigmoid_backward", "tanh", "tanh_backward", "silu", "silu_backward",
           "gelu", "gelu_backward"]
