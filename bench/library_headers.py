"""Kernels on CUDA's C++ libraries (issue 28): what their compiles cost, with NVRTC's precompiled header
(PCH) off and on.

The kernels are bench/library_kernels/*.cu (tests/python/test_header_library_kernels.py checks them): CUB's
BlockReduce, CUB's WarpReduce and BlockScan, thrust's tuples and function objects, libcu++ and a CuTe MMA
atom. CUB, thrust and CuTe name some of their headers through macros (`#include
__THRUST_DEVICE_SYSTEM_TAG_HEADER`); kjit learns those from NVRTC's failed passes and keeps them in the
header index. For each kernel, each setting of KJIT_PCH (off, on) and each repetition, in a cache
directory of its own (and an empty CUDA_CACHE_PATH), compile-only for one architecture
(`specialize(arch=...)`, no GPU needed):

  first             a new process, empty cache: Template.from_file, kernel() and the compile of
                    specialization A (the passes that learn the macro-computed includes included)
  second_spec       the same process: specialization B of the same template (another template
                    argument): where NVRTC's PCH can help
  warm_index_first  a new process on the same cache (the header index knows the learned includes):
                    from_file, kernel() and the compile of specialization C: the steady-state cost of a
                    new specialization's first compile

kjit reads its settings once per process, so every process gets its environment (KJIT_PCH among it)
before it starts. Each process first compiles a one-line kernel of another template (a new key every
time), off the clock: NVRTC's start-up (loading it and its builtins) is in none of the figures. Each
figure is the wall time from the start of the step to the kernel, with kjit.stats() (compile_ms: time
in NVRTC; phase_ms) beside it.

KJIT_PCH: `off` never uses NVRTC's PCH, `on` uses it for every template's in-process compiles, `auto`
(kjit's default) decides. A kjit that does not know the variable ignores it: the section records the
value it set, and what kjit reports about PCH where it reports anything (kjit.stats() or
kjit.cache_info() keys naming "pch"), and any warning the process printed.

KJIT_BENCH_LIBRARY_KERNELS=name,name limits the kernels (KERNELS' names); KJIT_BENCH_PROBE_TIMEOUT the
time limit of one process (default 600 s).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile

from . import stats
from .stats import error_text

ENV = "KJIT_PCH"
SETTINGS = ("off", "on")
STEPS = ("first", "second_spec", "warm_index_first")
STEP_TITLES = {"first": "first", "second_spec": "second spec", "warm_index_first": "warm-index first"}
DEFAULT_ARCH = "sm_90"
PROBE_TIMEOUT_S = float(os.environ.get("KJIT_BENCH_PROBE_TIMEOUT", "600"))
KERNELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "library_kernels")

# name -> file, kernel, kernel() options, whether it needs CUTLASS's include dir, specializations A, B, C.
KERNELS = {
    "cub_block_reduce": {
        "file": "cub_block_reduce.cu",
        "kernel": "block_sum",
        "options": {},
        "cutlass": False,
        "specs": ({"BLOCK": 256, "T": "float32"}, {"BLOCK": 128, "T": "float32"}, {"BLOCK": 512, "T": "float32"}),
    },
    "cub_warp_scan": {
        "file": "cub_warp_scan.cu",
        "kernel": "scan_plus_warp_sum",
        "options": {},
        "cutlass": False,
        "specs": ({"BLOCK": 128}, {"BLOCK": 256}, {"BLOCK": 64}),
    },
    "thrust": {
        "file": "thrust_functional.cu",
        "kernel": "max_plus",
        "options": {},
        "cutlass": False,
        "specs": ({"T": "float32"}, {"T": "float64"}, {"T": "int32"}),
    },
    "libcudacxx": {
        "file": "libcudacxx.cu",
        "kernel": "complex_norm_clamped",
        "options": {},
        "cutlass": False,
        # cuda::std::complex<int> does not compile under NVRTC (an ambiguous ::copysign): a float C.
        "specs": ({"T": "float32"}, {"T": "float64"}, {"T": "float32", "SCALE": 2}),
    },
    # CuTe's unannotated constexpr helpers need NVRTC's -default-device.
    "cute": {
        "file": "cute_mma.cu",
        "kernel": "mma_16x8x16",
        "options": {"default_device": True},
        "cutlass": True,
        "specs": ({"SCALE": 1}, {"SCALE": 2}, {"SCALE": 3}),
    },
}

MISSING_CUTLASS = "skipped: CuTe's headers are not installed (pip install nvidia-cutlass)"

# One process: NVRTC started off the clock, then the steps (each [name, params]) on one kernel family.
PROBE = r"""
import json, os, sys, time
args = json.loads(sys.argv[1])
import kjit
out = {"kjit": getattr(kjit, "__version__", None), "steps": {}}
t = time.perf_counter()
up = kjit.Template("template <int N> __global__ void kjit_bench_nvrtc_up(int* o) { o[0] = N; }\n",
                   name="kjit_bench_nvrtc_up.cu")
