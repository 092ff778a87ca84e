"""The matrix ops against PyTorch: kjit.ops.linear with every epilogue (bias, activation, scale, residual),
linear_swiglu, matmul, bmm, their gradients, awkward sizes (M in 1, 7, 127, 4097; K not a multiple of the tile or
of 8), views that are not contiguous or not aligned, CUDA graph capture, torch.compile, the float32 refusal
(TF32 only where allowed), and a tuned choice kept, recorded, warmed and replayed. (gemm.cuh launched
directly: ops/test_gemm_kernels.py.) Every test needs a GPU."""

import json

import pytest
import torch
import torch.nn.functional as F
from op_table import ACTIVATION_REFS as ACTIVATIONS
from support import run_python

from kjit import ops

pytestmark = pytest.mark.gpu

DTYPES = [torch.bfloat16, torch.float16]


def tol(dtype):
    return dict(atol=4e-2, rtol=3e-2) if dtype == torch.bfloat16 else dict(atol=1e-2, rtol=1e-2)


def operands(m, n, k, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=torch.float32, generator=g).to(dtype)
    w = (torch.randn(n, k, device="cuda", dtype=torch.float32, generator=g) / k**0.5).to(dtype)
    b = torch.randn(n, device="cuda", dtype=torch.float32, generator=g).to(dtype)
    r = torch.randn(m, n, device="cuda", dtype=torch.float32, generator=g).to(dtype)
    return x, w, b, r


