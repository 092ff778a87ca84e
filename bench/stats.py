"""Timing helpers and the arithmetic on their samples (pure functions, testable without a GPU)."""

from __future__ import annotations

import statistics
import time


def summarize(samples) -> dict:
    """{"median", "min", "max", "n"} of a non-empty sequence of numbers."""
    xs = [float(s) for s in samples]
    if not xs:
        raise ValueError("summarize: no samples")
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def gbps(nbytes: float, ms: float) -> float:
    """GB/s (1e9 bytes per second) for `nbytes` moved in `ms` milliseconds."""
    return nbytes / (ms * 1e-3) / 1e9


def gbps_summary(nbytes: float, ms: dict) -> dict:
    """GB/s of a summary of milliseconds: the median, and min/max from the slowest/fastest sample."""
    return {
        "median": gbps(nbytes, ms["median"]),
        "min": gbps(nbytes, ms["max"]),
        "max": gbps(nbytes, ms["min"]),
        "n": ms.get("n"),
    }


def speedup(peer_time: float, kjit_time: float) -> float:
    """How many times faster kjit is than the peer, from times (peer time / kjit time; < 1: the peer is
    faster). From bandwidths the same figure is ratio(kjit_gbps, peer_gbps)."""
    return peer_time / kjit_time


def ratio(a: float, b: float) -> float | None:
    """a / b, None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def cpu_us(fn, calls: int, reps: int, warmup: int = 200, sync=None) -> dict:
    """CPU microseconds per call: perf_counter around `calls` calls, `reps` times (summary of the reps).
    `sync` (default torch.cuda.synchronize) runs between the batches, outside the timed region."""
    if sync is None:
        import torch

        sync = torch.cuda.synchronize
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t) * 1e6 / calls)
    sync()
    return summarize(samples)


def wall_us(fns: dict, calls: int, reps: int, warmup: int = 20, sync=None) -> dict:
    """Microseconds per call of back-to-back calls synchronized at the end, for each named zero-argument
    function of `fns`: perf_counter around `calls` calls and the synchronize that waits for their GPU work,
    divided by `calls`. Once the launch queue is full a call costs the longer of its CPU cost and its GPU
    time, so this is what a loop of such calls costs. The functions take turns batch by batch (`reps`
    rounds, after `warmup` calls of each), so that clock and load drift touch them all alike.
    Returns {name: summary of the reps}. `sync` defaults to torch.cuda.synchronize."""
    if sync is None:
        import torch

        sync = torch.cuda.synchronize
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    sync()
    samples: dict = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            samples[name].append((time.perf_counter() - t) * 1e6 / calls)
    return {name: summarize(s) for name, s in samples.items()}


def graph_call_ms(fn, calls: int, quick: bool) -> float:
    """GPU milliseconds per call of fn with the CPU out of the way: `calls` calls captured in one CUDA graph
    (after one eager call), the graph replayed (gpu_ms's median), divided by `calls`."""
    import torch

    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    t = gpu_ms(g.replay, warmup=3, reps=5 if quick else 15, inner=3 if quick else 10)
    return t["median"] / calls


def gpu_ms(fn, warmup: int, reps: int, inner: int = 10) -> dict:
    """GPU milliseconds per call: CUDA events around `inner` back-to-back calls (so that the CPU cost of
    launching one call overlaps the GPU work of the previous one, as in a real workload, instead of
    being timed as GPU idle time); summary over `reps` such batches."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return summarize(times)


def error_text(e: BaseException, limit: int = 300) -> str:
    """One line saying what went wrong, for a peer that failed."""
    text = f"{type(e).__name__}: {e}".strip().replace("\n", " ")
    return text[:limit]
