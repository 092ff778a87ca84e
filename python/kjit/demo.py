"""``python -m kjit demo [--arch sm_90] [--json] [--once]``: the seed scenarios, end to end.

1. add a constant, then change it 100 times at run time: zero recompiles (``kjit.stats()`` before/after);
2. RGB to gray on a generated 1080x1920 image, checked against a torch reference;
3. outer product forward and backward, checked against ``torch.einsum`` + autograd and by gradcheck;
4. the fused update ``x = a*x + b*model_out + c*noise`` replayed 10 times inside a CUDA graph, checked.

Each scenario prints where its kernels came from (compiled / disk / memory), the first call in ms and
the cached call in us. Then the demo runs itself again in a second process on the same cache: there
every kernel is a disk hit (``--once`` skips that). Without a CUDA device it compiles every
specialization the scenarios use for ``--arch`` through the compile-only path and says so in one line
(GPUs that torch cannot use are an error, reported in full). A cache directory it could not use (an
unwritable home) is said in the summary, with the engine's reason, and explains the second process's
compiles. It ends with what to do next: the command that activates its environment (and the same without
activating), the cache directory (or, when it could not be used, why and what to set), and three things
to try (``next_steps()``; README.md shows these last lines).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field

import torch

# The specializations each scenario launches on a GPU (fresh tensors are 16-byte aligned and the
# sizes below are multiples of the vector width, so the ops pick the widest VEC).
F32 = dict(T=torch.float32, VEC=4)
F64 = dict(T=torch.float64, VEC=2)
SCENARIOS = {
    "add_constant": [("add_constant", "add_constant", F32)],
    "rgb_to_gray": [("rgb_to_gray", "rgb_to_gray", dict(H=1080, W=1920))],
    "outer": [("outer", k, p) for p in (F32, F64) for k in ("outer", "outer_backward_a", "outer_backward_c")],
    "fused_update": [("fused_update", "fused_update", F32)],
    # kjit.ops on rows of 4096 float32 (the geometry the library picks for them on a GPU).
    "library": [
        (
            "norm",
            "norm_forward",
            dict(T=torch.float32, TPR=128, ROWS=2, VEC=4, ITEMS=8, D=4096, RMS=False, HAS_W=True, HAS_B=True),
        ),
        ("softmax", "softmax_forward", dict(T=torch.float32, TPR=512, ROWS=1, VEC=4, ITEMS=2, D=4096, LOG=False)),
        (
            "reduce",
            "reduce_rows",
            dict(T=torch.float32, TO=torch.float32, OP=0, TPR=256, ROWS=1, VEC=4, ITEMS=4, D=4096),
        ),
    ],
}


@dataclass
class Result:
    name: str
    ok: bool = True
    origins: dict = field(default_factory=dict)  # first call: {"compiled": n, "disk": n, "memory": n}
    first_call_ms: float | None = None
    cached_call_us: float | None = None
    gpu_us: float | None = None
    notes: list = field(default_factory=list)

    def check(self, cond: bool, what: str) -> None:
        self.notes.append(("ok: " if cond else "FAILED: ") + what)
        self.ok = self.ok and bool(cond)


def _stats() -> dict:
    import kjit

    s = kjit.stats()
    return {k: s[k] for k in ("compiles", "disk_hits", "memory_hits", "compile_ms")}


def _origins(before: dict, after: dict) -> dict:
    return {
        "compiled": after["compiles"] - before["compiles"],
        "disk": after["disk_hits"] - before["disk_hits"],
        "memory": after["memory_hits"] - before["memory_hits"],
    }


def _timed_first(fn):
    """(result, ms, origins) of a first call, synchronized."""
    before = _stats()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3
    return out, ms, _origins(before, _stats())


def _timed_cached(fn, n: int = 200):
    """(CPU us per call, GPU us per call) of warm calls."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    cpu_us = (time.perf_counter() - t0) * 1e6 / n
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return cpu_us, start.elapsed_time(end) * 1e3 / n


