"""PyTorch's own checks of every registered kjit op (torch.library.opcheck: test_schema,
test_autograd_registration, test_faketensor, test_aot_dispatch_dynamic) on float32 and bfloat16 inputs of
awkward sizes, on the GPU; and the direct entries' behaviour: plain calls skip the dispatcher, anything
that needs it (autograd, subclasses, modes) goes through it, kjit.elementwise under
torch.compile(fullgraph=True) with gradients, one kernel table (stats, clear_memory).

The samples are the op table's (op_table.py); every operator of torch.ops.kjit has a row there
(ops/test_op_table.py checks it)."""

import pytest
import torch
import torch.nn.functional as F

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


def test_elementwise_gradients_are_derived():
    f = kjit.elementwise("silu(a) * b * s", "a, b", "s", name="grad_silu_mul")
    a, b = t(7, 33, dtype=torch.float64, grad=True), t(33, dtype=torch.float64, grad=True)
    torch.autograd.gradcheck(lambda a, b: f(a, b, s=0.5), (a, b))
    y = f(a, b, s=0.5)
    assert y.grad_fn is not None
    y.sum().backward()
    ref_a, ref_b = a.detach().requires_grad_(), b.detach().requires_grad_()
    (F.silu(ref_a) * ref_b * 0.5).sum().backward()
    torch.testing.assert_close(a.grad, ref_a.grad)
    torch.testing.assert_close(b.grad, ref_b.grad)  # summed over the broadcast dim


def test_elementwise_without_a_derivative_refuses_inputs_that_require_grad():
    f = kjit.elementwise("mystery(x)", "x", name="no_grad_fn")
    with pytest.raises(kjit.ValueError, match="input 'x' requires grad, but kjit has no derivative"):
        f(t(4, grad=True))


def test_elementwise_derivative_rules_agree_with_torch_autograd_at_edge_values():
    """Every derivative rule of kjit/_derivative.py, compiled: the cases of test_derivative.py (which reads the rules
    from the module's tables, each with PyTorch's counterpart) and its compositions run through one kjit.elementwise
    function's backward kernels on the GPU, compared with torch.autograd on CUDA at 0, -0, +-1, +-inf, NaN, 1e-30,
    -2.5 (ties and NaN pairs for the two-argument rules), alone and times an outer factor w of inf or NaN. One
    function holds them all, `s == i ? (case_i) * w : ...`: the derivative of c ? a : b is the taken branch's, so
    each element gets exactly its case's derivative (3 compiles, not 300)."""
    from test_derivative import COMPOSITIONS, EDGES, OUTER, agrees, by_constants, rule_cases, torch_gradients

    exprs, refs, points = [], [], []  # points: (case index, x, y, k, w)
    for cases in rule_cases().values():
        for expr, fn, pts in cases:
            points += [(len(exprs), x, y, k, w) for x, y, k in pts for w in (1.0, *OUTER)]
            exprs.append(expr)
            refs.append(fn)
    for expr, fn in COMPOSITIONS:
        points += [(len(exprs), x, y, 0.0, 1.0) for x in EDGES for y in EDGES]
        exprs.append(expr)
        refs.append(lambda a, b, k, fn=fn: fn(a, b))
    chain = "".join(f"s == {i} ? ({e}) * w : " for i, e in enumerate(exprs)) + "static_cast<C>(0)"
    f = kjit.elementwise(chain, "x, y, k, w, s", name="derivative_rules_at_edges")
    assert not f.no_grad, f.no_grad
    ts, tx, ty, tk, tw = (torch.tensor(column, dtype=torch.float32, device="cuda") for column in zip(*points))
    tx.requires_grad_()
    ty.requires_grad_()
    gx, gy = torch.autograd.grad(f(tx, ty, tk, tw, ts), (tx, ty), torch.ones(len(points), device="cuda"))
    assert gx.dtype == torch.float32 and gy.dtype == torch.float32
    got = {"x": gx.tolist(), "y": gy.tolist()}
    by_case: dict = {}
    for n, (i, px, py, pk, pw) in enumerate(points):
        by_case.setdefault(i, []).append((px, py, pk, pw, n))
    wrong = []
    for i, mine in by_case.items():  # PyTorch's gradients of each case, a batch per value of k and w
        for k, w, pts in by_constants(mine):
            want = torch_gradients(refs[i], [p[0] for p in pts], [p[1] for p in pts], k, w, device="cuda")
            for name, expected_all in zip("xy", want):
                for (x, y, n), expected in zip(pts, expected_all):
                    if not agrees(got[name][n], expected):
                        wrong.append(
                            f"d(({exprs[i]}) * w)/d{name} at x={x}, y={y}, k={k}, w={w}: kjit "
                            f"{got[name][n]}, torch {expected}"
                        )
    assert not wrong, f"{len(wrong)} disagreements:\n" + "\n".join(wrong[:40])


INF, NAN = float("inf"), float("nan")


