"""The kernel library on a GPU: kjit.elementwise, activations, reductions, softmax, norms and pooling
against PyTorch (forward, backward, gradcheck in float64), the specialization policy, torch.compile and
CUDA graphs.

Tolerances. References are computed by PyTorch in float64 from the same inputs and rounded once to the
output dtype. The kernels compute in float (half types) or in the dtype itself, so a result may differ
from its reference by one rounding of the output dtype (rtol = 2^-10 for float16, 2^-7 for bfloat16; the
comparison itself runs in float64, so the tolerance arithmetic is exact), plus a small absolute term for
the float arithmetic (cancellations; accumulation over R elements: 1e-5 * sqrt(R)).
Backward ops that read the forward's rounded output (sigmoid, tanh, softmax, log_softmax) are checked
against the formula evaluated in float64 on that same output; the autograd wiring is then checked to
give exactly the backward op's result.
"""

import json
import math
import os
import textwrap

import pytest
import torch

import kjit
from kjit import ops

pytestmark = pytest.mark.gpu

DEV = "cuda"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
ALL_DTYPES = DTYPES + [torch.float64]
SIZES = [1, 7, 1000, 4097]
ROW_SIZES = [1, 7, 768, 1000, 4096, 8192, 50257]

# One rounding of the output dtype (the largest relative spacing of its numbers).
ULP = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float64: 2.0**-52}


def dname(dtype):
    return str(dtype).split(".")[-1]


def randn(*shape, dtype=torch.float32, misaligned=False, scale=1.0):
    """A contiguous tensor (a leaf, without grad); `misaligned` makes it a view one element into a larger
    buffer (its data pointer is then not 16-byte aligned)."""
    if not misaligned:
        t = torch.randn(shape, dtype=dtype, device=DEV)
        return t.mul_(scale) if scale != 1.0 else t
    n = math.prod(shape)
    buf = torch.randn(n + 1, dtype=dtype, device=DEV)
    if scale != 1.0:
        buf.mul_(scale)
    view = buf[1:].view(shape)
    assert n == 0 or view.data_ptr() % 16 != 0
    return view


def misaligned_like(t):
    """A copy of t living one element into a larger buffer (its data pointer is not 16-byte aligned)."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buf[1:].view(t.shape)
    view.copy_(t)
    assert view.data_ptr() % 16 != 0
    return view


def close(actual, expected, *, rtol, atol, equal_nan=False):
    """assert_close after widening both to float64 (the tolerance arithmetic is then exact)."""
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=equal_nan)


def ew_tol(dtype):
    """Elementwise: one rounding of the output dtype, and float arithmetic's absolute error."""
    return {
        torch.float32: dict(rtol=1e-5, atol=1e-5),
        torch.float16: dict(rtol=ULP[torch.float16], atol=1e-5),
        torch.bfloat16: dict(rtol=ULP[torch.bfloat16], atol=1e-5),
        torch.float64: dict(rtol=1e-10, atol=1e-12),
    }[dtype]


def sum_tol(dtype, n):
    """A sum of n O(1) terms accumulated in float (double for float64), rounded once to dtype."""
    root = math.sqrt(max(n, 1))
    if dtype == torch.float64:
        return dict(rtol=1e-10, atol=1e-12 * root)
    return dict(rtol=1e-5 if dtype == torch.float32 else ULP[dtype], atol=1e-5 * root)


def row_tol(dtype):
    """softmax / norms: float statistics over a row, then one rounding of the output dtype."""
    return {
        torch.float32: dict(rtol=3e-5, atol=1e-5),
        torch.float16: dict(rtol=ULP[torch.float16], atol=1e-4),
        torch.bfloat16: dict(rtol=ULP[torch.bfloat16], atol=1e-4),
        torch.float64: dict(rtol=1e-10, atol=1e-10),
    }[dtype]


def softmax_tol(dtype, log):
    """softmax: relative (values down to float16 subnormals); log_softmax: absolute near 0."""
    if dtype == torch.float64:
        return dict(rtol=1e-10, atol=1e-12)
    return dict(rtol=3e-5 if dtype == torch.float32 else ULP[dtype], atol=1e-5 if log else 1e-6)


