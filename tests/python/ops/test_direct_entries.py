"""The op machinery every op family shares, tested across families: the direct entries (kjit.ops.<name>, a C
function: plain calls skip the dispatcher; autograd, subclasses, modes, vmap and special views go through it),
the device checks (CPU tensors, two devices), fake tensors, torch.compile and make_fx over several families'
ops, the kernel cache (memory hits, runtime arguments that never recompile, one load per specialized size, the
specialization policy, a second process finding every kernel on disk, entries compiled without a GPU), the
backward's kernels compiled ahead at a forward that wants gradients, streams and CUDA graphs. One family's own
tests are in its file (ops/test_<family>.py), the generic tests over the op table in ops/test_op_table.py.
"""

import os
import textwrap

import pytest
import torch
from family_helpers import DEV, norm_inputs, softmax_tol, traced_kjit_ops
from support import close, last_json, meta, randn, run_python

import kjit
from kjit import ops


# ---- the direct entries and the dispatcher ------------------------------------------------------------------


def test_ops_are_the_registered_operators():
    names = (
        "relu sigmoid tanh silu mish gelu sum mean amax amin softmax log_softmax layer_norm rms_norm add_layer_norm "
        "add_rms_norm max_pool2d avg_pool2d causal_conv1d linear_scan add_constant rgb_to_gray outer outer_backward "
        "fused_update"
    ).split()
    backward = (
        "relu sigmoid tanh silu mish gelu softmax log_softmax layer_norm rms_norm add_layer_norm add_rms_norm max_pool2d "
        "avg_pool2d causal_conv1d linear_scan"
    ).split()
    for name in names + [f"{n}_backward" for n in backward]:
        assert getattr(ops, name) is getattr(kjit._C.ops, name), name  # the direct entry (a C function)
        assert ops.registered(name) is getattr(torch.ops.kjit, name).default, name
        assert name in ops.__all__


@pytest.mark.gpu
def test_plain_calls_skip_the_dispatcher_and_others_use_it():
    x = randn(8, 4096, dtype=torch.bfloat16)
    ops.softmax(x)
    kjit.reset_stats()
    ops.softmax(x)
    ops.rms_norm(x, randn(4096, dtype=torch.bfloat16))
    assert kjit.stats()["op_calls"] == {"direct": 2, "dispatched": 0}
    xg = x.float().requires_grad_()
    y = ops.softmax(xg)
    assert y.grad_fn is not None
    with torch.no_grad():
        ops.softmax(xg)  # no gradient needed: direct again
    assert kjit.stats()["op_calls"] == {"direct": 3, "dispatched": 1}


@pytest.mark.gpu
def test_subclass_and_modes_go_through_the_dispatcher():
    class Logged(torch.Tensor):
        calls = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.calls.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    x = randn(4, 64).as_subclass(Logged)
    ops.silu(x)
    assert any("silu" in str(f) for f in Logged.calls)
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Record():
        ops.softmax(randn(4, 64))
    assert any("kjit.softmax" in s for s in seen), seen


@pytest.mark.gpu
def test_vmap_goes_through_the_dispatcher():
    x = randn(3, 5, 64)
    y = torch.vmap(ops.softmax)(x)  # vmap falls back to a loop over the op: still right
    torch.testing.assert_close(y, torch.softmax(x, -1))


@pytest.mark.gpu
def test_negative_views_are_resolved_not_read_raw():
    # A view with the negative bit (torch._neg_view) keeps its data pointer: the sign is only a dispatch key.
    # The direct entry takes plain CUDA tensors only, so such a view goes through the dispatcher, whose
    # fallback resolves the bit before kjit's kernel reads the data (hostile review 3's open question; the
    # conjugate bit is on complex tensors only, which kjit's ops refuse).
    x = torch.randn(1000, device=DEV)
    neg = torch._neg_view(x)
    assert neg.is_neg()
    torch.testing.assert_close(ops.add_constant(neg, 1.5), -x + 1.5)
    torch.testing.assert_close(kjit.ops.softmax(neg, -1), torch.softmax(-x, -1))
    y = torch.randn(64, 32, device=DEV)
    torch.testing.assert_close(ops.outer(torch._neg_view(y[0]), y[1]), torch.outer(-y[0], y[1]))