def scenario_add_constant(dev) -> Result:
    from kjit import ops

    r = Result("add_constant")
    x = torch.randn(1 << 20, device=dev)
    y, r.first_call_ms, r.origins = _timed_first(lambda: ops.add_constant(x, 1.0))
    r.check(torch.equal(y, x + 1.0), "x + 1.0 matches torch")
    before = _stats()
    worst = 0.0
    for i in range(100):
        c = 0.25 * i - 7.0
        worst = max(worst, (ops.add_constant(x, c) - (x + c)).abs().max().item())
    after = _stats()
    recompiles = after["compiles"] - before["compiles"]
    r.notes.append(f"stats before: {before}")
    r.notes.append(f"stats after:  {after}")
    r.check(recompiles == 0, f"100 different constants, {recompiles} recompiles")
    r.check(worst == 0.0, f"100 different constants match torch (max abs error {worst:g})")
    r.cached_call_us, r.gpu_us = _timed_cached(lambda: ops.add_constant(x, 3.0))
    return r


def scenario_rgb_to_gray(dev) -> Result:
    from kjit import ops

    r = Result("rgb_to_gray")
    g = torch.Generator(device=dev).manual_seed(0)
    img = torch.randint(0, 256, (1080, 1920, 3), dtype=torch.uint8, device=dev, generator=g)
    gray, r.first_call_ms, r.origins = _timed_first(lambda: ops.rgb_to_gray(img))
    w = img.to(torch.int32)
    ref = ((77 * w[..., 0] + 150 * w[..., 1] + 29 * w[..., 2] + 128) >> 8).to(torch.uint8)
    r.check(gray.shape == (1080, 1920) and torch.equal(gray, ref), "1080x1920 image equals the torch reference")
    r.cached_call_us, r.gpu_us = _timed_cached(lambda: ops.rgb_to_gray(img))
    return r


def scenario_outer(dev) -> Result:
    from kjit import ops

    r = Result("outer")
    a = torch.randn(8, 256, device=dev, requires_grad=True)
    b = torch.randn(8, 384, device=dev, requires_grad=True)
    grad = torch.randn(8, 256, 384, device=dev)

    def fwd_bwd():
        out = ops.outer(a, b)
        ga, gb = torch.autograd.grad(out, (a, b), grad)
        return out, ga, gb

    # The torch reference first: the first autograd.grad of a process starts torch's autograd engine
    # (seconds on a GPU machine), which is not kjit's first-call time.
    ref = torch.einsum("bi,bj->bij", a, b)
    ra, rb = torch.autograd.grad(ref, (a, b), grad)
    (out, ga, gb), r.first_call_ms, r.origins = _timed_first(fwd_bwd)
    close = lambda x, y: torch.allclose(x, y, rtol=1e-4, atol=1e-3)  # noqa: E731
    r.check(close(out, ref), "forward equals torch.einsum('bi,bj->bij')")
    r.check(close(ga, ra) and close(gb, rb), "grad_a and grad_b equal torch autograd of einsum")
    a64 = torch.randn(3, 5, device=dev, dtype=torch.float64, requires_grad=True)
    b64 = torch.randn(3, 6, device=dev, dtype=torch.float64, requires_grad=True)
    r.check(torch.autograd.gradcheck(ops.outer, (a64, b64)), "gradcheck in float64")
    r.cached_call_us, r.gpu_us = _timed_cached(lambda: ops.outer(a.detach(), b.detach()))
    return r


def scenario_fused_update(dev) -> Result:
    from kjit import ops

    r = Result("fused_update")
    ca, cb, cc = 0.9, 0.1, 0.05
    x = torch.randn(1 << 20, device=dev)
    model_out = torch.randn_like(x)
    noise = torch.randn_like(x)
    x_ref = x.clone()

    def step():
        x.copy_(ops.fused_update(x, model_out, noise, ca, cb, cc))

    # Warm up on a side stream (compiles or loads the kernel: capture must not compile), then capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _, r.first_call_ms, r.origins = _timed_first(lambda: ops.fused_update(x, model_out, noise, ca, cb, cc))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    x.copy_(x_ref)
    for _ in range(10):
        noise.normal_()  # new noise every step, outside the graph, into the captured buffer
        graph.replay()
        x_ref = ca * x_ref + cb * model_out + cc * noise
    torch.cuda.synchronize()
    err = (x - x_ref).abs().max().item()
    r.check(err < 1e-4, f"10 graph replays match the torch loop (max abs error {err:.2e})")
    r.cached_call_us, r.gpu_us = _timed_cached(lambda: ops.fused_update(x, model_out, noise, ca, cb, cc))
    return r


