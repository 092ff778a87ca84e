"""Where a process's first backward through kjit ops goes: each op's forward, then its backward given a
gradient, timed, with kjit's phases, every thread's state sampled each 20 ms from /proc, and every
Python thread's stack dumped 1 s into each backward (to stderr). Found that torch's first backward given
a gradient imports sympy (torch.autograd._make_grads), 2.4-4.1 s on the H100 machine: bench/first_call.py
now does one before its clock starts.

    python bench/first_backward.py softmax,rms_norm > out.json 2> stacks.txt   (needs a GPU)
"""

import collections
import faulthandler
import json
import os
import sys
import threading
import time
import torch
import kjit
from kjit import ops


def main() -> None:
    order = sys.argv[1].split(",")
    w0 = torch.ones(2, device="cuda", requires_grad=True)
    (w0 * 2).sum().backward()
    torch.cuda.synchronize()
    samples, stop = [], [False]

    def sampler():
        pid = os.getpid()
        while not stop[0]:
            row = []
            for tid in os.listdir(f"/proc/{pid}/task"):
                try:
                    st = open(f"/proc/{pid}/task/{tid}/stat").read()
                    comm = st[st.index("(") + 1 : st.rindex(")")]
                    state = st[st.rindex(")") + 2]
                    utime = int(st[st.rindex(")") + 2 :].split()[11])
                    sysc = open(f"/proc/{pid}/task/{tid}/syscall").read().split()[0]
                    row.append((tid, comm, state, sysc, utime))
                except Exception:
                    pass
            samples.append((time.perf_counter(), row))
            time.sleep(0.02)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    h = torch.randn(64, 4096, device="cuda")
    w = torch.randn(4096, device="cuda")
    b = torch.randn(4096, device="cuda")
    F = {
        "softmax": lambda a: ops.softmax(a, -1),
        "rms_norm": lambda a: ops.rms_norm(a, w),
        "layer_norm": lambda a: ops.layer_norm(a, w, b),
    }
    out = {}
    for name in order:
        a = h.clone().requires_grad_(True)
        kjit.reset_stats()
        t = time.perf_counter()
        y = F[name](a)
        torch.cuda.synchronize()
        out[name + " fwd"] = round((time.perf_counter() - t) * 1e3, 1)
        g = torch.ones_like(y)
        torch.cuda.synchronize()
        kjit.reset_stats()
        faulthandler.dump_traceback_later(1.0)
        t0 = time.perf_counter()
        y.backward(g)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        faulthandler.cancel_dump_traceback_later()
        s = kjit.stats()
        out[name + " bwd"] = {
            "ms": round((t1 - t0) * 1e3, 1),
            "compiles": s["compiles"],
            "phase_ms": {k: round(v, 1) for k, v in s["phase_ms"].items()},
        }
        win = [r for (ts, r) in samples if t0 <= ts <= t1]
        c = collections.Counter(
            (comm, state, sysc)
            for r in win
            for (tid, comm, state, sysc, u) in r
            if state in "RD" or sysc not in ("202", "7", "232", "running")
        )
        out[name + " bwd"]["threads"] = [f"{k} x{v}" for k, v in c.most_common(12)]
    stop[0] = True
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
