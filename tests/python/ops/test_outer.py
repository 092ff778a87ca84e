"""The outer product: outer (a [B, M] and b [B, N] to [B, M, N], or a [M] and b [N] to [M, N]) and its backward
op outer_backward (the two row sums of grad times the other input).

Without a GPU: Meta shapes and dtypes, the dtype and shape errors, and the kernels compile for sm_80 / sm_90 /
sm_100 in every floating dtype. On a GPU (the tests marked gpu): forward and backward against PyTorch (the
backward's sums in float64) at awkward shapes, aligned and misaligned, the autograd against einsum's (an
expanded incoming gradient), 1-D inputs, more rows than a grid, gradcheck in float64, empty inputs, the errors
on CUDA tensors, and more than 2^31 output elements (64-bit indexing).
"""

import pytest
import torch
from family_helpers import ARCHS, DEV, DTYPES, check_floating_templates_compile
from op_table import FLOATING
from support import meta, randn, skip_unless_free_gpu_memory

from kjit import ops


# ---- Meta tensors: shapes, dtypes and errors ----------------------------------------------------------------


def test_meta_shapes():
    assert ops.outer(meta(4, 3), meta(4, 5)).shape == (4, 3, 5)
    assert ops.outer(meta(3), meta(5)).shape == (3, 5)
    assert torch.ops.kjit.outer(meta(4, 3), meta(4, 5)).shape == (4, 3, 5)
    ga, gb = ops.outer_backward(meta(4, 3, 5), meta(4, 3), meta(4, 5))
    assert ga.shape == (4, 3) and gb.shape == (4, 5)


@pytest.mark.parametrize("dtype", FLOATING)
def test_meta_keeps_dtype(dtype):
    assert ops.outer(meta(2, 3, dtype=dtype), meta(2, 4, dtype=dtype)).dtype == dtype


def test_mismatched_dtypes_are_a_type_error():
    with pytest.raises(TypeError, match=r"kjit\.ops\.outer: b has dtype torch\.float16 but a has dtype torch\.float32"):
        ops.outer(meta(2, 3), meta(2, 4, dtype=torch.float16))


def test_shape_errors_say_what_is_expected():
    with pytest.raises(ValueError, match=r"a has shape \[2, 3\] and b has shape \[3, 4\]: the batch sizes"):
        ops.outer(meta(2, 3), meta(3, 4))
    with pytest.raises(ValueError, match=r"expected a \[B, M\] and b \[B, N\] \(batched\) or a \[M\] and b \[N\]"):
        ops.outer(meta(2, 3), meta(4))


# ---- compile-only: the kernels for every floating dtype ------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", FLOATING)
def test_floating_templates_compile(arch, dtype):
    kernels = [("outer", "outer"), ("outer", "outer_backward_a"), ("outer", "outer_backward_c")]
    check_floating_templates_compile(kernels, arch, dtype)


# ---- on a GPU: against PyTorch -----------------------------------------------------------------------------


def reduction_tol(dtype):
    return {
        torch.float32: dict(rtol=1e-4, atol=1e-3),
        torch.float16: dict(rtol=1e-2, atol=1e-2),
        torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
        torch.float64: dict(rtol=1e-10, atol=1e-10),
    }[dtype]


OUTER_SHAPES = [(1, 1, 1), (1, 7, 1000), (3, 1000, 7), (2, 4097, 7), (3, 7, 4097), (2, 1, 4097), (5, 33, 65)]