up.kernel("kjit_bench_nvrtc_up").specialize(arch=args["arch"], N=args["nonce"])
out["nvrtc_start_ms"] = (time.perf_counter() - t) * 1e3
family = None
for step, params in args["steps"]:
    kjit.reset_stats()
    t = time.perf_counter()
    try:
        if family is None:
            family = kjit.Template.from_file(args["file"], include_dirs=args["include"]).kernel(
                args["kernel"], **args["options"])
        k = family.specialize(arch=args["arch"], **params)
        ms = (time.perf_counter() - t) * 1e3
        s = kjit.stats()
        out["steps"][step] = {"ms": ms, "compile_ms": s["compile_ms"], "phase_ms": s["phase_ms"],
                              "compiles": s["compiles"], "origin": k.origin, "headers": s.get("headers")}
        pch = {key: v for key, v in s.items() if "pch" in key.lower()}  # what kjit counts of PCH, if anything
        if pch:
            out["steps"][step]["pch"] = pch
    except Exception as e:
        out["steps"][step] = {"error": (type(e).__name__ + ": " + str(e))[:2000]}
# Off the clock: the template's headers (count, and bytes of those found on the include path).
try:
    names = kjit.Template.from_file(args["file"], include_dirs=args["include"]).headers
    dirs = [os.path.dirname(args["file"])] + list(args["include"])
    try:
        dirs += list(kjit._core.toolkit().get("include_dirs") or [])
    except Exception:
        pass
    nbytes, found = 0, 0
    for n in names:
        for d in dirs:
            p = os.path.join(d, n)
            if os.path.isfile(p):
                nbytes += os.path.getsize(p); found += 1
                break
    out["headers"] = {"count": len(names), "bytes": nbytes, "found": found}
except Exception as e:
    out["headers"] = {"error": (type(e).__name__ + ": " + str(e))[:300]}
# What kjit says about PCH, where it says anything.
pch = {}
for what, get in (("stats", kjit.stats), ("cache_info", getattr(kjit, "cache_info", None))):
    try:
        d = get() if get else {}
        pch.update({what + "." + k: v for k, v in d.items() if "pch" in k.lower()})
    except Exception:
        pass
names = [n for n in dir(getattr(kjit, "_core", None)) if "pch" in n.lower()]
if names:
    pch["_core names"] = names
out["pch_reported"] = pch or None
print(json.dumps(out))
"""


class ProbeFailed(RuntimeError):
    pass


def cutlass_include_dir() -> str | None:
    """CUTLASS's include/ from the nvidia-cutlass package, as kjit finds it (kjit._cutlass_include_dir)."""
    import kjit

    return kjit._cutlass_include_dir()


def target_arch() -> str:
    """The local GPU's architecture (sm_XY), else DEFAULT_ARCH."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            return f"sm_{major}{minor}"
    except Exception:  # noqa: BLE001  (no torch or no device: compile for the default)
        pass
    return DEFAULT_ARCH


def selected(text: str | None) -> list[str]:
    """The kernels to run: all of KERNELS, or those named in `text` (comma-separated; unknown names raise)."""
    if not text or not text.strip():
        return list(KERNELS)
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [n for n in names if n not in KERNELS]
    if bad:
        raise ValueError(f"unknown library kernel(s) {bad}; choose from {','.join(KERNELS)}")
    return [n for n in KERNELS if n in names]


def plan(name: str, cutlass_dir: str | None) -> dict | str:
    """What one kernel's probes compile: {file, kernel, options, include, specs}, or "skipped: <why>"."""
    k = KERNELS[name]
    path = os.path.join(KERNELS_DIR, k["file"])
    if not os.path.isfile(path):
        return f"skipped: {path} is missing"
    if k["cutlass"] and not cutlass_dir:
        return MISSING_CUTLASS
    return {
        "file": path,
        "kernel": k["kernel"],
        "options": dict(k["options"]),
        "include": [cutlass_dir] if k["cutlass"] else [],
        "specs": dict(zip(STEPS, k["specs"])),
    }


