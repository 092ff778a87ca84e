"""gemm.cuh's gemm_mma launched directly (kjit.Template.builtin("gemm")) against PyTorch: every configuration
of the file comment, awkward M / N / K, N / K specialized and generic (0), batch 2, strided A / B, C / aux
with odd row strides and misaligned pointers, every activation, bias, residual, aux, SwiGLU, TF32. (The ops
that plan these kernels, linear / matmul / bmm: ops/test_matmul.py.) Every test needs a GPU.

References are computed in float64 from the same (rounded) inputs: the kernel accumulates in float and
rounds once to the output dtype, so results may differ by one rounding of the output dtype (rtol) plus the
float accumulation (atol; inputs are scaled so that outputs are O(1)). TF32 rounds the inputs to 10
mantissa bits: a looser tolerance.

kjit.Kernel.launch cannot raise a kernel's dynamic shared memory limit above 48 KB (the op's host code sets
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), so configurations above it run here with fewer STAGES.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from family_helpers import DEV, gemm_mma_shared_bytes
from support import ulp

import kjit

pytestmark = pytest.mark.gpu

HALF_TYPES = [torch.float16, torch.bfloat16]


ACTS = {0: lambda z: z, 1: F.relu, 2: F.gelu, 3: lambda z: F.gelu(z, approximate="tanh"), 4: F.silu}


SMEM_LIMIT = 48 * 1024


CONFIGS = {  # the file comment's, STAGES lowered to fit 48 KB where needed
    "large": dict(BM=128, BN=128, BK=32, WM=2, WN=2, WK=1, STAGES=3),
    "large_wide": dict(BM=128, BN=256, BK=32, WM=2, WN=4, WK=1, STAGES=2),
    "medium": dict(BM=64, BN=64, BK=32, WM=2, WN=2, WK=1, STAGES=4),
    "medium_wide": dict(BM=64, BN=128, BK=32, WM=2, WN=2, WK=1, STAGES=4),
    "small": dict(BM=16, BN=64, BK=64, WM=1, WN=2, WK=4, STAGES=3),
    "small_narrow": dict(BM=16, BN=32, BK=64, WM=1, WN=2, WK=8, STAGES=3),
    "small_deep": dict(BM=16, BN=16, BK=128, WM=1, WN=1, WK=8, STAGES=5),
    "small_deep_wide": dict(BM=16, BN=64, BK=128, WM=1, WN=2, WK=8, STAGES=2),
}


SWIGLU_CONFIGS = {
    "swiglu_large": dict(BM=128, BN=64, BK=32, WM=2, WN=2, WK=1, STAGES=3),
    "swiglu_large_wn4": dict(BM=128, BN=128, BK=32, WM=2, WN=4, WK=1, STAGES=2),
    "small": dict(BM=16, BN=64, BK=64, WM=1, WN=2, WK=4, STAGES=2),
    "small_narrow": dict(BM=16, BN=32, BK=64, WM=1, WN=2, WK=8, STAGES=3),
    "small_deep": dict(BM=16, BN=16, BK=128, WM=1, WN=1, WK=8, STAGES=3),
}


TF32_CONFIGS = {
    "medium": dict(BM=64, BN=64, BK=32, WM=2, WN=2, WK=1, STAGES=3),
    "small": dict(BM=16, BN=64, BK=32, WM=1, WN=2, WK=4, STAGES=3),
    "small_narrow": dict(BM=16, BN=32, BK=64, WM=1, WN=2, WK=8, STAGES=3),
    "small_deep": dict(BM=16, BN=16, BK=64, WM=1, WN=1, WK=8, STAGES=5),
}


_FAMILY = None


def family():
    global _FAMILY
    if _FAMILY is None:
        _FAMILY = kjit.Template.builtin("gemm").kernel("gemm_mma", **kjit._core.library_compile_options())
    return _FAMILY


def smem_bytes(dtype, cfg, swiglu):
    """The file comment's formula."""
    item = torch.empty((), dtype=dtype).element_size()
    return gemm_mma_shared_bytes(item, cfg["BM"], cfg["BN"], cfg["BK"], cfg["WK"], cfg["STAGES"], swiglu)


def padded(batch, rows, cols, dtype, ld, offset, fill):
    """A [batch, rows, cols] view with row stride ld, `offset` elements into a buffer filled with `fill`
    (the buffer is returned too: what lies outside the view must stay `fill`)."""
    buf = torch.full((batch * rows * ld + offset + ld,), fill, dtype=dtype, device=DEV)
    view = buf[offset : offset + batch * rows * ld].view(batch, rows, ld)[:, :, :cols]
    return buf, view


