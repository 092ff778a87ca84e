"""The whole warm-deployment loop on a GPU, each step in a fresh process: record a workload with
KJIT_RECORD (cache A), warm an EMPTY cache B for this GPU's target with `python -m kjit warm`, then run
the workload again with KJIT_CACHE_DIR=B and KJIT_CACHE_MODE=strict: zero compiles, identical results."""

import pathlib

import pytest

from conftest import run_python

pytestmark = pytest.mark.gpu

# The example's own workload (walk.sh runs it too): a few built-in ops; prints "compiles: N".
WORKLOAD = pathlib.Path(__file__).resolve().parents[2] / "examples" / "deploy" / "workload.py"


def test_record_warm_strict_loop(tmp_path):
    import torch

    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    script = WORKLOAD
    manifest = tmp_path / "manifest.json"
    cache_a, cache_b = tmp_path / "cache-a", tmp_path / "cache-b"

    first = run_python(
        [str(script), str(tmp_path / "first.pt")],
        env={"KJIT_RECORD": manifest, "KJIT_CACHE_DIR": cache_a, "KJIT_CACHE_MODE": None},
    )
    assert int(first.stdout.split()[-1]) >= 4, first
    records = [line for line in manifest.read_text().splitlines() if line.startswith('{"record"')]  # JSON lines
    assert len(records) >= 4
    assert not cache_b.exists()

    warm = run_python(
        ["-m", "kjit", "warm", str(manifest), "--arch", arch, "-j", "2"],
        env={"KJIT_CACHE_DIR": cache_b, "KJIT_CACHE_MODE": None},
    )
    assert f"{len(records)} compiled, 0 already cached, 0 failed" in warm.stdout, warm

    second = run_python(
        [str(script), str(tmp_path / "second.pt")],
        env={"KJIT_CACHE_DIR": cache_b, "KJIT_CACHE_MODE": "strict", "KJIT_RECORD": None},
    )
    assert second.stdout.split()[-1] == "0", second

    a = torch.load(tmp_path / "first.pt")
    b = torch.load(tmp_path / "second.pt")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