# torch.profiler.profile warns that it "clears events at the end of each cycle" (the events of the one cycle
# this test records are all it reads): expected here, filtered here (":" cannot be written in the filter).
@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events at the end of each cycle:UserWarning")
def test_profiler_sees_the_ops():
    x = randn(4, 256)
    ops.softmax(x)  # compiled and cached first
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        ops.softmax(x)
    assert any("kjit::softmax" in e.name for e in prof.events()), sorted({e.name for e in prof.events()})


# ---- devices: CPU tensors are a kjit.ValueError saying to use CUDA; two devices -----------------------------


_x = lambda *s: torch.randn(*s)  # noqa: E731
# (op, the tensors its message names, a call with CPU tensors)
CPU_CALLS = [
    ("relu", "x", lambda: ops.relu(_x(3))),
    ("sigmoid", "x", lambda: ops.sigmoid(_x(3))),
    ("tanh", "x", lambda: ops.tanh(_x(3))),
    ("silu", "x", lambda: ops.silu(_x(3))),
    ("gelu", "x", lambda: ops.gelu(_x(3))),
    ("gelu", "x", lambda: ops.gelu(_x(3), approximate="tanh")),
    ("relu_backward", "grad, saved", lambda: ops.relu_backward(_x(3), _x(3))),
    ("sigmoid_backward", "grad, saved", lambda: ops.sigmoid_backward(_x(3), _x(3))),
    ("tanh_backward", "grad, saved", lambda: ops.tanh_backward(_x(3), _x(3))),
    ("silu_backward", "grad, saved", lambda: ops.silu_backward(_x(3), _x(3))),
    ("gelu_backward", "grad, x", lambda: ops.gelu_backward(_x(3), _x(3), "tanh")),
    ("sum", "x", lambda: ops.sum(_x(3, 4))),
    ("mean", "x", lambda: ops.mean(_x(3, 4), 0)),
    ("amax", "x", lambda: ops.amax(_x(3, 4), 1, True)),
    ("amin", "x", lambda: ops.amin(_x(3, 4), dim=0, keepdim=True)),
    ("softmax", "x", lambda: ops.softmax(_x(3, 4))),
    ("log_softmax", "x", lambda: ops.log_softmax(_x(3, 4), -1)),
    ("softmax_backward", "grad, output", lambda: ops.softmax_backward(_x(3, 4), _x(3, 4))),
    ("log_softmax_backward", "grad, output", lambda: ops.log_softmax_backward(_x(3, 4), _x(3, 4))),
    ("layer_norm", "x, weight, bias", lambda: ops.layer_norm(_x(3, 4), _x(4), _x(4))),
    ("layer_norm", "x", lambda: ops.layer_norm(_x(3, 4))),
    ("rms_norm", "x, weight", lambda: ops.rms_norm(_x(3, 4), _x(4))),
    ("layer_norm_backward", "grad, x, weight", lambda: ops.layer_norm_backward(_x(3, 4), _x(3, 4), _x(4), True, 1e-5)),
    ("rms_norm_backward", "grad, x", lambda: ops.rms_norm_backward(_x(3, 4), _x(3, 4), None, False, 1e-6)),
    ("add_layer_norm", "x, residual, weight, bias", lambda: ops.add_layer_norm(_x(3, 4), _x(3, 4), _x(4), _x(4))),
    ("add_rms_norm", "x, residual", lambda: ops.add_rms_norm(_x(3, 4), _x(3, 4))),
    (
        "add_layer_norm_backward",
        "grad, grad_h, h, weight",
        lambda: ops.add_layer_norm_backward(_x(3, 4), _x(3, 4), _x(3, 4), _x(4), True, 1e-5),
    ),
    (
        "add_rms_norm_backward",
        "grad, h",
        lambda: ops.add_rms_norm_backward(_x(3, 4), None, _x(3, 4), None, False, 1e-6),
    ),
    ("max_pool2d", "x", lambda: ops.max_pool2d(_x(1, 2, 8, 8), [2, 2])),
    ("avg_pool2d", "x", lambda: ops.avg_pool2d(_x(2, 8, 8), [3, 3], [2, 2], [1, 1], False)),
    ("max_pool2d_backward", "grad, x", lambda: ops.max_pool2d_backward(_x(1, 2, 4, 4), _x(1, 2, 8, 8), [2, 2])),
    ("avg_pool2d_backward", "grad, x", lambda: ops.avg_pool2d_backward(_x(1, 2, 4, 4), _x(1, 2, 8, 8), [2, 2])),
    (
        "causal_conv1d",
        "x, weight, bias, initial_state",
        lambda: ops.causal_conv1d(_x(2, 3, 8), _x(3, 4), _x(3), _x(2, 3, 3), "silu"),
    ),
    (
        "causal_conv1d_backward",
        "grad, x, weight",
        lambda: ops.causal_conv1d_backward(_x(2, 3, 8), None, _x(2, 3, 8), _x(3, 4), None, None, None),
    ),
    ("linear_scan", "a, b, h0", lambda: ops.linear_scan(_x(2, 8), _x(2, 8), _x(2))),
    (
        "linear_scan_backward",
        "a, h, grad_h",
        lambda: ops.linear_scan_backward(_x(2, 8), _x(2, 8), _x(2, 8), None, None),
    ),
    ("add_constant", "x", lambda: ops.add_constant(torch.ones(3), 1.0)),
    ("rgb_to_gray", "img", lambda: ops.rgb_to_gray(torch.zeros(2, 2, 3, dtype=torch.uint8))),
    ("outer", "a, b", lambda: ops.outer(torch.ones(2, 3), torch.ones(2, 4))),
    ("outer_backward", "grad, a, b", lambda: ops.outer_backward(torch.ones(3, 4), torch.ones(3), torch.ones(4))),
    (
        "fused_update",
        "x, model_out, noise",
        lambda: ops.fused_update(torch.ones(3), torch.ones(3), torch.ones(3), 1.0, 2.0, 3.0),
    ),
]


