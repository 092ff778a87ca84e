"""A/B of KJIT_LIBRARY_FAST_COMPILE (NVRTC's --Ofast-compile level for kjit's own kernels): the speed of
every library kernel a model calls most, forward and backward, at each level. --Ofast-compile changes the
binary, so a level kjit compiles its library with must first be measured here against `off` (the fully
optimized binary); bench/nvrtc_flags.py measures what it saves in compile time (no GPU needed).

Each level runs in processes of its own (its own empty kjit cache, the level set in KJIT_LIBRARY_FAST_COMPILE),
the levels taking turns round after round, so that a drift of the machine reaches every level alike. A figure
is the time of one call replayed in a CUDA graph (10 calls per graph, the median of 20 replays), so the
kernel's own time, not the per-call path, is what is compared.

    python -m kjit.bench.fast_compile_ab [--levels off,min,mid] [--rounds 2] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from . import stats

ROW = 4096
ROWS = (256, 4096, 32768)  # rows of 4096: 4, 64 and 512 MiB of float32
DTYPES = ("float32", "bfloat16")
CALLS_PER_GRAPH = 10
REPLAYS = 20


def _cases(torch, dt, rows):
    """[(name, fn)]: each library kernel family a model calls most, its forward and backward called directly."""
    import kjit
    from kjit import ops

    x = torch.randn(rows, ROW, device="cuda", dtype=dt)
    g = torch.randn_like(x)
    w = torch.randn(ROW, device="cuda", dtype=dt)
    b = torch.randn(ROW, device="cuda", dtype=dt)
    y_sm = ops.softmax(x, -1)
    y_lsm = ops.log_softmax(x, -1)
    flat = x.view(-1)
    silu_mul = kjit.elementwise("x / (1.0f + expf(-x)) * y", ["x", "y"], name="ab_silu_mul")
    return [
        ("softmax forward", lambda: ops.softmax(x, -1)),
        ("softmax backward", lambda: ops.softmax_backward(g, y_sm)),
        ("log_softmax forward", lambda: ops.log_softmax(x, -1)),
        ("log_softmax backward", lambda: ops.log_softmax_backward(g, y_lsm)),
        ("layer_norm forward", lambda: ops.layer_norm(x, w, b)),
        ("layer_norm backward", lambda: ops.layer_norm_backward(g, x, w, True, 1e-5)),
        ("rms_norm forward", lambda: ops.rms_norm(x, w)),
        ("rms_norm backward", lambda: ops.rms_norm_backward(g, x, w, False, 1e-6)),
        ("sum(dim=-1)", lambda: ops.sum(x, -1)),
        ("sum(dim=0)", lambda: ops.sum(x, 0)),
        ("x + 1 (add_constant)", lambda: ops.add_constant(flat, 1.0)),
        ("gelu forward", lambda: ops.gelu(x)),
        ("gelu backward", lambda: ops.gelu_backward(g, x)),
        ("elementwise silu(x) * y", lambda: silu_mul(x, g)),
    ]


def _child() -> None:
    """One level's process: prints one JSON line per case."""
    import torch

    for dt_name in DTYPES:
        dt = getattr(torch, dt_name)
        for rows in ROWS:
            for name, fn in _cases(torch, dt, rows):
                fn()  # compiles (outside the capture)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    fn()
                    with torch.cuda.graph(graph, stream=stream):
                        for _ in range(CALLS_PER_GRAPH):
                            fn()
                torch.cuda.synchronize()
                per_replay_ms = stats.gpu_ms(graph.replay, warmup=0, reps=REPLAYS, inner=1)["median"]
                print(
                    json.dumps(
                        {"case": name, "dtype": dt_name, "rows": rows, "us": per_replay_ms * 1e3 / CALLS_PER_GRAPH}
                    ),
                    flush=True,
                )
                del graph


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child()
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="off,min,mid")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="", help="write the results as JSON here too")
    args = ap.parse_args()
    levels = args.levels.split(",")
    import torch

    runs = {lvl: [] for lvl in levels}
    for _ in range(args.rounds):
        for lvl in levels:
            with tempfile.TemporaryDirectory(prefix="kjit-ab-") as cache:
                env = dict(os.environ, KJIT_LIBRARY_FAST_COMPILE=lvl, KJIT_CACHE_DIR=cache)
                p = subprocess.run(
                    [sys.executable, "-m", "kjit.bench.fast_compile_ab", "--child"],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                if p.returncode != 0:
                    sys.exit(f"level {lvl}: the child failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
                runs[lvl].append([json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")])
    # Per case: the best of the rounds at each level (the least disturbed replay of each).
    table = {}
    for lvl, rounds in runs.items():
        for rows in rounds:
            for r in rows:
                k = (r["case"], r["dtype"], r["rows"])
                table.setdefault(k, {}).setdefault(lvl, []).append(r["us"])
    gpu = torch.cuda.get_device_name()
    out = {"gpu": gpu, "levels": levels, "rounds": args.rounds, "rows_of": ROW, "results": []}
    print(
        f"# KJIT_LIBRARY_FAST_COMPILE A/B on {gpu}: us per call (CUDA graph), best of {args.rounds} rounds; "
        f"ratio = level / off"
    )
    print(
        "| case | dtype | rows x 4096 | "
        + " | ".join(f"{lvl} us" for lvl in levels)
        + " | "
        + " | ".join(f"{lvl} / off" for lvl in levels if lvl != "off")
        + " |"
    )
    print("|---|---|---|" + "---|" * (2 * len(levels) - 1))
    for (case, dt, rows), per in table.items():
        best = {lvl: min(v) for lvl, v in per.items()}
        ratios = {lvl: best[lvl] / best["off"] for lvl in levels if lvl != "off" and "off" in best}
        out["results"].append({"case": case, "dtype": dt, "rows": rows, "us": best, "ratio_to_off": ratios})
        print(
            f"| {case} | {dt} | {rows} | "
            + " | ".join(f"{best[lvl]:.1f}" for lvl in levels)
            + " | "
            + " | ".join(f"{ratios[lvl]:.3f}" for lvl in ratios)
            + " |"
        )
    for lvl in levels:
        if lvl == "off":
            continue
        rs = [r["ratio_to_off"][lvl] for r in out["results"]]
        print(f"\n{lvl} / off: worst {max(rs):.3f}, best {min(rs):.3f}, median {statistics.median(rs):.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