def loads():
    """Kernels this process has loaded so far (compiled, or read from the disk cache)."""
    s = kjit.stats()
    return s["compiles"] + s["disk_hits"]


# ===================================================== norms ======================================================

EPS_LN, EPS_RMS = 1e-5, 1e-6


def norm_inputs(rows, d, dtype, *, misaligned=False):
    x = randn(rows, d, dtype=dtype, misaligned=misaligned, scale=2.0)
    x.add_(randn(rows, 1, dtype=dtype))  # a per-row offset: the mean matters (in place: keeps the alignment)
    w = (1.0 + 0.5 * randn(d)).to(dtype)
    b = (0.1 * randn(d)).to(dtype)
    return x, w, b


# ============================================ specialization policy ===============================================

_POLICY_CHILD = """
import json, warnings, torch, kjit
from kjit import ops
ok = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for rounds in range(2):
        for d in (256, 512, 1024):
            x = torch.randn(5, d, device="cuda")
            w = torch.randn(d, device="cuda")
            ok.append(bool(torch.allclose(ops.softmax(x).double(), torch.softmax(x.double(), -1), rtol=3e-5, atol=1e-6)))
            ok.append(bool(torch.allclose(ops.layer_norm(x, w).double(),
                                          torch.nn.functional.layer_norm(x.double(), (d,), w.double()),
                                          rtol=1e-4, atol=1e-4)))
            ok.append(bool(torch.allclose(ops.sum(x).double(), x.double().sum(-1), rtol=1e-5, atol=1e-4)))
        torch.cuda.synchronize()
        if rounds == 0:
            s = kjit.stats()
            first_loads = s["compiles"] + s["disk_hits"]
s = kjit.stats()
print(json.dumps({
    "ok": ok,
    "warnings": [str(w.message) for w in caught if issubclass(w.category, kjit.KjitWarning)],
    "specializations": s["specializations"],
    "max": s["max_specializations"],
    "first_loads": first_loads,
    "loads": s["compiles"] + s["disk_hits"],
}))
"""


def test_specialization_policy_saturates_to_the_generic_variant(run_py):
    r = run_py(_POLICY_CHILD, env={"KJIT_MAX_SPECIALIZATIONS": "2"})
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert all(out["ok"]), (out["ok"], r)
    assert out["max"] == 2
    by_kernel = {(e["kernel"], e["param"]): e for e in out["specializations"]}
    for kernel in ("softmax_forward", "norm_forward", "reduce_rows"):
        assert by_kernel[(kernel, "D")] == {
            "kernel": kernel,
            "param": "D",
            "specialized_values": 2,
            "generic_values": 1,
            "saturated": True,
        }, out["specializations"]
        said = [w for w in out["warnings"] if f"kernel '{kernel}' has been specialized on 2 distinct values of D" in w]
        assert len(said) == 1, out["warnings"]
    policy = [w for w in out["warnings"] if "has been specialized on" in w]
    assert len(policy) == 3, out["warnings"]
    # Per kernel: two specialized lengths and the generic variant, each loaded once; none in the second round.
    assert out["first_loads"] == 9, out
    assert out["loads"] == 9, out


# ======================================== torch.compile and CUDA graphs ==========================================


def _block(x, w, b):
    return ops.softmax(ops.layer_norm(ops.silu(x), w, b))


def test_torch_compile_fullgraph_matches_eager():
    x, w, b = norm_inputs(64, 1000, torch.float32)
    compiled = torch.compile(_block, fullgraph=True)
    torch.testing.assert_close(compiled(x, w, b), _block(x, w, b), rtol=1e-5, atol=1e-6)
    # With autograd.
    g = randn(64, 1000)
    grads = []
    for fn in (_block, compiled):
        xs, ws, bs = (t.detach().clone().requires_grad_() for t in (x, w, b))
        (fn(xs, ws, bs) * g).sum().backward()
        grads.append((xs.grad, ws.grad, bs.grad))
    for eager, comp in zip(*grads):
        torch.testing.assert_close(comp, eager, rtol=1e-4, atol=1e-5)