def operand(batch, rows, k, dtype, ld, scale):
    """A K-contiguous operand [batch, rows, k], row stride ld (a multiple of 8: 16-byte aligned rows)."""
    full = torch.randn(batch, rows, ld, dtype=torch.float32, device=DEV).mul_(scale).to(dtype)
    return full[:, :, :k]


def run_gemm(
    cfg,
    dtype,
    x,
    w,
    *,
    n,
    act=0,
    bias=None,
    residual=None,
    aux=False,
    swiglu=False,
    scale=1.0,
    specialize=True,
    shared_b=False,
    splits=1,
):
    """Launches gemm_mma on x [B, M, K], w [B or 1, N (2N for swiglu), K], K in `splits` parts (split-K across
    blocks: a workspace of partial sums and arrival counters); returns (out, aux, buffers) with out / aux views
    into sentinel-filled buffers (odd row strides, misaligned by one element)."""
    batch, m, k = x.shape
    assert smem_bytes(dtype, cfg, swiglu) <= SMEM_LIMIT
    sentinel = 1234.0
    out_buf, out = padded(batch, m, n, dtype, n + 3, 1, sentinel)
    aux_cols = 2 * n if swiglu else n
    aux_buf, aux_t = padded(batch, m, aux_cols, dtype, aux_cols + 5, 1, sentinel) if aux else (None, None)
    kern = family().specialize(
        T=dtype,
        N=n if specialize else 0,
        K=k if specialize else 0,
        **cfg,
        ACT=act,
        HAS_BIAS=bias is not None,
        HAS_RESIDUAL=residual is not None,
        AUX=aux,
        SWIGLU=swiglu,
    )
    grid = (kjit.cdiv(n, cfg["BN"]), kjit.cdiv(m, cfg["BM"]), batch * splits)
    block = 32 * cfg["WM"] * cfg["WN"] * cfg["WK"]
    tiles = grid[0] * grid[1] * batch
    partials = torch.full(
        (max(splits, 1) * tiles * cfg["BM"] * cfg["BN"] * (2 if swiglu else 1),), float("nan"), device=DEV
    )
    arrivals = torch.zeros(tiles, dtype=torch.int32, device=DEV)
    kern.launch(
        grid,
        block,
        x,
        w,
        out,
        m,
        n,
        k,
        x.stride(1),
        w.stride(1),
        out.stride(1),
        x.stride(0),
        0 if shared_b else w.stride(0),
        out.stride(0),
        bias,
        residual,
        aux_t,
        residual.stride(1) if residual is not None else 0,
        aux_t.stride(1) if aux else 0,
        residual.stride(0) if residual is not None else 0,
        aux_t.stride(0) if aux else 0,
        scale,
        splits,
        partials if splits > 1 else None,
        arrivals if splits > 1 else None,
        shared_mem=smem_bytes(dtype, cfg, swiglu),
    )
    torch.cuda.synchronize()
    if splits > 1:
        assert bool((arrivals == splits).all()), f"split-K arrivals {arrivals.tolist()}, every tile wants {splits}"
    return out, aux_t, (out_buf, out, aux_buf, aux_t, sentinel)


def reference(x, w, *, n, act=0, bias=None, residual=None, swiglu=False, scale=1.0, shared_b=False):
    """(out, pre-activation) in float64."""
    wd = w.double()
    if shared_b:
        wd = wd.expand(x.shape[0], -1, -1)
    acc = torch.matmul(x.double(), wd.transpose(1, 2)) * scale
    if swiglu:
        zg, zu = acc[..., :n], acc[..., n:]
        out, z = F.silu(zg) * zu, acc
    else:
        z = acc + bias.double() if bias is not None else acc
        out = ACTS[act](z)
    if residual is not None:
        out = out + residual.double()
    return out, z