def reference(x, w, b=None, activation=None, scale=1.0, residual=None):
    z = (x.float() @ w.float().T) * scale
    if b is not None:
        z = z + b.float()
    y = ACTIVATIONS[activation](z)
    return y + residual.float() if residual is not None else y


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m", [1, 7, 16, 127, 4097])
@pytest.mark.parametrize("n,k", [(256, 128), (200, 72), (96, 4104), (40, 70)])
def test_linear_matches_torch(m, n, k, dtype):
    x, w, b, _ = operands(m, n, k, dtype)
    y = ops.linear(x, w)
    assert y.shape == (m, n) and y.dtype == dtype
    torch.testing.assert_close(y.float(), reference(x, w), **tol(dtype))
    torch.testing.assert_close(ops.linear(x, w, b).float(), reference(x, w, b), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("m", [7, 300])
def test_every_epilogue(activation, m, dtype):
    x, w, b, r = operands(m, 136, 264, dtype, seed=1)
    y = ops.linear(x, w, b, activation=activation, scale=0.5, residual=r)
    torch.testing.assert_close(y.float(), reference(x, w, b, activation, 0.5, r), **tol(dtype))
    y = ops.linear(x, w, activation=activation)
    torch.testing.assert_close(y.float(), reference(x, w, None, activation), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_leading_dims_views_and_misaligned_operands(dtype):
    big = torch.randn(3, 5, 73, device="cuda", dtype=dtype)
    x = big[..., 1:]  # not contiguous, data not 16-byte aligned
    wt = (torch.randn(72, 48, device="cuda") / 8).to(dtype)
    w = wt.t()  # [48, 72], a transposed view
    y = ops.linear(x, w)
    assert y.shape == (3, 5, 48)
    torch.testing.assert_close(y.float(), x.float() @ w.float().T, **tol(dtype))
    xt = torch.randn(72, 9, device="cuda", dtype=dtype).t()  # last dim not contiguous
    torch.testing.assert_close(ops.linear(xt, w).float(), xt.float() @ w.float().T, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m", [1, 7, 127, 4097])
@pytest.mark.parametrize("f,k", [(128, 256), (200, 72)])
def test_linear_swiglu_matches_the_eager_formula(m, f, k, dtype):
    x, w, _, _ = operands(m, 2 * f, k, dtype, seed=2)
    y = ops.linear_swiglu(x, w)
    wg, wu = w[:f], w[f:]
    ref = F.silu(x.float() @ wg.float().T) * (x.float() @ wu.float().T)
    assert y.shape == (m, f)
    torch.testing.assert_close(y.float(), ref, **tol(dtype))
    r = torch.randn(m, f, device="cuda", dtype=dtype)
    torch.testing.assert_close(ops.linear_swiglu(x, w, residual=r).float(), ref + r.float(), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matmul_and_bmm(dtype):
    a = torch.randn(2, 37, 72, device="cuda", dtype=dtype)
    b = (torch.randn(72, 50, device="cuda") / 8).to(dtype)
    torch.testing.assert_close(ops.matmul(a, b).float(), a.float() @ b.float(), **tol(dtype))
    bb = (torch.randn(2, 72, 50, device="cuda") / 8).to(dtype)
    torch.testing.assert_close(ops.bmm(a, bb).float(), torch.bmm(a.float(), bb.float()), **tol(dtype))
    a2 = torch.randn(4097, 4104, device="cuda", dtype=dtype)
    b2 = (torch.randn(4104, 136, device="cuda") / 64).to(dtype)
    torch.testing.assert_close(ops.matmul(a2, b2).float(), a2.float() @ b2.float(), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_broadcast_batches_single_batches_and_empty_k(dtype):
    """bmm of one matrix broadcast over the batch (batch stride 0), and the backward of a sum over the batch
    (its gradient such a broadcast): copied, never read as a batch of distinct matrices; a batch of one whose
    batch stride is no multiple of 8 (never read); a transposed weight of K = 0 (the output is the bias)."""
    a = torch.randn(3, 130, 64, device="cuda", dtype=dtype)
    b1 = (torch.randn(1, 64, 136, device="cuda") / 8).to(dtype)
    torch.testing.assert_close(ops.bmm(a, b1.expand(3, 64, 136)).float(), a.float() @ b1.float(), **tol(dtype))
    wsum = torch.randn(130, 136, device="cuda", dtype=dtype)
    ag, bg = a.clone().requires_grad_(), b1.expand(3, 64, 136).clone().requires_grad_()
    (ops.bmm(ag, bg).sum(0).float() * wsum.float()).sum().backward()  # grad: wsum broadcast, batch stride 0
    g = wsum.float().expand(3, 130, 136)
    torch.testing.assert_close(ag.grad.float(), g @ b1.float().transpose(1, 2), atol=8e-2, rtol=5e-2)
    torch.testing.assert_close(bg.grad.float(), a.float().transpose(1, 2) @ g, atol=8e-2, rtol=5e-2)
    ap = torch.randn(130, 64, 1, device="cuda", dtype=dtype).permute(2, 0, 1)  # [1, 130, 64], strides (1, 64, 1)
    bp = (torch.randn(64, 136, 1, device="cuda") / 8).to(dtype).permute(2, 0, 1)
    torch.testing.assert_close(ops.bmm(ap, bp).float(), ap.float() @ bp.float(), **tol(dtype))
    x, bias = torch.randn(300, 0, device="cuda", dtype=dtype), torch.randn(48, device="cuda", dtype=dtype)
    w = torch.randn(5, 48, device="cuda", dtype=dtype)[:0].t()  # [48, 0], strides (1, 48)
    torch.testing.assert_close(ops.linear(x, w, bias), bias.expand(300, 48))


def _grads(fn, *tensors):
    ts = [t.detach().clone().requires_grad_(True) for t in tensors]
    out = fn(*ts)
    g = torch.randn_like(out)
    out.backward(g)
    return out, [t.grad for t in ts]


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_linear_gradients(activation):
    dtype = torch.bfloat16
    x, w, b, r = operands(33, 72, 136, dtype, seed=3)
    torch.manual_seed(0)
    out, grads = _grads(
        lambda x, w, b, r: ops.linear(x, w, b, activation=activation, scale=0.5, residual=r), x, w, b, r
    )
    torch.manual_seed(0)
    ref, ref_grads = _grads(
        lambda x, w, b, r: ACTIVATIONS[activation](F.linear(x.float(), w.float(), b.float() * 2) * 0.5) + r.float(),
        x,
        w,
        b,
        r,
    )
    torch.testing.assert_close(out.float(), ref, **tol(dtype))
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.float(), want.float(), atol=8e-2, rtol=5e-2)


def test_linear_swiglu_and_matmul_gradients():
    dtype = torch.bfloat16
    x, w, _, _ = operands(33, 2 * 72, 136, dtype, seed=4)
    torch.manual_seed(0)
    out, grads = _grads(lambda x, w: ops.linear_swiglu(x, w), x, w)
    torch.manual_seed(0)
    ref, ref_grads = _grads(lambda x, w: F.silu(x.float() @ w[:72].float().T) * (x.float() @ w[72:].float().T), x, w)
    torch.testing.assert_close(out.float(), ref, **tol(dtype))
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.float(), want.float(), atol=8e-2, rtol=5e-2)
    a = torch.randn(3, 17, 40, device="cuda", dtype=dtype)
    b = (torch.randn(3, 40, 24, device="cuda") / 6).to(dtype)
    torch.manual_seed(0)
    _, grads = _grads(ops.bmm, a, b)
    torch.manual_seed(0)
    _, ref_grads = _grads(lambda a, b: torch.bmm(a.float(), b.float()), a, b)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.float(), want.float(), atol=8e-2, rtol=5e-2)


def test_cuda_graph_capture_replays_the_fused_linear():
    x, w, b, r = operands(300, 256, 512, torch.bfloat16, seed=5)
    ops.linear(x, w, b, activation="gelu", residual=r)  # compiles before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = ops.linear(x, w, b, activation="gelu", residual=r)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y.float(), reference(x, w, b, "gelu", 1.0, r), **tol(torch.bfloat16))


def test_torch_compile_has_no_graph_break():
    x, w, b, _ = operands(64, 128, 256, torch.bfloat16, seed=6)

    def f(x, w, b):
        return ops.linear(x, w, b, activation="silu") * 2

    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x, w, b).float(), f(x, w, b).float())


