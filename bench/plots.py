"""PNG figures of a result (matplotlib with the Agg backend, imported lazily; without it: no plots).

bandwidth: GB/s against the input size, one panel per op, one line per peer (log x);
overhead: horizontal bars of the CPU cost per call; first_call: grouped bars, empty and warm cache;
small-<dtype>: kjit's time per call over eager's against the rows, one line per op, a line at 1.0 (log x).
"""

from __future__ import annotations

import math
import os
import sys

from .report import first_call_add_ms

MIB = 1 << 20
COLORS = {
    "kjit": "#d62728",
    "copy": "#7f7f7f",
    "eager": "#1f77b4",
    "torch.compile": "#2ca02c",
    "triton": "#9467bd",
    "cupy": "#ff7f0e",
    "jiterator": "#8c564b",
}


def _save(plt, fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"
    return plt, None


def bandwidth(plt, sweep: list[dict], path: str) -> str | None:
    ops: dict[str, list[dict]] = {}
    for r in sweep:
        if r.get("gbps") and r.get("size_bytes"):
            ops.setdefault(f"{r['op']} ({r['dtype']})", []).append(r)
    if not ops:
        return None
    cols = min(4, len(ops))
    rows = math.ceil(len(ops) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, (name, pts) in zip(axes.flat, ops.items()):
        pts = sorted(pts, key=lambda r: r["size_bytes"])
        peers = [
            p for p in ("copy", "eager", "torch.compile", "triton", "cupy", "kjit") if any(p in r["gbps"] for r in pts)
        ]
        for p in peers:
            xs = [r["size_bytes"] / MIB for r in pts if p in r["gbps"]]
            ys = [r["gbps"][p] for r in pts if p in r["gbps"]]
            ax.plot(
                xs,
                ys,
                marker="o",
                ms=3,
                label=p,
                color=COLORS.get(p),
                lw=2.2 if p == "kjit" else 1.2,
                ls="--" if p == "copy" else "-",
            )
        ax.set_xscale("log", base=2)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("input MiB", fontsize=8)
        ax.set_ylabel("GB/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(ops) :]:
        ax.axis("off")
    return _save(plt, fig, path)


def overhead(plt, res: dict, path: str) -> str | None:
    items = [(n, v["us"]["median"], v.get("kind")) for n, v in res.items() if isinstance(v, dict)]
    if not items:
        return None
    items.sort(key=lambda t: t[1], reverse=True)
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(items) + 1.2))
    names = [n for n, _, _ in items]
    vals = [v for _, v, _ in items]
    ax.barh(names, vals, color=[COLORS["kjit"] if k == "kjit" else COLORS["eager"] for _, _, k in items])
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:.2f}", va="center", fontsize=8)
    ax.set_xlabel("CPU us per cached call (median)")
    ax.tick_params(labelsize=8)
    ax.set_title("CPU cost per cached call")
    return _save(plt, fig, path)


def first_call(plt, res: dict, path: str) -> str | None:
    items = [
        (p, first_call_add_ms(v, "empty_cache"), first_call_add_ms(v, "warm_cache_new_process"))
        for p, v in res.items()
        if isinstance(v, dict)
    ]
    items = [(p, e, w) for p, e, w in items if e is not None and w is not None]
    if not items:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.5))
    w = 0.38
    xs = range(len(items))
    ax.bar([x - w / 2 for x in xs], [e for _, e, _ in items], w, label="empty cache", color="#1f77b4")
    ax.bar([x + w / 2 for x in xs], [m for _, _, m in items], w, label="new process, warm cache", color="#ff7f0e")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([p for p, _, _ in items])
    ax.set_yscale("log")
    ax.set_ylabel("ms (median)")
    ax.set_title("First call of the add kernel")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def small_ratio(plt, points: list[dict], path: str, dtype: str) -> str | None:
    """kjit / eager time per call against the rows for one dtype (points of the small section)."""
    ops: dict[str, list[tuple]] = {}
    for p in points:
        if p.get("dtype") == dtype and p.get("kjit_over_eager") is not None:
            ops.setdefault(p["op"], []).append((p["rows"], p["kjit_over_eager"]))
    if not ops:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.8))
    markers = "os^vD<>pPX*h"
    for i, (op, pts) in enumerate(ops.items()):
        pts.sort()
        ax.plot(
            [r for r, _ in pts],
            [v for _, v in pts],
            marker=markers[i % len(markers)],
            ms=4,
            lw=1.4,
            label=op,
            color=plt.get_cmap("tab10")(i % 10),
        )
    ax.axhline(1.0, color="black", lw=1.2, ls="--", label="eager (1.0)")
    ax.set_xscale("log", base=2)
    rows = sorted({r for pts in ops.values() for r, _ in pts})
    ax.minorticks_off()
    ax.set_xticks(rows)
    ax.set_xticklabels([str(r) for r in rows])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("rows of 4096 elements")
    ax.set_ylabel("kjit time / eager time per call")
    ax.set_title(f"kjit / eager, time per call ({dtype}; below 1: kjit faster)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _save(plt, fig, path)


def render(result: dict, out_dir: str, prefix: str) -> list[str]:
    """Writes the figures the result has data for into out_dir as <prefix>-<plot>.png; returns their paths
    ([] with a message on stderr when matplotlib is missing)."""
    plt, err = _pyplot()
    if plt is None:
        print(f"kjit.bench: matplotlib unavailable ({err}): no plots (pip install matplotlib)", file=sys.stderr)
        return []
    os.makedirs(out_dir, exist_ok=True)
    out = []
    jobs = [
        ("bandwidth", bandwidth, (result.get("bandwidth") or {}).get("sweep") or []),
        ("overhead", overhead, (result.get("overhead") or {}).get("results") or {}),
        ("first_call", first_call, (result.get("first_call") or {}).get("results") or {}),
    ]
    small_points = (result.get("small") or {}).get("points") or []
    for dt in dict.fromkeys(p.get("dtype") for p in small_points):
        jobs.append((f"small-{dt}", lambda plt_, pts, path, dt=dt: small_ratio(plt_, pts, path, dt), small_points))
    for name, fn, data in jobs:
        try:
            p = fn(plt, data, os.path.join(out_dir, f"{prefix}-{name}.png"))
        except Exception as e:  # noqa: BLE001  (a plot that fails never loses the results)
            print(f"kjit.bench: plot {name} failed: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        if p:
            out.append(p)
    return out