def check_untouched(buffers):
    """Everything of the padded buffers outside the views is still the sentinel (no stray writes)."""
    out_buf, out, aux_buf, aux_t, sentinel = buffers
    for buf, view in ((out_buf, out), (aux_buf, aux_t)):
        if buf is None:
            continue
        covered = torch.zeros(buf.shape, dtype=torch.bool, device=DEV)
        start = view.storage_offset() - buf.storage_offset()
        b, r, c = view.shape
        pos = (
            start
            + torch.arange(b, device=DEV)[:, None, None] * view.stride(0)
            + torch.arange(r, device=DEV)[None, :, None] * view.stride(1)
            + torch.arange(c, device=DEV)[None, None, :]
        )
        covered[pos.reshape(-1)] = True
        outside = buf[~covered]
        expected = torch.tensor(sentinel, dtype=buf.dtype, device=DEV)
        assert bool((outside == expected).all()), "gemm_mma wrote outside its output"


def close(actual, expected, dtype, k, what):
    tol = ulp(dtype) if dtype != torch.float32 else 2.0**-10
    atol = tol + 1e-5 * math.sqrt(k) if dtype != torch.float32 else 4e-3
    torch.testing.assert_close(
        actual.double(), expected.to(dtype).double(), rtol=2 * tol, atol=atol, msg=lambda m: f"{what}: {m}"
    )


# ---- shapes: every configuration, awkward M / N / K, specialized and generic ------------------------------


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("n, k, specialize", [(200, 72, True), (200, 4104, False), (256, 64, False)])
def test_gemm_shapes(name, dtype, n, k, specialize):
    torch.manual_seed(0)
    cfg = CONFIGS[name]
    for m in (1, 7, 16, 127, 4097):
        if m == 4097 and k > 1000 and cfg["BM"] == 16:
            m = 1025  # the small-M configurations are for small M: keep the test quick
        x = operand(1, m, k, dtype, k + 8, 1.0)
        w = operand(1, n, k, dtype, k + 16, 1.0 / math.sqrt(k))
        out, _, buffers = run_gemm(cfg, dtype, x, w, n=n, specialize=specialize)
        ref, _ = reference(x, w, n=n)
        close(out, ref, dtype, k, f"{name} M={m} N={n} K={k}")
        check_untouched(buffers)


# ---- epilogues: every activation with bias / residual / aux, batch 2 ----------------------------------------


EPILOGUE_CASES = [
    (act, has_bias, has_res, aux)
    for act in ACTS
    for has_bias, has_res, aux in ((True, False, True), (False, True, False), (True, True, True))
]


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("act, has_bias, has_res, aux", EPILOGUE_CASES)
def test_gemm_epilogues(act, has_bias, has_res, aux, dtype):
    torch.manual_seed(act * 8 + has_bias * 4 + has_res * 2 + aux)
    names = ["medium", "small", "large", "small_narrow", "medium_wide", "large_wide"]
    name = names[EPILOGUE_CASES.index((act, has_bias, has_res, aux)) % len(names)]
    cfg = CONFIGS[name]
    batch, n, k = 2, 200, 136
    scale = 0.5
    shared_b = act == 1
    for m in (1, 7, 127):
        x = operand(batch, m, k, dtype, k + 8, 1.0)
        w = operand(1 if shared_b else batch, n, k, dtype, k, 2.0 / math.sqrt(k))
        bias = torch.randn(n, device=DEV).to(dtype) if has_bias else None
        residual = operand(batch, m, n, dtype, n + 1, 1.0) if has_res else None  # odd row stride
        out, aux_t, buffers = run_gemm(
            cfg,
            dtype,
            x,
            w,
            n=n,
            act=act,
            bias=bias,
            residual=residual,
            aux=aux,
            scale=scale,
            specialize=m != 7,
            shared_b=shared_b,
        )
        ref, z = reference(x, w, n=n, act=act, bias=bias, residual=residual, scale=scale, shared_b=shared_b)
        close(out, ref, dtype, k, f"{name} act={act} M={m}")
        if aux:
            close(aux_t, z, dtype, k, f"{name} aux M={m}")
        check_untouched(buffers)


# ---- SwiGLU -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", list(SWIGLU_CONFIGS))
@pytest.mark.parametrize("has_res, aux, specialize", [(False, True, True), (True, False, False), (True, True, True)])
def test_gemm_swiglu(name, dtype, has_res, aux, specialize):
    torch.manual_seed(1)
    cfg = SWIGLU_CONFIGS[name]
    batch, n, k = 2, 200, 4104
    for m in (1, 16, 127):
        x = operand(batch, m, k, dtype, k, 1.0)
        w = operand(batch, 2 * n, k, dtype, k + 8, 2.0 / math.sqrt(k))
        residual = operand(batch, m, n, dtype, n, 1.0) if has_res else None
        out, aux_t, buffers = run_gemm(
            cfg, dtype, x, w, n=n, residual=residual, aux=aux, swiglu=True, scale=0.75, specialize=specialize
        )
        ref, z = reference(x, w, n=n, residual=residual, swiglu=True, scale=0.75)
        close(out, ref, dtype, k, f"swiglu {name} M={m}")
        if aux:
            close(aux_t, z, dtype, k, f"swiglu {name} aux M={m}")
        check_untouched(buffers)


