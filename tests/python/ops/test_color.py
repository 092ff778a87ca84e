"""Colour conversion: rgb_to_gray (interleaved 8-bit RGB [..., H, W, 3] to gray [..., H, W], BT.601 weights in
fixed point, the image size specialized).

Without a GPU: Meta shapes, the dtype and shape errors, and the kernel compiles for sm_80 / sm_90 / sm_100. On
a GPU (the tests marked gpu): exactly the fixed-point formula (op_table.py's reference) at sizes from 1 x 1 to
1080 x 1920, aligned and misaligned, batched, a batch larger than one grid, and empty images.
"""

import pytest
import torch
from family_helpers import ARCHS, DEV
from op_table import _gray_ref as gray_ref
from support import ORIGINS, meta

import kjit
from kjit import ops


# ---- Meta tensors: shapes and errors ------------------------------------------------------------------------


def test_meta_shapes():
    assert ops.rgb_to_gray(meta(1080, 1920, 3, dtype=torch.uint8)).shape == (1080, 1920)
    assert ops.rgb_to_gray(meta(2, 10, 20, 3, dtype=torch.uint8)).shape == (2, 10, 20)


def test_unsupported_dtype_is_a_type_error_listing_the_allowed_ones():
    with pytest.raises(TypeError, match=r"img has dtype torch\.float32, which is not supported; allowed: torch\.uint8"):
        ops.rgb_to_gray(meta(4, 4, 3))


def test_shape_errors_say_what_is_expected():
    with pytest.raises(ValueError, match=r"img has shape \[4, 4, 4\]: expected interleaved RGB of shape \[H, W, 3\]"):
        ops.rgb_to_gray(meta(4, 4, 4, dtype=torch.uint8))


@pytest.mark.parametrize("arch", ARCHS)
def test_rgb_to_gray_compiles(arch):
    k = kjit.Template.builtin("rgb_to_gray").kernel("rgb_to_gray").specialize(arch=arch, H=1080, W=1920)
    assert str(k.origin) in ORIGINS


# ---- on a GPU: against the formula ---------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("hw", [(1, 1), (7, 7), (1000, 7), (7, 4097), (1080, 1920)])
def test_rgb_to_gray(hw, misaligned):
    h, w = hw
    n = h * w * 3
    buf = torch.randint(0, 256, (n + int(misaligned),), dtype=torch.uint8, device=DEV)
    img = buf[int(misaligned) :].view(h, w, 3)
    out = ops.rgb_to_gray(img)
    assert out.shape == (h, w) and out.dtype == torch.uint8
    assert torch.equal(out, gray_ref(img))


@pytest.mark.gpu
def test_rgb_to_gray_batched():
    img = torch.randint(0, 256, (3, 7, 1000, 3), dtype=torch.uint8, device=DEV)
    assert torch.equal(ops.rgb_to_gray(img), gray_ref(img))


@pytest.mark.gpu
def test_rgb_to_gray_batch_larger_than_one_grid():
    img = torch.randint(0, 256, (70000, 1, 2, 3), dtype=torch.uint8, device=DEV)  # gridDim.z <= 65535
    assert torch.equal(ops.rgb_to_gray(img), gray_ref(img))


@pytest.mark.gpu
def test_empty_inputs_return_empty_outputs():
    assert ops.rgb_to_gray(torch.empty(0, 5, 3, dtype=torch.uint8, device=DEV)).shape == (0, 5)
