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


def gray_ref(img):
    w = img.to(torch.int32)
    return ((77 * w[..., 0] + 150 * w[..., 1] + 29 * w[..., 2] + 128) >> 8).to(torch.uint8)


def reduction_tol(dtype):
    return {
        torch.float32: dict(rtol=1e-4, atol=1e-3),
        torch.float16: dict(rtol=1e-2, atol=1e-2),
        torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
        torch.float64: dict(rtol=1e-10, atol=1e-10),
    }[dtype]


# ---- correctness ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES + [torch.float64])
def test_add_constant(dtype, n, misaligned):
    x = randn(n, dtype=dtype, misaligned=misaligned)
    torch.testing.assert_close(ops.add_constant(x, 2.5), x + 2.5)
    torch.testing.assert_close(ops.add_constant(x.view(1, n), -1.25), (x - 1.25).view(1, n))


@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES + [torch.float64])
def test_fused_update(dtype, n, misaligned):
    x, m, z = (randn(n, dtype=dtype, misaligned=misaligned) for _ in range(3))
    a, b, c = 0.9, -0.3, 0.05
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    ref = (a * x.to(acc) + b * m.to(acc) + c * z.to(acc)).to(dtype)
    torch.testing.assert_close(ops.fused_update(x, m, z, a, b, c), ref)


def test_fused_update_mixed_alignment():
    # x aligned, model_out misaligned: the vector width drops to 1 for all four pointers.
    x, m, z = randn(1001), randn(1001, misaligned=True), randn(1001)
    torch.testing.assert_close(ops.fused_update(x, m, z, 1.0, 2.0, 3.0), x + 2 * m + 3 * z)


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


def test_rgb_to_gray_batched():
    img = torch.randint(0, 256, (3, 7, 1000, 3), dtype=torch.uint8, device=DEV)
    assert torch.equal(ops.rgb_to_gray(img), gray_ref(img))


def test_rgb_to_gray_batch_larger_than_one_grid():
    img = torch.randint(0, 256, (70000, 1, 2, 3), dtype=torch.uint8, device=DEV)  # gridDim.z <= 65535
    assert torch.equal(ops.rgb_to_gray(img), gray_ref(img))


OUTER_SHAPES = [(1, 1, 1), (1, 7, 1000), (3, 1000, 7), (2, 4097, 7), (3, 7, 4097), (2, 1, 4097), (5, 33, 65)]


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


def test_outer_one_dimensional():
    a, b = randn(7), randn(1000)
    out = ops.outer(a, b)
    assert out.shape == (7, 1000)
    torch.testing.assert_close(out, torch.outer(a, b))


def test_outer_many_rows_uses_grid_stride():
    a, b = randn(70000, 4), randn(70000, 3)
    torch.testing.assert_close(ops.outer(a, b), a[:, :, None] * b[:, None, :])
    ga, gb = ops.outer_backward(torch.ones(70000, 4, 3, device=DEV), a, b)
    torch.testing.assert_close(ga, b.sum(1, keepdim=True).expand(-1, 4), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gb, a.sum(1, keepdim=True).expand(-1, 3), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [((2, 3), (2, 4)), ((3,), (5,)), ((1, 6), (1, 1))])
def test_outer_gradcheck_float64(shape):
    a = torch.randn(*shape[0], dtype=torch.float64, device=DEV, requires_grad=True)
    b = torch.randn(*shape[1], dtype=torch.float64, device=DEV, requires_grad=True)
    assert torch.autograd.gradcheck(ops.outer, (a, b))


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


def test_empty_inputs_return_empty_outputs():
    assert ops.add_constant(torch.empty(0, 3, device=DEV), 1.0).shape == (0, 3)
    assert ops.fused_update(*(torch.empty(0, device=DEV),) * 3, 1.0, 1.0, 1.0).shape == (0,)
    assert ops.outer(torch.empty(2, 0, device=DEV), torch.empty(2, 5, device=DEV)).shape == (2, 0, 5)
    assert ops.rgb_to_gray(torch.empty(0, 5, 3, dtype=torch.uint8, device=DEV)).shape == (0, 5)
    ga, gb = ops.outer_backward(torch.empty(2, 3, 0, device=DEV), randn(2, 3), torch.empty(2, 0, device=DEV))
    assert torch.equal(ga, torch.zeros(2, 3, device=DEV)) and gb.shape == (2, 0)


# ---- errors on CUDA tensors ------------------------------------------------------------------------------


def test_errors_name_the_argument_and_the_fix():
    with pytest.raises(ValueError, match=r"x is not contiguous \(shape \[4, 3\], strides \[1, 4\]\): call x\.cont"):
        ops.add_constant(randn(3, 4).t(), 1.0)
    expected = r"kjit\.ops\.outer: expected all tensors on one CUDA device, got cuda:\d \(a\) and cpu \(b\)"
    with pytest.raises(ValueError, match=expected + r"; move them with \.to\('cuda:\d'\)"):
        ops.outer(randn(2, 3), torch.ones(2, 4))
    with pytest.raises(TypeError, match=r"x has dtype torch\.int32, which is not supported"):
        ops.add_constant(torch.ones(3, dtype=torch.int32, device=DEV), 1.0)
    with pytest.raises(ValueError, match=r"noise has shape \[5\] but x has shape \[4\]"):
        ops.fused_update(randn(4), randn(4), randn(5), 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"grad has shape \[2, 3, 5\] but outer\(a, b\) has shape \[2, 3, 4\]"):
        ops.outer_backward(randn(2, 3, 5), randn(2, 3), randn(2, 4))
    # The process stays usable.
    torch.testing.assert_close(ops.add_constant(torch.ones(3, device=DEV), 1.0), torch.full((3,), 2.0, device=DEV))


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


# ---- more than 2^31 elements (64-bit indexing) ---------------------------------------------------------------


def _free_gib():
    free, _ = torch.cuda.mem_get_info()
    return free / 2**30


@pytest.mark.skipif(not torch.cuda.is_available() or _free_gib() < 24, reason="needs 24 GiB of free GPU memory")
def test_more_than_2_pow_31_elements():
    n = 2**31 + 9
    x = torch.ones(n, dtype=torch.float16, device=DEV)
    x[-5:] = 3.0
    y = ops.add_constant(x, 1.0)
    assert y[:1000].eq(2.0).all() and y[-5:].eq(4.0).all() and y[-1000:-5].eq(2.0).all()
    del x, y
    a = torch.ones(1, 65536, dtype=torch.float16, device=DEV)
    b = torch.arange(32769, device=DEV).remainder(7).to(torch.float16)[None]
    out = ops.outer(a, b)  # 2^31 + 65536 elements
    assert out.shape == (1, 65536, 32769)
    assert torch.equal(out[0, -1], b[0]) and torch.equal(out[0, 0], b[0])


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
