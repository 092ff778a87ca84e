"""The whole warm-deployment loop on a GPU, each step in a fresh process: record a workload with
KJIT_RECORD (cache A), warm an EMPTY cache B for this GPU's target with `python -m kjit warm`, then run
the workload again with KJIT_CACHE_DIR=B and KJIT_CACHE_MODE=strict: zero compiles, identical results."""

import pathlib

import pytest

from support import run_python

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


# The GEMM's tile heuristic and the column reduction's split read the multiprocessor count. A workload
# recorded on this GPU and run strict on another model of the same architecture (114 multiprocessors: an
# H100 PCIe after a 132-SM H100 SXM or H200; 16: a MIG slice) must find every kernel it runs: the GEMM
# replays the recorded pick (a "choice" line), the reduction splits by the shape alone. On a 132-SM GPU
# the heuristic picks 128x256 tiles for M=2048, N=K=4096 and 128x128 ones at 114, and the reduction of
# [15, 1024, 4096] over dim 1 (480 column blocks) split at 132 and did not at 114.
SM_COUNT_WORKLOAD = """
import sys, torch, kjit
if len(sys.argv) > 1:
    kjit._C._override_sm_count(0, int(sys.argv[1]))
torch.manual_seed(0)
x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
y = kjit.ops.linear(x, w)
r = torch.randn(15, 1024, 4096, device="cuda")
s = kjit.ops.sum(r, 1)
torch.cuda.synchronize()
torch.testing.assert_close(y.float(), (x.float() @ w.float().t()), rtol=2e-2, atol=2e-1)
torch.testing.assert_close(s, r.sum(1), rtol=1e-4, atol=1e-3)
print("compiles:", kjit.stats()["compiles"])
"""


def test_a_strict_run_on_a_gpu_with_another_multiprocessor_count_finds_every_kernel(tmp_path):
    import torch

    major, minor = torch.cuda.get_device_capability()
    script = tmp_path / "workload.py"
    script.write_text(SM_COUNT_WORKLOAD)
    manifest, cache_a, cache_b = tmp_path / "manifest.json", tmp_path / "cache-a", tmp_path / "cache-b"
    run_python(
        [str(script)],
        env={"KJIT_RECORD": manifest, "KJIT_CACHE_DIR": cache_a, "KJIT_CACHE_MODE": None, "KJIT_TUNE": "0"},
    )
    if major == 9:
        assert '{"choice":' in manifest.read_text(), "the GEMM's heuristic pick was not recorded"
    arch = f"sm_{major}{minor}"
    run_python(["-m", "kjit", "warm", str(manifest), "--arch", arch], env={"KJIT_CACHE_DIR": cache_b})
    for count in (114, 16):
        r = run_python(
            [str(script), str(count)],
            env={"KJIT_CACHE_DIR": cache_b, "KJIT_CACHE_MODE": "strict", "KJIT_RECORD": None, "KJIT_TUNE": "0"},
            check=False,
        )
        assert r.returncode == 0 and "compiles: 0" in r.stdout, (count, r)