@pytest.mark.gpu
@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("bmn", OUTER_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_outer_forward_and_backward(dtype, bmn, misaligned):
    B, M, N = bmn
    a = randn(B, M, dtype=dtype, misaligned=misaligned)
    b = randn(B, N, dtype=dtype, misaligned=misaligned)
    out = ops.outer(a, b)
    assert out.shape == (B, M, N) and out.dtype == dtype
    torch.testing.assert_close(out, a[:, :, None] * b[:, None, :])

    g = randn(B, M, N, dtype=dtype, misaligned=misaligned)
    ga, gb = ops.outer_backward(g, a, b)
    g64, a64, b64 = g.double(), a.double(), b.double()
    torch.testing.assert_close(ga, torch.einsum("bij,bj->bi", g64, b64).to(dtype), **reduction_tol(dtype))
    torch.testing.assert_close(gb, torch.einsum("bij,bi->bj", g64, a64).to(dtype), **reduction_tol(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_outer_autograd_matches_einsum(dtype):
    a = randn(4, 100, dtype=dtype).requires_grad_()
    b = randn(4, 37, dtype=dtype).requires_grad_()
    out = ops.outer(a, b)
    out.sum().backward()  # an expanded (stride 0) incoming gradient
    a2, b2 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    torch.einsum("bi,bj->bij", a2, b2).sum().backward()
    torch.testing.assert_close(a.grad, a2.grad.to(dtype), **reduction_tol(dtype))
    torch.testing.assert_close(b.grad, b2.grad.to(dtype), **reduction_tol(dtype))


@pytest.mark.gpu
def test_outer_one_dimensional():
    a, b = randn(7), randn(1000)
    out = ops.outer(a, b)
    assert out.shape == (7, 1000)
    torch.testing.assert_close(out, torch.outer(a, b))


@pytest.mark.gpu
def test_outer_many_rows_uses_grid_stride():
    a, b = randn(70000, 4), randn(70000, 3)
    torch.testing.assert_close(ops.outer(a, b), a[:, :, None] * b[:, None, :])
    ga, gb = ops.outer_backward(torch.ones(70000, 4, 3, device=DEV), a, b)
    torch.testing.assert_close(ga, b.sum(1, keepdim=True).expand(-1, 4), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gb, a.sum(1, keepdim=True).expand(-1, 3), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [((2, 3), (2, 4)), ((3,), (5,)), ((1, 6), (1, 1))])
def test_outer_gradcheck_float64(shape):
    a = torch.randn(*shape[0], dtype=torch.float64, device=DEV, requires_grad=True)
    b = torch.randn(*shape[1], dtype=torch.float64, device=DEV, requires_grad=True)
    assert torch.autograd.gradcheck(ops.outer, (a, b))


@pytest.mark.gpu
def test_empty_inputs_return_empty_outputs():
    assert ops.outer(torch.empty(2, 0, device=DEV), torch.empty(2, 5, device=DEV)).shape == (2, 0, 5)
    ga, gb = ops.outer_backward(torch.empty(2, 3, 0, device=DEV), randn(2, 3), torch.empty(2, 0, device=DEV))
    assert torch.equal(ga, torch.zeros(2, 3, device=DEV)) and gb.shape == (2, 0)


@pytest.mark.gpu
def test_errors_name_the_argument_and_the_fix():
    expected = r"kjit\.ops\.outer: expected all tensors on one CUDA device, got cuda:\d \(a\) and cpu \(b\)"
    with pytest.raises(ValueError, match=expected + r"; move them with \.to\('cuda:\d'\)"):
        ops.outer(randn(2, 3), torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"grad has shape \[2, 3, 5\] but outer\(a, b\) has shape \[2, 3, 4\]"):
        ops.outer_backward(randn(2, 3, 5), randn(2, 3), randn(2, 4))
    # The process stays usable.
    torch.testing.assert_close(
        ops.outer(torch.ones(2, device=DEV), torch.ones(3, device=DEV)), torch.ones(2, 3, device=DEV)
    )


@pytest.mark.gpu
def test_more_than_2_pow_31_elements():
    skip_unless_free_gpu_memory(24)
    a = torch.ones(1, 65536, dtype=torch.float16, device=DEV)
    b = torch.arange(32769, device=DEV).remainder(7).to(torch.float16)[None]
    out = ops.outer(a, b)  # 2^31 + 65536 elements
    assert out.shape == (1, 65536, 32769)
    assert torch.equal(out[0, -1], b[0]) and torch.equal(out[0, 0], b[0])
