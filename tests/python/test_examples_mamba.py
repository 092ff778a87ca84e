"""examples/mamba_kjit.py: the Mamba-style block with kjit's causal_conv1d and linear_scan matches its PyTorch
reference (F.conv1d and a Python loop over time) in outputs and in the gradients of its input and of every
parameter, in float32 (tight) and bfloat16, with no graph break under torch.compile. Its timing (main()
without --no-timing) is a benchmark, run on the GPU machine and reported, never asserted here."""

import importlib.util
import os
import sys

import pytest
import torch

import kjit  # noqa: F401

pytestmark = pytest.mark.gpu

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "mamba_kjit.py")
SMALL = ["--batch", "2", "--length", "300", "--model", "64", "--inner", "96", "--no-timing"]


def _example():
    name = "mamba_kjit_example"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_block_matches_its_reference_in_outputs_and_every_gradient(dtype):
    result = _example().main(SMALL + ["--dtype", dtype])
    keys = set(result["max_scaled_diff"])
    assert {"out", "u", "in_proj.weight", "conv_weight", "conv_bias", "out_proj.weight"} <= keys
    if dtype == "float32":
        assert max(result["max_scaled_diff"].values()) < 1e-4


def test_the_block_has_no_graph_break_and_compiles():
    ex = _example()
    block = ex.MambaStyleBlock(32, 48, device="cuda", dtype=torch.float32)
    u = torch.randn(2, 70, 32, device="cuda")
    explain = torch._dynamo.explain(block.forward)(u)
    assert explain.graph_break_count == 0
    compiled = torch.compile(block.forward, fullgraph=True)
    torch.testing.assert_close(compiled(u), block(u), rtol=1e-5, atol=1e-5)
