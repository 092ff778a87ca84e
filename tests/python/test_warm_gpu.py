"""The whole warm-deployment loop on a GPU, each step in a fresh process: record a workload with
KJIT_RECORD (cache A), warm an EMPTY cache B for this GPU's target with `python -m kjit warm`, then run
the workload again with KJIT_CACHE_DIR=B and KJIT_CACHE_MODE=strict: zero compiles, identical results."""

import json
import textwrap

import pytest

from conftest import run_python

pytestmark = pytest.mark.gpu

WORKLOAD = """
import sys, kjit, torch
torch.manual_seed(0)
x32 = torch.randn(4097, device="cuda")
x16 = torch.randn(1000, device="cuda", dtype=torch.float16)
img_a = torch.randint(0, 256, (7, 13, 3), device="cuda", dtype=torch.uint8)
img_b = torch.randint(0, 256, (2, 64, 48, 3), device="cuda", dtype=torch.uint8)
out = {
    "add32": kjit.ops.add_constant(x32, 1.5),
    "add16": kjit.ops.add_constant(x16, -2.0),
    "gray_a": kjit.ops.rgb_to_gray(img_a),
    "gray_b": kjit.ops.rgb_to_gray(img_b),
}
torch.cuda.synchronize()
torch.save({k: v.cpu() for k, v in out.items()}, sys.argv[1])
print(kjit.stats()["compiles"])
"""


def test_record_warm_strict_loop(tmp_path):
    import torch

    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    script = tmp_path / "workload.py"
    script.write_text(textwrap.dedent(WORKLOAD))
    manifest = tmp_path / "manifest.json"
    cache_a, cache_b = tmp_path / "cache-a", tmp_path / "cache-b"

    first = run_python([str(script), str(tmp_path / "first.pt")],
                       env={"KJIT_RECORD": manifest, "KJIT_CACHE_DIR": cache_a, "KJIT_CACHE_MODE": None})
    assert int(first.stdout.split()[-1]) >= 4, first
    records = json.loads(manifest.read_text())["records"]
    assert len(records) >= 4
    assert not cache_b.exists()

    warm = run_python(["-m", "kjit", "warm", str(manifest), "--arch", arch, "-j", "2"],
                      env={"KJIT_CACHE_DIR": cache_b, "KJIT_CACHE_MODE": None})
    assert f"{len(records)} compiled, 0 already cached, 0 failed" in warm.stdout, warm

    second = run_python([str(script), str(tmp_path / "second.pt")],
                        env={"KJIT_CACHE_DIR": cache_b, "KJIT_CACHE_MODE": "strict", "KJIT_RECORD": None})
    assert second.stdout.split()[-1] == "0", second

    a = torch.load(tmp_path / "first.pt")
    b = torch.load(tmp_path / "second.pt")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
