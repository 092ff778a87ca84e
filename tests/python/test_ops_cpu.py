"""Built-in ops without a GPU: error messages, Meta / fake-tensor shapes, compile-only for sm_80/90/100."""

import pytest
import torch

import kjit
from kjit import ops

FLOATING = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


# ---- CPU tensors: the documented message, and the process stays usable ---------------------------------


@pytest.mark.parametrize(
    "call, op, names",
    [
        (lambda: ops.add_constant(torch.ones(3), 1.0), "add_constant", "x"),
        (lambda: ops.rgb_to_gray(torch.zeros(2, 2, 3, dtype=torch.uint8)), "rgb_to_gray", "img"),
        (lambda: ops.outer(torch.ones(2, 3), torch.ones(2, 4)), "outer", "a, b"),
        (lambda: ops.outer_backward(torch.ones(3, 4), torch.ones(3), torch.ones(4)), "outer_backward", "grad, a, b"),
        (
            lambda: ops.fused_update(torch.ones(3), torch.ones(3), torch.ones(3), 1.0, 2.0, 3.0),
            "fused_update",
            "x, model_out, noise",
        ),
    ],
)
def test_cpu_tensor_is_a_value_error_saying_to_move_it(call, op, names):
    expected = f"kjit.ops.{op}: expected all tensors on one CUDA device, got cpu ({names}); move them with .to('cuda')"
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == expected
    assert isinstance(info.value, kjit.Error)


def test_cpu_tensor_that_requires_grad_gets_the_same_message():
    a = torch.ones(2, 3, requires_grad=True)
    expected = r"kjit\.ops\.outer: expected all tensors on one CUDA device, got cpu \(a, b\)"
    with pytest.raises(ValueError, match=expected):
        ops.outer(a, torch.ones(2, 4))


def test_empty_cpu_tensor_is_still_rejected():
    with pytest.raises(ValueError, match=r"got cpu \(x\); move them with \.to\('cuda'\)"):
        ops.add_constant(torch.ones(0), 1.0)


# ---- Meta tensors: shapes and dtype / shape errors (what torch.compile's fake tensors see) --------------


def test_outer_and_add_constant_under_torch_compile_fullgraph_on_meta_tensors_with_autograd():
    # The library ops' graph: test_library_compile.py (with the fake-tensor shapes of every op).
    def f(a, b):
        return ops.outer(ops.add_constant(a, 1.0), b).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    a = meta(2, 3).requires_grad_()
    b = meta(2, 4).requires_grad_()
    compiled(a, b).backward()
    assert a.grad.shape == (2, 3) and b.grad.shape == (2, 4)


def test_backward_traces_to_outer_backward():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(a, b, x):
        out = ops.outer(ops.add_constant(a, 1.0), b)
        u = ops.fused_update(x, x, x, 1.0, 2.0, 3.0)
        return torch.autograd.grad(out.sum() + u.sum(), (a, b, x))

    inputs = (
        torch.randn(2, 3, requires_grad=True),
        torch.randn(2, 4, requires_grad=True),
        torch.randn(5, requires_grad=True),
    )
    code = make_fx(f, tracing_mode="symbolic")(*inputs).code
    assert "torch.ops.kjit.outer_backward.default" in code
    assert "torch.ops.kjit.fused_update.default" in code