def test_float32_runs_as_tf32_only_where_allowed():
    x = torch.randn(300, 72, device="cuda")
    w = torch.randn(40, 72, device="cuda") / 8
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        with pytest.raises(TypeError, match="float32.*TF32.*allow_tf32"):
            ops.linear(x, w)
        torch.backends.cuda.matmul.allow_tf32 = True
        for m in (7, 300):
            y = ops.linear(x[:m], w, activation="relu")
            assert y.dtype == torch.float32
            torch.testing.assert_close(y, F.relu(x[:m] @ w.T), atol=2e-2, rtol=1e-2)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def test_bad_shapes_are_refused():
    x = torch.randn(4, 8, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="K"):
        ops.linear(x, torch.randn(8, 9, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="even"):
        ops.linear_swiglu(x, torch.randn(7, 8, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="activation"):
        ops.linear(x, torch.randn(8, 8, device="cuda", dtype=torch.bfloat16), activation="tanh")
    ops.linear(x, torch.randn(8, 8, device="cuda", dtype=torch.bfloat16))  # the process is still usable


TUNE_WORKLOAD = """
import torch, kjit
from kjit import ops
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(300, 256, device="cuda", dtype=torch.bfloat16, generator=g)
w = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16, generator=g) / 16
y = ops.linear(x, w, activation="gelu")
torch.cuda.synchronize()
print("compiles:", kjit.stats()["compiles"], "sum:", float(y.float().sum()))
"""


def _run_workload(script, cache_dir, **env):
    """Runs the workload script with KJIT_CACHE_DIR=cache_dir, KJIT_TUNE=1 and KJIT_VERBOSE=1, and `env`."""
    return run_python([str(script)], env={"KJIT_CACHE_DIR": cache_dir, "KJIT_TUNE": "1", "KJIT_VERBOSE": "1", **env})


def test_tuned_choice_is_kept_recorded_warmed_and_replayed_strictly(tmp_path):
    """KJIT_TUNE=1 times the candidates once and keeps the pick on disk; a new process reuses it without
    timing; KJIT_RECORD records it, `kjit warm` installs it, and a strict process replays it with no compile."""
    major, minor = torch.cuda.get_device_capability()
    script = tmp_path / "workload.py"
    script.write_text(TUNE_WORKLOAD)
    manifest, cache_a, cache_b = tmp_path / "m.json", tmp_path / "cache-a", tmp_path / "cache-b"
    tuned = _run_workload(script, cache_a, KJIT_RECORD=manifest, KJIT_CACHE_MODE=None)
    assert "tuned gemm|" in tuned.stderr, tuned
    assert '"choice"' in manifest.read_text()
    again = _run_workload(script, cache_a, KJIT_RECORD=None, KJIT_CACHE_MODE=None)
    assert "tuned gemm|" not in again.stderr, again  # found on disk: no timing
    assert again.stdout.split("sum:")[1] == tuned.stdout.split("sum:")[1]
    warm = run_python(
        ["-m", "kjit", "warm", str(manifest), "--arch", f"sm_{major}{minor}"],
        env={"KJIT_CACHE_DIR": cache_b, "KJIT_CACHE_MODE": None},
    )
    assert "1 tuned choice installed" in warm.stdout and " 0 failed" in warm.stdout, warm
    strict = _run_workload(script, cache_b, KJIT_CACHE_MODE="strict", KJIT_RECORD=None)
    assert "compiles: 0" in strict.stdout and "tuned gemm|" not in strict.stderr, strict
    assert strict.stdout.split("sum:")[1] == tuned.stdout.split("sum:")[1]


# ---- every configuration of each GEMM kernel ------------------------------------------------------------------

# gemm.cpp's candidates by name (a name that is not one makes the op warn "names no configuration", which the
# tests refuse): the sm_90 kernel's plain and SwiGLU configurations (paired with them in turn), and the
# mma.sync kernel's for M <= 16 (decode; every architecture).
WGMMA_PLAIN = [
    "wgmma-pingpong:64x256:s4",
    "wgmma-pingpong:128x128:s5",
    "wgmma-pingpong:64x192:s5",
    "wgmma-pingpong:64x128:s8",
    "wgmma:128x256:s3",
    "wgmma:128x192:s4",
    "wgmma:128x128:s6",
    "wgmma:64x128:s8",
    "wgmma:64x64:s8",
]
WGMMA_GATED = ["wgmma-pingpong:64x128:s4", "wgmma:128x128:s4", "wgmma:128x64:s6", "wgmma:64x128:s5"]
SMALL_M = [
    "mma:16x64x128:w1x2x8:s4",
    "mma:16x32x128:w1x2x8:s6",
    "mma:16x16x128:w1x1x8:s8",
    "mma:16x16x128:w1x1x8:s12",
    "mma:16x64x64:w1x2x4:s6",
    "mma:16x32x64:w1x2x8:s6",
    "mma:16x16x64:w1x1x8:s6",
]

# The workloads print one line per case: its name and whether it matched.
CONFIG_WORKLOAD_HEAD = """
import torch, torch.nn.functional as F
from kjit import ops
torch.manual_seed(0)
dt = torch.bfloat16
def rnd(*s, scale=1.0, dtype=dt):
    return (torch.randn(*s, device="cuda") * scale).to(dtype)
def check(name, got, want, atol=4e-2, rtol=3e-2):
    err = (got.float() - want).abs().max().item()
    ok = torch.allclose(got.float(), want, atol=atol, rtol=rtol)
    print("case", name, "ok" if ok else f"MISMATCH max error {err:.4g}")
"""

# Every case on the wgmma kernel (M > 16): tiles cut at M, N and K; N = 203 stores from registers (rows not
# 16-byte aligned for the TMA store); 100 x 264 x 2048 splits K (few tiles, many k-tiles); 20000 rows give
# every block of every configuration several tiles (ping-pong's hand-over, the ring and the output tile
# reused across tiles); each epilogue; the pre-activation kept (aux) where gradients are wanted;
# SwiGLU; a batch (bmm). The backward's dX and dW and matmul read operands M- / N-major in place: K of 17
# rows (the TMA box past them reads zeros) beside a K-major operand padded to 24, 20000 rows of K split
# (dW: 8 tiles), a batch, 40 rows (fewer than a box's 64).
CONFIG_WORKLOAD = (
    CONFIG_WORKLOAD_HEAD
    + """
for m, n, k in ((300, 200, 72), (1000, 520, 1032), (17, 203, 200), (4500, 384, 264), (100, 264, 2048), (20000, 512, 256)):
    x, w, b, r = rnd(m, k), rnd(n, k, scale=k ** -0.5), rnd(n), rnd(m, n)
    z = x.float() @ w.float().T
    check(f"plain {m}x{n}x{k}", ops.linear(x, w), z)
    check(f"bias+gelu {m}x{n}x{k}", ops.linear(x, w, b, activation="gelu"), F.gelu(z + b.float()))
    check(f"scale+residual {m}x{n}x{k}", ops.linear(x, w, scale=0.5, residual=r), 0.5 * z + r.float())
    xg = x.clone().requires_grad_()
    y = ops.linear(xg, w, b, activation="silu")  # the forward that keeps its pre-activation (aux)
    check(f"silu with grad {m}x{n}x{k}", y.detach(), F.silu(z + b.float()))
    y.float().sum().backward()
    check(f"silu dx {m}x{n}x{k}", xg.grad, (torch.sigmoid(z + b.float()) * (1 + (z + b.float()) * (1 - torch.sigmoid(z + b.float())))) @ w.float())
    # The backward's GEMMs read W (dX) and dY and X (dW) in place from their transposes (N- / M-major).
    x2, w2, dy = x.clone().requires_grad_(), w.clone().requires_grad_(), rnd(m, n, scale=m ** -0.5)
    dx, dw = torch.autograd.grad(ops.linear(x2, w2), (x2, w2), dy)
    check(f"dx {m}x{n}x{k}", dx, dy.float() @ w.float())
    check(f"dw {m}x{n}x{k}", dw, dy.float().T @ x.float())
    wgu = rnd(2 * n, k, scale=k ** -0.5)
    zg, zu = (x.float() @ wgu.float().T).chunk(2, dim=-1)
    check(f"swiglu {m}x{n}x{k}", ops.linear_swiglu(x, wgu), F.silu(zg) * zu)
a, bb = rnd(3, 130, 64), rnd(3, 64, 136, scale=0.125)
check("bmm 3x130x136x64", ops.bmm(a, bb), a.float() @ bb.float())
ag, bg, dy = a.clone().requires_grad_(), bb.clone().requires_grad_(), rnd(3, 130, 136, scale=130 ** -0.5)
da, db = torch.autograd.grad(ops.bmm(ag, bg), (ag, bg), dy)
check("bmm da 3x130x136x64", da, dy.float() @ bb.float().transpose(1, 2))
check("bmm db 3x130x136x64", db, a.float().transpose(1, 2) @ dy.float())
# The forward's epilogues with a transposed weight (N-major B) and a transposed x (M-major A), both read in
# place, and both at once where the pre-activation is kept (aux).
x, w, b, r = rnd(1000, 1032), rnd(520, 1032, scale=1032 ** -0.5), rnd(520), rnd(1000, 520)
wt, xt = w.t().contiguous().t(), x.t().contiguous().t()
z = x.float() @ w.float().T
check("bias+gelu w^T 1000x520x1032", ops.linear(x, wt, b, activation="gelu"), F.gelu(z + b.float()))
check("scale+residual x^T 1000x520x1032", ops.linear(xt, w, scale=0.5, residual=r), 0.5 * z + r.float())
check("silu with grad x^T w^T 1000x520x1032", ops.linear(xt.clone().requires_grad_(), wt, b, activation="silu").detach(), F.silu(z + b.float()))
# matmul's b [K, N] is an N-major B; a dW of 40 rows (M narrower than the 64 of a TMA box).
a, bm = rnd(2, 150, 264), rnd(264, 200, scale=264 ** -0.5)
check("matmul 300x200x264", ops.matmul(a, bm), a.float() @ bm.float())
x, w, dy = rnd(300, 72), rnd(40, 72).requires_grad_(), rnd(300, 40, scale=300 ** -0.5)
check("dw 300x40x72", torch.autograd.grad(ops.linear(x, w), w, dy)[0], dy.float().T @ x.float())
torch.cuda.synchronize()
"""
)

# Every case on the small-M kernel (M <= 16): M of 1, 5 and 16; N cut at every tile width (203, 1000) and
# wide enough for every block count (4104); K cut at the 128-deep tile (72, 2056) and long (11008: every
# stage of the pipeline reused); each epilogue; SwiGLU; float32 as TF32; a batch (bmm).
SMALL_M_WORKLOAD = (
    CONFIG_WORKLOAD_HEAD
    + """
for m, n, k in ((1, 203, 72), (5, 1000, 2056), (16, 4104, 264), (1, 520, 11008), (16, 264, 11008)):
    x, w, b, r = rnd(m, k), rnd(n, k, scale=k ** -0.5), rnd(n), rnd(m, n)
    z = x.float() @ w.float().T
    check(f"plain {m}x{n}x{k}", ops.linear(x, w), z)
    check(f"bias+gelu {m}x{n}x{k}", ops.linear(x, w, b, activation="gelu"), F.gelu(z + b.float()))
    check(f"scale+residual {m}x{n}x{k}", ops.linear(x, w, scale=0.5, residual=r), 0.5 * z + r.float())
    wgu = rnd(2 * n, k, scale=k ** -0.5)
    zg, zu = (x.float() @ wgu.float().T).chunk(2, dim=-1)
    check(f"swiglu {m}x{n}x{k}", ops.linear_swiglu(x, wgu), F.silu(zg) * zu)
torch.backends.cuda.matmul.allow_tf32 = True
xf, wf = rnd(7, 1032, dtype=torch.float32), rnd(300, 1032, scale=1032 ** -0.5, dtype=torch.float32)
check("tf32 7x300x1032", ops.linear(xf, wf), (xf.double() @ wf.double().T).float(), atol=1e-2, rtol=1e-2)
a, bb = rnd(3, 5, 64), rnd(3, 64, 136, scale=0.125)
check("bmm 3x5x136x64", ops.bmm(a, bb), a.float() @ bb.float())
torch.cuda.synchronize()
"""
)


def _run_with_every_choice(tmp_path, workload, choose, arch):
    """Runs `workload` with every GEMM's tuned choice replaced by choose(key) (its keys recorded by a
    first run, their values replaced, `kjit warm` installing them); returns its case lines."""
    script, manifest = tmp_path / "workload.py", tmp_path / "m.json"
    script.write_text(workload)
    run_python([str(script)], env={"KJIT_CACHE_DIR": tmp_path / "cache-a", "KJIT_RECORD": manifest})
    lines = []
    for line in manifest.read_text().splitlines():
        entry = json.loads(line)
        if "choice" in entry:
            entry["choice"]["value"] = choose(entry["choice"]["key"])
            lines.append(json.dumps(entry))
        elif "record" not in entry:  # the header; the kernels are compiled by the run below
            lines.append(line)
    assert len(lines) > 1, manifest.read_text()
    manifest.write_text("\n".join(lines) + "\n")
    cache = tmp_path / "cache-b"
    warm = run_python(["-m", "kjit", "warm", str(manifest), "--arch", arch], env={"KJIT_CACHE_DIR": cache})
    assert " 0 failed" in warm.stdout, warm
    run = run_python([str(script)], env={"KJIT_CACHE_DIR": cache, "KJIT_TUNE": None})
    assert "names no configuration" not in run.stderr, run
    return [line for line in run.stdout.splitlines() if line.startswith("case ")]


@pytest.mark.parametrize("round_", range(len(WGMMA_PLAIN)), ids=lambda i: WGMMA_PLAIN[i])
def test_every_wgmma_configuration_matches_torch(tmp_path, round_):
    """Each configuration of the sm_90 GEMM, made the tuned choice of every GEMM of a workload, runs every
    case right."""
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        pytest.skip("the wgmma kernel runs on sm_90 only")

    def choose(key):
        return WGMMA_GATED[round_ % len(WGMMA_GATED)] if "epi=swiglu" in key else WGMMA_PLAIN[round_]

    cases = _run_with_every_choice(tmp_path, CONFIG_WORKLOAD, choose, "sm_90")
    assert len(cases) == 56 and all(line.endswith(" ok") for line in cases), cases


@pytest.mark.parametrize("config", SMALL_M)
def test_every_small_m_configuration_matches_torch(tmp_path, config):
    """Each configuration of the small-M (decode) GEMM, made the tuned choice of every GEMM of a workload
    whose M is at most 16, runs every case right."""
    major, minor = torch.cuda.get_device_capability()
    cases = _run_with_every_choice(tmp_path, SMALL_M_WORKLOAD, lambda key: config, f"sm_{major}{minor}")
    assert len(cases) == 22 and all(line.endswith(" ok") for line in cases), cases


def test_many_gemms_in_turn_each_use_their_own_operands():
    """Twenty layers' weights in turn on one activation, twice (more TMA descriptors than the per-thread
    cache keeps; the activation's a hit while each weight's a miss): every output is its own layer's."""
    x, _, _, _ = operands(300, 256, 256, torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(1)
    ws = [(torch.randn(256, 256, device="cuda", generator=g) / 16).to(torch.bfloat16) for _ in range(20)]
    for _ in range(2):
        for w in ws:
            torch.testing.assert_close(ops.linear(x, w).float(), reference(x, w), **tol(torch.bfloat16))
