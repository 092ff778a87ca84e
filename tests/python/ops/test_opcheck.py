"""PyTorch's own checks of every registered kjit op (torch.library.opcheck: test_schema,
test_autograd_registration, test_faketensor, test_aot_dispatch_dynamic) on float32 and bfloat16 inputs of
awkward sizes, on the GPU.

The samples are the op table's (op_table.py); every operator of torch.ops.kjit has a row there
(ops/test_op_table.py checks it), but kjit::elementwise, the op of every kjit.elementwise function, whose
samples are here."""

import pytest
import torch
from op_table import OPS
from op_table import samples as op_samples

import kjit

pytestmark = pytest.mark.gpu


DTYPES = [torch.float32, torch.bfloat16]


def t(*shape, dtype=torch.float32, grad=False, offset=0):
    """A CUDA tensor of `shape` (`offset` > 0: a misaligned view of a larger one)."""
    n = 1
    for s in shape:
        n *= s
    base = torch.randn(n + offset, device="cuda", dtype=dtype)
    x = base[offset:].view(shape).clone() if offset == 0 else base[offset:].view(shape)
    return x.requires_grad_(grad) if grad else x


def _elementwise_spec():
    return kjit.elementwise("silu(a) * b + s", "a, b", "s", name="opcheck_silu_mul").spec


def _elementwise_samples(dtype):
    """kjit::elementwise, the op of every kjit.elementwise function (not a row of the op table: it takes a
    function's spec, not tensors of fixed roles)."""
    spec = _elementwise_spec()
    return [
        ((spec, [t(7, 33, dtype=dtype, grad=True), t(33, dtype=dtype, grad=True)], [0.5]), {}),
        ((spec, [t(5, 1, dtype=dtype, grad=True), t(4, dtype=dtype)], [-1.0]), {}),
    ]


OPCHECK_CASES = [(n, d) for n, spec in OPS.items() for d in spec.sample_dtypes] + [("elementwise", d) for d in DTYPES]


@pytest.mark.parametrize("name, dtype", OPCHECK_CASES, ids=[f"{n}-{str(d).split('.')[-1]}" for n, d in OPCHECK_CASES])
def test_opcheck(name, dtype):
    """torch.library.opcheck over every registered op, on the op table's samples (ops/test_op_table.py checks
    that every registered op has a row)."""
    op = getattr(torch.ops.kjit, name).default
    cases = _elementwise_samples(dtype) if name == "elementwise" else op_samples(name, "cuda", dtype)
    assert cases, name
    for args, kwargs in cases:
        torch.library.opcheck(op, args, kwargs)
