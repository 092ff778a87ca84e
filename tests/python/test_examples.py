"""The examples in examples/ run and check themselves.

examples/llama_kjit.py: a Hugging Face Llama with kjit's rms_norm, linear_swiglu, linear (down_proj with
the residual) and add_rms_norm (or, with --mlp silu_mul, the fused silu(a) * b). The GPU tests run the
example's main() at a tiny size, in both MLP modes (correctness in bf16 and fp32, gradients of every
parameter, 0 graph breaks; no timing), and one short timing run that counts kernels. The patching tests
need transformers only (no GPU, no kernel runs). All skip, with the reason, when transformers is not
installed.

examples/mamba_kjit.py (GPU): the Mamba-style block with kjit's causal_conv1d and linear_scan matches its
PyTorch reference (F.conv1d and a Python loop over time) in outputs and in the gradients of its input and
of every parameter, in float32 (tight) and bfloat16, with no graph break under torch.compile. Its timing
(main() without --no-timing) is a benchmark, run on the GPU machine and reported, never asserted here.

examples/diffusion_policy_kjit.py: the diffusion policy's 1-D U-Net (issue 43) on kjit's conv1d, group_norm
(Mish, FiLM and residual fused), conv_transpose1d and ddpm_step, against the same network in PyTorch modules.
Without a GPU: the reference network is the issue's (parameters, shapes). On a GPU: main() at batch 2 matches
the reference's output and every gradient (not yet run on a GPU).

examples/deploy/ (record, warm, strict): test_deployment.py.
"""

import copy
import importlib.util
import json
import pathlib
import sys

import pytest
import torch