def scenario_library(dev) -> Result:
    import torch.nn.functional as F

    import kjit
    from kjit import ops

    r = Result("library")
    x = torch.randn(4096, 4096, device=dev)
    w, b = torch.randn(4096, device=dev), torch.randn(4096, device=dev)
    silu_scaled = kjit.elementwise("silu(x) * s", "x", "s", name="silu_scaled")

    def block():
        h = ops.layer_norm(x, w, b, 1e-5)
        h = silu_scaled(h, s=0.5)
        return ops.sum(ops.softmax(h), -1)

    out, r.first_call_ms, r.origins = _timed_first(block)
    ref = torch.softmax(F.silu(F.layer_norm(x, (4096,), w, b, 1e-5)) * 0.5, -1).sum(-1)
    r.check(torch.allclose(out, ref, rtol=1e-4, atol=1e-4), "layer_norm -> silu(x) * s -> softmax -> sum equals torch")
    r.cached_call_us, r.gpu_us = _timed_cached(block, n=50)
    return r


RUNNERS = {
    "add_constant": scenario_add_constant,
    "rgb_to_gray": scenario_rgb_to_gray,
    "outer": scenario_outer,
    "fused_update": scenario_fused_update,
    "library": scenario_library,
}


def _guarded(name, run, dev) -> Result:
    try:
        return run(dev)
    except Exception as e:  # noqa: BLE001 (reported as a failed scenario; the others still run)
        r = Result(name)
        r.check(False, f"{type(e).__name__}: {e}")
        return r


def _describe(tmpl: str, kernel: str, params: dict) -> str:
    show = lambda v: str(v).replace("torch.", "")  # noqa: E731
    return f"{kernel}<{', '.join(f'{k}={show(v)}' for k, v in params.items())}>"


def compile_only(arch: str) -> list[Result]:
    """Compiles every specialization of the scenarios for `arch` (no GPU needed)."""
    import kjit

    results = []
    for name, kernels in SCENARIOS.items():
        r = Result(name)
        t0 = time.perf_counter()
        for tmpl, kernel, params in kernels:
            k0 = time.perf_counter()
            try:
                # The options kjit.ops compile with: the same cache entries.
                spec = (
                    kjit.Template.builtin(tmpl)
                    .kernel(kernel, **kjit._core.library_compile_options())
                    .specialize(arch=arch, **params)
                )
                origin = str(getattr(spec, "origin", "compiled"))
                r.origins[origin] = r.origins.get(origin, 0) + 1
                r.notes.append(
                    f"{_describe(tmpl, kernel, params)} for {arch}: {origin} "
                    f"in {(time.perf_counter() - k0) * 1e3:.1f} ms"
                )
            except Exception as e:  # noqa: BLE001 (reported, the demo goes on)
                r.check(False, f"{_describe(tmpl, kernel, params)} for {arch}: {type(e).__name__}: {e}")
        r.first_call_ms = (time.perf_counter() - t0) * 1e3
        results.append(r)
    return results


def _visible_gpus() -> list[str]:
    """The NVIDIA GPUs this machine's kernel driver shows (Linux: /proc/driver/nvidia/gpus, else the
    /dev/nvidiaN device files); empty on a machine without a GPU or driver."""
    proc = pathlib.Path("/proc/driver/nvidia/gpus")
    try:
        found = sorted(e.name for e in proc.iterdir())
    except OSError:
        found = []
    if not found:
        found = sorted(str(d) for d in pathlib.Path("/dev").glob("nvidia[0-9]*"))
    return found


@dataclass
class DeviceState:
    """Why this process cannot launch. `kind`: None (a CUDA device is usable), "none" (this machine shows
    no GPU to this process, the expected case on a build machine: said in one calm line), or "error" (the
    machine has GPUs that torch cannot use: a real failure, reported in full)."""

    kind: str | None = None
    detail: str = ""


