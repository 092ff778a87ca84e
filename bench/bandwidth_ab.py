"""Bandwidth of one op family of bench/bandwidth.py at a few sizes, as JSON lines: the A/B of a template
change. Run it once per template folder (KJIT_TEMPLATES_DIR=<the old templates> for A, the installed ones
for B), each with its own empty KJIT_CACHE_DIR, in one session on one GPU; compare kjit's GB/s and its
ratio to the device copy measured beside it.

    python -m kjit.bench.bandwidth_ab --family "x + 1 (add_constant)" --label after
"""

from __future__ import annotations

import argparse
import json

from . import bandwidth, machine

MIB = 1 << 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", required=True, help="an op family of bench/bandwidth.py")
    ap.add_argument("--label", default="", help="a name for this side of the A/B, copied into each line")
    ap.add_argument("--mib", default="16,256,1024", help="input sizes in MiB (comma-separated)")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    import torch

    ops = bandwidth._ops()
    if args.family not in ops:
        ap.error(f"--family: {args.family!r} is not one of {', '.join(ops)}")
    op = ops[args.family]
    versions = machine.peers()
    for dt_name in args.dtypes.split(","):
        dt = getattr(torch, dt_name)
        elem = torch.empty((), dtype=dt).element_size()
        for mib in (int(m) for m in args.mib.split(",")):
            shape = bandwidth.sweep_shape(op["kind"], mib * MIB, elem)
            row = bandwidth.measure(
                args.family, op, dt, shape, warmup=10, reps=args.reps, compile_=False, peer_versions=versions
            )
            row["label"] = args.label
            row["gpu"] = torch.cuda.get_device_name()
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
