"""Many processes on one cache directory (CPU, compile-only): 16 processes each specialize the same 50
kernels, in different orders, started together. Each key must be compiled exactly once across all of
them (the others load it from disk), every entry must verify, and no temporary or lock file may be left.
"""

import os
import subprocess
import sys
import textwrap

from support import WAIT_FOR_GO, run_together

PROCESSES = 16
SPECIALIZATIONS = 50

WORKER = (
    textwrap.dedent(
        r"""
    import json, os, random, sys, time
    import kjit

    go, index, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    name = str(index)
    SRC = '''
    template <int K>
    __global__ void fill(float* y) { y[threadIdx.x] = K; }
    '''
    family = kjit.Template(SRC, name="race").kernel("fill")
    order = list(range(count))
    random.Random(index).shuffle(order)
    """
    )
    + WAIT_FOR_GO
    + textwrap.dedent(
        r"""
    for k in order:
        family.specialize(arch="sm_90", K=k)
    print(json.dumps(kjit.stats()))
    """
    )
)


def test_sixteen_processes_compile_each_of_fifty_keys_exactly_once(tmp_path, cache_dir):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    env = dict(os.environ, KJIT_CACHE_DIR=str(cache_dir))
    workers = {str(i): [i, SPECIALIZATIONS] for i in range(PROCESSES)}
    stats = run_together(worker, tmp_path / "go", workers, env)

    # Each process saw every key once, from NVRTC or from disk; across processes each key compiled once.
    for s in stats:
        assert s["compiles"] + s["disk_hits"] == SPECIALIZATIONS, s
    assert sum(s["compiles"] for s in stats) == SPECIALIZATIONS, [s["compiles"] for s in stats]

    files = [os.path.join(d, f) for d, _, fs in os.walk(cache_dir) for f in fs]
    entries = [f for f in files if f.endswith(".kjit")]
    assert len(entries) == SPECIALIZATIONS
    stray = [f for f in files if ".tmp." in f or f.endswith(".lock")]
    assert stray == [], stray

    verify = subprocess.run([sys.executable, "-m", "kjit", "verify"], env=env, capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"{SPECIALIZATIONS} entries verified, all valid" in verify.stdout
