"""gemm_sm90.cuh's operand layouts: A and B K-major, or read in place from their transposes (A_MN: A^T [K, M],
M contiguous; B_MN: B^T [K, N], N contiguous), the layouts the backward's GEMMs have their saved tensors in.
These tests compile the forms for sm_90a, check that the K-major kernels are unchanged by the template
parameters that select them, and that the ops plan the M- / N-major forms where their operands are
transposes' views (and K-major copies where the kernel cannot read them: mma.sync, misaligned rows).
No GPU needed (test_matmul.py runs every form on one)."""

import pytest
import torch

import kjit

BASE = dict(
    T="bfloat16",
    N=4096,
    K=4096,
    BM=128,
    BN=128,
    STAGES=5,
    PINGPONG=True,
    TMA_STORE=True,
    ACT=0,
    HAS_BIAS=False,
    HAS_RESIDUAL=False,
    AUX=False,
    SWIGLU=False,
)


def family():
    return kjit.Template.builtin("gemm_sm90").kernel("gemm_wgmma", **kjit._core.library_compile_options())


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KJIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    "layout",
    [
        dict(A_MN=False, B_MN=True),  # dX = dY @ W: W [N_fwd, K_fwd] as an N-major B
        dict(A_MN=True, B_MN=True, PINGPONG=False, BN=256, STAGES=3),  # dW = dY^T @ X, cooperative
        dict(A_MN=True, B_MN=False, BM=64, BN=64, STAGES=8, N=0, K=0, T="float16", ACT=2, HAS_BIAS=True),
        dict(A_MN=True, B_MN=True, BM=64, BN=192, TMA_STORE=False, HAS_RESIDUAL=True, AUX=True),
    ],
    ids=["dx", "dw-cooperative", "a-only-generic", "both-register-store"],
)
def test_the_transposed_layouts_compile_for_sm_90a(layout):
    k = family().specialize(arch="sm_90a", **{**BASE, **layout})
    assert k.target == "sm_90a"
    assert k.name_expression.endswith(f"{str(layout['A_MN']).lower()}, {str(layout['B_MN']).lower()}>")


def test_swiglu_refuses_the_transposed_layouts():
    with pytest.raises(kjit.CompileError, match="SWIGLU reads K-major operands"):
        family().specialize(arch="sm_90a", **{**BASE, "SWIGLU": True, "B_MN": True})


def test_the_k_major_kernel_is_the_one_the_ops_name():
    """The ops name 13 template arguments: the K-major forms (A_MN, B_MN default to false), one kernel
    whichever way it is named."""
    named = family().specialize(arch="sm_90a", **BASE)
    spelled = family().specialize(arch="sm_90a", **BASE, A_MN=False, B_MN=False)
    assert named.name_expression.count(",") == 12 and spelled.name_expression.count(",") == 14
    assert named.meta["lowered_name"] == spelled.meta["lowered_name"]


# ---- the layouts the ops plan --------------------------------------------------------------------------------


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="meta", dtype=dtype)


def planned_layouts(name, args, arch="sm_90"):
    """The GEMM kernels the op's plan launches, in order: ("wgmma", A_MN, B_MN) or ("mma", False, False)."""
    _, kernels = kjit._C._plan_op(name, tuple(args), {}, arch=arch, compile=False)
    out = []
    for k in kernels:
        expr = k["name_expression"]
        if not expr.startswith(("gemm_wgmma<", "gemm_mma<")):
            continue
        params = [a.strip() for a in expr[expr.index("<") + 1 : -1].split(",")]
        if expr.startswith("gemm_mma<"):
            out.append(("mma", False, False))
        else:  # 13 parameters: K-major; 15: A_MN and B_MN spelled out
            assert len(params) in (13, 15), expr
            out.append(("wgmma", params[13:14] == ["true"], params[14:15] == ["true"]))
    return out


def test_the_linear_backward_reads_its_saved_tensors_in_place():
    """dX = dY @ W reads W [N, K] as an N-major B; dW = dY^T @ X reads dY and X as an M-major A and an
    N-major B: no transposed copies."""
    x, w, dy = meta(300, 256), meta(512, 256), meta(300, 512)
    layouts = planned_layouts("linear_backward", (dy, x, w, None, None, 1.0, False))
    assert layouts == [("wgmma", False, True), ("wgmma", True, True)]
    swiglu = planned_layouts("linear_swiglu_backward", (meta(300, 256), x, meta(512, 256), meta(300, 512)))
    assert swiglu == [("wgmma", False, True), ("wgmma", True, True)]


def test_matmul_and_bmm_read_their_operands_in_place():
    a, b = meta(300, 256), meta(256, 512)
    assert planned_layouts("matmul", (a, b)) == [("wgmma", False, True)]  # b [K, N]: N-major
    assert planned_layouts("matmul_backward", (meta(300, 512), a, b)) == [
        ("wgmma", False, False),
        ("wgmma", True, True),
    ]
    a3, b3 = meta(3, 130, 64), meta(3, 64, 136)
    assert planned_layouts("bmm_backward", (meta(3, 130, 136), a3, b3)) == [
        ("wgmma", False, False),
        ("wgmma", True, True),
    ]


def test_operands_the_kernel_cannot_read_in_place_are_copied_k_major():
    x, w = meta(300, 256), meta(200, 256)
    # dY's rows of 203 elements are not 16-byte aligned: dW's A copied K-major (dX's A is K-major, padded).
    assert planned_layouts("linear_backward", (meta(300, 203), x, meta(203, 256), None, None, 1.0, False)) == [
        ("wgmma", False, True),
        ("wgmma", False, True),
    ]
    # M <= 16 (dX of a decode step) runs on mma.sync, which reads K-major operands only; dW (M = N) on wgmma.
    assert planned_layouts("linear_backward", (meta(8, 200), meta(8, 256), w, None, None, 1.0, False)) == [
        ("mma", False, False),
        ("wgmma", True, True),
    ]
    # One matrix broadcast over a batch (batch stride 0; a TMA map has no stride-0 dim): copied, in the
    # forward and for the backward's broadcast gradient.
    b1 = meta(1, 64, 136).expand(3, 64, 136)
    assert planned_layouts("bmm", (meta(3, 130, 64), b1)) == [("wgmma", False, False)]
    grad = meta(1, 130, 136).expand(3, 130, 136)
    assert planned_layouts("bmm_backward", (grad, meta(3, 130, 64), meta(3, 64, 136))) == [
        ("wgmma", False, False),
        ("wgmma", True, False),
    ]
    # K = 0 (a transposed weight [N, 0]): nothing to read in place.
    assert planned_layouts("linear", (meta(300, 0), meta(5, 48)[:0].t())) == [("wgmma", False, False)]
    # Other architectures and float32 (TF32): the mma.sync kernel, K-major.
    assert (
        planned_layouts("linear_backward", (meta(300, 200), x, w, None, None, 1.0, False), arch="sm_80")
        == [("mma", False, False)] * 2
    )
