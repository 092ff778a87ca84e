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


def test_meta_shapes():
    assert ops.add_constant(meta(5, 7), 2.0).shape == (5, 7)
    assert ops.outer(meta(4, 3), meta(4, 5)).shape == (4, 3, 5)
    assert ops.outer(meta(3), meta(5)).shape == (3, 5)
    assert torch.ops.kjit.outer(meta(4, 3), meta(4, 5)).shape == (4, 3, 5)
    ga, gb = ops.outer_backward(meta(4, 3, 5), meta(4, 3), meta(4, 5))
    assert ga.shape == (4, 3) and gb.shape == (4, 5)
    assert ops.fused_update(meta(6), meta(6), meta(6), 0.1, 0.2, 0.3).shape == (6,)
    assert ops.rgb_to_gray(meta(1080, 1920, 3, dtype=torch.uint8)).shape == (1080, 1920)
    assert ops.rgb_to_gray(meta(2, 10, 20, 3, dtype=torch.uint8)).shape == (2, 10, 20)


@pytest.mark.parametrize("dtype", FLOATING)
def test_meta_keeps_dtype(dtype):
    assert ops.add_constant(meta(3, dtype=dtype), 1.0).dtype == dtype
    assert ops.outer(meta(2, 3, dtype=dtype), meta(2, 4, dtype=dtype)).dtype == dtype


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


def test_unsupported_dtype_is_a_type_error_listing_the_allowed_ones():
    with pytest.raises(TypeError) as info:
        ops.add_constant(meta(3, dtype=torch.int32), 1.0)
    assert str(info.value).endswith(
        "kjit.ops.add_constant: x has dtype torch.int32, which is not supported; allowed: torch.float32, "
        "torch.float16, torch.bfloat16, torch.float64; convert it with x.to(torch.float32)"
    )
    with pytest.raises(TypeError, match=r"img has dtype torch\.float32, which is not supported; allowed: torch\.uint8"):
        ops.rgb_to_gray(meta(4, 4, 3))


def test_mismatched_dtypes_are_a_type_error():
    with pytest.raises(TypeError, match=r"kjit\.ops\.outer: b has dtype torch\.float16 but a has dtype torch\.float32"):
        ops.outer(meta(2, 3), meta(2, 4, dtype=torch.float16))


def test_shape_errors_say_what_is_expected():
    with pytest.raises(ValueError, match=r"a has shape \[2, 3\] and b has shape \[3, 4\]: the batch sizes"):
        ops.outer(meta(2, 3), meta(3, 4))
    with pytest.raises(ValueError, match=r"expected a \[B, M\] and b \[B, N\] \(batched\) or a \[M\] and b \[N\]"):
        ops.outer(meta(2, 3), meta(4))
    with pytest.raises(ValueError, match=r"img has shape \[4, 4, 4\]: expected interleaved RGB of shape \[H, W, 3\]"):
        ops.rgb_to_gray(meta(4, 4, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="x, model_out and noise must have the same shape"):
        ops.fused_update(meta(3), meta(4), meta(3), 1.0, 1.0, 1.0)


# ---- compile-only: every built-in kernel for every dtype it supports ------------------------------------

ARCHS = ["sm_80", "sm_90", "sm_100"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", FLOATING)
def test_floating_templates_compile(arch, dtype):
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for tmpl, kernel in [
        ("add_constant", "add_constant"),
        ("fused_update", "fused_update"),
        ("outer", "outer"),
        ("outer", "outer_backward_a"),
        ("outer", "outer_backward_c"),
    ]:
        k = kjit.Template.builtin(tmpl).kernel(kernel).specialize(arch=arch, T=dtype, VEC=vec)
        assert str(k.origin) in ("compiled", "disk", "memory"), (tmpl, kernel, k.origin)


@pytest.mark.parametrize("arch", ARCHS)
def test_rgb_to_gray_compiles(arch):
    k = kjit.Template.builtin("rgb_to_gray").kernel("rgb_to_gray").specialize(arch=arch, H=1080, W=1920)
    assert str(k.origin) in ("compiled", "disk", "memory")


def test_demo_without_a_device_compiles_and_says_what_it_did_not_run(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the demo runs the scenarios (see test_ops_gpu.py)")
    from kjit import demo

    assert demo.main(["--arch", "sm_80", "--once"]) == 0
    out = capsys.readouterr().out
    assert "no GPU here: compiled for sm_80 only (choose with --arch); run on a GPU machine to launch" in out
    assert "NVIDIA driver" not in out  # torch's driver error is not the demo's message (test_demo_ending.py)
