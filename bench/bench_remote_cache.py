"""The remote cache tier on Redis (issue 16): a cold start of many machines, without and with it, and the
cost of a remote hit against a disk hit. CPU only, compile-only (no GPU needed); not a test.

    python bench/bench_remote_cache.py [--procs 16] [--keys 50] [--arch sm_90] [--out DIR]

What it measures (each "machine" is one process with its own, empty KJIT_CACHE_DIR, all started at once,
each running `kjit warm MANIFEST --arch sm_90 -j 1` over the same manifest of `keys` specializations of the
built-in rgb_to_gray, one per image size, as bench_warm.py builds it):

  (a) no remote tier: every machine compiles every key (procs x keys compiles);
  (b) one Redis (a fresh redis-server started here, no persistence), empty: the machines share the compiles
      through the remote tier's leases (ideally `keys` compiles in total), the others fetch;
  (c) the same Redis, now holding every entry, and fresh machines: everything is fetched, nothing compiled.
For each: the wall time (first start to last exit), the sum of "compiled" over the warm summaries, the sum of
"fetched" / "pushed" of their "remote cache:" lines, and how many processes failed.

Then the cost of one hit, measured inside one process around `KernelFamily.specialize` (key computation,
lookup, and for a remote hit the Redis GET, the seal check and the write to the local disk), median over
`keys` distinct keys, each looked up once in a fresh process (no memory hit):
  remote hit: an empty local cache, the entry in Redis;      disk hit: the same entries on the local disk.
On localhost a remote hit costs more in the durable write of the entry onto the local disk (atomic_file.cpp:
fsync of the file and of its directory, the same write a compile does) than in Redis's round trip.
The same from the command line: one `kjit warm -j 1` over the manifest with an empty local cache while
Redis holds every entry, against the same warm with every entry on the disk (the difference per entry).
And `kjit prefetch` of the whole manifest into an empty local cache (one pipelined round trip), per entry,
with the process start-up (`kjit --version`) taken off.

Nothing here waits forever: every subprocess has a timeout (--timeout), and a phase that fails is reported
as failed (with the error) while the others still run. Writes <date>-cpu-<N>cores-bench_remote_cache.json
and .md to --out (default: print only).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))  # redis_server.py: the tests' redis-server helper
from redis_server import RedisServer, server_version, unavailable_reason  # noqa: E402

SECRET = "bench-remote-cache-secret-0123456789"
HIDE_TORCH = "import sys; sys.modules['torch'] = None"
CLI = HIDE_TORCH + "; from kjit.__main__ import main; sys.exit(main(sys.argv[1:]))"
SUMMARY = re.compile(r"(\d+) jobs? \([^)]*\): (\d+) compiled, (\d+) already cached, (\d+) failed")


class Failed(Exception):
    pass


# --- the machine --------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(cli: list[str]) -> dict:
    try:
        kjit = subprocess.run([*cli, "--version"], capture_output=True, text=True, timeout=120).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        kjit = f"unknown: {e}"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "redis_server": server_version(),
        "kjit": kjit,
        "cli": " ".join(cli) if cli[:2] != [sys.executable, "-c"] else f"{sys.executable} -c <kjit CLI, torch hidden>",
    }


# --- processes ----------------------------------------------------------------------------------------

_TORCH_FREE: list[bool] = []


def torch_free() -> bool:
    """Whether kjit imports with torch hidden (sys.modules['torch'] = None): a quick start-up."""
    if not _TORCH_FREE:
        try:
            ok = (
                subprocess.run(
                    [sys.executable, "-c", HIDE_TORCH + "; import kjit"], capture_output=True, timeout=120
                ).returncode
                == 0
            )
        except subprocess.TimeoutExpired:
            ok = False
        _TORCH_FREE.append(ok)
    return _TORCH_FREE[0]


def python_prelude() -> str:
    """The first line of the Python snippets run here: torch hidden when kjit works without it."""
    return HIDE_TORCH if torch_free() else "import sys"


def light_cli() -> list[str]:
    """`python -m kjit` with torch hidden when kjit allows it, else `python -m kjit`."""
    return [sys.executable, "-c", CLI] if torch_free() else [sys.executable, "-m", "kjit"]


def clean_env(**settings) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KJIT_")}
    env.update({k: str(v) for k, v in settings.items() if v is not None})
    return env


def run_one(argv, env, timeout) -> dict:
    t = time.perf_counter()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise Failed(
            f"{' '.join(map(str, argv[-6:]))} did not finish within {timeout} s; stderr: {(e.stderr or b'')[-2000:]!r}"
        ) from None
    seconds = time.perf_counter() - t
    if p.returncode != 0:
        raise Failed(f"{' '.join(map(str, argv[-6:]))} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return {"seconds": seconds, "stdout": p.stdout, "stderr": p.stderr}


def parse_warm(stdout: str, stderr: str) -> dict:
    out = {}
    m = SUMMARY.search(stdout)
    if m:
        out.update(zip(("jobs", "compiled", "cached", "failed"), map(int, m.groups())))
    m = re.search(r"^remote cache:.*$", stdout + "\n" + stderr, re.M)
    if m:
        for word in ("fetched", "pushed"):
            n = re.search(rf"(\d+) {word}", m.group(0))
            if n:
                out[word] = int(n.group(1))
    return out


def cold_start(cli, manifest, arch, procs, workdir, remote_url, timeout) -> dict:
    """`procs` warms at once, each with its own empty cache; their totals and the wall time."""
    workdir.mkdir(parents=True)
    running = []
    t0 = time.perf_counter()
    for i in range(procs):
        cache = workdir / f"machine-{i:02d}"
        env = clean_env(
            KJIT_CACHE_DIR=cache, KJIT_REMOTE_CACHE=remote_url, KJIT_REMOTE_CACHE_SECRET=SECRET if remote_url else None
        )
        out, err = open(workdir / f"{i}.out", "w+"), open(workdir / f"{i}.err", "w+")
        p = subprocess.Popen(
            [*cli, "warm", str(manifest), "--arch", arch, "-j", "1"], env=env, stdout=out, stderr=err, text=True
        )
        running.append((p, out, err))
    deadline = t0 + timeout
    ends: dict[int, float] = {}
    while len(ends) < procs and time.perf_counter() < deadline:
        for i, (p, _, _) in enumerate(running):
            if i not in ends and p.poll() is not None:
                ends[i] = time.perf_counter()
        time.sleep(0.01)
    for p, _, _ in running:
        if p.poll() is None:
            p.kill()
            p.wait()
    per, problems = [], []
    for i, (p, out, err) in enumerate(running):
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        out.close()
        err.close()
        parsed = parse_warm(stdout, stderr)
        if i not in ends:
            problems.append(f"process {i}: still running after {timeout} s (killed)")
        elif p.returncode != 0 or "compiled" not in parsed or parsed.get("failed"):
            problems.append(f"process {i}: exit {p.returncode}: {stdout[-800:]} {stderr[-800:]}")
        per.append({"seconds": round(ends.get(i, deadline) - t0, 3), **parsed})
    wall = (max(ends.values()) if ends else deadline) - t0
    result = {
        "status": "ok" if not problems else "failed",
        "wall_seconds": round(wall, 3),
        "processes": procs,
        "compiled": sum(r.get("compiled", 0) for r in per),
        "already_cached": sum(r.get("cached", 0) for r in per),
        "fetched": sum(r.get("fetched", 0) for r in per),
        "pushed": sum(r.get("pushed", 0) for r in per),
        "failed_processes": len(problems),
        "slowest_process_seconds": max(r["seconds"] for r in per),
        "median_process_seconds": statistics.median(r["seconds"] for r in per),
    }
    if problems:
        result["errors"] = problems[:5]
    return result


# --- the manifest -------------------------------------------------------------------------------------


def record_manifest(cli, path: pathlib.Path, keys: int, arch: str, timeout: float) -> None:
    """`keys` specializations rgb_to_gray(H=64+i, W=96+2i), recorded with KJIT_RECORD (one process)."""
    code = f"""{python_prelude()}
