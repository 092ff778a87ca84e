"""`kjit warm` scaling: the same manifest of N specializations warmed into an empty cache with
-j 1 and with more threads (default: 1, 2 and every CPU). Not a test; needs no GPU.

    python bench/bench_warm.py [--count 200] [--arch sm_90] [--jobs 1,2,16] [--json out.json]

The manifest holds `count` distinct specializations of the built-in rgb_to_gray (one per image size),
written directly in the manifest schema (records without an id are accepted).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time


def manifest(count: int) -> dict:
    import kjit

    digest = kjit.Template.builtin("rgb_to_gray").digest
    records = []
    for i in range(count):
        records.append({
            "template": {"builtin": True, "name": "rgb_to_gray", "digest": digest},
            "kernel": "rgb_to_gray",
            "args": [{"name": "H", "kind": "integer", "value": 64 + i},
                     {"name": "W", "kind": "integer", "value": 96 + 2 * i}],
            "options": {"std": "c++20", "fast_math": False, "line_info": False, "device_debug": False,
                        "max_registers": None, "defines": {}},
        })
    return {"kjit_manifest": 1, "records": records}


def warm(path: str, arch: str, jobs: int) -> float:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, KJIT_CACHE_DIR=cache)
        env.pop("KJIT_CACHE_MODE", None)
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "kjit", "warm", path, "--arch", arch, "-j", str(jobs)],
                           env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t
        if r.returncode != 0:
            raise SystemExit(f"kjit warm -j {jobs} failed:\n{r.stdout}\n{r.stderr}")
        return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--jobs", default=f"1,2,{os.cpu_count()}")
    ap.add_argument("--json")
    args = ap.parse_args()
    jobs = sorted({int(j) for j in args.jobs.split(",")})
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "manifest.json")
        with open(path, "w") as f:
            json.dump(manifest(args.count), f)
        seconds = {j: warm(path, args.arch, j) for j in jobs}
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
        "specializations": args.count, "arch": args.arch,
        "seconds": seconds,
        "speedup_vs_j1": {j: seconds[min(jobs)] / s for j, s in seconds.items()},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
