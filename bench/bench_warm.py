"""`kjit warm` scaling: the same manifest of N specializations warmed into an empty cache with
-j 1 and with more threads (default: 1, 2 and every CPU). Not a test; needs no GPU.

    python bench/bench_warm.py [--count 200] [--arch sm_90] [--jobs 1,2,16] [--cli build/kjit] [--json out.json]

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


def builtin_digest(cli: list[str]) -> str:
    """The recorded digest of the built-in rgb_to_gray, as the timed kjit sees it (KJIT_RECORD)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, KJIT_CACHE_DIR=os.path.join(d, "c"), KJIT_RECORD=os.path.join(d, "m.json"))
        subprocess.run(
            [
                *cli,
                "compile",
                "rgb_to_gray",
                "--kernel",
                "rgb_to_gray",
                "--param",
                "H=1",
                "--param",
                "W=1",
                "--arch",
                "sm_90",
            ],
            env=env,
            capture_output=True,
            check=True,
        )
        with open(os.path.join(d, "m.json")) as f:  # JSON lines: the version, then the record
            return json.loads(f.read().splitlines()[1])["record"]["template"]["digest"]


def manifest(count: int, digest: str) -> dict:
    records = []
    for i in range(count):
        records.append(
            {
                "template": {"builtin": True, "name": "rgb_to_gray", "digest": digest},
                "kernel": "rgb_to_gray",
                "args": [
                    {"name": "H", "kind": "integer", "value": 64 + i},
                    {"name": "W", "kind": "integer", "value": 96 + 2 * i},
                ],
                "options": {
                    "std": "c++20",
                    "fast_math": False,
                    "line_info": False,
                    "device_debug": False,
                    "max_registers": None,
                    "defines": {},
                },
            }
        )
    return {"kjit_manifest": 1, "records": records}


def warm(cli: list[str], path: str, arch: str, jobs: int) -> float:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, KJIT_CACHE_DIR=cache)
        env.pop("KJIT_CACHE_MODE", None)
        t = time.perf_counter()
        r = subprocess.run(
            [*cli, "warm", path, "--arch", arch, "-j", str(jobs)], env=env, capture_output=True, text=True
        )
        seconds = time.perf_counter() - t
        if r.returncode != 0:
            raise SystemExit(f"kjit warm -j {jobs} failed:\n{r.stdout}\n{r.stderr}")
        return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--jobs", default=f"1,2,{os.cpu_count()}")
    ap.add_argument("--cli", help="the kjit command to time (default: python -m kjit; e.g. build/kjit)")
    ap.add_argument("--json")
    args = ap.parse_args()
    cli = [args.cli] if args.cli else [sys.executable, "-m", "kjit"]
    # The start-up of the command alone (for python -m kjit: Python, torch and kjit imports).
    t = time.perf_counter()
    subprocess.run([*cli, "--version"], capture_output=True, check=True)
    startup = time.perf_counter() - t
    jobs = sorted({int(j) for j in args.jobs.split(",")})
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "manifest.json")
        with open(path, "w") as f:
            json.dump(manifest(args.count, builtin_digest(cli)), f)
        seconds = {j: warm(cli, path, args.arch, j) for j in jobs}
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "specializations": args.count,
        "arch": args.arch,
        "cli": " ".join(cli),
        "startup_seconds": startup,
        "seconds": seconds,
        "speedup_vs_j1": {j: seconds[min(jobs)] / s for j, s in seconds.items()},
        "speedup_vs_j1_without_startup": {
            j: (seconds[min(jobs)] - startup) / max(s - startup, 1e-9) for j, s in seconds.items()
        },
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
