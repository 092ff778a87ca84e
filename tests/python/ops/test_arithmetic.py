"""The arithmetic ops: add_constant (y = x + c) and fused_update (a * x + b * model_out + c * noise, a sampler's
step), with their gradients.

Without a GPU: Meta shapes and dtypes, the dtype and shape errors, and their kernels compile for sm_80 / sm_90
/ sm_100 in every floating dtype. On a GPU (the tests marked gpu): against PyTorch at sizes 1 to 4097, aligned
and misaligned (every pointer, or one of four), the gradients, empty inputs, the errors on CUDA tensors, and
more than 2^31 elements (64-bit indexing).
"""

import pytest
import torch
from family_helpers import ARCHS, DEV, DTYPES, SIZES, check_floating_templates_compile
from op_table import FLOATING
from support import meta, randn, skip_unless_free_gpu_memory

from kjit import ops


# ---- Meta tensors: shapes, dtypes and errors ----------------------------------------------------------------


def test_meta_shapes():
    assert ops.add_constant(meta(5, 7), 2.0).shape == (5, 7)
    assert ops.fused_update(meta(6), meta(6), meta(6), 0.1, 0.2, 0.3).shape == (6,)


@pytest.mark.parametrize("dtype", FLOATING)
def test_meta_keeps_dtype(dtype):
    assert ops.add_constant(meta(3, dtype=dtype), 1.0).dtype == dtype


def test_unsupported_dtype_is_a_type_error_listing_the_allowed_ones():
    with pytest.raises(TypeError) as info:
        ops.add_constant(meta(3, dtype=torch.int32), 1.0)
    assert str(info.value).endswith(
        "kjit.ops.add_constant: x has dtype torch.int32, which is not supported; allowed: torch.float32, "
        "torch.float16, torch.bfloat16, torch.float64; convert it with x.to(torch.float32)"
    )


def test_shape_errors_say_what_is_expected():
    with pytest.raises(ValueError, match="x, model_out and noise must have the same shape"):
        ops.fused_update(meta(3), meta(4), meta(3), 1.0, 1.0, 1.0)


# ---- compile-only: the kernels for every floating dtype ------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", FLOATING)
def test_floating_templates_compile(arch, dtype):
    check_floating_templates_compile([("add_constant", "add_constant"), ("fused_update", "fused_update")], arch, dtype)


# ---- on a GPU: against PyTorch -----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES + [torch.float64])
def test_add_constant(dtype, n, misaligned):
    x = randn(n, dtype=dtype, misaligned=misaligned)
    torch.testing.assert_close(ops.add_constant(x, 2.5), x + 2.5)
    torch.testing.assert_close(ops.add_constant(x.view(1, n), -1.25), (x - 1.25).view(1, n))


@pytest.mark.gpu
@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES + [torch.float64])
def test_fused_update(dtype, n, misaligned):
    x, m, z = (randn(n, dtype=dtype, misaligned=misaligned) for _ in range(3))
    a, b, c = 0.9, -0.3, 0.05
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    ref = (a * x.to(acc) + b * m.to(acc) + c * z.to(acc)).to(dtype)
    torch.testing.assert_close(ops.fused_update(x, m, z, a, b, c), ref)


@pytest.mark.gpu
def test_fused_update_mixed_alignment():
    # x aligned, model_out misaligned: the vector width drops to 1 for all four pointers.
    x, m, z = randn(1001), randn(1001, misaligned=True), randn(1001)
    torch.testing.assert_close(ops.fused_update(x, m, z, 1.0, 2.0, 3.0), x + 2 * m + 3 * z)


@pytest.mark.gpu
def test_fused_update_and_add_constant_gradients():
    x, m, z = (randn(50).requires_grad_() for _ in range(3))
    g = randn(50)
    ops.fused_update(x, m, z, 0.5, 2.0, -3.0).backward(g)
    torch.testing.assert_close(x.grad, 0.5 * g)
    torch.testing.assert_close(m.grad, 2.0 * g)
    torch.testing.assert_close(z.grad, -3.0 * g)
    y = randn(9).requires_grad_()
    ops.add_constant(y, 4.0).backward(torch.full((9,), 2.0, device=DEV))
    torch.testing.assert_close(y.grad, torch.full((9,), 2.0, device=DEV))


@pytest.mark.gpu
def test_empty_inputs_return_empty_outputs():
    assert ops.add_constant(torch.empty(0, 3, device=DEV), 1.0).shape == (0, 3)
    assert ops.fused_update(*(torch.empty(0, device=DEV),) * 3, 1.0, 1.0, 1.0).shape == (0,)


@pytest.mark.gpu
def test_errors_name_the_argument_and_the_fix():
    with pytest.raises(ValueError, match=r"x is not contiguous \(shape \[4, 3\], strides \[1, 4\]\): call x\.cont"):
        ops.add_constant(randn(3, 4).t(), 1.0)
    with pytest.raises(TypeError, match=r"x has dtype torch\.int32, which is not supported"):
        ops.add_constant(torch.ones(3, dtype=torch.int32, device=DEV), 1.0)
    with pytest.raises(ValueError, match=r"noise has shape \[5\] but x has shape \[4\]"):
        ops.fused_update(randn(4), randn(4), randn(5), 1.0, 1.0, 1.0)
    # The process stays usable.
    torch.testing.assert_close(ops.add_constant(torch.ones(3, device=DEV), 1.0), torch.full((3,), 2.0, device=DEV))


@pytest.mark.gpu
def test_more_than_2_pow_31_elements():
    skip_unless_free_gpu_memory(24)
    n = 2**31 + 9
    x = torch.ones(n, dtype=torch.float16, device=DEV)
    x[-5:] = 3.0
    y = ops.add_constant(x, 1.0)
    assert y[:1000].eq(2.0).all() and y[-5:].eq(4.0).all() and y[-1000:-5].eq(2.0).all()
