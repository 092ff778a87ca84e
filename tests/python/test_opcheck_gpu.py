"""PyTorch's own checks of every registered kjit op (torch.library.opcheck: test_schema,
test_autograd_registration, test_faketensor, test_aot_dispatch_dynamic) on float32 and bfloat16 inputs of
awkward sizes, on the GPU; and the direct entries' behaviour: plain calls skip the dispatcher, anything
that needs it (autograd, subclasses, modes) goes through it, kjit.elementwise under
torch.compile(fullgraph=True) with gradients, one kernel table (stats, clear_memory).

The samples are the op table's (op_table.py); every operator of torch.ops.kjit has a row there
(ops/test_op_table.py checks it)."""

import pytest
import torch

import kjit
from kjit import ops
from op_table import OPS
from op_table import samples as op_samples

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


# ---- the direct entries ----------------------------------------------------------------------------------


def test_plain_calls_skip_the_dispatcher_and_others_use_it():
    x = t(8, 4096, dtype=torch.bfloat16)
    ops.softmax(x)
    kjit.reset_stats()
    ops.softmax(x)
    ops.rms_norm(x, t(4096, dtype=torch.bfloat16))
    assert kjit.stats()["op_calls"] == {"direct": 2, "dispatched": 0}
    xg = x.float().requires_grad_()
    y = ops.softmax(xg)
    assert y.grad_fn is not None
    with torch.no_grad():
        ops.softmax(xg)  # no gradient needed: direct again
    assert kjit.stats()["op_calls"] == {"direct": 3, "dispatched": 1}


def test_subclass_and_modes_go_through_the_dispatcher():
    class Logged(torch.Tensor):
        calls = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.calls.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    x = t(4, 64).as_subclass(Logged)
    ops.silu(x)
    assert any("silu" in str(f) for f in Logged.calls)
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Record():
        ops.softmax(t(4, 64))
    assert any("kjit.softmax" in s for s in seen), seen


def test_vmap_goes_through_the_dispatcher():
    x = t(3, 5, 64)
    y = torch.vmap(ops.softmax)(x)  # vmap falls back to a loop over the op: still right
    torch.testing.assert_close(y, torch.softmax(x, -1))


# ---- kjit.elementwise as an op -----------------------------------------------------------------------------


def test_library_calls_are_memory_hits_and_clear_memory_forgets_them():
    x = t(8, 1024)
    ops.layer_norm(x)
    kjit.reset_stats()
    ops.layer_norm(x)
    assert kjit.stats()["memory_hits"] >= 1 and kjit.stats()["compiles"] == 0
    kjit.clear_memory()
    kjit.reset_stats()
    ops.layer_norm(x)
    s = kjit.stats()
    assert s["memory_hits"] == 0 and s["disk_hits"] + s["compiles"] >= 1, s


# torch.profiler.profile warns that it "clears events at the end of each cycle" (the events of the one cycle
# this test records are all it reads): expected here, filtered here (":" cannot be written in the filter).
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events at the end of each cycle:UserWarning")
def test_profiler_sees_the_ops():
    x = t(4, 256)
    ops.softmax(x)  # compiled and cached first
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        ops.softmax(x)
    assert any("kjit::softmax" in e.name for e in prof.events()), sorted({e.name for e in prof.events()})