def test_elementwise_backward_masks_an_inf_or_nan_incoming_gradient_as_torch_does():
    """The backward kernel of a derived derivative runs the gradient with kjit_grad flowing in at the top: where
    PyTorch masks the incoming gradient (relu's threshold_backward, fmax's masked_fill, pow's exponent-0 mask), an
    inf or NaN gradient gives 0, not inf * 0 = NaN. Every rule case of test_derivative.py (at w = 1), through the
    same function as the test above (its kernels are cached), each point under kjit_grad = inf, -inf, NaN."""
    from test_derivative import agrees, rule_cases, torch_gradient_for

    exprs, refs, points = [], [], []  # points: (case index, x, y, k, g)
    for cases in rule_cases().values():
        for expr, fn, pts in cases:
            points += [(len(exprs), x, y, k, g) for x, y, k in pts for g in (INF, -INF, NAN)]
            exprs.append(expr)
            refs.append(fn)
    from test_derivative import COMPOSITIONS

    exprs += [e for e, _ in COMPOSITIONS]  # the same chain as the test above
    chain = "".join(f"s == {i} ? ({e}) * w : " for i, e in enumerate(exprs)) + "static_cast<C>(0)"
    f = kjit.elementwise(chain, "x, y, k, w, s", name="derivative_rules_at_edges")
    ts, tx, ty, tk, tg = (torch.tensor(column, dtype=torch.float32, device="cuda") for column in zip(*points))
    tx.requires_grad_()
    ty.requires_grad_()
    gx, gy = torch.autograd.grad(f(tx, ty, tk, torch.ones_like(tk), ts), (tx, ty), tg)
    got = {"x": gx.tolist(), "y": gy.tolist()}
    wrong = []
    for n, (i, x, y, k, g) in enumerate(points):
        for name, expected in zip("xy", torch_gradient_for(refs[i], x, y, k, g, device="cuda")):
            if not agrees(got[name][n], expected):
                wrong.append(
                    f"gradient of {name} in {exprs[i]} at x={x}, y={y}, k={k}, kjit_grad={g}: kjit "
                    f"{got[name][n]}, torch {expected}"
                )
    assert not wrong, f"{len(wrong)} disagreements:\n" + "\n".join(wrong[:40])


def test_elementwise_of_a_1000_term_expression_is_defined_and_differentiated():
    # 13 KB: the derivation raised RecursionError, so the function could not be defined (issue 27, item 10)
    f = kjit.elementwise(" + ".join(f"x * {i}.0f" for i in range(1000)), "x", name="long_sum")
    assert not f.no_grad and f.grads["x"] == " + ".join(f"{i}.0f" for i in range(1000))
    x = torch.tensor([1.0, 2.0, -1.0, 0.0], device="cuda", requires_grad=True)
    y = f(x)
    assert torch.equal(y, x.detach() * 499500.0)  # small integers: every sum is exact in float
    y.sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 499500.0))


def test_elementwise_user_gradient():
    f = kjit.elementwise("x * x", "x", grads={"x": "static_cast<C>(3) * x"}, name="user_grad")
    x = t(5, grad=True)
    f(x).sum().backward()
    torch.testing.assert_close(x.grad, 3 * x.detach())


def test_elementwise_under_torch_compile_fullgraph():
    f = kjit.elementwise("silu(a) * b", "a, b", name="compiled_silu_mul")

    def fn(a, b):
        return f(a, b) + ops.rms_norm(a, None)

    a, b = t(8, 256, grad=True), t(8, 256, grad=True)
    compiled = torch.compile(fn, fullgraph=True)
    y = compiled(a, b)
    torch.testing.assert_close(y, F.silu(a) * b + F.rms_norm(a, (256,), eps=1e-6))
    y.sum().backward()
    assert a.grad is not None and b.grad is not None
    explanation = torch._dynamo.explain(fn)(a, b)
    assert explanation.graph_break_count == 0, explanation.break_reasons


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


def test_specialized_nan_inf_and_signed_zero_are_each_their_own_kernel():
    f = kjit.elementwise("x / s", "x", "s", specialize="s", name="special_values")
    x = torch.ones(5, device="cuda")
    assert torch.equal(f(x, s=1.0), x)
    assert torch.isnan(f(x, s=float("nan"))).all()
    assert torch.equal(f(x, s=float("inf")), torch.zeros_like(x))
    assert torch.equal(f(x, s=-0.0), torch.full_like(x, float("-inf")))
    assert torch.equal(f(x, s=0.0), torch.full_like(x, float("inf")))


def test_nine_input_function_has_gradients_and_32_inputs_refuse_them_with_the_reason():
    # Issue #28: up to 31 inputs have derivative kernels (the gradient and every input: 32 tensors).
    names = [f"a{i}" for i in range(9)]
    f = kjit.elementwise(" + ".join(names), names, name="nine_inputs")
    args = [t(4) for _ in names]
    torch.testing.assert_close(f(*args), sum(args))
    args[0].requires_grad_()
    f(*args).sum().backward()
    torch.testing.assert_close(args[0].grad, torch.ones_like(args[0]))
    names = [f"a{i}" for i in range(32)]
    f = kjit.elementwise(" + ".join(names), names, name="thirty_two_inputs")
    args = [t(4) for _ in names]
    torch.testing.assert_close(f(*args), sum(args))
    args[0].requires_grad_()
    with pytest.raises(kjit.ValueError, match="32 inputs has no derivative kernel"):
        f(*args)