def test_cuda_graph_capture_and_replay():
    f = kjit.elementwise("p * s + y", "p, y", "s", name="test_graph")
    x, y = randn(64, 1000, scale=3.0), randn(64, 1000)
    # Warm up on a side stream (loads every kernel: compiling during capture is an error).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        f(ops.softmax(x), y, s=0.5)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        p = ops.softmax(x)
        z = f(p, y, s=0.5)
    for _ in range(3):
        x.copy_(torch.randn_like(x) * 3)
        y.normal_()
        graph.replay()
        torch.cuda.synchronize()
        ref = torch.softmax(x.double(), -1)
        close(p, ref.float(), **softmax_tol(torch.float32, False))
        close(z, (ref * 0.5 + y.double()).float(), rtol=1e-5, atol=1e-5)


# ================================================ compiled ahead ================================================

_AHEAD_CHILD = r"""
import json, torch, kjit
from kjit import ops
torch.manual_seed(0)
h = torch.randn(64, 4096, device="cuda", dtype=torch.float64)
w = torch.randn(4096, device="cuda", dtype=torch.float64)
b = torch.randn(4096, device="cuda", dtype=torch.float64)
silu_mul = kjit.elementwise("x / (1.0 + exp(-x)) * y", ["x", "y"], name="ahead_silu_mul")
CASES = {
    "softmax": (lambda a: ops.softmax(a, -1), lambda a: torch.softmax(a, -1)),
    "log_softmax": (lambda a: ops.log_softmax(a, -1), lambda a: torch.log_softmax(a, -1)),
    "layer_norm": (lambda a: ops.layer_norm(a, w, b), lambda a: torch.nn.functional.layer_norm(a, (4096,), w, b)),
    "rms_norm": (lambda a: ops.rms_norm(a, w), lambda a: torch.nn.functional.rms_norm(a, (4096,), w, 1e-6)),
    "elementwise": (lambda a: silu_mul(a, h), lambda a: torch.nn.functional.silu(a) * h),
}
out = {}
for name, (f, ref) in CASES.items():
    a = h.clone().requires_grad_(True)
    kjit.reset_stats()
    y = f(a)
    kjit._core._drain_background_jobs()
    forward = kjit.stats()["compiles"]
    g = torch.randn_like(y)
    kjit.reset_stats()
    y.backward(g)
    torch.cuda.synchronize()
    s = kjit.stats()
    a2 = h.clone().requires_grad_(True)
    ref(a2).backward(g)
    out[name] = {"forward_compiles": forward, "backward_compiles": s["compiles"], "backward_disk_hits": s["disk_hits"],
                 "grad_ok": bool(torch.allclose(a.grad, a2.grad, rtol=1e-9, atol=1e-9))}
kjit.reset_stats()
ops.softmax(torch.randn(8, 1000, device="cuda"))
kjit._core._drain_background_jobs()
out["no_grad_compiles"] = kjit.stats()["compiles"]
# The same forward with gradients finds its kernel in memory: nothing is predicted (the hot path stays as
# it was), and the backward compiles its own kernel when it comes.
kjit.reset_stats()
a = torch.randn(8, 1000, device="cuda", requires_grad=True)
y = ops.softmax(a)
kjit._core._drain_background_jobs()
forward = kjit.stats()["compiles"]
y.backward(torch.ones_like(y))
torch.cuda.synchronize()
out["forward_in_memory"] = {"forward_compiles": forward, "backward_compiles": kjit.stats()["compiles"] - forward}
print(json.dumps(out))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one usable CPU: kjit compiles nothing ahead there")
def test_a_forward_that_wants_gradients_compiles_its_backward_kernels_ahead(run_py):
    """At a forward whose inputs want gradients, the backward's kernels compile on background threads (into
    the disk cache): the backward then loads them, compiling nothing, and its gradients are right. A
    forward without gradients compiles only its own kernel; a forward whose kernel is in memory predicts
    nothing (the backward compiles when it comes)."""
    out = json.loads(run_py(_AHEAD_CHILD).stdout.strip().splitlines()[-1])
    for name in ("softmax", "log_softmax", "layer_norm", "rms_norm", "elementwise"):
        case = out[name]
        assert case["grad_ok"], (name, case)
        assert case["backward_compiles"] == 0, (name, case)
        assert case["backward_disk_hits"] >= 1, (name, case)
        assert case["forward_compiles"] >= 2, (name, case)
    assert out["no_grad_compiles"] == 1, out
    assert out["forward_in_memory"] == {"forward_compiles": 0, "backward_compiles": 1}, out


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_a_bad_call_that_wants_gradients_gets_the_ops_own_message(op):
    """The prediction of the backward's kernels at a forward with gradients raises nothing of its own: a
    dtype the op refuses is reported by the op, as without gradients."""
    f = getattr(ops, op)
    messages = []
    kjit.reset_stats()
    for grad in (False, True):
        x = torch.randn(4, 8, device=DEV, dtype=torch.complex64).requires_grad_(grad)
        with pytest.raises(kjit.TypeError) as e:
            f(x)
        messages.append(str(e.value))
    assert f"kjit.ops.{op}" in messages[0] and "complex64" in messages[0], messages[0]
    assert f"kjit.ops.{op}" in messages[1] and "complex64" in messages[1], messages[1]
    if op.endswith("softmax"):  # a dim the op refuses
        with pytest.raises(kjit.ValueError):
            f(torch.randn(8, 24, device=DEV, requires_grad=True), 0)
    kjit._core._drain_background_jobs()
    assert kjit.stats()["compiles"] == 0, "a refused call compiled its backward's kernels ahead"


_AHEAD_UNDER_A_MODE = r"""
import json, torch, kjit
from kjit import ops
from torch.utils._python_dispatch import TorchDispatchMode
class CallsKjitFirst(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.name().startswith("kjit::softmax"):  # another kjit op first, which must compile
            ops.add_constant(torch.ones(5, device="cuda", dtype=torch.float64), 1.0)
        return func(*args, **(kwargs or {}))
x = torch.randn(8, 1000, device="cuda", requires_grad=True)
kjit.reset_stats()
refused = False
with CallsKjitFirst():
    try:
        ops.softmax(x, 0)
    except Exception:
        refused = True
kjit._core._drain_background_jobs()
print(json.dumps({"refused": refused, "compiles": kjit.stats()["compiles"]}))
"""


def test_under_a_dispatch_mode_no_backward_is_compiled_ahead_for_a_call_the_op_then_refuses(run_py):
    """A TorchDispatchMode's handler runs between an autograd forward and its kernel, and may call other
    ops first: their compile must not trigger the prediction of a forward whose checks have not run (here
    softmax over dim 0, refused). Only the other op's kernel compiles."""
    out = json.loads(run_py(_AHEAD_UNDER_A_MODE).stdout.strip().splitlines()[-1])
    assert out == {"refused": True, "compiles": 1}, out


def test_compiling_without_a_gpu_makes_the_entries_the_calls_use(run_py):
    # What a build machine compiles for a deployment (Elementwise.compile, a built-in kernel with
    # library_compile_options(), as `python -m kjit demo` does without a GPU) has the keys of the kernels the calls
    # then load: the next process makes no compile.
    code = """
        import torch, kjit
        cc = torch.cuda.get_device_capability(); arch = f"sm_{cc[0]}{cc[1]}"
        f = kjit.elementwise("x * 3.0f + y", "x, y", name="ahead_of_time")
        x = torch.randn(4096, device="cuda"); y = torch.randn(4096, device="cuda")
        if STEP == "compile":
            f.compile(arch=arch, dtypes=(torch.float32, torch.float32), vec=4)
            kjit.Template.builtin("add_constant").kernel("add_constant", **kjit._core.library_compile_options()
                                                          ).specialize(T=torch.float32, VEC=4, arch=arch)
        else:
            torch.testing.assert_close(f(x, y), x * 3 + y)
            torch.testing.assert_close(kjit.ops.add_constant(x, 2.0), x + 2)
        s = kjit.stats()
        print(s["compiles"], s["disk_hits"])
    """
    assert run_py("STEP = 'compile'\n" + textwrap.dedent(code)).stdout.split() == ["2", "0"]
    assert run_py("STEP = 'call'\n" + textwrap.dedent(code)).stdout.split() == ["0", "2"]