def probe_env(base: dict, cache_dir: str, cuda_cache_dir: str, setting: str) -> dict:
    """The environment of one probe process: its cache, an empty NVRTC/driver cache, KJIT_PCH=setting, no
    compiler preload, and none of the settings that would send it elsewhere (a cache path, a remote tier,
    a cache mode, a manifest)."""
    env = dict(base, KJIT_CACHE_DIR=cache_dir, CUDA_CACHE_PATH=cuda_cache_dir, KJIT_PRELOAD_COMPILER="0")
    env[ENV] = setting
    for k in ("KJIT_CACHE_PATH", "KJIT_REMOTE_CACHE", "KJIT_CACHE_MODE", "KJIT_RECORD"):
        env.pop(k, None)
    return env


def probe(args: dict, env: dict, timeout_s: float = PROBE_TIMEOUT_S) -> dict:
    """Runs PROBE with `args` in a fresh process: its JSON result, with "stderr" (its last lines) when it
    printed any (a warning about KJIT_PCH, say). ProbeFailed with the reason when it fails, prints no
    result or runs past `timeout_s` (then it is killed)."""
    try:
        r = subprocess.run(
            [sys.executable, "-c", PROBE, json.dumps(args)], env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise ProbeFailed(f"timed out after {timeout_s:g} s (killed)") from None
    if r.returncode != 0:
        lines = (r.stderr.strip() or r.stdout.strip() or f"exit code {r.returncode}").splitlines()
        raise ProbeFailed(f"exit code {r.returncode}: {lines[-1][:300]}")
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ProbeFailed(f"printed no result (stdout: {r.stdout.strip()[-200:]!r})") from None
    if r.stderr.strip():
        out["stderr"] = "\n".join(r.stderr.strip().splitlines()[-5:])[-1000:]
    return out


def measure_once(p: dict, arch: str, setting: str, timeout_s: float = PROBE_TIMEOUT_S) -> dict:
    """One repetition of one kernel under one setting: the first process (steps first and second_spec) and
    the warm-index process (warm_index_first) on one fresh cache directory. {"steps": {step: {...} or
    {"error"}}, "headers", "pch_reported", "stderr"}."""
    common = {"arch": arch, "file": p["file"], "kernel": p["kernel"], "options": p["options"], "include": p["include"]}
    out: dict = {"steps": {}}
    with (
        tempfile.TemporaryDirectory(prefix="kjit-bench-libs-") as cache,
        tempfile.TemporaryDirectory(prefix="kjit-bench-cuda-cache-") as cuda_cache,
    ):
        env = probe_env(os.environ, cache, cuda_cache, setting)
        for steps in (("first", "second_spec"), ("warm_index_first",)):
            args = dict(common, nonce=random.randrange(1, 1 << 30), steps=[[s, p["specs"][s]] for s in steps])
            try:
                r = probe(args, env, timeout_s)
            except ProbeFailed as e:
                for s in steps:
                    out["steps"][s] = {"error": error_text(e)}
                if steps[0] == "first":  # no warm index to measure without the first process
                    out["steps"]["warm_index_first"] = {"error": "not measured: the first process failed"}
                    break
                continue
            out["steps"].update(r.get("steps") or {})
            for k in ("headers", "pch_reported", "kjit", "nvrtc_start_ms"):
                if r.get(k) is not None:
                    out.setdefault(k, {})[steps[0]] = r[k]
            if r.get("stderr"):
                out.setdefault("stderr", {})[steps[0]] = r["stderr"]
    return out


def aggregate(runs: list[dict]) -> dict:
    """{step: {"ms": summary, "compile_ms": summary, "phase_ms": medians, "compiles", "origin", "errors"}}
    over the repetitions of one kernel and setting; a step without any figure keeps its errors only."""
    out: dict = {}
    for step in STEPS:
        got = [r["steps"][step] for r in runs if isinstance((r.get("steps") or {}).get(step), dict)]
        ok = [g for g in got if "ms" in g]
        errors = [g["error"] for g in got if "error" in g]
        e: dict = {}
        if ok:
            e["ms"] = stats.summarize([g["ms"] for g in ok])
            e["compile_ms"] = stats.summarize([g.get("compile_ms") or 0.0 for g in ok])
            phases = ok[0].get("phase_ms") or {}
            e["phase_ms"] = {
                ph: round(stats.summarize([(g.get("phase_ms") or {}).get(ph, 0.0) for g in ok])["median"], 3)
                for ph in phases
            }
            e["compiles"] = ok[-1].get("compiles")
            e["origin"] = sorted({g.get("origin") for g in ok if g.get("origin")})
            if ok[-1].get("pch") is not None:
                e["pch"] = ok[-1]["pch"]  # kjit's PCH counters of the last repetition
        if errors:
            e["errors"] = errors
        out[step] = e
    return out


def headers_of(runs: list[dict]) -> dict | None:
    """The template's headers as a process last saw them (the warm-index process's, else the first's)."""
    for r in reversed(runs):
        h = r.get("headers") or {}
        for key in ("warm_index_first", "first"):
            if isinstance(h.get(key), dict) and "count" in h[key]:
                return h[key]
    return None


def _setting_entry(setting: str, runs: list[dict]) -> dict:
    reported = [v for r in runs for v in (r.get("pch_reported") or {}).values() if v]
    warnings = sorted({v for r in runs for v in (r.get("stderr") or {}).values() if v})
    return {
        "env": f"{ENV}={setting}",
        "kjit_reported": reported[-1] if reported else None,
        "stderr": warnings,
        "steps": aggregate(runs),
        "runs": runs,
    }


def reason(error: str, limit: int = 400) -> str:
    """One line of an error text: its first line, and the line that says why when there is one (kjit's own
    explanation, or NVRTC's first error)."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    if not lines:
        return "?"
    why = next((ln for ln in lines[1:] if ln.startswith("kjit ") or " error" in ln), None)
    return (lines[0][: limit // 2] + (" | " + why if why else ""))[:limit]


def cause(error: str) -> str:
    """What an error text says went wrong, without the specialization it names: the line that says why when
    there is one, else its first line (the same cause in several steps groups into one note)."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    why = next((ln for ln in lines[1:] if ln.startswith("kjit ") or " error" in ln), None)
    return why or (lines[0] if lines else "?")


def _line(name: str, setting: str, r: dict) -> str:
    """The progress line of one repetition (its own figures, not the medians so far)."""
    parts, errors = [], []
    for step in STEPS:
        e = (r.get("steps") or {}).get(step) or {}
        parts.append(f"{STEP_TITLES[step]} {e['ms']:.0f} ms" if "ms" in e else f"{STEP_TITLES[step]} failed")
        errors += [e["error"]] if "error" in e else []
    causes = list(dict.fromkeys(cause(err)[:200] for err in errors))
    return f"  {name}, {ENV}={setting}: " + "; ".join(parts) + (f" ({'; '.join(causes)})" if causes else "")


def run(
    quick: bool,
    peer_versions: dict | None = None,
    log=None,
    save=None,
    kernels: list[str] | None = None,
    reps: int | None = None,
    arch: str | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> dict:
    reps = reps or (1 if quick else 3)
    arch = arch or target_arch()
    names = kernels or selected(os.environ.get("KJIT_BENCH_LIBRARY_KERNELS"))
    cutlass_dir = cutlass_include_dir()
    res: dict = {}
    out = {
        "arch": arch,
        "reps": reps,
        "env": ENV,
        "settings": list(SETTINGS),
        "cutlass_include": cutlass_dir,
        "probe_timeout_s": timeout_s,
        "method": "compile-only (specialize(arch=...)); per kernel, setting and repetition a fresh cache "
        "directory and empty CUDA_CACHE_PATH; first and second_spec in one new process, "
        "warm_index_first in a second new process on the same cache; NVRTC started off the clock; "
        "ms: wall time from Template.from_file (second_spec: from specialize) to the kernel",
        "kernels": res,
    }
    plans = {n: plan(n, cutlass_dir) for n in names}
    raw: dict = {}
    for n, p in plans.items():
        if isinstance(p, str):
            res[n] = p
            if log:
                log(f"  {n}: {p}")
            continue
        res[n] = {
            "file": os.path.basename(p["file"]),
            "kernel": p["kernel"],
            "options": p["options"],
            "specs": p["specs"],
            "headers": None,
            "pch": {},
        }
        raw[n] = {s: [] for s in SETTINGS}
    if save:
        save(out)
    for rep in range(reps):
        # Settings alternate in order between repetitions, so that drift touches both alike.
        order = SETTINGS if rep % 2 == 0 else tuple(reversed(SETTINGS))
        for n in raw:
            for setting in order:
                try:
                    r = measure_once(plans[n], arch, setting, timeout_s)
                except Exception as e:  # noqa: BLE001  (one failed kernel never loses the others)
                    r = {"steps": {s: {"error": error_text(e)} for s in STEPS}}
                raw[n][setting].append(r)
                entry = res[n]
                entry["pch"][setting] = _setting_entry(setting, raw[n][setting])
                entry["headers"] = headers_of(raw[n]["off"] + raw[n]["on"])
                if log:
                    log(_line(n, setting, r) + (f" (rep {rep + 1}/{reps})" if reps > 1 else ""))
                if save:
                    save(out)
    return out
