"""The generic tests of the op library: each iterates the op table (op_table.py, one row per op), so a new op
with a row gets them all.

- The registry: the dispatcher's kjit:: operators, kjit.ops.__all__, the op table and docs/ops.md's table name
  the same ops.
- Meta against CUDA shapes (no GPU): for every sample and plan-only call, the op's CUDA function run as a plan
  on meta tensors (python/src/ops/runtime/plan.hpp; naming its kernels, compiling none) gives outputs of the
  shapes, dtypes and strides of its Meta kernel (what torch.compile and fake tensors see).
- Compile (no GPU): for every op, dtype and target (sm_80, sm_90, sm_100), the kernels the op's own planners
  pick for each sample compile, shape-specialized and generic: never a second list of them.
- On a GPU: every sample against the PyTorch reference, and torch.library.opcheck (ops/test_opcheck.py).
The bad-input matrix (test_bad_input.py) generates its op rows from the same table.
"""

from __future__ import annotations

import inspect
import pathlib
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import kjit
from kjit import ops
from family_helpers import ARCHS, gemm_mma_shared_bytes
from op_table import OPS, Factory, plans, samples
from support import ORIGINS, dname

ROOT = pathlib.Path(__file__).resolve().parents[3]
# The ops that are not rows: kjit::elementwise runs kjit.elementwise functions (tested with them).
NOT_ROWS = {"elementwise"}


def registered_ops() -> set[str]:
    return {n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("kjit::")}


def _id(name, dtype):
    return f"{name}-{dname(dtype)}"


def _bound(name, args, kwargs):
    """The call's arguments in schema order, defaults filled in (the references take them positionally)."""
    sig = inspect.signature(getattr(ops, name))
    b = sig.bind(*args, **kwargs)
    b.apply_defaults()
    return b.args


def _plan(name, args, kwargs, arch, **options):
    return kjit._C._plan_op(name, tuple(args), dict(kwargs), arch=arch, **options)