import kjit  # noqa: F401

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _example(name):
    """examples/NAME.py, imported once as the module NAME_example."""
    module = f"{name}_example"
    if module not in sys.modules:
        spec = importlib.util.spec_from_file_location(module, EXAMPLES / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[module] = mod  # Dynamo imports the module of the patched classes by name
        spec.loader.exec_module(mod)
    return sys.modules[module]


# ---- examples/llama_kjit.py ---------------------------------------------------------------------------------

TINY = [
    "--hidden",
    "128",
    "--intermediate",
    "352",
    "--layers",
    "2",
    "--heads",
    "4",
    "--vocab",
    "256",
    "--check-tokens",
    "2x16",
]


def _transformers():
    return pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")


def test_llama_patching_swaps_classes_only_in_the_copy():
    _transformers()
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    ex = _example("llama_kjit")
    args = ex._parser().parse_args(TINY)
    base = ex.build_base(args)
    patched = copy.deepcopy(base)
    assert ex.decoder_layer_fusable() is None  # the installed transformers has the structure fused
    assert ex.patch_llama(patched) == {"rms_norm": 2 * 2 + 1, "mlp": 2, "decoder_layer": 2}
    assert ex.unpatched_left(patched) == []
    assert len(ex.unpatched_left(base)) == 2 * 2 + 1 + 2 + 2  # the original keeps its own forward
    norm, mlp = patched.model.norm, patched.model.layers[0].mlp
    assert isinstance(norm, LlamaRMSNorm) and type(norm) is not LlamaRMSNorm
    assert isinstance(mlp, LlamaMLP) and type(mlp).forward is ex._mlp_forward
    assert type(base.model.norm) is LlamaRMSNorm
    # Same parameters, same names: state_dict and checkpoints do not change.
    assert list(patched.state_dict()) == list(base.state_dict())
    # The norm weights are not all 1 (a kernel ignoring them would be caught).
    assert not bool((base.model.norm.weight == 1).all())
    # gate_proj / up_proj: the same values, now the two halves of one [2F, K] tensor (no copy per forward).
    for i in range(2):
        m, b = patched.model.layers[i].mlp, base.model.layers[i].mlp
        assert torch.equal(m.gate_proj.weight, b.gate_proj.weight) and torch.equal(m.up_proj.weight, b.up_proj.weight)
        assert ex._halves_of(m._kjit_gate_up, m.gate_proj.weight, m.up_proj.weight)
        assert m.gate_proj.weight.is_leaf and m.gate_proj.weight.requires_grad
    assert "_kjit_gate_up" not in str(list(patched.state_dict()))
    # deepcopy and .to() keep them joined; apart, the eager path copies (torch.cat) and stays correct.
    for model in (copy.deepcopy(patched), patched.to(torch.float64)):
        m = model.model.layers[0].mlp
        assert ex._halves_of(m._kjit_gate_up, m.gate_proj.weight, m.up_proj.weight)
    m = patched.model.layers[1].mlp
    m.up_proj.weight.data = m.up_proj.weight.data.clone()
    assert not ex._halves_of(m._kjit_gate_up, m.gate_proj.weight, m.up_proj.weight)
    assert torch.equal(ex._gate_up_weight(m), torch.cat([m.gate_proj.weight, m.up_proj.weight]))
    ex.refuse_gate_up(m)
    assert ex._halves_of(m._kjit_gate_up, m.gate_proj.weight, m.up_proj.weight)
    # Gradients reach both parameters, split as torch.cat's backward would split them.
    g = torch.randn(m._kjit_gate_up.shape, dtype=m._kjit_gate_up.dtype)
    ex._gate_up_weight(m).backward(g)
    assert torch.equal(m.gate_proj.weight.grad, g[: m.gate_proj.weight.shape[0]])
    assert torch.equal(m.up_proj.weight.grad, g[m.gate_proj.weight.shape[0] :])


def test_llama_patching_silu_mul_mode_keeps_the_layers():
    _transformers()
    ex = _example("llama_kjit")
    base = ex.build_base(ex._parser().parse_args(TINY))
    patched = copy.deepcopy(base)
    assert ex.patch_llama(patched, "silu_mul") == {"rms_norm": 5, "mlp": 2, "decoder_layer": 0}
    assert ex.unpatched_left(patched, "silu_mul") == []
    assert type(patched.model.layers[0].mlp).forward is ex._mlp_silu_mul_forward
    with pytest.raises(ValueError, match="mlp='other'"):
        ex.patch_llama(copy.deepcopy(base), "other")


def test_llama_patching_refuses_another_activation():
    _transformers()
    ex = _example("llama_kjit")
    base = ex.build_base(ex._parser().parse_args(TINY))
    base.model.layers[1].mlp.act_fn = torch.nn.GELU()
    with pytest.raises(ValueError, match="model.layers.1.mlp: the MLP's activation is GELU, not SiLU"):
        ex.patch_llama(copy.deepcopy(base))


@pytest.mark.gpu
@pytest.mark.parametrize("mlp", ["swiglu", "silu_mul"])
def test_llama_example_tiny(tmp_path, capsys, mlp):
    _transformers()
    ex = _example("llama_kjit")
    out_json = tmp_path / "llama.json"
    rc = ex.main(TINY + ["--no-timing", "--mlp", mlp, "--json", str(out_json)])
    printed = capsys.readouterr()
    assert rc == 0, printed.out + printed.err
    assert "llama_kjit: all checks passed" in printed.out
    data = json.loads(out_json.read_text())
    assert data["ok"] and data["failures"] == [] and "timing" not in data
    assert [c["dtype"] for c in data["correctness"]] == ["bfloat16", "float32"]
    layers = 2 if mlp == "swiglu" else 0
    assert all(c["patched_modules"] == {"rms_norm": 5, "mlp": 2, "decoder_layer": layers} for c in data["correctness"])
    assert data["graph_breaks"]["patched"]["graph_breaks"] == 0
    # Every parameter has a gradient matching the unpatched model's (failures would be listed above).
    assert all(c["params"] > 0 and "loss" in c for c in data["correctness"])


@pytest.mark.gpu
def test_llama_example_counts_kernels_and_times(tmp_path, capsys):
    _transformers()
    ex = _example("llama_kjit")
    out_json = tmp_path / "llama.json"
    rc = ex.main(
        TINY + ["--shapes", "1x1,2x16", "--iters", "2", "--warmup", "1", "--no-compile", "--json", str(out_json)]
    )
    printed = capsys.readouterr()
    assert rc == 0, printed.out + printed.err
    t = json.loads(out_json.read_text())["timing"]
    for shape in ("1x1", "2x16"):
        k = t["shapes"][shape]["kernels"]
        assert k["unpatched eager"] > 0 and 0 < k["kjit eager"] < k["unpatched eager"], k
    assert "kernels per forward, kjit eager" in printed.out


# ---- examples/mamba_kjit.py ---------------------------------------------------------------------------------

SMALL = ["--batch", "2", "--length", "300", "--model", "64", "--inner", "96", "--no-timing"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_mamba_block_matches_its_reference_in_outputs_and_every_gradient(dtype):
    result = _example("mamba_kjit").main(SMALL + ["--dtype", dtype])
    keys = set(result["max_scaled_diff"])
    assert {"out", "u", "in_proj.weight", "conv_weight", "conv_bias", "out_proj.weight"} <= keys
    if dtype == "float32":
        assert max(result["max_scaled_diff"].values()) < 1e-4


@pytest.mark.gpu
def test_mamba_block_has_no_graph_break_and_compiles():
    ex = _example("mamba_kjit")
    block = ex.MambaStyleBlock(32, 48, device="cuda", dtype=torch.float32)
    u = torch.randn(2, 70, 32, device="cuda")
    explain = torch._dynamo.explain(block.forward)(u)
    assert explain.graph_break_count == 0
    compiled = torch.compile(block.forward, fullgraph=True)
    torch.testing.assert_close(compiled(u), block(u), rtol=1e-5, atol=1e-5)


# ---- examples/diffusion_policy_kjit.py -----------------------------------------------------------------------
# (issue 43; the GPU test is not yet run on a GPU: the next session's first GPU call runs it.)


def test_diffusion_policy_unet_is_the_issues_model():
    """The reference U-Net at the issue's sizes (action dim 10, a 512-feature condition): 72.6M parameters, and
    its forward maps an action sample [B, 16, 10] to the predicted noise of that shape (CPU, no kjit kernel)."""
    ex = _example("diffusion_policy_kjit")
    unet = ex.ConditionalUnet1D(10, 512)
    assert round(sum(p.numel() for p in unet.parameters()) / 1e6, 1) == 72.6
    with torch.no_grad():
        y = unet(torch.randn(2, 16, 10), torch.tensor([3, 50]), torch.randn(2, 512))
    assert y.shape == (2, 16, 10)
    betas = ex.squared_cosine_betas(100)
    assert betas.shape == (100,) and float(betas.max()) <= 0.999 and float(betas.min()) > 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_diffusion_policy_unet_matches_its_reference_in_outputs_and_every_gradient(dtype):
    result = _example("diffusion_policy_kjit").main(["--batch", "2", "--no-timing", "--dtype", dtype])
    assert result["parameters"] > 7e7 and result["max_scaled_diff"] < 0.08