# ---- float as TF32 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(TF32_CONFIGS))
def test_gemm_tf32(name):
    torch.manual_seed(2)
    cfg = TF32_CONFIGS[name]
    dtype = torch.float32
    n, k = 200, 520
    for m in (1, 7, 127):
        x = operand(2, m, k, dtype, k + 8, 1.0)
        w = operand(2, n, k, dtype, k, 1.0 / math.sqrt(k))
        bias = torch.randn(n, device=DEV)
        out, aux_t, buffers = run_gemm(cfg, dtype, x, w, n=n, act=2, bias=bias, aux=True, specialize=m != 7)
        ref, z = reference(x, w, n=n, act=2, bias=bias)
        close(out, ref, dtype, k, f"tf32 {name} M={m}")
        close(aux_t, z, dtype, k, f"tf32 {name} aux M={m}")
        check_untouched(buffers)
    # SwiGLU in float too (2 stages: 48 KB).
    x = operand(1, 33, k, dtype, k, 1.0)
    w = operand(1, 2 * n, k, dtype, k, 1.0 / math.sqrt(k))
    out, _, buffers = run_gemm(dict(cfg, STAGES=2), dtype, x, w, n=n, swiglu=True)
    ref, _ = reference(x, w, n=n, swiglu=True)
    close(out, ref, dtype, k, f"tf32 swiglu {name}")
    check_untouched(buffers)


# ---- split-K across blocks ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, dtype, splits",
    [
        ("small_deep", torch.float32, 4),  # TF32 at M <= 16 (the U-Net's batch of one)
        ("medium", torch.float32, 3),  # TF32 at M > 16: parts of unequal depth (the last one shorter)
        ("small_narrow", torch.bfloat16, 5),
        ("medium_wide", torch.float16, 2),
    ],
)
def test_gemm_split_k_matches_and_is_deterministic(name, dtype, splits):
    """K in parts on separate blocks, the last to arrive adding them up in order: the same result as the
    reference with every epilogue, batch 2, every row and column edge, and bitwise the same on a second run."""
    torch.manual_seed(3)
    cfg = (TF32_CONFIGS if dtype == torch.float32 else CONFIGS)[name]
    batch, n, k = 2, 200, 1000  # 16 / 32 k-tiles: parts of 4, 4, 4, 4, 0 for 5; 11, 11, 10 for 3
    for m in (1, 16, 127):
        x = operand(batch, m, k, dtype, k + 8, 1.0)
        w = operand(batch, n, k, dtype, k, 1.0 / math.sqrt(k))
        bias = torch.randn(n, device=DEV).to(dtype)
        residual = operand(batch, m, n, dtype, n + 1, 1.0)
        kw = dict(n=n, act=2, bias=bias, residual=residual, aux=True, scale=0.5, splits=splits)
        out, aux_t, buffers = run_gemm(cfg, dtype, x, w, **kw)
        ref, z = reference(x, w, n=n, act=2, bias=bias, residual=residual, scale=0.5)
        close(out, ref, dtype, k, f"split-K {splits} {name} M={m}")
        close(aux_t, z, dtype, k, f"split-K {splits} {name} aux M={m}")
        check_untouched(buffers)
        again, _, _ = run_gemm(cfg, dtype, x, w, **kw)
        assert torch.equal(out, again), f"split-K {splits} {name} M={m}: two runs differ"
    # SwiGLU's two accumulator sets through the workspace.
    x = operand(1, 33, k, dtype, k, 1.0)
    w = operand(1, 2 * n, k, dtype, k, 1.0 / math.sqrt(k))
    out, _, buffers = run_gemm(dict(cfg, STAGES=2), dtype, x, w, n=n, swiglu=True, splits=splits)
    ref, _ = reference(x, w, n=n, swiglu=True)
    close(out, ref, dtype, k, f"split-K {splits} swiglu {name}")
    check_untouched(buffers)
