"""Every tile configuration of kjit's GEMM timed at the matmul section's shapes: the measurements behind the
planner's heuristic (python/src/ops/runtime/gemm.cpp).

Runs the shapes in a child process with KJIT_TUNE=1 and KJIT_VERBOSE=1 and an empty cache, so that the op
times each candidate once per key (gemm.cpp's time_candidates: 5 back-to-back calls after one, L2-warm
operands) and logs "timed M=.. N=.. K=..: name us, ..."; writes a JSON and a Markdown table of those
times, the fastest per shape and its margin over the default (the heuristic's pick, also logged).

    python -m kjit.bench.gemm_tiles [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from .matmul import M_FUSED, M_PLAIN, NK

CHILD = r"""
import sys, json, torch
from kjit import ops
cases = json.loads(sys.argv[1])
for kind, m, n, k in cases:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if kind == "swiglu":
        w = torch.randn(2 * n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        print("case", kind, m, n, k, flush=True, file=sys.stderr)
        ops.linear_swiglu(x, w)
    else:
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        print("case", kind, m, n, k, flush=True, file=sys.stderr)
        ops.linear(x, w, b, activation="gelu") if kind == "gelu" else ops.linear(x, w)
    torch.cuda.synchronize()
"""

TIMED = re.compile(r"timed M=(\d+) N=(\d+) K=(\d+) \(default ([^)]*)\): (.*)$")
CASE = re.compile(r"^case (\w+) (\d+) (\d+) (\d+)$")


def cases(quick: bool) -> list[tuple]:
    big = [m for m in M_PLAIN if m >= 128]
    nk = NK[:2] if quick else NK
    out = [("plain", m, n, k) for m in big for n, k in nk]
    out += [(kind, m, n, k) for kind in ("gelu", "swiglu") for m in M_FUSED if m >= 128 for n, k in nk]
    return out


def parse(stderr: str) -> list[dict]:
    points, kind = [], None
    for line in stderr.splitlines():
        c = CASE.match(line.strip())
        if c:
            kind = c.group(1)
            continue
        t = TIMED.search(line)
        if not t:
            continue
        times = {}
        for item in t.group(5).split(", "):
            name, us, _ = item.rsplit(" ", 2)
            times[name] = float(us)
        best = min(times, key=times.get)
        points.append(
            dict(
                kind=kind,
                m=int(t.group(1)),
                n=int(t.group(2)),
                k=int(t.group(3)),
                us=times,
                fastest=best,
                default=t.group(4),
                default_over_fastest=round(times.get(t.group(4), float("nan")) / times[best], 3),
            )
        )
    return points


def markdown(points: list[dict], gpu: str) -> str:
    names = sorted({n for p in points for n in p["us"]})
    lines = [
        f"# kjit GEMM tile configurations: {gpu}",
        "",
        "Microseconds per call (KJIT_TUNE's timing); **bold**: the fastest.",
        "",
    ]
    lines.append("| kind | M | N | K | " + " | ".join(names) + " | default | default / fastest |")
    lines.append("|---|---|---|---|" + "---|" * (len(names) + 2))
    for p in points:
        cells = []
        for n in names:
            v = p["us"].get(n)
            cells.append("" if v is None else (f"**{v:.1f}**" if n == p["fastest"] else f"{v:.1f}"))
        lines.append(
            f"| {p['kind']} | {p['m']} | {p['n']} | {p['k']} | "
            + " | ".join(cells)
            + f" | {p['default']} | {p['default_over_fastest']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, KJIT_TUNE="1", KJIT_VERBOSE="1", KJIT_CACHE_DIR=cache)
        env.pop("KJIT_CACHE_MODE", None)
        r = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(cases(args.quick))], env=env, capture_output=True, text=True
        )
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-4000:])
        return 1
    points = parse(r.stderr)
    import torch

    gpu = torch.cuda.get_device_name()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gemm_tiles.json"), "w") as f:
        json.dump({"gpu": gpu, "points": points}, f, indent=1)
    md = markdown(points, gpu)
    with open(os.path.join(args.out, "gemm_tiles.md"), "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