def _expected_cpu_message(op, names):
    return f"kjit.ops.{op}: expected all tensors on one CUDA device, got cpu ({names}); move them with .to('cuda')"


@pytest.mark.parametrize("op, names, call", CPU_CALLS, ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(CPU_CALLS)])
def test_cpu_tensors_are_a_value_error_saying_to_use_cuda(op, names, call):
    with pytest.raises(ValueError) as info:
        call()
    assert isinstance(info.value, kjit.ValueError) and isinstance(info.value, kjit.Error)
    assert str(info.value) == _expected_cpu_message(op, names)


_grad = lambda *s: torch.randn(*s, requires_grad=True)  # noqa: E731


GRAD_CPU_CALLS = [
    ("silu", "x", lambda: ops.silu(_grad(4, 4))),
    ("softmax", "x", lambda: ops.softmax(_grad(4, 4))),
    ("layer_norm", "x", lambda: ops.layer_norm(_grad(4, 4))),
    ("sum", "x", lambda: ops.sum(_grad(4, 4), 0)),
    ("max_pool2d", "x", lambda: ops.max_pool2d(_grad(4, 4).view(1, 1, 4, 4), 2)),
    ("outer", "a, b", lambda: ops.outer(torch.ones(2, 3, requires_grad=True), torch.ones(2, 4))),
]


@pytest.mark.parametrize("op, names, call", GRAD_CPU_CALLS, ids=[op for op, _, _ in GRAD_CPU_CALLS])
def test_cpu_tensor_that_requires_grad_gets_the_same_error(op, names, call):
    with pytest.raises(kjit.ValueError) as info:
        call()
    assert str(info.value) == _expected_cpu_message(op, names)


def test_empty_cpu_tensor_is_still_rejected():
    with pytest.raises(ValueError, match=r"got cpu \(x\); move them with \.to\('cuda'\)"):
        ops.add_constant(torch.ones(0), 1.0)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_tensors_on_different_devices():
    with pytest.raises(ValueError, match=r"got cuda:0 \(a\) and cuda:1 \(b\); move them with \.to\('cuda:0'\)"):
        ops.outer(torch.ones(2, 3, device="cuda:0"), torch.ones(2, 4, device="cuda:1"))


# ---- fake tensors, torch.compile and make_fx over the ops of several families ---------------------------------