import kjit
k = kjit.Template.builtin("rgb_to_gray").kernel("rgb_to_gray")
for i in range({keys}):
    k.specialize(H=64 + i, W=96 + 2 * i, arch={arch!r})
"""
    with tempfile.TemporaryDirectory() as d:
        run_one([sys.executable, "-c", code], clean_env(KJIT_CACHE_DIR=os.path.join(d, "c"), KJIT_RECORD=path), timeout)
    records = sum(1 for line in path.read_text().splitlines() if '"record"' in line)
    if records != keys:
        raise Failed(f"the recorded manifest has {records} records, expected {keys}")


HIT_TIMING = """{hide}
import json, statistics, time, kjit
k = kjit.Template.builtin("rgb_to_gray").kernel("rgb_to_gray")
k.specialize(H=1, W=1, arch={arch!r})  # the first call's one-time costs (NVRTC, template load), not timed
ms = []
for i in range({keys}):
    t = time.perf_counter()
    k.specialize(H=64 + i, W=96 + 2 * i, arch={arch!r})
    ms.append((time.perf_counter() - t) * 1000)
s = kjit.stats()
print(json.dumps({{"ms": ms, "compiles": s["compiles"], "disk_hits": s["disk_hits"],
                  "remote_hits": s.get("remote_hits")}}))