def _device_state() -> DeviceState:
    if torch.cuda.is_available():
        return DeviceState()
    gpus = _visible_gpus()
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not gpus:
        # No GPU at all: torch's own message ("Found no NVIDIA driver on your system. Please check that
        # you have an NVIDIA GPU and installed a driver from ...") would read like a failure; it is not.
        return DeviceState("none", "")
    if hidden is not None and torch.cuda.device_count() == 0:
        return DeviceState("none", f"{len(gpus)} GPU(s) here, hidden by CUDA_VISIBLE_DEVICES={hidden!r}")
    # GPUs are present but torch cannot use them (a driver too old for this torch, a CPU-only torch
    # build, a broken installation): the real error, in full.
    if not torch.backends.cuda.is_built():
        return DeviceState("error", f"torch {torch.__version__} was built without CUDA")
    try:
        torch.cuda.init()
    except Exception as e:  # noqa: BLE001 (its text is the report)
        return DeviceState("error", f"{type(e).__name__}: {e}".strip())
    return DeviceState(
        "error", f"torch.cuda.is_available() is False (torch.cuda.device_count() = {torch.cuda.device_count()})"
    )


def _fmt(v, unit, digits=1):
    return "-" if v is None else f"{v:.{digits}f} {unit}"


def _print_results(results: list[Result], header: str, ran: bool) -> None:
    print(header)
    for r in results:
        origins = ", ".join(f"{k} {v}" for k, v in r.origins.items() if v) or "-"
        status = "ok" if r.ok else "FAILED"
        line = f"  [{status}] {r.name:<13} kernels: {origins:<24}"
        if ran:
            line += (
                f" first call {_fmt(r.first_call_ms, 'ms'):>10}   cached call {_fmt(r.cached_call_us, 'us'):>8}"
                f" (GPU {_fmt(r.gpu_us, 'us')})"
            )
        else:
            line += f" compile {_fmt(r.first_call_ms, 'ms'):>10}"
        print(line)
        for n in r.notes:
            print(f"        {n}")