def test_fake_tensor_mode_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(6, 10)
        w = torch.empty(10)
        assert ops.silu(a).shape == (6, 10)
        assert ops.gelu(a, approximate="tanh").shape == (6, 10)
        assert ops.softmax(a).shape == (6, 10)
        assert ops.log_softmax(a, -1).shape == (6, 10)
        assert ops.layer_norm(a, w, w).shape == (6, 10)
        assert ops.rms_norm(a, w).shape == (6, 10)
        assert [t.shape for t in ops.add_rms_norm(a, a, w)] == [(6, 10), (6, 10)]
        assert [t.shape for t in ops.add_layer_norm(a, a, w, w)] == [(6, 10), (6, 10)]
        assert ops.mean(a, 0, True).shape == (1, 10)
        assert ops.amax(a).shape == (6,)
        assert ops.avg_pool2d(torch.empty(2, 3, 9, 9), 3, 2, 1).shape == (2, 3, 5, 5)
        assert ops.max_pool2d(torch.empty(3, 9, 9), 2).shape == (3, 4, 4)
        b = torch.empty(6, 32)
        assert ops.outer(a, b).shape == (6, 10, 32)
        assert [t.shape for t in ops.outer_backward(torch.empty(6, 10, 32), a, b)] == [(6, 10), (6, 32)]
        assert ops.fused_update(a, a, a, 1.0, 2.0, 3.0).shape == (6, 10)
        assert ops.add_constant(a, 1.0).shape == (6, 10)
        assert ops.rgb_to_gray(torch.empty(4, 5, 3, dtype=torch.uint8)).shape == (4, 5)


def _library_graph(x, w, b):
    y = ops.softmax(ops.layer_norm(ops.silu(x), w, b))
    y = y + ops.log_softmax(ops.rms_norm(ops.gelu(x, approximate="tanh"), w))
    y = y + ops.sigmoid(x) * ops.tanh(x) + ops.relu(x)
    pooled = ops.max_pool2d(x.view(1, 1, 4, 8), 2) + ops.avg_pool2d(x.view(1, 1, 4, 8), 2)
    return y.sum() + ops.amax(x, 0).sum() + ops.mean(x).sum() + pooled.sum()


def test_torch_compile_fullgraph_on_meta_tensors_with_autograd():
    compiled = torch.compile(_library_graph, fullgraph=True, backend="aot_eager")
    x, w, b = meta(4, 8).requires_grad_(), meta(8).requires_grad_(), meta(8).requires_grad_()
    compiled(x, w, b).backward()
    assert x.grad.shape == (4, 8) and w.grad.shape == (8,) and b.grad.shape == (8,)


def test_outer_and_add_constant_under_torch_compile_fullgraph_on_meta_tensors_with_autograd():
    def f(a, b):
        return ops.outer(ops.add_constant(a, 1.0), b).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    a = meta(2, 3).requires_grad_()
    b = meta(2, 4).requires_grad_()
    compiled(a, b).backward()
    assert a.grad.shape == (2, 3) and b.grad.shape == (2, 4)


def test_backward_traces_to_the_library_backward_ops():
    def f(x, w, b):
        return torch.autograd.grad(_library_graph(x, w, b), (x, w, b))

    inputs = (
        torch.randn(4, 8, requires_grad=True),
        torch.randn(8, requires_grad=True),
        torch.randn(8, requires_grad=True),
    )
    found = traced_kjit_ops(f, inputs)
    for name in (
        "silu",
        "gelu",
        "sigmoid",
        "tanh",
        "relu",
        "softmax",
        "log_softmax",
        "layer_norm",
        "rms_norm",
        "max_pool2d",
        "avg_pool2d",
        "amax",
        "mean",
    ):
        assert name in found, (name, sorted(found))
        if name not in ("amax", "mean"):  # their gradients are PyTorch ops
            assert f"{name}_backward" in found, (name, sorted(found))


