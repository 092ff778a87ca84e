"""The activation ops: relu, sigmoid, tanh, silu, mish and gelu (exact and tanh-approximated), and their backward ops.

Without a GPU: Meta shapes and dtypes. On a GPU (the tests marked gpu): the forward against PyTorch in float64
on the same inputs (sizes 1 to 4097, misaligned, transposed, 3-D, empty), the backward ops against their
formulas (sigmoid / tanh / relu read the forward's output, the others x), the autograd wiring (exactly the
backward op's result), gradcheck in float64, and the errors on CUDA tensors. Tolerances: support.py's.
"""

import pytest
import torch
import torch.nn.functional as F
from family_helpers import DEV, DTYPES, SIZES
from op_table import FLOATING
from support import close, dname, ew_tol, meta, misaligned_like, randn

from kjit import ops


# ---- Meta tensors: shapes and dtypes (what fake tensors / torch.compile see) ------------------------------


UNARY = ["relu", "sigmoid", "tanh", "silu", "mish", "gelu"]


@pytest.mark.parametrize("dtype", FLOATING, ids=lambda d: str(d).split(".")[-1])
def test_meta_activation_shapes(dtype):
    for name in UNARY:
        op, bwd = getattr(ops, name), getattr(ops, f"{name}_backward")
        for shape in [(), (0,), (7,), (3, 5, 2)]:
            y = op(meta(*shape, dtype=dtype))
            assert y.shape == shape and y.dtype == dtype, name
            g = bwd(meta(*shape, dtype=dtype), meta(*shape, dtype=dtype))
            assert g.shape == shape and g.dtype == dtype, name
        # A strided input gives a contiguous result.
        assert op(meta(4, 6, dtype=dtype).t()).is_contiguous()
    assert ops.gelu(meta(5, dtype=dtype), approximate="tanh").shape == (5,)
    assert ops.gelu_backward(meta(5, dtype=dtype), meta(5, dtype=dtype), "tanh").shape == (5,)


# ---- on a GPU: against PyTorch -----------------------------------------------------------------------------


TORCH_ACT = {
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "silu": F.silu,
    "mish": F.mish,
    "gelu": lambda t: F.gelu(t),
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
}


def kjit_act(name):
    if name == "gelu_tanh":
        return lambda t: ops.gelu(t, approximate="tanh")
    return getattr(ops, name)


def kjit_act_backward(name):
    if name == "gelu":
        return lambda g, s: ops.gelu_backward(g, s)
    if name == "gelu_tanh":
        return lambda g, s: ops.gelu_backward(g, s, "tanh")
    return getattr(ops, f"{name}_backward")


THROUGH_OUTPUT = {"relu", "sigmoid", "tanh"}


def act_inputs(n, dtype):
    """Activation inputs: N(0, 2) so that the tails of sigmoid / tanh / gelu are reached."""
    return randn(n, dtype=dtype, scale=2.0)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(TORCH_ACT))
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_activation_forward(dtype, name):
    op, ref = kjit_act(name), TORCH_ACT[name]
    tol = ew_tol(dtype)
    for n in SIZES:
        x = act_inputs(n, dtype)
        y = op(x)
        assert y.dtype == dtype and y.shape == (n,)
        close(y, ref(x.double()).to(dtype), **tol)
    # Misaligned, transposed (strided), 3-D, empty.
    x = misaligned_like(act_inputs(4097, dtype))
    close(op(x), ref(x.double()).to(dtype), **tol)
    x = act_inputs(37 * 61, dtype).view(37, 61).t()
    y = op(x)
    assert y.shape == (61, 37) and y.is_contiguous()
    close(y, ref(x.double()).to(dtype), **tol)
    x = act_inputs(2 * 3 * 50, dtype).view(2, 3, 50)
    close(op(x), ref(x.double()).to(dtype), **tol)
    for shape in [(0,), (4, 0)]:
        y = op(torch.empty(shape, dtype=dtype, device=DEV))
        assert y.shape == shape and y.dtype == dtype


