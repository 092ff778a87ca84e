"""Several GPUs: two processes, one per GPU, launching the kernel library on one cache directory; and one
process alternating between two GPUs. Results must match PyTorch's, and each key is compiled once across
the processes (both GPUs are the same model, so they share every cache entry).
Needs two CUDA devices (the `nvidia-h200-x2` machine); skipped, with the reason, otherwise.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from support import WAIT_FOR_GO, last_json, run_together

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        torch.cuda.device_count() < 2, reason=f"needs two CUDA devices (found {torch.cuda.device_count()})"
    ),
]

# The work each process does on its own GPU: several ops, dtypes and specialized shapes, checked
# against PyTorch on the same device. Prints kjit.stats() as JSON on its last line.
WORK = textwrap.dedent(
    r"""
    import json, os, sys, time
    import torch
    import kjit
    from kjit import ops

    def work(dev, rounds=3):
        g = torch.Generator(device=dev).manual_seed(1234)
        for _ in range(rounds):
            for dtype in (torch.float32, torch.bfloat16):
                for rows, cols in ((64, 1000), (7, 4096), (33, 257)):
                    x = torch.randn(rows, cols, device=dev, dtype=dtype, generator=g)
                    w = torch.randn(cols, device=dev, dtype=dtype, generator=g)
                    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-4, rtol=1e-4)
                    torch.testing.assert_close(ops.softmax(x), torch.softmax(x.float(), -1).to(dtype), **tol)
                    torch.testing.assert_close(ops.silu(x), torch.nn.functional.silu(x.float()).to(dtype), **tol)
                    torch.testing.assert_close(
                        ops.rms_norm(x, w, eps=1e-6),
                        torch.nn.functional.rms_norm(x.float(), (cols,), w.float(), eps=1e-6).to(dtype), **tol)
                    torch.testing.assert_close(ops.sum(x, dim=-1), x.float().sum(-1).to(dtype), **tol)
            y = torch.randn(4097, device=dev)
            torch.testing.assert_close(ops.add_constant(y, 2.5), y + 2.5)
        torch.cuda.synchronize(dev)
    """
)

TWO_PROCESSES = (
    WORK
    + textwrap.dedent(
        r"""
    go, dev = sys.argv[1], sys.argv[2]
    name = dev
    torch.cuda.set_device(dev)
    """
    )
    + WAIT_FOR_GO
    + textwrap.dedent(
        r"""
    work(torch.device(dev))
    print(json.dumps(kjit.stats()))
    """
    )
)

ONE_PROCESS = WORK + textwrap.dedent(
    r"""
    for _ in range(2):
        for d in ("cuda:0", "cuda:1"):
            work(torch.device(d), rounds=1)
    # Interleaved: a launch on cuda:1 while work on cuda:0 is still queued.
    a = torch.randn(1 << 20, device="cuda:0")
    b = torch.randn(1 << 20, device="cuda:1")
    for _ in range(20):
        ra, rb = ops.add_constant(a, 1.0), ops.add_constant(b, -1.0)
    torch.testing.assert_close(ra, a + 1.0)
    torch.testing.assert_close(rb, b - 1.0)
    assert ra.device == a.device and rb.device == b.device
    print(json.dumps(kjit.stats()))
    """
)


def test_two_processes_on_two_gpus_share_one_cache(tmp_path, cache_dir):
    script = tmp_path / "worker.py"
    script.write_text(TWO_PROCESSES)
    env = dict(os.environ, KJIT_CACHE_DIR=str(cache_dir))
    stats = run_together(script, tmp_path / "go", {f"cuda:{i}": [f"cuda:{i}"] for i in range(2)}, env)
    # Both processes needed the same kernels; between them each was compiled once.
    loaded = [s["compiles"] + s["disk_hits"] for s in stats]
    assert loaded[0] == loaded[1] > 0, stats
    assert sum(s["compiles"] for s in stats) == loaded[0], stats

    verify = subprocess.run([sys.executable, "-m", "kjit", "verify"], env=env, capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"{loaded[0]} entries verified, all valid" in verify.stdout


def test_one_process_alternating_between_two_gpus(tmp_path, cache_dir):
    script = tmp_path / "alternate.py"
    script.write_text(ONE_PROCESS)
    env = dict(os.environ, KJIT_CACHE_DIR=str(cache_dir))
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    s = last_json(p.stdout)
    assert s["compiles"] > 0, s