def test_backward_traces_to_outer_backward():
    def f(a, b, x):
        out = ops.outer(ops.add_constant(a, 1.0), b)
        u = ops.fused_update(x, x, x, 1.0, 2.0, 3.0)
        return torch.autograd.grad(out.sum() + u.sum(), (a, b, x))

    inputs = (
        torch.randn(2, 3, requires_grad=True),
        torch.randn(2, 4, requires_grad=True),
        torch.randn(5, requires_grad=True),
    )
    found = traced_kjit_ops(f, inputs)
    assert "outer_backward" in found and "fused_update" in found, sorted(found)


@pytest.mark.gpu
def test_torch_compile_fullgraph():
    def f(a, b, x):
        return ops.outer(ops.add_constant(a, 1.0), b), ops.fused_update(x, x, x, 1.0, 2.0, 3.0)

    compiled = torch.compile(f, fullgraph=True)
    a, b, x = randn(3, 5), randn(3, 7), randn(11)
    out, upd = compiled(a, b, x)
    torch.testing.assert_close(out, (a + 1.0)[:, :, None] * b[:, None, :])
    torch.testing.assert_close(upd, 6 * x)


@pytest.mark.gpu
def test_torch_compile_fullgraph_with_autograd():
    def f(a, b):
        return ops.outer(ops.add_constant(a, 1.0), b).sum()

    compiled = torch.compile(f, fullgraph=True)
    a, b = randn(3, 5).requires_grad_(), randn(3, 7).requires_grad_()
    compiled(a, b).backward()
    torch.testing.assert_close(a.grad, b.detach().sum(1, keepdim=True).expand(-1, 5))
    torch.testing.assert_close(b.grad, (a.detach() + 1.0).sum(1, keepdim=True).expand(-1, 7))


def _block(x, w, b):
    return ops.softmax(ops.layer_norm(ops.silu(x), w, b))


@pytest.mark.gpu
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


# ---- the kernel cache ----------------------------------------------------------------------------------------


def stats():
    s = kjit.stats()
    return {k: s[k] for k in ("compiles", "disk_hits", "memory_hits")}


def loads_since(before):
    """Kernels this process loaded since `before` (compiled or read from disk)."""
    now = stats()
    return (now["compiles"] - before["compiles"]) + (now["disk_hits"] - before["disk_hits"])


@pytest.mark.gpu
def test_library_calls_are_memory_hits_and_clear_memory_forgets_them():
    x = randn(8, 1024)
    ops.layer_norm(x)
    kjit.reset_stats()
    ops.layer_norm(x)
    assert kjit.stats()["memory_hits"] >= 1 and kjit.stats()["compiles"] == 0
    kjit.clear_memory()
    kjit.reset_stats()
    ops.layer_norm(x)
    s = kjit.stats()
    assert s["memory_hits"] == 0 and s["disk_hits"] + s["compiles"] >= 1, s


@pytest.mark.gpu
def test_changing_the_constant_never_recompiles():
    x = randn(4096)
    ops.add_constant(x, 0.0)
    before = stats()
    for i in range(50):
        c = 0.5 * i - 3.0
        torch.testing.assert_close(ops.add_constant(x, c), x + c)
    assert loads_since(before) == 0
    assert stats()["memory_hits"] - before["memory_hits"] >= 50


@pytest.mark.gpu
def test_one_load_per_distinct_specialized_size():
    sizes = [(13, 29), (14, 29), (13, 30)]  # sizes no other test uses
    before = stats()
    for h, w in sizes:
        ops.rgb_to_gray(torch.zeros(h, w, 3, dtype=torch.uint8, device=DEV))
    assert loads_since(before) == 3  # compiled, or read from a warm disk cache
    before = stats()
    for _ in range(5):
        for h, w in sizes:
            ops.rgb_to_gray(torch.zeros(2, h, w, 3, dtype=torch.uint8, device=DEV))  # the batch is not specialized
    assert loads_since(before) == 0


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


@pytest.mark.gpu
def test_specialization_policy_saturates_to_the_generic_variant(run_py):
    r = run_py(_POLICY_CHILD, env={"KJIT_MAX_SPECIALIZATIONS": "2"})
    out = last_json(r.stdout)
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