def _flat(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


# ---- the registry ----------------------------------------------------------------------------------------


def test_every_registered_op_has_a_row():
    registered = registered_ops() - NOT_ROWS
    assert set(OPS) == registered, (
        f"rows without an op: {sorted(set(OPS) - registered)}; ops without a row in tests/python/op_table.py: "
        f"{sorted(registered - set(OPS))}"
    )
    assert sorted(ops.__all__) == sorted(registered), "kjit.ops.__all__ must list every op KJIT_OP registered"
    for name, spec in OPS.items():
        assert spec.samples is not None and spec.samples, f"{name}: the row has no samples"


def test_the_docs_table_lists_every_op():
    """docs/ops.md's table of every op (`name(...)` in its first two columns) names exactly the registered ops."""
    text = (ROOT / "docs" / "ops.md").read_text()
    section = text.split("## Every op", 1)
    assert len(section) == 2, "docs/ops.md has no '## Every op' section"
    body = section[1].split("\n## ", 1)[0]
    # An op is named `name(...)` in a row's first two cells (the op, its backward).
    cells = [c for row in re.findall(r"^\|(.*)\|$", body, re.M) for c in row.split("|")[:2]]
    documented = [n for c in cells for n in re.findall(r"`([a-z0-9_]+)\(", c)]
    assert len(documented) == len(set(documented)), "an op is listed twice"
    assert set(documented) == registered_ops() - NOT_ROWS, (
        f"missing from docs/ops.md: {sorted(registered_ops() - NOT_ROWS - set(documented))}; "
        f"listed but not registered: {sorted(set(documented) - registered_ops())}"
    )


# ---- Meta against the CUDA function, and the kernels the planners pick --------------------------------------

# Every (op, dtype) the ops take: the float ops four dtypes, the matrix ops three, rgb_to_gray uint8.
PLAN_CASES = [(n, d) for n, spec in OPS.items() for d in spec.dtypes]


@pytest.fixture
def tf32():
    """float32 matrix ops run as TF32 only where the user allows it, as cuBLAS does."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("name, dtype", PLAN_CASES, ids=[_id(*c) for c in PLAN_CASES])
def test_the_cuda_function_shapes_its_outputs_as_the_meta_kernel_does(name, dtype, tf32):
    registered = getattr(torch.ops.kjit, name).default
    calls = [(a, k, {}) for a, k in samples(name, "meta", dtype)] + plans(name, dtype)
    for args, kwargs, _ in calls:
        result, _ = _plan(name, args, kwargs, "sm_90", compile=False)
        expected = registered(*args, **kwargs)  # the Meta kernel (meta tensors dispatch there)
        for got, want in zip(_flat(result), _flat(expected), strict=True):
            assert (got.shape, got.dtype, got.stride()) == (want.shape, want.dtype, want.stride()), (name, args)


# The ops on the GEMM (python/src/ops/matmul.cpp), whose 16-bit calls take gemm_sm90.cuh's kernel on sm_90.
_WGMMA_OPS = {f"{op}{part}" for op in ("linear", "linear_swiglu") for part in ("", "_aux", "_backward")} | {
    "matmul",
    "matmul_backward",
    "bmm",
    "bmm_backward",
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name, dtype", PLAN_CASES, ids=[_id(*c) for c in PLAN_CASES])
def test_the_kernels_the_planners_pick_compile(name, dtype, arch, tf32):
    """Each sample as the op plans it on a GPU of `arch` (132 multiprocessors), its sizes specialized and
    generic (the variants past KJIT_MAX_SPECIALIZATIONS distinct sizes), and the row's plan-only calls (the
    sizes the planners branch on; the GEMM's every tuning candidate): every kernel compiles for it."""
    jobs = [(a, k, {"generic": g}) for a, k in samples(name, "meta", dtype) for g in (False, True)]
    jobs += plans(name, dtype)
    with ThreadPoolExecutor(2) as pool:
        planned = list(pool.map(lambda j: _plan(name, j[0], j[1], arch, **j[2])[1], jobs))
    for (args, _, options), kernels in zip(jobs, planned):
        assert kernels, f"{name}: the plan of {args} ({options}) compiled nothing"
        for k in kernels:
            assert k["origin"] in ORIGINS, k
            wgmma = k["name_expression"].startswith("gemm_wgmma<")
            assert k["target"] == (arch + "a" if wgmma else arch), k  # the wgmma GEMM: sm_90a only
    # The matrix ops in 16 bits take the TMA + wgmma GEMM on sm_90 at the sizes their plans name: it compiles.
    if arch == "sm_90" and dtype in (torch.float16, torch.bfloat16) and name in _WGMMA_OPS:
        assert any(k["name_expression"].startswith("gemm_wgmma<") for ks in planned for k in ks), name


def _gemm_mma_shared_bytes(name_expression):
    """gemm.cuh's shared memory of a gemm_mma<T, N, K, BM, BN, BK, WM, WN, WK, STAGES, ACT, HAS_BIAS,
    HAS_RESIDUAL, AUX, SWIGLU> name expression."""
    args = [a.strip() for a in name_expression[len("gemm_mma<") : -1].split(",")]
    bm, bn, bk, wk, stages = (int(args[i]) for i in (3, 4, 5, 8, 9))
    return gemm_mma_shared_bytes(4 if args[0] == "float" else 2, bm, bn, bk, wk, stages, args[14] == "true")


@pytest.mark.parametrize(
    "arch, limit", [("sm_86", 99 * 1024), ("sm_89", 99 * 1024), ("sm_120", 99 * 1024), ("sm_80", 163 * 1024)]
)
@pytest.mark.parametrize("name", ["linear", "linear_swiglu"])
def test_the_gemm_planner_keeps_to_the_shared_memory_of_the_architecture(arch, limit, name):
    """The decode GEMM's tile, planned for GPUs whose blocks may opt in to 99 KB (or 163 KB) of shared memory:
    every M <= 16 and width of N (each tile width the heuristic picks from), SwiGLU's doubled B tile
    included, every candidate tuning would time too, within the limit (not a launch the driver refuses)."""
    f = Factory("meta", torch.bfloat16)
    for m in (1, 16):
        for n in (512, 3000, 6000, 12000, 20000):
            w = f.t(2 * n if name == "linear_swiglu" else n, 4096)
            for candidates in (False, True):
                _, kernels = _plan(name, (f.t(m, 4096), w), {}, arch, compile=False, candidates=candidates)
                exprs = [k["name_expression"] for k in kernels if k["name_expression"].startswith("gemm_mma<")]
                assert exprs, (name, m, n, kernels)
                for e in exprs:
                    assert _gemm_mma_shared_bytes(e) <= limit, (arch, m, n, e)


# ---- on a GPU: every sample against PyTorch -----------------------------------------------------------------


def _tolerance(spec, dtype):
    if dtype in (torch.float16, torch.bfloat16):
        return max(spec.tol, 3e-2)
    return spec.tol


SAMPLE_CASES = [(n, d) for n, spec in OPS.items() for d in spec.sample_dtypes]


@pytest.mark.gpu
@pytest.mark.parametrize("name, dtype", SAMPLE_CASES, ids=[_id(*c) for c in SAMPLE_CASES])
def test_samples_match_the_reference(name, dtype, tf32):
    """kjit.ops.<name> on each sample against the row's PyTorch reference, computed in float32 for 16-bit
    inputs (then rounded to the op's output dtype)."""
    spec = OPS[name]
    tol = _tolerance(spec, dtype)
    for args, kwargs in samples(name, "cuda", dtype, seed=1):
        with torch.no_grad():
            got = _flat(getattr(ops, name)(*args, **kwargs))
            wide = [
                a.float() if torch.is_tensor(a) and a.dtype in (torch.float16, torch.bfloat16) else a
                for a in _bound(name, args, kwargs)
            ]
            want = _flat(spec.ref(*wide))
        assert len(got) == len(want), name
        for g, w in zip(got, want):
            assert g.shape == w.shape, (name, g.shape, w.shape)
            torch.testing.assert_close(g, w.to(g.dtype), rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")


# ---- the worked example of docs/adding-an-op.md ------------------------------------------------------------


def test_the_worked_example_is_the_real_op():
    """Every code block of docs/adding-an-op.md's worked example is, verbatim, in the file the text above it
    names (the last `path` mentioned before the block), so the doc shows the files of a real op as they are."""
    text = (ROOT / "docs" / "adding-an-op.md").read_text()
    section = text.split("## Worked example", 1)[1].split("\n## ", 1)[0]
    path, checked, block = None, 0, None
    for line in section.splitlines():
        if block is not None:
            if line.rstrip() == "```":
                assert path, "a block of the worked example with no file named before it"
                code = "\n".join(block)
                assert code in (ROOT / path).read_text(), f"docs/adding-an-op.md's block is not in {path}:\n{code}"
                checked, block = checked + 1, None
            else:
                block.append(line)
        elif line.startswith("```"):
            block = []
        else:
            named = re.findall(r"`([\w./-]+\.(?:cuh|cpp|py|md))`", line)
            if named:
                path = named[-1]
    assert checked >= 5, f"the worked example shows {checked} blocks"
    # The files it names are the op's, and the op is a row of the table and of the docs.
    assert "fused_update" in OPS and (ROOT / "kernel_templates" / "fused_update.cuh").is_file()
    assert (ROOT / "python" / "src" / "ops" / "fused_update.cpp").is_file()
