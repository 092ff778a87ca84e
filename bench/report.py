"""The result file (JSON) and its Markdown rendering, with the list of figures where kjit is behind.

Ratios are "kjit speed relative to the peer": peer time / kjit time, or kjit GB/s / peer GB/s; above 1
kjit is faster, below 1 the peer is (and the figure lands in "where kjit is behind"). The small section
is the exception, because its targets are stated that way: its ratios are kjit time / peer time (below 1
kjit is faster); its entries in "where kjit is behind" follow the rule above. The matmul section's ratios
are speeds (kjit TFLOP/s over the peer's), as the rule says.
"""

from __future__ import annotations

import argparse
import json
import os

from . import library_headers, machine, matmul, sequence, small

MIB = 1 << 20


# -- files -----------------------------------------------------------------------------------------------
def file_prefix(result: dict) -> str:
    """<YYYY-MM-DD>-<gpu slug>-kjit-bench, from the result's machine record."""
    m = result.get("machine", {})
    date = (m.get("date") or machine.today())[:10]
    slug = "cpu" if "gpu" in m and m["gpu"] is None else machine.gpu_slug(m.get("gpu"))  # compile-only, no GPU
    return f"{date}-{slug}-kjit-bench"


def write_json(result: dict, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return path


def standalone_main(argv, doc: str, name: str, run, markdown) -> int:
    """The main() of a bench run on its own (python -m kjit.bench.NAME [--out DIR] [--quick]): run(quick), then
    <date>-<gpu>-NAME.json and .md in DIR, the Markdown printed."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    res = run(args.quick)
    stem = os.path.join(args.out, f"{res['date']}-{machine.gpu_slug(res['machine'].get('gpu'))}-{name}")
    write_json(res, stem + ".json")
    md = markdown(res)
    with open(stem + ".md", "w") as f:
        f.write(md)
    print(md)
    return 0


def load_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


# -- formatting ------------------------------------------------------------------------------------------
def _num(v, fmt="{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _x(r) -> str:
    return "-" if r is None else f"{r:.2f}x"


def _size(nbytes) -> str:
    if nbytes is None:
        return "-"
    return f"{nbytes / MIB:.0f} MiB" if nbytes < 1024 * MIB else f"{nbytes / (1024 * MIB):.0f} GiB"


def _shape(shape) -> str:
    return "x".join(str(s) for s in shape)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _is(v) -> bool:
    return isinstance(v, dict)


# -- "where kjit is behind" ------------------------------------------------------------------------------
def behind(result: dict) -> list[dict]:
    """Every figure where a peer is faster than kjit: {section, figure, peer, kjit, peer_value, unit, ratio}
    with ratio = kjit speed relative to the peer (< 1)."""
    out: list[dict] = []
    ov = (result.get("overhead") or {}).get("results") or {}
    for name, v in ov.items():
        if _is(v) and v.get("kind") == "peer" and _is(ov.get(v.get("vs"))):
            k, p = ov[v["vs"]]["us"]["median"], v["us"]["median"]
            if p < k:
                out.append(
                    dict(
                        section="overhead",
                        figure=f"CPU cost per call: {v['vs']} vs {name}",
                        peer=name,
                        kjit=k,
                        peer_value=p,
                        unit="us",
                        ratio=p / k,
                    )
                )
    fc = (result.get("first_call") or {}).get("results") or {}
    if _is(fc.get("kjit")):
        for peer, v in fc.items():
            if peer.startswith("kjit") or not _is(v):  # kjit itself, and its variants (no preload)
                continue
            for kind, label in (
                ("empty_cache", "first call of the add kernel, empty cache"),
                ("warm_cache_new_process", "first call of the add kernel, new process, warm cache"),
            ):
                k, p = first_call_add_ms(fc["kjit"], kind), first_call_add_ms(v, kind)
                if k is not None and p is not None and p < k:
                    out.append(
                        dict(
                            section="first_call", figure=label, peer=peer, kjit=k, peer_value=p, unit="ms", ratio=p / k
                        )
                    )
    bw = result.get("bandwidth") or {}
    for part in ("sweep", "reference"):
        for r in bw.get(part) or []:
            g = r.get("gbps") or {}
            if "kjit" not in g:
                continue
            for peer, v in g.items():
                if peer in ("kjit", "copy", "kjit generic"):
                    continue
                if v > g["kjit"]:
                    where = _size(r.get("size_bytes")) if part == "sweep" else _shape(r["shape"])
                    out.append(
                        dict(
                            section="bandwidth",
                            figure=f"{r['op']} {r['dtype']} {where} ({part})",
                            peer=peer,
                            kjit=g["kjit"],
                            peer_value=v,
                            unit="GB/s",
                            ratio=g["kjit"] / v,
                        )
                    )
    for p in (result.get("small") or {}).get("points") or []:
        us = p.get("us") or {}
        if not _is(us.get("kjit")):
            continue
        for peer in small.PEERS:
            if _is(us.get(peer)) and us[peer]["median"] < us["kjit"]["median"]:
                k, v = us["kjit"]["median"], us[peer]["median"]
                out.append(
                    dict(
                        section="small",
                        figure=f"time per call: {small.where(p)}",
                        peer=peer,
                        kjit=k,
                        peer_value=v,
                        unit="us",
                        ratio=v / k,
                    )
                )
    for p in (result.get("matmul") or {}).get("points") or []:
        tf = p.get("tflops") or {}
        if "kjit" not in tf:
            continue
        for peer in matmul.CONTENDERS.get(p.get("kind"), ())[1:]:
            if peer in tf and tf[peer] > tf["kjit"]:
                out.append(
                    dict(
                        section="matmul",
                        figure=f"TFLOP/s: {matmul.where(p)}",
                        peer=peer,
                        kjit=tf["kjit"],
                        peer_value=tf[peer],
                        unit="TFLOP/s",
                        ratio=tf["kjit"] / tf[peer],
                    )
                )
    for p in (result.get("sequence") or {}).get("points") or []:
        k = ((p.get("ms") or {}).get("kjit") or {}).get("median")
        for peer, v in (p.get("speedup") or {}).items():
            if v < 1 and k:
                out.append(
                    dict(
                        section="sequence",
                        figure=f"time: {sequence.where(p)}",
                        peer=peer,
                        kjit=k,
                        peer_value=p["ms"][peer]["median"],
                        unit="ms",
                        ratio=v,
                    )
                )
    rc = result.get("recompile") or {}
    res = rc.get("results") or {}
    for peer, ref in (rc.get("vs") or {}).items():
        p, k = res.get(peer), res.get(ref)
        if not (_is(p) and _is(k)) or p.get("compiles") is None or k.get("compiles") is None:
            continue
        if p["compiles"] < k["compiles"]:
            out.append(
                dict(
                    section="recompile",
                    figure=f"new compiles over {p['changes']} changes ({ref})",
                    peer=peer,
                    kjit=k["compiles"],
                    peer_value=p["compiles"],
                    unit="compiles",
                    ratio=(p["compiles"] / k["compiles"]) if k["compiles"] else 0.0,
                )
            )
        elif p["compiles"] == k["compiles"] and p["seconds"] < k["seconds"]:
            out.append(
                dict(
                    section="recompile",
                    figure=f"seconds for {p['changes']} changes ({ref})",
                    peer=peer,
                    kjit=k["seconds"],
                    peer_value=p["seconds"],
                    unit="s",
                    ratio=p["seconds"] / k["seconds"],
                )
            )
    return out


# Peers ahead by less than this fraction are listed apart: that is the spread between repeated runs.
NOISE = 0.02


def _behind_line(b: dict) -> str:
    fmt = "{:.0f}" if b["unit"] in ("GB/s", "compiles") else "{:.1f}" if b["unit"] == "TFLOP/s" else "{:.3g}"
    return (
        f"- {b['section']}: {b['figure']}: {b['peer']} is faster, kjit at {b['ratio']:.2f}x "
        f"({fmt.format(b['kjit'])} {b['unit']} for kjit, {fmt.format(b['peer_value'])} {b['unit']} for "
        f"{b['peer']})"
    )


# -- sections --------------------------------------------------------------------------------------------
def _overhead_md(sec: dict) -> list[str]:
    res = sec.get("results") or {}
    out = [
        f"## CPU cost per cached call ({sec.get('n')} {sec.get('dtype')} elements, add a constant)",
        "",
        f"Median / min / max over {sec.get('reps')} batches of {sec.get('calls')} calls. "
        '"kjit / peer": peer time / kjit time against the kjit entry named (above 1: kjit faster).',
        "",
    ]
    rows = []
    for name, v in res.items():
        if not _is(v):
            rows.append([name, v, "-", "-", "-", "-", "-"])
            continue
        us = v["us"]
        ref = res.get(v.get("vs")) if v.get("vs") else None
        r = us["median"] / ref["us"]["median"] if _is(ref) and ref["us"]["median"] else None
        rows.append(
            [
                name,
                f"{us['median']:.2f} us",
                f"{us['min']:.2f}-{us['max']:.2f}",
                _x(v.get("ratio_vs_torch_add_out")),
                v.get("vs") or "(kjit)",
                _x(r),
                v.get("kind", ""),
            ]
        )
    return out + _table(
        ["call", "median", "min-max", "vs torch.add(out=)", "compared with", "kjit / peer", "kind"], rows
    )


# The add kernel's case in each probe: kjit's first compile of a process is what a peer's first call is.
_ADD_CASE = {"empty_cache": "add, first kjit compile of the process", "warm_cache_new_process": "add"}
# Targets (issue 17), by case; "<op> forward + backward" rows are computed from the two cases.
FIRST_CALL_TARGETS_MS = {
    "add, first kjit compile of the process": 60.0,
    "add, new specialization": 25.0,
    "forward": 60.0,
    "forward + backward": 100.0,
    "warm": 2.0,
}


def _add_case(v: dict, kind: str) -> dict | None:
    """The add kernel's case of one peer's results ({"ms": summary, ...}), in this format or in the one
    before 2026-11-24 ({"empty_cache_ms": summary, "warm_cache_new_process_ms": summary})."""
    if _is(v.get(kind + "_ms")):
        return {"ms": v[kind + "_ms"]}
    cases = v.get(kind) if _is(v.get(kind)) else {}
    e = cases.get(_ADD_CASE[kind]) or cases.get("add")
    return e if _is(e) and _is(e.get("ms")) else None


def first_call_add_ms(v: dict, kind: str) -> float | None:
    e = _add_case(v, kind)
    return e["ms"]["median"] if e else None


def _ms_cell(ms: dict) -> str:
    spread = f" ({ms['min']:.1f}-{ms['max']:.1f})" if "min" in ms and "max" in ms else ""
    return f"{ms['median']:.1f} ms{spread}"


def _target(kind: str, case: str) -> float | None:
    if kind == "warm_cache_new_process":
        return FIRST_CALL_TARGETS_MS["warm"]
    if case in FIRST_CALL_TARGETS_MS:
        return FIRST_CALL_TARGETS_MS[case]
    if case.endswith(" forward + backward"):
        return FIRST_CALL_TARGETS_MS["forward + backward"]
    return FIRST_CALL_TARGETS_MS["forward"] if case.endswith(" forward") else None


def _with_pairs(cases: dict) -> dict:
    """The cases, with "<op> forward + backward" (sum of medians) after each op's backward."""
    out: dict = {}
    for case, e in cases.items():
        if not (_is(e) and _is(e.get("ms"))):
            continue
        out[case] = e
        f = cases.get(case[:-9] + " forward") if case.endswith(" backward") else None
        if _is(f) and _is(f.get("ms")):
            fp, ep = f.get("phase_ms") or {}, e.get("phase_ms") or {}
            out[case[:-9] + " forward + backward"] = {
                "ms": {"median": f["ms"]["median"] + e["ms"]["median"]},
                "phase_ms": {p: fp[p] + ep[p] for p in fp if p in ep},
                "compiles": (f.get("compiles") or 0) + (e.get("compiles") or 0),
            }
    return out


def _first_call_md(sec: dict) -> list[str]:
    res = sec.get("results") or {}
    k = res.get("kjit") if _is(res.get("kjit")) else None
    method = f" Method: {sec['method']}." if sec.get("method") else ""
    out = [
        "## First calls (import and CUDA context excluded)",
        "",
        f"Median (min-max) over {sec.get('repeats')} fresh cache directories; each time a first process "
        f"(empty cache) and a second one (warm disk cache).{method}",
        "",
        "### The add kernel, against the peers",
        "",
    ]
    rows = []
    for peer, v in res.items():
        if not _is(v):
            rows.append([peer, v, "-", "-", "-"])
            continue
        cells = [peer]
        ratios = []
        for kind in ("empty_cache", "warm_cache_new_process"):
            e = _add_case(v, kind)
            cells.append(_ms_cell(e["ms"]) if e else "-")
            kv, pv = (first_call_add_ms(k, kind) if k else None), first_call_add_ms(v, kind)
            ratios.append(_x(pv / kv) if kv and pv is not None else "-")
        rows.append(cells + ratios)
    out += _table(
        [
            "peer",
            "empty cache (kjit: first compile of the process)",
            "new process, warm cache",
            "kjit / peer (empty)",
            "kjit / peer (warm)",
        ],
        rows,
    )
    if not k or not any(_is(k.get(kind)) for kind in ("empty_cache", "warm_cache_new_process")):
        return out
    out += [
        "",
        "### kjit: every first call, and where its time went (ms; other = the rest: Python, launch, the op's own work)",
        "",
    ]
    phases = ["template", "key", "store", "compile", "module_load"]
    rows = []
    for kind, title in (("empty_cache", "empty cache"), ("warm_cache_new_process", "warm cache, new process")):
        for case, e in _with_pairs(k.get(kind) if _is(k.get(kind)) else {}).items():
            ms = e["ms"]
            spread = f" ({ms['min']:.1f}-{ms['max']:.1f})" if "min" in ms else ""
            ph = e.get("phase_ms") or {}
            other = ms["median"] - sum(ph.get(p, 0.0) for p in phases)
            t = _target(kind, case)
            verdict = "-" if t is None else (f"<= {t:g}: met" if ms["median"] <= t else f"<= {t:g}: over")
            rows.append(
                [title, case, f"{ms['median']:.1f}{spread}"]
                + [_num(ph.get(p), "{:.1f}") for p in phases]
                + [f"{other:.1f}", str(e.get("compiles", "-")), verdict]
            )
    return out + _table(["cache", "call", "ms"] + phases + ["other", "compiles", "target ms"], rows)


def _peers_in(rows: list[dict]) -> list[str]:
    order = ["copy", "eager", "torch.compile", "kjit", "kjit generic", "triton", "cupy"]
    seen = {p for r in rows for p in (r.get("gbps") or {})}
    return [p for p in order if p in seen] + sorted(seen - set(order))


def _bandwidth_rows(rows: list[dict], part: str) -> list[str]:
    peers = _peers_in(rows)
    others = [p for p in peers if p not in ("copy", "kjit", "kjit generic")]
    header = (
        ["op", "dtype", "size" if part == "sweep" else "shape"]
        + [f"{p} GB/s" for p in peers]
        + ["kjit min-max", "kjit / copy"]
        + [f"kjit / {p}" for p in others]
    )
    if "kjit generic" in peers:
        header.append("specialized / generic")
    body = []
    for r in rows:
        where = _size(r.get("size_bytes")) if part == "sweep" else _shape(r["shape"])
        if "gbps" not in r:
            body.append([r["op"], r["dtype"], where, "error: " + str(r.get("error"))] + ["-"] * (len(header) - 4))
            continue
        g, ms = r["gbps"], r["ms"]
        cells = [r["op"], r["dtype"], where] + [_num(g.get(p), "{:.0f}") for p in peers]
        if "kjit" in ms:
            cells.append(f"{r['bytes'] / ms['kjit']['max'] / 1e6:.0f}-{r['bytes'] / ms['kjit']['min'] / 1e6:.0f}")
            cells.append(f"{g['kjit'] / g['copy']:.0%}")
        else:
            cells += ["-", "-"]
        cells += [_x(g["kjit"] / g[p]) if "kjit" in g and p in g else "-" for p in others]
        if "kjit generic" in peers:
            cells.append(_x(g["kjit"] / g["kjit generic"]) if "kjit" in g and "kjit generic" in g else "-")
        body.append(cells)
    out = _table(header, body)
    errs = [
        f"- {r['op']} {r['dtype']} {_shape(r['shape'])}: {p}: {e}"
        for r in rows
        for p, e in (r.get("errors") or {}).items()
    ]
    if errs:
        out += ["", "Peers that failed:", ""] + errs
    return out


def _bandwidth_md(sec: dict) -> list[str]:
    out = [
        "## Bandwidth of the kernel library",
        "",
        f"GB/s of the bytes each op reads and writes once; median of {sec.get('reps')} CUDA-event timings of "
        f"{sec.get('inner', 10)} back-to-back calls; a device copy of the same bytes in the same run. "
        '"kjit / peer": kjit GB/s over the peer\'s (above 1: kjit faster).',
        "",
    ]
    if sec.get("sweep"):
        out += ["### Size sweep", ""] + _bandwidth_rows(sec["sweep"], "sweep") + [""]
    if sec.get("reference"):
        out += ["### Reference table", ""] + _bandwidth_rows(sec["reference"], "reference")
    return out


def _recompile_md(sec: dict) -> list[str]:
    res = sec.get("results") or {}
    out = [
        "## Changing a scalar: new compiles",
        "",
        f"{sec.get('runtime_changes')} changes of a runtime scalar; {sec.get('specialized_values')} distinct values "
        "of a specialized one (counts exclude the warm-up call).",
        "",
    ]
    rows = []
    for name, v in res.items():
        if not _is(v):
            rows.append([name, v, "-", "-", "-", "-", "-"])
            continue
        rows.append(
            [
                name,
                str(v["changes"]),
                str(v["distinct_values"]),
                "?" if v.get("compiles") is None else str(v["compiles"]),
                f"{v['seconds']:.3f}",
                _num(v.get("compile_ms"), "{:.0f}"),
                v.get("expected", ""),
            ]
        )
    return out + _table(
        ["case", "value changes", "distinct values", "new compiles", "seconds", "compile ms (kjit.stats)", "expected"],
        rows,
    )


def _small_cell(p: dict, contender: str) -> str:
    v = (p.get("us") or {}).get(contender)
    if _is(v):
        return f"{v['median']:.2f}"
    reason = (p.get("skipped") or {}).get(contender)
    return "-" if reason is None else reason.split(":")[0]  # "skipped" / "failed"; the reasons follow the tables


def _small_ratio(p: dict, peer: str, limit: float) -> str:
    r = p.get(small.RATIO_KEYS[peer])
    if r is None:
        return "-"
    return f"**{r:.2f}x**" if r > limit else f"{r:.2f}x"


def _small_spread(s: dict | None, what: str) -> str:
    if not s:
        return f"no point has both a kjit and a {what} figure"
    return f"median kjit / {what} {s['median']:.2f}x, worst {s['worst']:.2f}x ({s['worst_at']})"


def small_summary_line(sec: dict) -> str:
    """The one-line verdict of the small section against its targets."""
    t = {**small.TARGETS, **(sec.get("targets") or {})}
    s = small.summary(sec)  # from the points, never a stale copy
    eager = _small_spread(s["vs_eager"], "eager")
    if s["vs_eager"]:
        eager += f" (median target <= {t['eager_median_max']:.2f}x: {'met' if s['median_met'] else 'missed'})"
    line = (
        f"{eager}; {_small_spread(s['vs_compiled'], 'torch.compile')}; misses: {s['misses_vs_eager']} vs "
        f"eager (> {t['eager_max']:.2f}x), {s['misses_vs_compiled']} vs torch.compile "
        f"(> {t['compiled_max']:.2f}x), over {s['points']} points"
    )
    if s["kjit_failed"]:
        line += f"; kjit has no figure at {s['kjit_failed']} points"
    return line + "."


def _sequence_md(sec: dict) -> list[str]:
    t = sec.get("timing") or {}
    out = [
        "## Sequence ops (causal_conv1d, linear_scan)",
        "",
        f"GPU time per call (CUDA events around {t.get('inner')} back-to-back calls, median of {t.get('reps')}). "
        "GB/s: bytes read and written once over time; \"of copy\": the copy's time for the same bytes over kjit's. "
        "\"kjit speedup\": the peer's time over kjit's (below 1: the peer is faster).",
        "",
    ]
    out += [f"- {v['target']}: **{'met' if v['met'] else 'missed'}** ({v['detail']})" for v in sequence.verdicts(sec)]
    out += [""]
    contenders = ["kjit", "eager", "torch.compile", "python loop", "copy"]
    rows = []
    for p in sec.get("points") or []:
        ms = p.get("ms") or {}
        cells = [f"{ms[c]['median']:.3f}" if _is(ms.get(c)) else "-" for c in contenders]
        gb = (p.get("gbps") or {}).get("kjit")
        rows.append(
            [p["op"], p["pass"], p["dtype"], _shape(p["shape"])]
            + cells
            + [f"{gb:.0f}" if gb else "-", f"{p['of_copy']:.0%}" if p.get("of_copy") else "-"]
            + [", ".join(f"{k} {_x(v)}" for k, v in (p.get("speedup") or {}).items()) or "-"]
        )
    out += _table(
        ["op", "pass", "dtype", "shape"] + [f"{c} ms" for c in contenders] + ["kjit GB/s", "of copy", "kjit speedup"],
        rows,
    )
    out += [f"- skipped: {s}" for s in sec.get("skipped") or []]
    return out


def _small_md(sec: dict) -> list[str]:
    t = {**small.TARGETS, **(sec.get("targets") or {})}
    points = sec.get("points") or []
    s = small.summary(sec)  # from the points, never a stale copy
    out = [
        f"## Time per call at small sizes (rows x {sec.get('cols', small.COLS)})",
        "",
        f"Microseconds per call of back-to-back calls synchronized at the end: median of {sec.get('reps')} "
        f"batches of {sec.get('calls')} calls, the contenders taking turns after {sec.get('warmup')} warm-up "
        "calls each. torch.compile: mode default, dynamic=False, compiled once per shape before timing "
        f"({sec.get('compile_s', 0):.0f} s of compiles, budget {sec.get('compile_budget_s', 0):.0f} s). "
        f"`{small.POOL}` runs on NCHW [rows, 4, 32, 32]. \"kjit / peer\": kjit's time over the peer's "
        "(below 1: kjit faster; bold: a miss).",
        "",
        f"Targets: kjit <= {t['eager_max']:.2f}x eager at every size, median <= {t['eager_median_max']:.2f}x; "
        f"kjit <= {t['compiled_max']:.2f}x torch.compile.",
        "",
        "**Summary**: " + small_summary_line(sec),
        "",
    ]
    by_dtype = [f"{d} {v['median']:.2f}x (worst {v['worst']:.2f}x)" for d, v in (s.get("by_dtype") or {}).items() if v]
    if by_dtype:
        out += ["Median kjit / eager by dtype: " + ", ".join(by_dtype) + ".", ""]
    order = {op: i for i, op in enumerate(sec.get("ops") or small.OPS)}
    for d in dict.fromkeys(p["dtype"] for p in points):
        rows = []
        for p in sorted((p for p in points if p["dtype"] == d), key=lambda p: (order.get(p["op"], 99), p["rows"])):
            if "error" in p:
                rows.append([p["op"], str(p["rows"]), "error: " + str(p["error"]), "-", "-", "-", "-"])
                continue
            rows.append(
                [p["op"], str(p["rows"])]
                + [_small_cell(p, c) for c in small.CONTENDERS]
                + [_small_ratio(p, "eager", t["eager_max"]), _small_ratio(p, "torch.compile", t["compiled_max"])]
            )
        out += (
            [f"### {d}", ""]
            + _table(
                ["op", "rows", "kjit us", "eager us", "torch.compile us", "kjit / eager", "kjit / torch.compile"], rows
            )
            + [""]
        )
    m = small.misses(sec)
    out += ["### Misses", ""]
    out += (
        [
            f"- vs {x['peer']} (target <= {x['limit']:.2f}x): {x['op']} {x['dtype']} rows {x['rows']}: "
            f"{x['ratio']:.2f}x ({x['kjit_us']:.2f} us for kjit, {x['peer_us']:.2f} us for {x['peer']})"
            for x in m
        ]
        if m
        else ["- none: every point with figures meets its target"]
    )
    skipped = [f"- {small.where(p)}: {c}: {r}" for p in points for c, r in (p.get("skipped") or {}).items()]
    if skipped:
        out += ["", "Skipped or failed:", ""] + skipped
    return out


def _matmul_cell(p: dict, contender: str) -> str:
    v = (p.get("tflops") or {}).get(contender)
    if v is not None:
        return f"{v:.1f}"
    reason = (p.get("skipped") or {}).get(contender)
    return "-" if reason is None else reason.split(":")[0]  # "skipped" / "failed"; the reasons follow the tables


def matmul_summary_lines(sec: dict) -> list[str]:
    """The matmul section's targets, each "met" / "missed" with its figure (from the points, never a stale
    copy), and the figures without a target."""
    s = matmul.summary(sec)
    out = [
        f"- {v['target']}: **{matmul.verdict_text(v)}**" + (f" ({v['detail']})" if v["detail"] else "")
        for v in matmul.verdicts(sec)
    ]
    if s["square"] is not None:
        out.append(f"- kjit / cuBLAS at {matmul.SQUARE}^3: {s['square']:.2f}x (no target)")
    if s["swiglu_compiled"]:
        out.append(f"- swiglu: kjit / torch.compile median {s['swiglu_compiled']['median']:.2f}x (no target)")
    if s["backward_compiled"]:
        b = s["backward_compiled"]
        out.append(f"- backward: kjit / torch.compile median {b['median']:.2f}x, min {b['min']:.2f}x (no target)")
    if s["kjit_failed"]:
        out.append(f"- kjit has no figure at {s['kjit_failed']} of {s['points']} points")
    return out


def _matmul_md(sec: dict) -> list[str]:
    points = sec.get("points") or []
    tune = sec.get("kjit_tune")
    out = (
        [
            f"## Matrix ops ({sec.get('dtype', matmul.DTYPE)}, TFLOP/s)",
            "",
            f"TFLOP/s = 2 M N K / time (swiglu: 2 M 2F K; backward: 4 M N K, dX and dW); time: median of {sec.get('reps')} CUDA-event timings of "
            f"{sec.get('inner', matmul.INNER)} back-to-back calls after {sec.get('warmup')} warm-up calls, each "
            f"contender cycling through copies of its operands spanning >= {sec.get('l2_factor', matmul.L2_FACTOR)}x "
            f"the L2 ({(sec.get('l2_bytes') or 0) / MIB:.0f} MiB): no call finds its weights in L2. torch.compile: "
            f"mode default, dynamic=False ({sec.get('compile_s', 0):.0f} s of compiles, budget "
            f'{sec.get("compile_budget_s", 0):.0f} s). "kjit / peer": kjit TFLOP/s over the peer\'s (above 1: '
            f"kjit faster). KJIT_TUNE={tune!r}"
            + (" (kjit tuned its configurations)" if tune not in ("", "0", None) else " (no tuning)")
            + ".",
            "",
            "**Targets**:",
            "",
        ]
        + matmul_summary_lines(sec)
        + [""]
    )
    titles = {
        "plain": "GEMM: kjit.ops.linear(x, w) vs F.linear (cuBLAS)",
        "gelu": 'Fused bias + gelu: kjit.ops.linear(x, w, b, activation="gelu") vs F.gelu(F.linear(x, w, b))',
        "swiglu": "Gated MLP: kjit.ops.linear_swiglu(x, w_gate_up) vs F.silu(F.linear(x, wg)) * F.linear(x, wu)",
        "backward": "Backward (dX + dW) of kjit.ops.linear(x, w) vs F.linear's (cuBLAS) and torch.compile(F.linear)'s",
    }
    for kind in matmul.KINDS:
        pts = [p for p in points if p.get("kind") == kind]
        if not pts:
            continue
        peers = matmul.CONTENDERS[kind][1:]
        rows = []
        for p in pts:
            if "error" in p:
                rows.append(
                    [str(p["m"]), str(p["n"]), str(p["k"]), "error: " + str(p["error"])] + ["-"] * (2 * len(peers))
                )
                continue
            rows.append(
                [str(p["m"]), str(p["n"]), str(p["k"])]
                + [_matmul_cell(p, c) for c in matmul.CONTENDERS[kind]]
                + [_x(p.get(matmul.RATIO_KEYS[peer])) for peer in peers]
            )
        out += (
            [f"### {titles[kind]}", ""]
            + _table(
                ["M", "F" if kind == "swiglu" else "N", "K"]
                + [f"{c} TFLOP/s" for c in matmul.CONTENDERS[kind]]
                + [f"kjit / {peer}" for peer in peers],
                rows,
            )
            + [""]
        )
    c = sec.get("compile")
    if isinstance(c, dict):
        out += ["### Compile time of the first calls (fresh process, empty cache)", ""]
        if "error" in c:
            out += [f"failed: {c['error']}", ""]
        else:
            rows = []
            for case, e in (c.get("cases") or {}).items():
                ms = e["ms"]
                ph = e.get("phase_ms") or {}
                rows.append(
                    [
                        case,
                        f"{ms['median']:.0f} ({ms['min']:.0f}-{ms['max']:.0f})",
                        str(e.get("compiles", "-")),
                        _num(ph.get("compile"), "{:.0f}"),
                    ]
                )
            out += [
                f"Median (min-max) over {c.get('repeats')} fresh processes, N={c.get('n')} K={c.get('k')}; "
                "kjit's first compile of the process (an add_constant) is paid before the clock.",
                "",
            ]
            out += _table(["call", "ms", "compiles", "NVRTC compile ms"], rows) + [""]
    skipped = [f"- {matmul.where(p)}: {k}: {r}" for p in points for k, r in (p.get("skipped") or {}).items()]
    if skipped:
        out += ["Skipped or failed:", ""] + skipped
    return out


def _spec_labels(specs: dict) -> str:
    """ "A / B / C" of the template arguments that differ between the specializations ("BLOCK=256 / 128 /
    512"), or all of them when none differs."""
    steps = [s for s in library_headers.STEPS if _is(specs.get(s))]
    keys = list(dict.fromkeys(k for s in steps for k in specs[s]))
    vary = [k for k in keys if len({str(specs[s].get(k)) for s in steps}) > 1] or keys
    # A parameter a specialization leaves to its default is not shown for it.
    return " / ".join(", ".join(f"{k}={specs[s][k]}" for k in vary if k in specs[s]) for s in steps)


def _lib_cell(e: dict | None, ref: dict | None = None) -> str:
    """One step under one setting: "median ms (min-max)", with "on / off" of the medians after the on cell;
    "failed" when no repetition gave a figure."""
    if not _is(e) or not _is(e.get("ms")):
        return "failed" if _is(e) and e.get("errors") else "-"
    ms = e["ms"]
    f = "{:.0f}" if ms["median"] >= 100 else "{:.1f}"  # compiles take seconds: whole ms are enough
    cell = f.format(ms["median"]) + " ms"
    if "min" in ms and "max" in ms:
        cell += f" ({f.format(ms['min'])}-{f.format(ms['max'])})"
    if _is(ref) and _is(ref.get("ms")) and ref["ms"]["median"]:
        cell += f", {e['ms']['median'] / ref['ms']['median']:.2f}x"
    if e.get("errors"):
        cell += f" ({len(e['errors'])} failed)"
    return cell


def _library_headers_md(sec: dict) -> list[str]:
    lh = library_headers
    env = sec.get("env", lh.ENV)
    out = [
        f"## Kernels on CUDA's C++ libraries: compiles with NVRTC's PCH off and on ({sec.get('arch')})",
        "",
        f"Milliseconds, median (min-max) over {sec.get('reps')} fresh cache directories per kernel and setting "
        f"of {env}, compile-only: **first**: a new process, empty cache, from Template.from_file to "
        "specialization A (the passes that learn the macro-computed includes included); **second spec**: "
        "specialization B in the same process; **warm-index first**: a new process on the same cache (the "
        "header index knows the learned includes), from Template.from_file to specialization C. NVRTC's "
        "start-up is paid before the clock. The ratio after a PCH-on figure: on / off of the medians (below 1: "
        "PCH faster). headers: the template's headers, and the bytes of those found on the include path.",
        "",
    ]
    rows, failed = [], {}
    for name, v in (sec.get("kernels") or {}).items():
        if not _is(v):
            rows.append([name, str(v)] + ["-"] * 8)
            continue
        pch = v.get("pch") or {}
        cells = [name, _spec_labels(v.get("specs") or {})]
        for step in lh.STEPS:
            off = ((pch.get("off") or {}).get("steps") or {}).get(step)
            on = ((pch.get("on") or {}).get("steps") or {}).get(step)
            cells += [_lib_cell(off), _lib_cell(on, off)]
            for setting, e in (("off", off), ("on", on)):
                for err in (e or {}).get("errors") or []:
                    # One note per kernel and cause: the same cause in several steps and settings is listed once.
                    g = failed.setdefault(
                        (name, lh.cause(err)), {"reason": lh.reason(err), "steps": {}, "settings": {}}
                    )
                    g["steps"][lh.STEP_TITLES[step]] = g["settings"][setting] = None
        h = v.get("headers") if _is(v.get("headers")) else {}
        cells += [str(h.get("count", "-")), f"{h['bytes'] / 1024:.0f} KiB" if h.get("bytes") is not None else "-"]
        rows.append(cells)
    header = ["kernel", "A / B / C"]
    for step in lh.STEPS:
        header += [f"{lh.STEP_TITLES[step]}, PCH off", f"{lh.STEP_TITLES[step]}, PCH on"]
    out += _table(header + ["headers", "header bytes"], rows)
    reported = []
    for setting in sec.get("settings") or lh.SETTINGS:
        got = [
            (name, ((v.get("pch") or {}).get(setting) or {}))
            for name, v in (sec.get("kernels") or {}).items()
            if _is(v)
        ]
        said = [json.dumps(e["kjit_reported"], sort_keys=True) for _, e in got if e.get("kjit_reported")]
        warned = [w.splitlines()[-1][:200] for _, e in got for w in e.get("stderr") or []]
        line = f"- {env}={setting}: " + (
            "kjit reported " + "; ".join(dict.fromkeys(said))
            if said
            else "kjit reported no PCH setting (the figures are under the variable's value "
            "only; a kjit that does not know it ignores it)"
        )
        if warned:
            line += "; the processes printed: " + "; ".join(dict.fromkeys(warned))
        reported.append(line)
    if reported:
        out += ["", "The setting as kjit ran it:", ""] + reported
    if failed:
        out += ["", "Failed:", ""] + [
            f"- {name} ({', '.join(g['steps'])}; {env}={', '.join(g['settings'])}): {g['reason']}"
            for (name, _), g in failed.items()
        ]
    return out


def markdown(result: dict) -> str:
    m = result.get("machine", {})
    peers = m.get("peers") or {}
    lines = [
        f"# kjit bench: {m.get('gpu') or 'no GPU'} ({m.get('date')})",
        "",
        f"driver {m.get('driver')}, CUDA {m.get('cuda')}, torch {m.get('torch')}, kjit {m.get('kjit')}"
        + ("; quick run" if result.get("quick") else ""),
        "",
        "Peers: " + ", ".join(f"{k} {v}" for k, v in peers.items()),
        "",
    ]
    for key, fn in (
        ("overhead", _overhead_md),
        ("first_call", _first_call_md),
        ("bandwidth", _bandwidth_md),
        ("recompile", _recompile_md),
        ("small", _small_md),
        ("matmul", _matmul_md),
        ("sequence", _sequence_md),
        ("library_headers", _library_headers_md),
    ):
        sec = result.get(key)
        if sec is None:
            continue
        if "error" in sec and len(sec) == 1:
            lines += [f"## {key}", "", f"failed: {sec['error']}", ""]
            continue
        lines += fn(sec) + [""]
        if "error" in sec:  # failed part way: what it measured before is above
            lines += [f"The {key} section failed part way: {sec['error']}", ""]
    bl = behind(result)
    clear = [b for b in bl if b["ratio"] < 1 - NOISE]
    close = [b for b in bl if b["ratio"] >= 1 - NOISE]
    lines += ["## Where kjit is behind", ""]
    lines += [_behind_line(b) for b in clear] if clear else ["- nowhere in these figures"]
    if close:
        lines += [
            "",
            f"Peers ahead by less than {NOISE:.0%} (within run-to-run spread): "
            + "; ".join(f"{b['figure']}: {b['peer']} {b['ratio']:.3f}x" for b in close)
            + ".",
        ]
    return "\n".join(lines) + "\n"