"""


def hit_cost(cli, arch, keys, workdir, remote_url, timeout) -> dict:
    """Median ms of a remote hit (empty local cache) and of a disk hit (the same cache afterwards)."""
    code = HIT_TIMING.format(hide=python_prelude(), arch=arch, keys=keys)
    cache = workdir / "hits"
    out = {}
    for name, env in (
        ("remote_hit", clean_env(KJIT_CACHE_DIR=cache, KJIT_REMOTE_CACHE=remote_url, KJIT_REMOTE_CACHE_SECRET=SECRET)),
        ("disk_hit", clean_env(KJIT_CACHE_DIR=cache, KJIT_REMOTE_CACHE=remote_url, KJIT_REMOTE_CACHE_SECRET=SECRET)),
        ("disk_hit_no_remote_tier", clean_env(KJIT_CACHE_DIR=cache)),
    ):
        r = json.loads(run_one([sys.executable, "-c", code], env, timeout)["stdout"].strip().splitlines()[-1])
        # The untimed first call (H=1, W=1) is compiled in the first run, a disk hit afterwards.
        out[name] = {
            "median_ms": round(statistics.median(r["ms"]), 3),
            "mean_ms": round(statistics.mean(r["ms"]), 3),
            "min_ms": round(min(r["ms"]), 3),
            "max_ms": round(max(r["ms"]), 3),
            "compiles": r["compiles"],
            "disk_hits": r["disk_hits"],
            "remote_hits": r["remote_hits"],
        }
    expected = {"remote_hit": keys, "disk_hit": 0, "disk_hit_no_remote_tier": None}
    for name, want in expected.items():
        got = out[name]["remote_hits"]
        if want is not None and got != want:
            out[name]["warning"] = f"remote_hits {got}, expected {want}: not the kind of hit it is named after"
    return out


def warm_hit_cost(cli, manifest, arch, keys, workdir, remote_url, timeout, repeats=3) -> dict:
    """One `kjit warm -j 1` process over the manifest: with an empty local cache while Redis holds every entry
    (each job a remote hit: GET, seal check, write to disk) against the same warm with every entry on the local
    disk (each job a disk hit); the difference per entry is the extra cost of a remote hit, start-up excluded.
    Best of `repeats` runs each (a fresh empty cache per remote run)."""
    fetch, disk = [], []
    for i in range(repeats):
        env = clean_env(
            KJIT_CACHE_DIR=workdir / f"warm-hits-{i}", KJIT_REMOTE_CACHE=remote_url, KJIT_REMOTE_CACHE_SECRET=SECRET
        )
        argv = [*cli, "warm", str(manifest), "--arch", arch, "-j", "1"]
        r = run_one(argv, env, timeout)
        got = parse_warm(r["stdout"], r["stderr"])
        if got.get("fetched") != keys:
            raise Failed(f"the warm into an empty cache fetched {got.get('fetched')} of {keys}: {r['stdout'][-500:]}")
        fetch.append(r["seconds"])
        disk.append(run_one(argv, env, timeout)["seconds"])
    return {
        "warm_all_fetched_seconds": round(min(fetch), 4),
        "warm_all_on_disk_seconds": round(min(disk), 4),
        "remote_minus_disk_ms_per_entry": round((min(fetch) - min(disk)) * 1000 / keys, 3),
    }


def prefetch_cost(cli, manifest, arch, keys, workdir, remote_url, timeout) -> dict:
    env = clean_env(KJIT_CACHE_DIR=workdir / "prefetch", KJIT_REMOTE_CACHE=remote_url, KJIT_REMOTE_CACHE_SECRET=SECRET)
    startup = min(run_one([*cli, "--version"], env, timeout)["seconds"] for _ in range(3))
    r = run_one([*cli, "prefetch", str(manifest), "--arch", arch], env, timeout)
    m = re.search(r"prefetched (\d+) of (\d+)", r["stdout"] + r["stderr"])
    line = next((ln for ln in (r["stdout"] + r["stderr"]).splitlines() if "prefetched" in ln), "")
    fetched = int(m.group(1)) if m else None
    return {
        "seconds": round(r["seconds"], 4),
        "startup_seconds": round(startup, 4),
        "fetched": fetched,
        "line": line.strip(),
        "ms_per_entry": round((r["seconds"] - startup) * 1000 / fetched, 3) if fetched else None,
    }


# --- report -------------------------------------------------------------------------------------------


def short(text: str, limit: int = 300) -> str:
    """One line of at most `limit` characters (Markdown cells and notes)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [
        f"# kjit remote cache (Redis): cold start of {result['procs']} machines x {result['keys']} keys",
        "",
        f"{m['date']}, {m['cpus']} CPUs ({m['cpu_model']}), redis-server {m['redis_server']}, {m['kjit']}, "
        f"compile-only for {result['arch']}; each machine: one process, its own empty local cache, "
        "`kjit warm MANIFEST -j 1`, all started at once.",
        "",
        "| phase | status | wall s | compiles (sum) | fetched (sum) | pushed (sum) | slowest process s | "
        "failed processes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = {
        "no_remote": "(a) no remote tier",
        "redis_cold": "(b) one Redis, empty",
        "redis_warm": "(c) one Redis holding every entry",
    }
    notes: list[str] = []
    for key, label in names.items():
        p = result["phases"].get(key)
        if p is None:
            continue
        if p.get("status") != "ok" and "wall_seconds" not in p:
            lines.append(f"| {label} | failed: {p.get('error', '')[:120]} | | | | | | |")
            continue
        lines.append(
            f"| {label} | {p['status']} | {p['wall_seconds']:.2f} | {p['compiled']} | {p['fetched']} | "
            f"{p['pushed']} | {p['slowest_process_seconds']:.2f} | {p['failed_processes']} |"
        )
        notes += [f"{label}: {w}" for w in p.get("warnings", []) + p.get("errors", [])[:2]]
    if notes:
        lines += [""] + [f"- {short(n)}" for n in notes]
    if "error" in result:
        lines += ["", f"The run failed: {short(result['error'])}"]
    h = result.get("hit_cost", {})
    lines += [
        "",
        "Cost of one hit, inside one process (`specialize`, median over "
        f"{result['keys']} distinct keys, a fresh process per row: no memory hits):",
        "",
    ]
    if "error" in h:
        lines.append(f"failed: {short(h['error'])}")
    else:
        lines += ["| hit | median ms | mean ms | min ms | max ms |", "|---|---|---|---|---|"]
        for name, label in (
            ("remote_hit", "Redis (local cache empty; includes the write to disk)"),
            ("disk_hit", "local disk (remote tier configured)"),
            ("disk_hit_no_remote_tier", "local disk (no remote tier)"),
        ):
            r = h.get(name)
            if r:
                lines.append(
                    f"| {label} | {r['median_ms']:.3f} | {r['mean_ms']:.3f} | {r['min_ms']:.3f} | {r['max_ms']:.3f} |"
                )
        warnings = [f"- {name}: {h[name]['warning']}" for name in h if h[name].get("warning")]
        lines += [""] + warnings if warnings else []
    w = result.get("warm_hit_cost", {})
    if w:
        lines += [""]
        if "error" in w:
            lines.append(f"warm, remote against disk hits: failed: {short(w['error'])}")
        else:
            lines.append(
                f"One `kjit warm -j 1` of the {result['keys']} keys: {w['warm_all_fetched_seconds']:.3f} s "
                f"with an empty local cache (every entry fetched from Redis) against "
                f"{w['warm_all_on_disk_seconds']:.3f} s with every entry on the local disk (best of 3 "
                f"each): a remote hit costs {w['remote_minus_disk_ms_per_entry']} ms more than a disk hit."
            )
    p = result.get("prefetch", {})
    if p:
        lines += [""]
        if "error" in p:
            lines.append(f"prefetch: failed: {short(p['error'])}")
        else:
            lines.append(
                f"`kjit prefetch` of the manifest into an empty local cache: {p['seconds']:.3f} s "
                f"({p['startup_seconds']:.3f} s of it process start-up), {p['fetched']} entries, "
                f"{p['ms_per_entry']} ms per entry. Its line: `{p['line']}`"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=16, help="machines (processes) per cold start (default 16)")
    ap.add_argument("--keys", type=int, default=50, help="specializations in the manifest (default 50)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--out", help="directory for the JSON and Markdown results (default: print only)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed to each subprocess / phase")
    ap.add_argument("--cli", help="the kjit command (default: python -m kjit with torch hidden; e.g. build/kjit)")
    ap.add_argument("--only", default="a,b,c,hits", help="phases to run: a,b,c,hits (default all)")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))

    reason = unavailable_reason()
    if reason:
        print(f"bench_remote_cache: {reason}", file=sys.stderr)
        return 2
    cli = [args.cli] if args.cli else light_cli()
    result = {
        "bench": "bench_remote_cache",
        "procs": args.procs,
        "keys": args.keys,
        "arch": args.arch,
        "machine": machine(cli),
        "phases": {},
    }

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    work = pathlib.Path(tempfile.mkdtemp(prefix="kjit-bench-remote-"))
    server = None
    try:
        manifest = work / "manifest.json"
        log(f"recording {args.keys} specializations into {manifest}")
        record_manifest(cli, manifest, args.keys, args.arch, args.timeout)
        server = RedisServer(work / "redis").start()
        url = server.url
        phases = [("a", "no_remote", None), ("b", "redis_cold", url), ("c", "redis_warm", url)]
        for letter, name, remote in phases:
            if letter not in only:
                continue
            log(f"phase {name}: {args.procs} processes x {args.keys} keys")
            try:
                result["phases"][name] = cold_start(
                    cli, manifest, args.arch, args.procs, work / name, remote, args.timeout
                )
            except Exception as e:  # noqa: BLE001  (reported, the other phases still run)
                result["phases"][name] = {
                    "status": "failed",
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc(),
                }
            phase = result["phases"][name]
            if phase.get("status") == "ok" and remote:
                want = args.keys if name == "redis_cold" else 0
                if phase["compiled"] != want:
                    phase.setdefault("warnings", []).append(
                        f"{phase['compiled']} compiles in total, expected {want} with the remote tier"
                    )
                if phase["fetched"] + phase["pushed"] == 0:
                    phase.setdefault("warnings", []).append(
                        "nothing fetched or pushed: is the remote tier on (a 'remote cache:' line in warm's output)?"
                    )
            log(f"  {json.dumps({k: v for k, v in phase.items() if k != 'traceback'})}")
        if "hits" in only:
            if "b" not in only:  # the entries must be in Redis: one warm puts them there
                run_one(
                    [*cli, "warm", str(manifest), "--arch", args.arch],
                    clean_env(KJIT_CACHE_DIR=work / "seed", KJIT_REMOTE_CACHE=url, KJIT_REMOTE_CACHE_SECRET=SECRET),
                    args.timeout,
                )
            for name, fn in (
                ("hit_cost", lambda: hit_cost(cli, args.arch, args.keys, work, url, args.timeout)),
                ("warm_hit_cost", lambda: warm_hit_cost(cli, manifest, args.arch, args.keys, work, url, args.timeout)),
                ("prefetch", lambda: prefetch_cost(cli, manifest, args.arch, args.keys, work, url, args.timeout)),
            ):
                log(f"{name}")
                try:
                    result[name] = fn()
                except Exception as e:  # noqa: BLE001
                    result[name] = {"error": f"{type(e).__name__}: {e}"}
                log(f"  {json.dumps(result[name])}")
    except Exception as e:  # noqa: BLE001
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)

    md = markdown(result)
    text = json.dumps(result, indent=2)
    print(md)
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"{result['machine']['date'][:10]}-cpu-{os.cpu_count()}cores-bench_remote_cache"
        (out / f"{stem}.json").write_text(text + "\n")
        (out / f"{stem}.md").write_text(md)
        print(f"wrote {out / stem}.json and .md", file=sys.stderr)
    failed = (
        "error" in result
        or any(p.get("status") != "ok" for p in result["phases"].values())
        or any("error" in result.get(k, {}) for k in ("hit_cost", "warm_hit_cost", "prefetch"))
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