def _backward_reference(name, g, saved):
    """The gradient in float64 from (grad, saved) as given: saved is y for relu / sigmoid / tanh, x otherwise."""
    g64, s64 = g.double(), saved.double()
    if name == "relu":
        return torch.where(s64 > 0, g64, torch.zeros_like(g64))
    if name == "sigmoid":
        return g64 * s64 * (1 - s64)
    if name == "tanh":
        return g64 * (1 - s64 * s64)
    x64 = s64.clone().requires_grad_()
    (dx,) = torch.autograd.grad(TORCH_ACT[name](x64), x64, g64)
    return dx


def _saved_values(name, n, dtype):
    if name == "sigmoid":
        return torch.rand(n, device=DEV).to(dtype)
    if name == "tanh":
        return (2 * torch.rand(n, device=DEV) - 1).to(dtype)
    if name == "relu":
        return F.relu(randn(n, dtype=dtype))
    return act_inputs(n, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(TORCH_ACT))
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_activation_backward_op(dtype, name):
    bwd = kjit_act_backward(name)
    for n, misaligned in [(7, False), (1000, False), (4097, False), (4097, True)]:
        g = randn(n, dtype=dtype, misaligned=misaligned)
        saved = _saved_values(name, n, dtype)
        dx = bwd(g, saved)
        assert dx.dtype == dtype and dx.shape == (n,)
        close(dx, _backward_reference(name, g, saved).to(dtype), **ew_tol(dtype))
    # Strided grad (as an expanded incoming gradient is).
    g = randn(1, 50, dtype=dtype).expand(20, 50)
    saved = _saved_values(name, 1000, dtype).view(20, 50)
    close(bwd(g, saved), _backward_reference(name, g, saved).to(dtype), **ew_tol(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(TORCH_ACT))
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_activation_autograd(dtype, name):
    op, bwd = kjit_act(name), kjit_act_backward(name)
    x = act_inputs(4097, dtype).requires_grad_()
    g = randn(4097, dtype=dtype)
    y = op(x)
    y.backward(g)
    saved = y.detach() if name in THROUGH_OUTPUT else x.detach()
    assert torch.equal(x.grad, bwd(g, saved))  # the registered backward is the backward op
    # Against PyTorch's autograd on the same inputs in float64.
    x64 = x.detach().double().requires_grad_()
    TORCH_ACT[name](x64).backward(g.double())
    if dtype == torch.float32:
        close(x.grad, x64.grad.to(dtype), rtol=1e-4, atol=1e-5)
    elif name not in THROUGH_OUTPUT:
        close(x.grad, x64.grad.to(dtype), **ew_tol(dtype))
    # (sigmoid / tanh in half types differentiate through their rounded output: test_activation_backward_op.)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(TORCH_ACT))
def test_activation_gradcheck(name):
    x = torch.randn(4, 7, dtype=torch.float64, device=DEV)
    x = (x.abs() + 0.1) * x.sign()  # away from relu's kink
    x.requires_grad_()
    assert torch.autograd.gradcheck(kjit_act(name), (x,))


@pytest.mark.gpu
def test_activation_errors_on_cuda():
    with pytest.raises(TypeError, match=r"kjit\.ops\.silu: x has dtype torch\.int32, which is not supported"):
        ops.silu(torch.ones(3, dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match=r"approximate='fast' is not supported; allowed: 'none', 'tanh'"):
        ops.gelu(randn(3), approximate="fast")
    with pytest.raises(ValueError, match=r"grad has shape \[4\] but must have shape \[3\]"):
        ops.silu_backward(randn(4), randn(3))
    with pytest.raises(TypeError, match=r"grad has dtype torch\.float16 but saved has dtype torch\.float32"):
        ops.relu_backward(randn(3, dtype=torch.float16), randn(3))
