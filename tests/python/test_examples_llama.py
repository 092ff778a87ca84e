"""examples/llama_kjit.py: a Hugging Face Llama with kjit's rms_norm and fused silu(a) * b.

The GPU test runs the example's main() at a tiny size (correctness in bf16 and fp32, gradients of every
parameter, 0 graph breaks; no timing). The patching test needs transformers only (no GPU, no kernel runs).
Both skip, with the reason, when transformers is not installed.
"""

import copy
import importlib.util
import sys
import json
import os

import pytest

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "llama_kjit.py")
TINY = ["--hidden", "128", "--intermediate", "352", "--layers", "2", "--heads", "4", "--vocab", "256",
        "--check-tokens", "2x16"]


def _transformers():
    return pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")


def _example():
    name = "llama_kjit_example"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # Dynamo imports the module of the patched classes by name
    spec.loader.exec_module(mod)
    return mod


def test_patching_swaps_classes_only_in_the_copy():
    _transformers()
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    ex = _example()
    args = ex._parser().parse_args(TINY)
    base = ex.build_base(args)
    patched = copy.deepcopy(base)
    assert ex.patch_llama(patched) == {"rms_norm": 2 * 2 + 1, "mlp": 2}
    assert ex.unpatched_left(patched) == []
    assert len(ex.unpatched_left(base)) == 2 * 2 + 1 + 2  # the original keeps its own forward
    norm, mlp = patched.model.norm, patched.model.layers[0].mlp
    assert isinstance(norm, LlamaRMSNorm) and type(norm) is not LlamaRMSNorm
    assert isinstance(mlp, LlamaMLP) and type(mlp).forward is ex._mlp_forward
    assert type(base.model.norm) is LlamaRMSNorm
    # Same parameters, same names: state_dict and checkpoints do not change.
    assert list(patched.state_dict()) == list(base.state_dict())
    # The norm weights are not all 1 (a kernel ignoring them would be caught).
    assert not bool((base.model.norm.weight == 1).all())


def test_patching_refuses_another_activation():
    _transformers()
    ex = _example()
    base = ex.build_base(ex._parser().parse_args(TINY))
    base.model.layers[1].mlp.act_fn = __import__("torch").nn.GELU()
    with pytest.raises(ValueError, match="model.layers.1.mlp: the MLP's activation is GELU, not SiLU"):
        ex.patch_llama(copy.deepcopy(base))


@pytest.mark.gpu
def test_llama_example_tiny(tmp_path, capsys):
    _transformers()
    ex = _example()
    out_json = tmp_path / "llama.json"
    rc = ex.main(TINY + ["--no-timing", "--json", str(out_json)])
    printed = capsys.readouterr()
    assert rc == 0, printed.out + printed.err
    assert "llama_kjit: all checks passed" in printed.out
    data = json.loads(out_json.read_text())
    assert data["ok"] and data["failures"] == [] and "timing" not in data
    assert [c["dtype"] for c in data["correctness"]] == ["bfloat16", "float32"]
    assert all(c["patched_modules"] == {"rms_norm": 5, "mlp": 2} for c in data["correctness"])
    assert data["graph_breaks"]["patched"]["graph_breaks"] == 0
