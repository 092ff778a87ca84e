"""kjit.launcher: argument handling, recipes and refusals without a GPU; launches that match PyTorch and
the refusals of tensors it cannot take on a GPU (marked gpu). Arrays of other frameworks through a
launcher: test_arrays.py."""

import pytest
import torch

import kjit


def make(add, **kw):
    spec = dict(T=kjit.arg("x").dtype, VEC=4)
    spec.update(kw)
    return kjit.launcher(add, grid=lambda x, y, c, n: kjit.cdiv(n, 1024), block=256, **spec)


def test_cdiv():
    assert [kjit.cdiv(n, 4) for n in [0, 1, 4, 5, 8]] == [0, 1, 1, 2, 2]


def test_cpu_tensors_are_refused(add):
    run = make(add)
    x = torch.zeros(8)
    with pytest.raises(kjit.ValueError) as e:
        run(x, torch.empty_like(x), 1.0, 8)
    assert str(e.value) == (
        "add_constant: expected all tensors on one CUDA device, got cpu (x, y); move them with .to('cuda')"
    )
    assert isinstance(e.value, ValueError)


def test_argument_count_and_keywords(add):
    run = make(add)
    x = torch.zeros(8)
    with pytest.raises(kjit.TypeError) as e:
        run(x, x, 1.0)
    assert str(e.value) == "kernel add_constant takes 4 arguments (x, y, c, n), got 3"
    with pytest.raises(kjit.TypeError) as e:
        run(x, x, 1.0, n=8, z=1)
    assert str(e.value) == "kernel add_constant has no parameter 'z'; its parameters are (x, y, c, n)"
    with pytest.raises(kjit.TypeError) as e:
        run(x, x, c=1.0)
    assert str(e.value) == "kernel add_constant takes 4 arguments (x, y, c, n), missing n"
    with pytest.raises(kjit.TypeError) as e:
        run(x, x, 1.0, 8, c=2.0)
    assert str(e.value) == "kernel add_constant got argument 'c' twice"
    # Keywords bind by name: the call gets as far as the device check.
    with pytest.raises(kjit.ValueError, match="expected all tensors on one CUDA device"):
        run(y=x, x=x, n=8, c=1.0)


def test_recipe_errors(add):
    with pytest.raises(kjit.ValueError) as e:
        make(add, X=1)
    assert str(e.value) == "kernel 'add_constant' has no template parameter 'X'; its parameters are T (type), VEC (int)"
    with pytest.raises(kjit.ValueError) as e:
        make(add, T=kjit.arg("z").dtype)
    assert (
        str(e.value) == "kjit.arg('z').dtype: kernel 'add_constant' has no parameter 'z'; its parameters are "
        "(x, y, c, n)"
    )
    with pytest.raises(kjit.ValueError) as e:
        make(add, T=kjit.arg(7).dtype)
    assert str(e.value) == "kjit.arg(7).dtype: kernel 'add_constant' has 4 parameters (x, y, c, n)"
    with pytest.raises(kjit.TypeError):
        kjit.launcher(add, grid=(1, 2, 3, 4), T=torch.float32, VEC=4)
    with pytest.raises(kjit.TypeError):
        kjit.launcher(add, grid=1.5, T=torch.float32, VEC=4)
    with pytest.raises(kjit.TypeError):
        kjit.launcher("add_constant", grid=1)
    with pytest.raises(kjit.TypeError):
        kjit.arg(1.5)


def test_arg_references_describe_themselves():
    assert repr(kjit.arg("x").dtype) == "kjit.arg('x').dtype"
    assert repr(kjit.arg(0).shape[1]) == "kjit.arg(0).shape[1]"
    assert repr(kjit.arg("x").numel) == "kjit.arg('x').numel"
    assert repr(kjit.arg("x").stride[0]) == "kjit.arg('x').stride[0]"


@pytest.mark.gpu
def test_launcher_on_gpu(add):
    run = make(add)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(4097, device="cuda").to(dtype)
        y = torch.empty_like(x)
        run(x, y, 2.0, x.numel())
        torch.testing.assert_close(y, x + 2.0)
    x = torch.randn(64, 64, device="cuda")
    with pytest.raises(kjit.ValueError) as e:
        run(x.t(), torch.empty_like(x), 1.0, x.numel())
    assert (
        str(e.value) == "add_constant: argument 'x' is not contiguous (shape [64, 64], strides [1, 64]): call "
        "x.contiguous() first"
    )
    with pytest.raises(kjit.TypeError) as e:
        run(x, torch.empty_like(x, dtype=torch.float16), 1.0, x.numel())
    assert (
        str(e.value) == "add_constant: argument 'y' has dtype torch.float16, but add_constant<float, 4> takes it "
        "as float* __restrict__ (torch.float32); convert it with y.to(torch.float32)"
    )
    with pytest.raises(kjit.ValueError) as e:
        run(x, torch.empty(64, 64), 1.0, x.numel())
    assert (
        str(e.value) == f"add_constant: expected all tensors on one CUDA device, got cuda:{x.get_device()} (x) "
        f"and cpu (y); move them with .to('cuda:{x.get_device()}')"
    )
    empty = torch.empty(0, device="cuda")
    run(empty, torch.empty_like(empty), 1.0, 0)  # a grid of 0 blocks launches nothing