_CHILD = textwrap.dedent(
    """
    import json, torch, kjit
    from kjit import ops
    x = torch.randn(1000, device="cuda")
    ops.add_constant(x, 1.0)
    ops.fused_update(x, x, x, 1.0, 2.0, 3.0)
    a = torch.randn(2, 8, device="cuda", requires_grad=True)
    b = torch.randn(2, 12, device="cuda", requires_grad=True)
    ops.outer(a, b).sum().backward()
    ops.rgb_to_gray(torch.zeros(4, 6, 3, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    s = kjit.stats()
    print(json.dumps({k: s[k] for k in ("compiles", "disk_hits", "memory_hits")}))
    """
)


def _run_child(cache_dir):
    return last_json(
        run_python(["-c", _CHILD], env={"KJIT_CACHE_DIR": cache_dir, "KJIT_CACHE_MODE": "readwrite"}).stdout
    )


@pytest.mark.gpu
def test_second_process_finds_every_kernel_on_disk(tmp_path):
    first = _run_child(tmp_path / "cache")
    assert first["compiles"] == 6  # add_constant, fused_update, outer, outer_backward_a/_c, rgb_to_gray
    second = _run_child(tmp_path / "cache")
    assert second["compiles"] == 0
    assert second["disk_hits"] == first["compiles"]


@pytest.mark.gpu
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


# ---- the backward's kernels compiled ahead ------------------------------------------------------------------


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


@pytest.mark.gpu
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one usable CPU: kjit compiles nothing ahead there")
def test_a_forward_that_wants_gradients_compiles_its_backward_kernels_ahead(run_py):
    """At a forward whose inputs want gradients, the backward's kernels compile on background threads (into
    the disk cache): the backward then loads them, compiling nothing, and its gradients are right. A
    forward without gradients compiles only its own kernel; a forward whose kernel is in memory predicts
    nothing (the backward compiles when it comes)."""
    out = last_json(run_py(_AHEAD_CHILD).stdout)
    for name in ("softmax", "log_softmax", "layer_norm", "rms_norm", "elementwise"):
        case = out[name]
        assert case["grad_ok"], (name, case)
        assert case["backward_compiles"] == 0, (name, case)
        assert case["backward_disk_hits"] >= 1, (name, case)
        assert case["forward_compiles"] >= 2, (name, case)
    assert out["no_grad_compiles"] == 1, out
    assert out["forward_in_memory"] == {"forward_compiles": 0, "backward_compiles": 1}, out


@pytest.mark.gpu
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


@pytest.mark.gpu
def test_under_a_dispatch_mode_no_backward_is_compiled_ahead_for_a_call_the_op_then_refuses(run_py):
    """A TorchDispatchMode's handler runs between an autograd forward and its kernel, and may call other
    ops first: their compile must not trigger the prediction of a forward whose checks have not run (here
    softmax over dim 0, refused). Only the other op's kernel compiles."""
    out = last_json(run_py(_AHEAD_UNDER_A_MODE).stdout)
    assert out == {"refused": True, "compiles": 1}, out


# ---- streams and CUDA graphs -------------------------------------------------------------------------------


@pytest.mark.gpu
def test_runs_on_the_current_side_stream_in_order():
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.zeros(1 << 20, device=DEV)
        torch.cuda._sleep(50_000_000)  # a long op ahead of the fill on this stream
        x.fill_(1.0)
        y = ops.add_constant(x, 2.0)
        z = ops.fused_update(y, x, x, 1.0, 1.0, 0.0)
    side.synchronize()
    assert torch.all(y == 3.0)
    assert torch.all(z == 4.0)


@pytest.mark.gpu
def test_cuda_graph_capture_and_replay_of_fused_update_and_add_constant():
    x, m, noise = randn(10_000), randn(10_000), randn(10_000)
    # Warm up (loads the kernels: compiling during capture is an error) on a side stream.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ops.fused_update(x, m, noise, 0.9, 0.1, 0.05)
        ops.add_constant(x, 1.0)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        x.copy_(ops.fused_update(x, m, noise, 0.9, 0.1, 0.05))
        y = ops.add_constant(x, 1.0)
    ref = x.clone()
    for _ in range(10):
        noise.normal_()
        graph.replay()
        ref = 0.9 * ref + 0.1 * m + 0.05 * noise
    torch.cuda.synchronize()
    torch.testing.assert_close(x, ref)
    torch.testing.assert_close(y, ref + 1.0)


@pytest.mark.gpu
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
