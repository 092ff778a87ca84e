"""gemm_sm90.cuh's operand layouts: A and B K-major (what the ops launch today), or read in place from their
transposes (A_MN: A^T [K, M], M contiguous; B_MN: B^T [K, N], N contiguous), the layouts the backward's
GEMMs have their saved tensors in. No op plans the M- / N-major forms yet (they have not run on a GPU): these
tests compile them for sm_90a, and check that the K-major kernels the ops launch are unchanged by the
template parameters that select them. No GPU needed."""

import pytest

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
