"""Built-in ops on a GPU: correctness against PyTorch, caching behaviour, streams, CUDA graphs,
torch.compile and a second process that finds every kernel on disk."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import kjit
from kjit import ops

pytestmark = pytest.mark.gpu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SIZES = [1, 7, 1000, 4097]
DEV = "cuda"


def stats():
    s = kjit.stats()
    return {k: s[k] for k in ("compiles", "disk_hits", "memory_hits")}


def loads_since(before):
    """Kernels this process loaded since `before` (compiled or read from disk)."""
    now = stats()
    return (now["compiles"] - before["compiles"]) + (now["disk_hits"] - before["disk_hits"])


def randn(*shape, dtype=torch.float32, misaligned=False):
    """A contiguous tensor; `misaligned` makes it a view one element into a larger buffer."""
    if not misaligned:
        return torch.randn(*shape, dtype=dtype, device=DEV)
    n = 1
    for s in shape:
        n *= s
    return torch.randn(n + 1, dtype=dtype, device=DEV)[1:].view(*shape)


# ---- errors on CUDA tensors ------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_tensors_on_different_devices():
    with pytest.raises(ValueError, match=r"got cuda:0 \(a\) and cuda:1 \(b\); move them with \.to\('cuda:0'\)"):
        ops.outer(torch.ones(2, 3, device="cuda:0"), torch.ones(2, 4, device="cuda:1"))


# ---- caching -----------------------------------------------------------------------------------------------


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


def test_changing_the_constant_never_recompiles():
    x = randn(4096)
    ops.add_constant(x, 0.0)
    before = stats()
    for i in range(50):
        c = 0.5 * i - 3.0
        torch.testing.assert_close(ops.add_constant(x, c), x + c)
    assert loads_since(before) == 0
    assert stats()["memory_hits"] - before["memory_hits"] >= 50


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


# ---- streams, CUDA graphs, torch.compile ------------------------------------------------------------------


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


def test_torch_compile_fullgraph():
    def f(a, b, x):
        return ops.outer(ops.add_constant(a, 1.0), b), ops.fused_update(x, x, x, 1.0, 2.0, 3.0)

    compiled = torch.compile(f, fullgraph=True)
    a, b, x = randn(3, 5), randn(3, 7), randn(11)
    out, upd = compiled(a, b, x)
    torch.testing.assert_close(out, (a + 1.0)[:, :, None] * b[:, None, :])
    torch.testing.assert_close(upd, 6 * x)


def test_torch_compile_fullgraph_with_autograd():
    def f(a, b):
        return ops.outer(ops.add_constant(a, 1.0), b).sum()

    compiled = torch.compile(f, fullgraph=True)
    a, b = randn(3, 5).requires_grad_(), randn(3, 7).requires_grad_()
    compiled(a, b).backward()
    torch.testing.assert_close(a.grad, b.detach().sum(1, keepdim=True).expand(-1, 5))
    torch.testing.assert_close(b.grad, (a.detach() + 1.0).sum(1, keepdim=True).expand(-1, 7))


# ---- a second process finds every kernel on disk -----------------------------------------------------------

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
    env = dict(os.environ, KJIT_CACHE_DIR=str(cache_dir), KJIT_CACHE_MODE="readwrite")
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_second_process_finds_every_kernel_on_disk(tmp_path):
    first = _run_child(tmp_path / "cache")
    assert first["compiles"] == 6  # add_constant, fused_update, outer, outer_backward_a/_c, rgb_to_gray
    second = _run_child(tmp_path / "cache")
    assert second["compiles"] == 0
    assert second["disk_hits"] == first["compiles"]