def _second_process(arch: str) -> dict | None:
    cmd = [sys.executable, "-m", "kjit.demo", "--once", "--json", "--arch", arch]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        sys.stderr.write(f"second run failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return None


def _environment() -> tuple[str | None, str]:
    """(the command that activates the virtual environment this demo runs in, None when it runs in none;
    that environment's Python by absolute path): what a new shell needs to find this kjit."""
    prefix = pathlib.Path(sys.prefix).absolute()
    activate, python = prefix / "bin" / "activate", prefix / "bin" / "python"
    if sys.prefix != sys.base_prefix and activate.is_file() and python.is_file():
        return f"source {shlex.quote(str(activate))}", shlex.quote(str(python))
    # Not a virtual environment (a system or conda Python): this interpreter, as it was started.
    return None, shlex.quote(os.path.abspath(sys.executable))


# The sections next_steps() points at (tests/python/test_demo_ending.py checks that they exist).
FIVE_MINUTES = "#python-in-five-minutes"
WARM_DEPLOYMENT = "#warm-deployment"


def _cache() -> dict:
    """The engine's account of this process's disk cache (kjit._core.cache_info()): dir, dir_source, mode,
    writable, problem (why dir could not be used, in the words of the engine's warning), ..."""
    import kjit

    return kjit._core.cache_info()


def cache_not_kept(cache: dict) -> str | None:
    """Why the kernels this process compiled were not kept on disk for the next process (None when they
    were): the cache directory could not be used (the engine's reason), or KJIT_CACHE_MODE keeps nothing."""
    if cache.get("problem"):
        return f"the cache could not be used ({cache['problem']})"
    if not cache["writable"]:
        return f"KJIT_CACHE_MODE={cache['mode']} writes nothing to the cache"
    return None


def next_steps() -> list[str]:
    """The demo's last lines: how to use this kjit from a new shell, where its cache is, what to try."""
    activate, python = _environment()
    cache = _cache()
    lines = ["", "next:"]
    if activate is not None:
        lines.append(f"  environment:  {activate}")
        lines.append(f"                (or without activating: {python} -m kjit info)")
        info = "kjit info"
    else:
        lines.append(f"  python:       {python} (kjit is installed for this Python)")
        info = f"{python} -m kjit info"
    if cache.get("problem"):
        # Not "the cache": a folder the demo could not use. What to set instead (the engine's settings).
        lines.append(f"  cache:        none: {cache['dir']} (from {cache['dir_source']}) could not be used")
        lines.append(f"                ({cache['problem']})")
        lines.append("                set KJIT_CACHE_DIR=<a folder you can write>, or XDG_CACHE_HOME=<folder>")
        lines.append("                (the cache is then <folder>/kjit), and run the demo again")
    else:
        lines.append(f"  cache:        {cache['dir']} (from {cache['dir_source']})")
    tries = [
        (info, "what kjit finds: NVRTC, GPUs, cache, settings"),
        (f"README.md{FIVE_MINUTES}", "a first kernel: specialize, launch (on a GPU)"),
        (f"docs/deployment.md{WARM_DEPLOYMENT}", "record, warm (no GPU needed), ship, run strict"),
    ]
    width = max(len(cmd) for cmd, _ in tries)
    for i, (cmd, what) in enumerate(tries):
        lines.append(f"  {'try:' if i == 0 else '':<12}  {cmd:<{width}}   {what}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kjit demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="sm_90", help="target to compile for when there is no CUDA device (default sm_90)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    p.add_argument("--once", action="store_true", help="skip the second run in a new process")
    args = p.parse_args(argv)

    import kjit

    state = _device_state()
    t0 = time.perf_counter()
    if state.kind is None:
        dev = torch.device("cuda", torch.cuda.current_device())
        device = torch.cuda.get_device_name(dev)
        results = [_guarded(name, run, dev) for name, run in RUNNERS.items()]
    else:
        device = None
        results = compile_only(args.arch)
    doc = {
        "device": device,
        "no_device": None if state.kind is None else {"kind": state.kind, "detail": state.detail},
        "arch": None if state.kind is None else args.arch,
        "scenarios": [r.__dict__ for r in results],
        "stats": _stats(),
        "cache": _cache(),
        "total_s": time.perf_counter() - t0,
        # GPUs that torch cannot use are a failure even when every compile worked.
        "ok": all(r.ok for r in results) and state.kind != "error",
    }
    second = None if args.once else _second_process(args.arch)
    if second is not None:
        doc["second_process"] = {
            "scenarios": second["scenarios"],
            "stats": second["stats"],
            "cache": second.get("cache"),
            "ok": second["ok"],
        }
        doc["ok"] = doc["ok"] and second["ok"]

    if args.json:
        print(json.dumps(doc, indent=2, default=str))
        return 0 if doc["ok"] else 1

    if state.kind is None:
        _print_results(results, f"kjit {kjit.__version__} demo on {device}", ran=True)
    else:
        _print_results(results, f"kjit {kjit.__version__} demo: compile-only for {args.arch}", ran=False)
    s = doc["stats"]
    print(
        f"\nsummary: {sum(r.ok for r in results)}/{len(results)} scenarios ok; "
        f"{s['compiles']} compiles ({s['compile_ms']:.0f} ms), {s['disk_hits']} disk hits, "
        f"{s['memory_hits']} memory hits; {doc['total_s']:.2f} s"
    )
    not_kept = cache_not_kept(doc["cache"])
    if not_kept:
        print(f"warning: {not_kept}: kernels were kept in memory only, and every new process compiles them again")
    if second is not None:
        s2 = second["stats"]
        per = "; ".join(
            f"{r['name']}: " + ", ".join(f"{k} {v}" for k, v in r["origins"].items() if v) for r in second["scenarios"]
        )
        line = f"second process, same cache: {s2['compiles']} compiles, {s2['disk_hits']} disk hits ({per})"
        # No disk hits: say why (the first process kept nothing, or the second could not read the cache).
        why = not_kept or (cache_not_kept(second["cache"]) if second.get("cache") else None)
        if why and not s2["disk_hits"]:
            line += f"; no disk hits because {why}"
        print(line)
    if state.kind == "none":
        print(f"no GPU here: compiled for {args.arch} only (choose with --arch); run on a GPU machine to launch")
        if state.detail:
            print(f"  ({state.detail})")
    elif state.kind == "error":
        sys.stdout.flush()
        print(
            f"error: this machine has NVIDIA GPUs ({', '.join(_visible_gpus())}) but torch cannot use them, so "
            f"the demo only compiled for {args.arch}: {state.detail}\n"
            f"  `python -m kjit info` shows the driver and GPUs kjit finds.",
            file=sys.stderr,
            flush=True,
        )
    print("\n".join(next_steps()))
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
