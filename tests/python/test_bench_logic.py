"""kjit.bench without a GPU: statistics, Markdown, plots, the JSON round trip through --report, the
no-GPU exit code and peer detection (the measuring code runs on the GPU machine only)."""

import json
import os
import subprocess
import sys
import time

import pytest

from kjit.bench import machine, report, stats
from kjit.bench.__main__ import NO_GPU, main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _ms(median, lo=None, hi=None, n=10):
    return {"median": median, "min": lo if lo is not None else median, "max": hi if hi is not None else median, "n": n}


def _row(op, size, ms: dict, nbytes=2 << 30):
    g = {k: stats.gbps(nbytes, v["median"]) for k, v in ms.items()}
    return {
        "op": op,
        "dtype": "float32",
        "shape": [65536, 4096],
        "size_bytes": size,
        "bytes": nbytes,
        "ms": ms,
        "gbps": g,
    }


def _case(median, lo=None, hi=None, compile=0.0, compiles=1):
    return {
        "ms": _ms(median, lo, hi) if lo is not None else _ms(median),
        "compiles": compiles,
        "phase_ms": {"template": 2.0, "key": 0.1, "store": 0.2, "compile": compile, "module_load": 1.0},
    }


def synthetic() -> dict:
    mib = 1 << 20
    return {
        "schema": 1,
        "quick": True,
        "sections": ["overhead", "first_call", "bandwidth", "recompile"],
        "machine": {
            "date": "2026-11-24T10:00:00+00:00",
            "gpu": "NVIDIA H200",
            "driver": "580.159.04",
            "cuda": "13.0",
            "torch": "2.11.0+cu130",
            "kjit": "0.1.0",
            "peers": {
                "triton": "3.6.0",
                "cupy": "skipped: cupy not installed",
                "torch.compile": "2.11.0",
                "jiterator": "2.11.0",
            },
        },
        "overhead": {
            "n": 1024,
            "dtype": "float32",
            "calls": 1000,
            "reps": 7,
            "results": {
                "torch.add(x, c, out=y)": {
                    "kind": "peer",
                    "vs": "kjit Kernel.launch",
                    "us": _ms(6.4, 6.3, 6.8),
                    "ratio_vs_torch_add_out": 1.0,
                },
                "torch x + c": {"kind": "peer", "vs": "kjit.ops.add_constant(x, c)", "us": _ms(7.1, 7.0, 7.3)},
                "kjit.ops.add_constant(x, c)": {"kind": "kjit", "vs": None, "us": _ms(6.8, 6.7, 6.9)},
                "kjit Kernel.launch": {"kind": "kjit", "vs": None, "us": _ms(3.72, 3.66, 3.88)},
                "bare cuLaunchKernel (ctypes, same process)": {
                    "kind": "peer",
                    "vs": "kjit Kernel.launch",
                    "us": _ms(3.24, 3.2, 3.3),
                },
                "cupy RawKernel launch": "skipped: cupy not installed",
            },
        },
        "first_call": {
            "repeats": 2,
            "method": "fresh processes",
            "results": {
                "kjit": {
                    "empty_cache": {
                        "add, first kjit compile of the process": _case(49.0, 48.0, 50.0, compile=40.0),
                        "add, new specialization": _case(21.0, compile=15.0),
                        "softmax forward": _case(70.0, compile=55.0),
                        "softmax backward": _case(35.0, compile=30.0),
                    },
                    "warm_cache_new_process": {
                        "add": _case(4.6, 4.5, 4.7, compiles=0),
                        "softmax": _case(3.5, compiles=0),
                    },
                },
                "cupy": {
                    "empty_cache": {"add": {"ms": _ms(44.0)}},
                    "warm_cache_new_process": {"add": {"ms": _ms(15.5)}},
                },
                "triton": {
                    "empty_cache": {"add": {"ms": _ms(1047.0)}},
                    "warm_cache_new_process": {"add": {"ms": _ms(456.0)}},
                },
                "jiterator": "failed: timed out after 120 s (killed)",
            },
        },
        "bandwidth": {
            "warmup": 3,
            "reps": 10,
            "inner": 10,
            "sizes": [mib, 1024 * mib],
            "sweep": [
                _row(
                    "x * 0.5",
                    mib,
                    {
                        "copy": _ms(0.5),
                        "eager": _ms(0.5),
                        "torch.compile": _ms(0.4),
                        "kjit": _ms(0.5),
                        "triton": _ms(0.6),
                    },
                ),
                _row("x * 0.5", 1024 * mib, {"copy": _ms(0.5), "eager": _ms(0.5), "kjit": _ms(0.5, 0.45, 0.55)}),
                {"op": "relu", "dtype": "float32", "shape": [262144], "size_bytes": mib, "error": "RuntimeError: oom"},
            ],
            "reference": [
                dict(
                    _row(
                        "layer_norm",
                        None,
                        {
                            "copy": _ms(0.5),
                            "eager": _ms(0.6),
                            "torch.compile": _ms(0.48),
                            "kjit": _ms(0.5),
                            "kjit generic": _ms(0.85),
                        },
                    ),
                    errors={"cupy": "TypeError: float32 only"},
                )
            ],
        },
        "recompile": {
            "runtime_changes": 1000,
            "specialized_values": 20,
            "results": {
                "kjit runtime scalar": {
                    "kind": "kjit",
                    "mode": "runtime",
                    "changes": 1000,
                    "distinct_values": 1000,
                    "compiles": 0,
                    "compile_ms": 0.0,
                    "seconds": 0.02,
                    "expected": "0 compiles",
                },
                "kjit specialized scalar": {
                    "kind": "kjit",
                    "mode": "specialized",
                    "changes": 20,
                    "distinct_values": 20,
                    "compiles": 20,
                    "compile_ms": 800.0,
                    "seconds": 0.9,
                    "expected": "20 compiles",
                },
                "torch.compile Python float": {
                    "kind": "peer",
                    "mode": "runtime",
                    "changes": 1000,
                    "distinct_values": 1000,
                    "compiles": 1,
                    "seconds": 3.0,
                },
                "triton runtime argument": {
                    "kind": "peer",
                    "mode": "runtime",
                    "changes": 1000,
                    "distinct_values": 1000,
                    "compiles": 0,
                    "seconds": 0.01,
                },
                "triton tl.constexpr": {
                    "kind": "peer",
                    "mode": "specialized",
                    "changes": 20,
                    "distinct_values": 20,
                    "compiles": 20,
                    "seconds": 6.0,
                },
            },
            "vs": {
                "torch.compile Python float": "kjit runtime scalar",
                "triton runtime argument": "kjit runtime scalar",
                "triton tl.constexpr": "kjit specialized scalar",
            },
        },
    }


# -- stats -----------------------------------------------------------------------------------------------
def test_summarize():
    assert stats.summarize([3.0, 1.0, 2.0, 10.0]) == {"median": 2.5, "min": 1.0, "max": 10.0, "n": 4}
    assert stats.summarize([5]) == {"median": 5.0, "min": 5.0, "max": 5.0, "n": 1}
    with pytest.raises(ValueError):
        stats.summarize([])


def test_gbps_and_ratios():
    assert stats.gbps(2e9, 1.0) == pytest.approx(2000.0)  # 2 GB in 1 ms
    s = stats.gbps_summary(1e9, _ms(1.0, 0.5, 2.0))
    assert (s["median"], s["min"], s["max"]) == pytest.approx((1000.0, 500.0, 2000.0))
    assert stats.speedup(peer_time=6.0, kjit_time=3.0) == 2.0
    assert stats.ratio(4.0, 2.0) == 2.0 and stats.ratio(1.0, 0) is None and stats.ratio(None, 1.0) is None


def test_cpu_us_with_a_fake_clockless_function():
    calls = []
    s = stats.cpu_us(lambda: calls.append(1), calls=10, reps=3, warmup=5, sync=lambda: None)
    assert s["n"] == 3 and s["min"] <= s["median"] <= s["max"] and len(calls) == 35


# -- report ----------------------------------------------------------------------------------------------
def test_file_prefix_and_gpu_slug():
    assert report.file_prefix(synthetic()) == "2026-11-24-H200-kjit-bench"
    assert machine.gpu_slug("NVIDIA H100 80GB HBM3") == "H100"
    assert machine.gpu_slug("NVIDIA GeForce RTX 4090") == "RTX-4090"
    assert machine.gpu_slug(None) == "gpu"


def test_behind_list():
    b = report.behind(synthetic())
    got = {(x["section"], x["peer"], x["figure"]): x["ratio"] for x in b}
    assert got[
        (
            "overhead",
            "bare cuLaunchKernel (ctypes, same process)",
            "CPU cost per call: kjit Kernel.launch vs bare cuLaunchKernel (ctypes, same process)",
        )
    ] == pytest.approx(3.24 / 3.72)
    assert got[("first_call", "cupy", "first call of the add kernel, empty cache")] == pytest.approx(44 / 49)
    assert got[("bandwidth", "torch.compile", "x * 0.5 float32 1 MiB (sweep)")] == pytest.approx(0.4 / 0.5)
    assert got[("bandwidth", "torch.compile", "layer_norm float32 65536x4096 (reference)")] == pytest.approx(0.48 / 0.5)
    # Slower peers, copy and kjit's own generic variant are never listed; nor is triton (slower) here.
    assert not any(
        x["peer"] in ("copy", "kjit generic", "triton", "eager", "torch x + c")
        for x in b
        if x["section"] == "bandwidth" or x["section"] == "overhead"
    )
    assert not any(x["section"] == "first_call" and x["peer"] == "triton" for x in b)
    # Same compile counts (0), but Triton's 1000 launches took less time than kjit's calls.
    assert got[
        ("recompile", "triton runtime argument", "seconds for 1000 changes (kjit runtime scalar)")
    ] == pytest.approx(0.5)
    assert len(b) == 5 and all(x["ratio"] < 1 for x in b)


def test_behind_recompile_counts():
    r = synthetic()
    r["recompile"]["results"]["kjit runtime scalar"]["compiles"] = 3
    b = [x for x in report.behind(r) if x["section"] == "recompile"]
    assert {x["peer"] for x in b} == {"torch.compile Python float", "triton runtime argument"}


def test_markdown_cells():
    md = report.markdown(synthetic())
    assert md.startswith("# kjit bench: NVIDIA H200 (2026-11-24T10:00:00+00:00)")
    assert "driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130, kjit 0.1.0; quick run" in md
    # Overhead: median, min-max, ratio vs torch.add(out=), ratio vs the kjit entry compared with.
    assert (
        "| bare cuLaunchKernel (ctypes, same process) | 3.24 us | 3.20-3.30 | - | kjit Kernel.launch | 0.87x | peer |"
    ) in md
    assert "| kjit Kernel.launch | 3.72 us | 3.66-3.88 | - | (kjit) | - | kjit |" in md
    assert "| cupy RawKernel launch | skipped: cupy not installed |" in md
    # First call: the add kernel against the peers (kjit's first compile of the process against theirs).
    assert "| cupy | 44.0 ms (44.0-44.0) | 15.5 ms (15.5-15.5) | 0.90x | 3.37x |" in md
    assert "| jiterator | failed: timed out after 120 s (killed) |" in md
    # kjit's breakdown: phases, the rest, compiles, the target; an op's forward + backward summed.
    assert (
        "| empty cache | add, first kjit compile of the process | 49.0 (48.0-50.0) | 2.0 | 0.1 | 0.2 | 40.0 | "
        "1.0 | 5.7 | 1 | <= 60: met |"
    ) in md
    assert (
        "| empty cache | softmax forward | 70.0 (70.0-70.0) | 2.0 | 0.1 | 0.2 | 55.0 | 1.0 | 11.7 | 1 | <= 60: over |"
        in md
    )
    assert (
        "| empty cache | softmax forward + backward | 105.0 | 4.0 | 0.2 | 0.4 | 85.0 | 2.0 | 13.4 | 2 | <= 100: over |"
        in md
    )
    assert (
        "| warm cache, new process | softmax | 3.5 (3.5-3.5) | 2.0 | 0.1 | 0.2 | 0.0 | 1.0 | 0.2 | 0 | <= 2: over |"
        in md
    )
    # Bandwidth sweep: 2 GiB moved in 0.5 ms = 4295 GB/s; kjit min-max from the ms range.
    assert "| x * 0.5 | float32 | 1 GiB | 4295 | 4295 | - | 4295 | - | 3905-4772 | 100% | 1.00x | - | - |" in md
    assert (
        "| x * 0.5 | float32 | 1 MiB | 4295 | 4295 | 5369 | 4295 | 3579 | 4295-4295 | 100% | 1.00x | 0.80x | 1.20x |"
        in md
    )
    assert "| relu | float32 | 1 MiB | error: RuntimeError: oom |" in md
    # Reference table with the specialized / generic column and the failed peer.
    assert (
        "| layer_norm | float32 | 65536x4096 | 4295 | 3579 | 4474 | 4295 | 2526 | 4295-4295 | 100% | 1.20x | "
        "0.96x | 1.70x |" in md
    )
    assert "- layer_norm float32 65536x4096: cupy: TypeError: float32 only" in md
    # Recompile.
    assert "| kjit runtime scalar | 1000 | 1000 | 0 | 0.020 | 0 | 0 compiles |" in md
    assert "| triton tl.constexpr | 20 | 20 | 20 | 6.000 | - |  |" in md
    # The behind list, computed from the data.
    behind = md.split("## Where kjit is behind")[1]
    assert (
        "- bandwidth: layer_norm float32 65536x4096 (reference): torch.compile is faster, kjit at 0.96x "
        "(4295 GB/s for kjit, 4474 GB/s for torch.compile)"
    ) in behind
    assert "- first_call: first call of the add kernel, empty cache: cupy is faster, kjit at 0.90x" in behind
    assert "- overhead: CPU cost per call: kjit Kernel.launch vs bare cuLaunchKernel" in behind
    assert "- recompile: seconds for 1000 changes (kjit runtime scalar): triton runtime argument is faster" in behind
    assert behind.count("\n- ") == 5


def test_markdown_lists_near_ties_apart():
    r = synthetic()
    ref = [x for x in r["bandwidth"]["reference"] if x["op"] == "layer_norm"][0]
    ref["gbps"]["torch.compile"] = ref["gbps"]["kjit"] / 0.99  # ahead by 1%: within the spread
    md = report.markdown(r)
    behind = md.split("## Where kjit is behind")[1]
    assert "layer_norm float32 65536x4096 (reference): torch.compile is faster" not in behind
    assert behind.count("\n- ") == 4
    assert (
        "Peers ahead by less than 2% (within run-to-run spread): layer_norm float32 65536x4096 (reference): "
        "torch.compile 0.990x."
    ) in behind


def test_markdown_nothing_behind_and_failed_section():
    r = {"machine": {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-24"}, "bandwidth": {"error": "boom"}}
    md = report.markdown(r)
    assert "## bandwidth\n\nfailed: boom" in md
    assert md.rstrip().endswith("- nowhere in these figures")


# -- plots and the CLI -----------------------------------------------------------------------------------
def check_pngs(paths):
    """Each of `paths` is a PNG file of some size (a plot with something drawn)."""
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == PNG_MAGIC
        assert os.path.getsize(p) > 1000


def check_section_round_trip(tmp_path, capsys, results, section):
    """`--report FILE --only SECTION` of saved results prints what report.markdown() makes of them."""
    src = tmp_path / f"{section}.json"
    report.write_json(results, str(src))
    assert main(["--report", str(src), "--out", str(tmp_path / "o"), "--only", section]) == 0
    assert capsys.readouterr().out == report.markdown(results)


def test_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from kjit.bench import plots

    paths = plots.render(synthetic(), str(tmp_path), "p")
    names = sorted(os.path.basename(p) for p in paths)
    assert names == ["p-bandwidth.png", "p-first_call.png", "p-overhead.png"]
    check_pngs(paths)


def test_report_round_trip(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    src = tmp_path / "in.json"
    report.write_json(synthetic(), str(src))
    assert report.load_json(str(src)) == json.loads(json.dumps(synthetic()))
    out = tmp_path / "out"
    assert main(["--report", str(src), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    md_file = out / "2026-11-24-H200-kjit-bench.md"
    assert md_file.read_text() == printed == report.markdown(synthetic())
    for plot in ("bandwidth", "overhead", "first_call"):
        assert (out / f"2026-11-24-H200-kjit-bench-{plot}.png").read_bytes()[:8] == PNG_MAGIC


def test_report_missing_file(tmp_path, capsys):
    assert main(["--report", str(tmp_path / "nope.json"), "--out", str(tmp_path)]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_bad_only_is_a_usage_error():
    with pytest.raises(SystemExit) as e:
        main(["--only", "overhead,nonsense", "--report", "x.json"])
    assert e.value.code == 2


def test_no_gpu_exit_code(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    r = subprocess.run(
        [sys.executable, "-m", "kjit.bench", "--quick", "--out", str(tmp_path / "o")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert r.returncode == 2, r.stderr
    assert NO_GPU in r.stderr
    assert NO_GPU == "no CUDA device: nothing to measure; use --report FILE.json to render saved results"
    assert not (tmp_path / "o").exists()


# -- peer detection --------------------------------------------------------------------------------------
def test_detect_missing_module():
    assert machine.detect_module("kjit_no_such_module_xyz") == "skipped: kjit_no_such_module_xyz not installed"
    assert machine.detect_module("json") != "" and not machine.detect_module("json").startswith("skipped")


def test_detect_broken_module(tmp_path, monkeypatch):
    (tmp_path / "kjit_broken_peer.py").write_text("raise RuntimeError('half installed')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    v = machine.detect_module("kjit_broken_peer")
    assert v.startswith("skipped: kjit_broken_peer import failed: RuntimeError: half installed")


def test_peers_never_raise():
    p = machine.peers()
    assert set(p) == {"triton", "cupy", "torch.compile", "jiterator"}
    assert all(isinstance(v, str) and v for v in p.values())
    assert not machine.available({"cupy": "skipped: x"}, "cupy") and machine.available({"a": "1.0"}, "a")
    assert not machine.available({}, "cupy")


# -- the small section (time per call at small sizes) -------------------------------------------------------
def _small_point(op, dtype, rows, **us):
    from kjit.bench import small

    p = {
        "op": op,
        "dtype": dtype,
        "rows": rows,
        "shape": list(small.input_shape(op, rows)),
        "us": {k.replace("compiled", "torch.compile"): _ms(v, v * 0.9, v * 1.2, 11) for k, v in us.items()},
    }
    return small.add_ratios(p)


def synthetic_small() -> dict:
    from kjit.bench import small

    points = [
        _small_point("softmax", "bfloat16", 1, kjit=9.0, eager=10.0, compiled=30.0),
        _small_point("softmax", "bfloat16", 4096, kjit=24.0, eager=20.0, compiled=30.0),
        dict(
            _small_point("rms_norm", "bfloat16", 1, kjit=6.0, eager=12.0),
            skipped={
                "torch.compile": "skipped: the section's torch.compile budget of 80 s is spent (81 s of "
                "compiles so far)"
            },
        ),
        _small_point("silu", "float32", 1, kjit=5.0, eager=8.0, compiled=40.0),
        dict(
            _small_point("gelu", "float32", 1, eager=8.0, compiled=30.0),
            skipped={"kjit": "failed: AssertionError: Tensor-likes are not close!"},
        ),
        {
            "op": small.POOL,
            "dtype": "float32",
            "rows": 8,
            "shape": [8, 4, 32, 32],
            "us": {},
            "error": "RuntimeError: oom",
        },
    ]
    sec = {
        "cols": 4096,
        "rows": [1, 8, 4096],
        "dtypes": ["bfloat16", "float32"],
        "ops": list(small.OPS),
        "calls": 200,
        "reps": 11,
        "warmup": 20,
        "targets": dict(small.TARGETS),
        "compile_budget_s": 80.0,
        "compile_s": 81.2,
        "points": points,
    }
    sec["summary"] = small.summary(sec)
    return {
        "schema": 1,
        "quick": False,
        "sections": ["small"],
        "machine": {
            "date": "2026-11-25T10:00:00+00:00",
            "gpu": "NVIDIA H100 80GB HBM3",
            "driver": "580",
            "cuda": "13.0",
            "torch": "2.11.0+cu130",
            "kjit": "0.1.0",
            "peers": {},
        },
        "small": sec,
    }


def test_wall_us_turns_and_counts():
    order, syncs = [], []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    s = stats.wall_us(fns, calls=4, reps=3, warmup=2, sync=lambda: syncs.append(1))
    assert set(s) == {"a", "b"} and all(v["n"] == 3 and v["min"] <= v["median"] <= v["max"] for v in s.values())
    assert order[:4] == ["a", "a", "b", "b"]  # warm-up, then the functions take turns batch by batch
    assert order[4:] == (["a"] * 4 + ["b"] * 4) * 3
    assert len(syncs) == 1 + 3 * 2  # after the warm-up, and inside each timed batch


def test_small_shapes_and_sections():
    from kjit.bench import SECTIONS, small

    assert "small" in SECTIONS
    assert small.input_shape("softmax", 64) == (64, 4096)
    pool = small.input_shape(small.POOL, 64)
    assert pool == (64, 4, 32, 32) and 4 * 32 * 32 == small.COLS
    assert small.ROWS_FULL == (1, 8, 64, 512, 4096) and small.ROWS_QUICK == (1, 64, 4096)
    assert small.DTYPES_QUICK == ("bfloat16",) and len(small.OPS) == 13 and small.OPS[-1] == small.LINEAR


def test_small_ratios_misses_summary():
    from kjit.bench import small

    p = _small_point("softmax", "bfloat16", 4096, kjit=24.0, eager=20.0, compiled=30.0)
    assert p["kjit_over_eager"] == pytest.approx(1.2) and p["kjit_over_compiled"] == pytest.approx(0.8)
    p["us"].pop("eager")
    assert "kjit_over_eager" not in small.add_ratios(p) and "kjit_over_compiled" in p
    sec = synthetic_small()["small"]
    m = small.misses(sec)
    assert [(x["op"], x["dtype"], x["rows"], x["peer"]) for x in m] == [
        ("softmax", "bfloat16", 4096, "eager"),
        ("softmax", "bfloat16", 4096, "torch.compile"),
    ]
    assert m[0]["ratio"] == pytest.approx(1.2) and m[0]["limit"] == 1.0 and m[1]["limit"] == 0.7
    assert (m[0]["kjit_us"], m[0]["peer_us"]) == (24.0, 20.0)
    s = small.summary(sec)
    assert s["points"] == 6 and s["kjit_failed"] == 2
    assert s["vs_eager"]["median"] == pytest.approx((0.625 + 0.9) / 2) and s["vs_eager"]["n"] == 4
    assert s["vs_eager"]["worst"] == pytest.approx(1.2) and s["vs_eager"]["worst_at"] == "softmax bfloat16 rows 4096"
    assert s["vs_compiled"]["median"] == pytest.approx(0.3) and s["vs_compiled"]["worst"] == pytest.approx(0.8)
    assert s["median_met"] is True and (s["misses_vs_eager"], s["misses_vs_compiled"]) == (1, 1)
    assert s["by_dtype"]["bfloat16"]["median"] == pytest.approx(0.9)
    assert s["by_dtype"]["float32"]["median"] == pytest.approx(0.625)
    # Stricter targets recorded with the section are the ones applied.
    sec["targets"]["eager_median_max"] = 0.7
    sec["targets"]["eager_max"] = 0.6
    s = small.summary(sec)
    assert s["median_met"] is False and s["misses_vs_eager"] == 3
    assert small.summary({"points": []})["vs_eager"] is None and small.summary({})["median_met"] is None


def test_small_compile_budget():
    from kjit.bench import small

    b = small.CompileBudget(10.0)
    assert b.reason() is None
    b.spent_s = 12.4
    assert b.reason() == "skipped: the section's torch.compile budget of 10 s is spent (12 s of compiles so far)"


def test_small_markdown():
    md = report.markdown(synthetic_small())
    assert "## Time per call at small sizes (rows x 4096)" in md
    assert (
        "**Summary**: median kjit / eager 0.76x, worst 1.20x (softmax bfloat16 rows 4096) (median target <= "
        "0.80x: met); median kjit / torch.compile 0.30x, worst 0.80x (softmax bfloat16 rows 4096); misses: 1 "
        "vs eager (> 1.00x), 1 vs torch.compile (> 0.70x), over 6 points; kjit has no figure at 2 points."
    ) in md
    assert "Median kjit / eager by dtype: bfloat16 0.90x (worst 1.20x), float32 0.62x (worst 0.62x)." in md
    assert (
        "### bfloat16\n\n| op | rows | kjit us | eager us | torch.compile us | kjit / eager | kjit / torch.compile |"
    ) in md
    assert "| softmax | 1 | 9.00 | 10.00 | 30.00 | 0.90x | 0.30x |" in md
    assert "| softmax | 4096 | 24.00 | 20.00 | 30.00 | **1.20x** | **0.80x** |" in md
    assert "| rms_norm | 1 | 6.00 | 12.00 | skipped | 0.50x | - |" in md
    assert "| gelu | 1 | failed | 8.00 | 30.00 | - | - |" in md
    assert "| max_pool2d 2x2 s2 | 8 | error: RuntimeError: oom | - | - | - | - |" in md
    misses = md.split("### Misses")[1]
    assert (
        "- vs eager (target <= 1.00x): softmax bfloat16 rows 4096: 1.20x (24.00 us for kjit, 20.00 us for eager)"
    ) in misses
    assert (
        "- vs torch.compile (target <= 0.70x): softmax bfloat16 rows 4096: 0.80x (24.00 us for kjit, 30.00 us "
        "for torch.compile)"
    ) in misses
    assert "- rms_norm bfloat16 rows 1: torch.compile: skipped: the section's torch.compile budget" in misses
    assert "- gelu float32 rows 1: kjit: failed: AssertionError: Tensor-likes are not close!" in misses
    # The general list of figures where a peer is ahead has the one point where eager is faster.
    behind = md.split("## Where kjit is behind")[1]
    assert (
        "- small: time per call: softmax bfloat16 rows 4096: eager is faster, kjit at 0.83x (24 us for kjit, "
        "20 us for eager)"
    ) in behind
    assert behind.count("\n- ") == 1


def test_small_markdown_no_misses():
    r = synthetic_small()
    sec = r["small"]
    sec["points"] = sec["points"][:1]
    del sec["summary"]  # the report computes it from the points
    md = report.markdown(r)
    assert "### Misses\n\n- none: every point with figures meets its target" in md
    assert "misses: 0 vs eager (> 1.00x), 0 vs torch.compile (> 0.70x), over 1 points." in md


def test_small_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from kjit.bench import plots

    paths = plots.render(synthetic_small(), str(tmp_path), "s")
    assert sorted(os.path.basename(p) for p in paths) == ["s-small-bfloat16.png", "s-small-float32.png"]
    check_pngs(paths)


def test_small_report_round_trip(tmp_path, capsys):
    check_section_round_trip(tmp_path, capsys, synthetic_small(), "small")


# -- first_call: probes under a time limit, results saved as they come -----------------------------------
def test_a_probe_that_hangs_fails_or_prints_nothing_is_reported_with_its_reason(tmp_path):
    from kjit.bench import first_call

    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(120)\n")
    start = time.monotonic()
    with pytest.raises(first_call.ProbeFailed, match=r"^timed out after 1 s \(killed\)$"):
        first_call.probe(str(hang), dict(os.environ), timeout_s=1)
    assert time.monotonic() - start < 60
    crash = tmp_path / "crash.py"
    crash.write_text("raise SystemExit('no CUDA device here')\n")
    with pytest.raises(first_call.ProbeFailed, match=r"^exit code 1: no CUDA device here$"):
        first_call.probe(str(crash), dict(os.environ), timeout_s=30)
    silent = tmp_path / "silent.py"
    silent.write_text("print('hello')\n")
    with pytest.raises(first_call.ProbeFailed, match=r"^printed no result"):
        first_call.probe(str(silent), dict(os.environ), timeout_s=30)


def test_first_call_keeps_going_past_a_failed_peer_and_saves_after_every_probe(monkeypatch):
    from kjit.bench import first_call

    def fake_measure(peer, repeats, timeout_s=first_call.PROBE_TIMEOUT_S):
        if peer == "jiterator":
            raise first_call.ProbeFailed("timed out after 120 s (killed)")
        return {"empty_cache": {"add": {"ms": _ms(1.0)}}, "warm_cache_new_process": {"add": {"ms": _ms(1.0)}}}

    monkeypatch.setattr(first_call, "measure", fake_measure)
    saved = []
    versions = {"cupy": "skipped: cupy not installed", "triton": "3.6.0", "jiterator": "2.11.0"}
    out = first_call.run(True, peer_versions=versions, save=lambda part: saved.append(json.loads(json.dumps(part))))
    assert out["results"]["jiterator"] == "failed: ProbeFailed: timed out after 120 s (killed)"
    assert out["results"]["cupy"] == "skipped: cupy not installed"
    k = ["kjit", "kjit, no preload"]
    assert [list(s["results"]) for s in saved] == [
        k[:1],
        k,
        k + ["cupy"],
        k + ["cupy", "triton"],
        k + ["cupy", "triton", "jiterator"],
    ]
    assert "--no-cache" in out["method"] and "CUDA_CACHE_PATH" in out["method"]


def test_first_call_results_of_the_format_before_2026_11_24_still_render():
    r = synthetic()
    r["first_call"] = {
        "repeats": 5,
        "results": {
            "kjit": {"empty_cache_ms": _ms(46.9), "warm_cache_new_process_ms": _ms(5.1)},
            "jiterator": {"empty_cache_ms": _ms(19.6), "warm_cache_new_process_ms": _ms(0.9)},
        },
    }
    md = report.markdown(r)
    assert "| jiterator | 19.6 ms (19.6-19.6) | 0.9 ms (0.9-0.9) | 0.42x | 0.18x |" in md
    got = {(x["peer"], x["figure"]) for x in report.behind(r) if x["section"] == "first_call"}
    assert got == {
        ("jiterator", "first call of the add kernel, empty cache"),
        ("jiterator", "first call of the add kernel, new process, warm cache"),
    }


def test_first_call_partial_or_odd_results_render_without_error():
    r = synthetic()
    kj = r["first_call"]["results"]["kjit"]
    kj["empty_cache"]["rms_norm forward"] = {"ms": {"median": 90.0}}  # no spread, no phases
    kj["empty_cache"]["rms_norm backward"] = {"ms": {"median": 30.0}}
    kj["empty_cache"]["sum forward"] = "failed: boom"
    del kj["warm_cache_new_process"]
    r["first_call"]["error"] = "ProbeFailed: timed out after 120 s (killed)"
    md = report.markdown(r)
    assert "| empty cache | rms_norm forward + backward | 120.0 | - | - | - | - | - | 120.0 | 0 | <= 100: over |" in md
    assert "sum forward" not in md
    assert "The first_call section failed part way: ProbeFailed: timed out after 120 s (killed)" in md


def test_first_call_shows_the_compiler_preload_and_the_run_without_it_which_is_no_peer():
    r = synthetic()
    fc = r["first_call"]["results"]
    fc["kjit"]["empty_cache"] = {
        "compiler preload (background, since CUDA started)": {"ms": _ms(31.0)},
        **fc["kjit"]["empty_cache"],
    }
    fc["kjit, no preload"] = {
        "empty_cache": {"add, first kjit compile of the process": _case(40.0, compile=35.0)},
        "warm_cache_new_process": {"add": _case(4.0, compiles=0)},
    }
    md = report.markdown(r)
    assert "| empty cache | compiler preload (background, since CUDA started) | 31.0 (31.0-31.0) |" in md
    assert "| kjit, no preload | 40.0 ms (40.0-40.0) | 4.0 ms (4.0-4.0) | 0.82x | 0.87x |" in md
    # The run without the preload is kjit's own figure, never listed as a peer kjit is behind.
    assert not any(x["peer"] == "kjit, no preload" for x in report.behind(r))


# -- library_headers: compiles of the library kernels, NVRTC's PCH off and on ----------------------------
def _lib_step(median, lo=None, hi=None, errors=None):
    e = {"ms": _ms(median, lo, hi), "compile_ms": _ms(median * 0.9), "compiles": 1, "origin": ["compiled"]}
    if errors:
        e["errors"] = errors
    return e


def synthetic_library_headers() -> dict:
    from kjit.bench import library_headers as lh

    specs = {
        "first": {"BLOCK": 256, "T": "float32"},
        "second_spec": {"BLOCK": 128, "T": "float32"},
        "warm_index_first": {"BLOCK": 512, "T": "float32"},
    }
    return {
        "schema": 1,
        "quick": False,
        "sections": ["library_headers"],
        "machine": {
            "date": "2026-11-26T10:00:00+00:00",
            "gpu": None,
            "cuda": "13.0",
            "torch": "2.11.0",
            "kjit": "0.1.0",
            "peers": {},
        },
        "library_headers": {
            "arch": "sm_90",
            "reps": 3,
            "env": "KJIT_PCH",
            "settings": ["off", "on"],
            "kernels": {
                "cub_block_reduce": {
                    "file": "cub_block_reduce.cu",
                    "kernel": "block_sum",
                    "specs": specs,
                    "headers": {"count": 622, "bytes": 6 << 20, "found": 622},
                    "pch": {
                        "off": {
                            "env": "KJIT_PCH=off",
                            "kjit_reported": None,
                            "stderr": [],
                            "steps": {
                                "first": _lib_step(4200.0, 4100.0, 4400.0),
                                "second_spec": _lib_step(2100.0, 2000.0, 2200.0),
                                "warm_index_first": _lib_step(2300.0, 2250.0, 2350.0),
                            },
                        },
                        "on": {
                            "env": "KJIT_PCH=on",
                            "kjit_reported": {"stats.pch": {"mode": "on"}},
                            "stderr": ["kjit: warning: something"],
                            "steps": {
                                "first": _lib_step(4620.0, 4500.0, 4700.0),
                                "second_spec": _lib_step(420.0, 400.0, 450.0),
                                "warm_index_first": {
                                    "errors": [
                                        "CompileError: NVRTC could not compile block_sum\n"
                                        "kjit did not find 'x.h' where it resolves includes"
                                    ]
                                },
                            },
                        },
                    },
                },
                "thrust": {
                    "file": "thrust_functional.cu",
                    "kernel": "max_plus",
                    "specs": {
                        "first": {"T": "float32"},
                        "second_spec": {"T": "float64"},
                        "warm_index_first": {"T": "int32"},
                    },
                    "headers": None,
                    "pch": {"off": {"steps": {"first": _lib_step(95.5)}}},
                },
                "cute": lh.MISSING_CUTLASS,
            },
        },
    }


def test_library_headers_markdown():
    md = report.markdown(synthetic_library_headers())
    assert md.startswith("# kjit bench: no GPU (2026-11-26")
    assert "## Kernels on CUDA's C++ libraries: compiles with NVRTC's PCH off and on (sm_90)" in md
    assert (
        "| kernel | A / B / C | first, PCH off | first, PCH on | second spec, PCH off | second spec, PCH on | "
        "warm-index first, PCH off | warm-index first, PCH on | headers | header bytes |"
    ) in md
    # Only the template argument that differs names the specializations; "on / off" after each PCH-on figure.
    assert (
        "| cub_block_reduce | BLOCK=256 / BLOCK=128 / BLOCK=512 | 4200 ms (4100-4400) | 4620 ms (4500-4700), "
        "1.10x | 2100 ms (2000-2200) | 420 ms (400-450), 0.20x | 2300 ms (2250-2350) | failed | 622 | 6144 KiB |"
    ) in md
    assert "| thrust | T=float32 / T=float64 / T=int32 | 95.5 ms (95.5-95.5) | - | - | - | - | - | - | - |" in md
    assert "| cute | skipped: CuTe's headers are not installed (pip install nvidia-cutlass) | - |" in md
    assert "- KJIT_PCH=off: kjit reported no PCH setting" in md
    assert (
        '- KJIT_PCH=on: kjit reported {"stats.pch": {"mode": "on"}}; the processes printed: kjit: warning: something'
    ) in md
    assert (
        "- cub_block_reduce (warm-index first; KJIT_PCH=on): CompileError: NVRTC could not compile block_sum | "
        "kjit did not find 'x.h' where it resolves includes"
    ) in md
    assert report.file_prefix(synthetic_library_headers()) == "2026-11-26-cpu-kjit-bench"


def test_library_headers_report_round_trip(tmp_path, capsys):
    check_section_round_trip(tmp_path, capsys, synthetic_library_headers(), "library_headers")


def test_library_headers_kernels_plans_and_environment(tmp_path, monkeypatch):
    from kjit.bench import SECTIONS, COMPILE_ONLY, library_headers as lh

    assert "library_headers" in SECTIONS and COMPILE_ONLY == ("library_headers",)
    assert lh.selected(None) == lh.selected("") == list(lh.KERNELS)
    assert lh.selected("thrust, cute") == ["thrust", "cute"]
    with pytest.raises(ValueError, match="unknown library kernel"):
        lh.selected("thrust,nope")
    for name, k in lh.KERNELS.items():  # A, B and C: three distinct specializations of one template
        assert len(k["specs"]) == 3 and len({json.dumps(s, sort_keys=True) for s in k["specs"]}) == 3, name
    monkeypatch.setattr(lh, "KERNELS_DIR", str(tmp_path))
    assert lh.plan("thrust", None).startswith("skipped: ") and "thrust_functional.cu is missing" in lh.plan(
        "thrust", None
    )
    for k in lh.KERNELS.values():
        (tmp_path / k["file"]).write_text("// a kernel\n")
    p = lh.plan("cub_warp_scan", None)
    assert p == {
        "file": str(tmp_path / "cub_warp_scan.cu"),
        "kernel": "scan_plus_warp_sum",
        "options": {},
        "include": [],
        "specs": {"first": {"BLOCK": 128}, "second_spec": {"BLOCK": 256}, "warm_index_first": {"BLOCK": 64}},
    }
    assert lh.plan("cute", None) == lh.MISSING_CUTLASS
    cute = lh.plan("cute", "/opt/cutlass/include")
    assert cute["include"] == ["/opt/cutlass/include"] and cute["options"] == {"default_device": True}
    base = {
        "PATH": "/bin",
        "KJIT_CACHE_PATH": "/a:/b",
        "KJIT_REMOTE_CACHE": "redis://x",
        "KJIT_CACHE_MODE": "read",
        "KJIT_RECORD": "m.json",
        "KJIT_PCH": "auto",
    }
    env = lh.probe_env(base, "/tmp/c", "/tmp/cc", "on")
    assert env == {
        "PATH": "/bin",
        "KJIT_CACHE_DIR": "/tmp/c",
        "CUDA_CACHE_PATH": "/tmp/cc",
        "KJIT_PCH": "on",
        "KJIT_PRELOAD_COMPILER": "0",
    }
    assert base["KJIT_PCH"] == "auto"  # the caller's environment is left alone
    assert (
        lh.reason("CompileError: boom\n  options: -x\nkjit did not find 'a.h'\n--- log ---\nx(1): error: y")
        == "CompileError: boom | kjit did not find 'a.h'"
    )
    assert lh.reason("") == "?"
    assert lh.cause("CompileError: could not compile f<1>\nkjit did not find 'a.h'") == "kjit did not find 'a.h'"
    assert lh.cause("TypeError: kernel(): bad\n  1. (self, name)") == "TypeError: kernel(): bad"


def test_library_headers_aggregates_repetitions_and_keeps_errors():
    from kjit.bench import library_headers as lh

    def step(ms, origin="compiled"):
        return {
            "ms": ms,
            "compile_ms": ms - 10,
            "phase_ms": {"template": 5.0, "compile": ms - 10},
            "compiles": 1,
            "origin": origin,
        }

    runs = [
        {
            "steps": {"first": step(300.0), "second_spec": step(100.0), "warm_index_first": {"error": "boom"}},
            "headers": {"first": {"count": 3, "bytes": 10, "found": 3}},
        },
        {
            "steps": {"first": step(100.0), "second_spec": step(120.0), "warm_index_first": step(50.0, "disk")},
            "headers": {
                "first": {"count": 3, "bytes": 10, "found": 3},
                "warm_index_first": {"count": 4, "bytes": 12, "found": 4},
            },
        },
        {"steps": {"first": step(200.0), "second_spec": {"error": "bad"}}},
    ]
    agg = lh.aggregate(runs)
    assert agg["first"]["ms"] == {"median": 200.0, "min": 100.0, "max": 300.0, "n": 3}
    assert agg["first"]["compile_ms"]["median"] == 190.0
    assert agg["first"]["phase_ms"] == {"template": 5.0, "compile": 190.0}
    assert agg["second_spec"]["ms"]["n"] == 2 and agg["second_spec"]["errors"] == ["bad"]
    assert agg["warm_index_first"]["ms"]["n"] == 1 and agg["warm_index_first"]["origin"] == ["disk"]
    assert agg["warm_index_first"]["errors"] == ["boom"]
    assert lh.aggregate([{"steps": {}}]) == {s: {} for s in lh.STEPS}
    assert "pch" not in agg["first"]
    runs[2]["steps"]["first"]["pch"] = {"pch_builds": 1}  # a kjit that counts its PCH work: kept with the step
    assert lh.aggregate(runs)["first"]["pch"] == {"pch_builds": 1}
    assert lh.headers_of(runs) == {"count": 4, "bytes": 12, "found": 4}  # the warm-index process's view
    assert lh.headers_of([{"steps": {}}]) is None


def test_library_headers_run_alternates_settings_keeps_going_and_saves_after_every_probe(monkeypatch):
    from kjit.bench import library_headers as lh

    calls = []

    def fake_measure_once(p, arch, setting, timeout_s=lh.PROBE_TIMEOUT_S):
        calls.append((os.path.basename(p["file"]), arch, setting))
        if p["kernel"] == "block_sum":
            raise RuntimeError("probe machinery broke")
        ms = 100.0 if setting == "off" else 60.0
        return {
            "steps": {
                s: {"ms": ms, "compile_ms": ms, "phase_ms": {}, "compiles": 1, "origin": "compiled"} for s in lh.STEPS
            },
            "headers": {"first": {"count": 2, "bytes": 2048, "found": 2}},
            "stderr": {"first": "kjit: hello"},
        }

    monkeypatch.setattr(lh, "measure_once", fake_measure_once)
    monkeypatch.setattr(lh, "cutlass_include_dir", lambda: None)
    saved, logged = [], []
    out = lh.run(
        False,
        log=logged.append,
        save=lambda part: saved.append(json.loads(json.dumps(part))),
        kernels=["cub_block_reduce", "thrust", "cute"],
        reps=2,
        arch="sm_80",
    )
    assert calls == [
        ("cub_block_reduce.cu", "sm_80", "off"),
        ("cub_block_reduce.cu", "sm_80", "on"),
        ("thrust_functional.cu", "sm_80", "off"),
        ("thrust_functional.cu", "sm_80", "on"),
        ("cub_block_reduce.cu", "sm_80", "on"),
        ("cub_block_reduce.cu", "sm_80", "off"),
        ("thrust_functional.cu", "sm_80", "on"),
        ("thrust_functional.cu", "sm_80", "off"),
    ]
    assert len(saved) == 1 + len(calls)
    assert out["arch"] == "sm_80" and out["reps"] == 2 and out["settings"] == ["off", "on"]
    k = out["kernels"]
    assert k["cute"] == lh.MISSING_CUTLASS
    assert k["cub_block_reduce"]["pch"]["on"]["steps"]["first"] == {
        "errors": ["RuntimeError: probe machinery broke"] * 2
    }
    assert (
        "  cub_block_reduce, KJIT_PCH=on: first failed; second spec failed; warm-index first failed "
        "(RuntimeError: probe machinery broke) (rep 2/2)"
    ) in logged
    thrust = k["thrust"]
    assert thrust["headers"] == {"count": 2, "bytes": 2048, "found": 2}
    assert thrust["pch"]["on"]["steps"]["second_spec"]["ms"]["median"] == 60.0
    assert thrust["pch"]["on"]["env"] == "KJIT_PCH=on" and thrust["pch"]["on"]["stderr"] == ["kjit: hello"]
    assert len(thrust["pch"]["off"]["runs"]) == 2
    assert any("thrust, KJIT_PCH=on: first 60 ms" in line for line in logged)
    md = report.markdown({"machine": {"gpu": "NVIDIA H100 80GB HBM3"}, "library_headers": out})
    assert "| thrust | T=float32 / T=float64 / T=int32 | 100 ms (100-100) | 60.0 ms (60.0-60.0), 0.60x |" in md
    assert "- cub_block_reduce (first, second spec, warm-index first; KJIT_PCH=off, on): RuntimeError: probe" in md


def test_library_headers_runs_without_a_gpu_and_other_sections_still_refuse(tmp_path):
    # An unknown kernel name: the section fails at once (nothing compiles), and the run still writes its result.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", KJIT_BENCH_LIBRARY_KERNELS="nope")
    r = subprocess.run(
        [sys.executable, "-m", "kjit.bench", "--quick", "--only", "library_headers", "--out", str(tmp_path / "o")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert NO_GPU not in r.stderr and "compile-only" in r.stderr
    (json_file,) = (tmp_path / "o").glob("*-cpu-kjit-bench.json")
    result = json.loads(json_file.read_text())
    assert result["sections"] == ["library_headers"]
    assert "unknown library kernel(s) ['nope']" in result["library_headers"]["error"]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kjit.bench",
            "--quick",
            "--only",
            "small,library_headers",
            "--out",
            str(tmp_path / "o2"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert r.returncode == 2 and NO_GPU in r.stderr
    assert not (tmp_path / "o2").exists()


# -- matmul: points, ratios of speeds, the targets' summary and verdicts, rendering -----------------------
def _mm_point(kind, m, n, k, **ms):
    """A matmul point with these medians (ms) per contender (cublas= for "cuBLAS", compiled= for
    "torch.compile"), its TFLOP/s and ratios computed."""
    from kjit.bench import matmul

    names = {"cublas": "cuBLAS", "compiled": "torch.compile"}
    p = {
        "kind": kind,
        "m": m,
        "n": n,
        "k": k,
        "dtype": "bfloat16",
        "copies": 1,
        "ms": {names.get(c, c): _ms(v) for c, v in ms.items() if v is not None},
    }
    return matmul.add_ratios(p)


def synthetic_matmul() -> dict:
    """Plain: kjit at 0.9x (M >= 128, but one at 0.8x) and 1.1x (M <= 16) of cuBLAS; gelu 1.0x eager and
    torch.compile at M = 16, 1.2x / 1.1x at M = 2048; swiglu 1.3x eager; the backward 0.95x eager and 1.05x
    torch.compile; the compile probe 1.2 s then 0.9 s."""
    pts = [_mm_point("plain", 8192, 8192, 8192, kjit=1.0, cublas=0.95, compiled=0.96)]
    for m in (1, 16):
        pts += [_mm_point("plain", m, 4096, 4096, kjit=1.0, cublas=1.1, compiled=1.5)]
    pts += [
        _mm_point("plain", 2048, 4096, 4096, kjit=1.0, cublas=0.9, compiled=0.9),
        _mm_point("plain", 8192, 4096, 4096, kjit=1.0, cublas=0.9, compiled=0.9),
        _mm_point("plain", 128, 11008, 4096, kjit=1.0, cublas=0.8, compiled=0.85),
        _mm_point("gelu", 16, 4096, 4096, kjit=1.0, eager=1.0, compiled=1.0),
        _mm_point("gelu", 2048, 4096, 4096, kjit=1.0, eager=1.2, compiled=1.1),
        _mm_point("backward", 2048, 4096, 4096, kjit=1.0, eager=0.95, compiled=1.05),
        _mm_point("swiglu", 2048, 11008, 4096, kjit=1.0, eager=1.3, compiled=None),
        {
            "kind": "swiglu",
            "m": 8192,
            "n": 14336,
            "k": 4096,
            "dtype": "bfloat16",
            "ms": {},
            "error": "RuntimeError: CUDA out of memory",
        },
    ]
    pts[-2]["skipped"] = {
        "torch.compile": "skipped: the section's torch.compile budget of 60 s is spent (61 s of compiles so far)"
    }
    probe = {
        "repeats": 1,
        "n": 4096,
        "k": 4096,
        "m": [16, 8192],
        "first_case": "linear, new (N, K), M=16",
        "second_case": "linear, same (N, K), M=8192 (another tile configuration)",
        "cases": {
            "linear, new (N, K), M=16": _case(1200.0, 1100.0, 1300.0, compile=1100.0),
            "linear, same (N, K), M=8192 (another tile configuration)": _case(900.0, compile=850.0),
        },
    }
    return {
        "schema": 1,
        "quick": False,
        "sections": ["matmul"],
        "machine": {"date": "2026-11-27T10:00:00+00:00", "gpu": "NVIDIA H100 80GB HBM3", "peers": {}},
        "matmul": {
            "dtype": "bfloat16",
            "warmup": 10,
            "reps": 20,
            "inner": 10,
            "l2_bytes": 50 << 20,
            "l2_factor": 2,
            "kjit_tune": "",
            "compile_budget_s": 300.0,
            "compile_s": 61.0,
            "points": pts,
            "compile": probe,
        },
    }


def test_matmul_points_flops_and_section():
    from kjit.bench import SECTIONS, matmul

    assert "matmul" in SECTIONS and "matmul" not in __import__("kjit.bench").bench.COMPILE_ONLY
    full = matmul.points(False)
    assert len(full) == 1 + 5 * 4 + 2 * 3 * 4 + 2 * 4
    assert full[0] == {"kind": "plain", "m": 8192, "n": 8192, "k": 8192}
    assert {(p["n"], p["k"]) for p in full if p["kind"] == "swiglu"} == set(matmul.NK)
    assert sorted({p["m"] for p in full if p["kind"] == "plain"}) == [1, 16, 128, 2048, 8192]
    assert sorted({p["m"] for p in full if p["kind"] == "gelu"}) == [16, 2048, 8192]
    quick = matmul.points(True)
    assert len(quick) < 10 and {p["kind"] for p in quick} == set(matmul.KINDS)
    assert matmul.flops("plain", 2, 3, 5) == 60 and matmul.flops("swiglu", 2, 3, 5) == 120
    assert matmul.flops("backward", 2, 3, 5) == 120  # dX and dW
    assert {(p["m"], p["n"], p["k"]) for p in full if p["kind"] == "backward"} == {
        (m, n, k) for m in matmul.M_BACKWARD for n, k in matmul.NK
    }
    assert matmul.tflops(2 * 8192**3, 1.0) == pytest.approx(1099.511627776)
    assert matmul.where(full[0]) == "plain M=8192 N=8192 K=8192"


def test_matmul_ratios_are_speeds():
    from kjit.bench import matmul

    p = _mm_point("plain", 16, 4096, 4096, kjit=0.5, cublas=0.6, compiled=0.4)
    assert p["kjit_over_cublas"] == pytest.approx(1.2) and p["kjit_over_compiled"] == pytest.approx(0.8)
    assert p["tflops"]["kjit"] == pytest.approx(2 * 16 * 4096 * 4096 / 0.5e-3 / 1e12)
    assert "kjit_over_eager" not in p
    p["ms"].pop("kjit")
    matmul.add_ratios(p)
    assert "kjit_over_cublas" not in p and "kjit" not in p["tflops"]


def test_matmul_l2_copies():
    from kjit.bench import matmul

    mib = 1 << 20
    assert matmul.copies_for_l2(32 * mib, 50 * mib) == 4  # M = 1, [4096, 4096] bf16: 4 x 32 MiB >= 100 MiB
    assert matmul.copies_for_l2(400 * mib, 50 * mib) == 1
    assert matmul.copies_for_l2(0, 50 * mib) == 1 and matmul.copies_for_l2(10, 0) == 1
    assert matmul._operand_bytes("plain", 1, 4096, 4096) == 2 * (4096 + 4096 * 4096 + 4096 + 4096)
    assert matmul._operand_bytes("swiglu", 1, 4096, 4096) == 2 * (4096 + 2 * 4096 * 4096 + 4096)


def test_matmul_timing_cycles_through_the_copies(monkeypatch):
    import torch

    from kjit.bench import matmul

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return 5.0

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    seen = []
    s = matmul.gpu_ms_rotating(seen.append, copies=3, warmup=2, reps=2, inner=4)
    assert s == {"median": 1.25, "min": 1.25, "max": 1.25, "n": 2}
    assert seen == [0, 1, 2] + [0, 1, 2, 0] + [1, 2, 0, 1]  # warm-up touches every copy; never twice in a row


def test_matmul_summary_and_verdicts():
    from kjit.bench import matmul

    sec = synthetic_matmul()["matmul"]
    s = matmul.summary(sec)
    assert s["points"] == 11 and s["kjit_failed"] == 1
    assert s["cublas_large_m"]["median"] == pytest.approx(0.9) and s["cublas_large_m"]["n"] == 3
    assert s["cublas_large_m"]["min"] == pytest.approx(0.8)
    assert s["cublas_large_m"]["min_at"] == "plain M=128 N=11008 K=4096"
    assert s["cublas_small_m"]["median"] == pytest.approx(1.1) and s["square"] == pytest.approx(0.95)
    assert s["gelu_eager"]["n"] == 2 and s["gelu_eager"]["median"] == pytest.approx(1.1)  # every M
    assert s["gelu_eager"]["min"] == pytest.approx(1.0) and s["gelu_eager"]["min_at"] == "gelu M=16 N=4096 K=4096"
    assert s["gelu_compiled"]["median"] == pytest.approx(1.05)
    assert s["swiglu_eager"]["median"] == pytest.approx(1.3) and s["swiglu_compiled"] is None
    assert s["backward_eager"]["min"] == pytest.approx(0.95) and s["backward_compiled"]["median"] == pytest.approx(1.05)
    assert s["compile"] == {"first_s": 1.2, "first_compiles": 1, "second_s": 0.9, "second_compiles": 1}
    v = {x["target"]: (x["met"], x["value"]) for x in matmul.verdicts(sec)}
    assert v["kjit / cuBLAS median >= 1.00x (LLM shapes, M >= 128)"] == (False, pytest.approx(0.9))
    assert v["kjit / cuBLAS none under 0.92x (LLM shapes, M >= 128)"] == (False, pytest.approx(0.8))
    assert v["kjit / cuBLAS none under 1.00x (M <= 16)"] == (True, pytest.approx(1.1))
    assert v["fused gelu: kjit / eager none under 1.10x (every M)"] == (False, pytest.approx(1.0))
    assert v["fused gelu: kjit / torch.compile none under 1.10x (every M)"] == (False, pytest.approx(1.0))
    assert v["swiglu: kjit / eager median >= 1.25x"] == (True, pytest.approx(1.3))
    assert v["backward (dX + dW): kjit / eager none under 1.00x (every M)"] == (False, pytest.approx(0.95))
    assert v["first call of kjit.ops.linear, new (N, K), empty cache <= 1.5 s"] == (True, 1.2)
    assert v["another tile configuration of the same (N, K) <= 0.8 s"] == (False, 0.9)
    texts = [matmul.verdict_text(x) for x in matmul.verdicts(sec)]
    assert texts == [
        "missed (0.90x)",
        "missed (0.80x)",
        "met (1.10x)",
        "missed (1.00x)",
        "missed (1.00x)",
        "met (1.30x)",
        "missed (0.95x)",
        "met (1.200 s)",
        "missed (0.900 s)",
    ]
    # Targets recorded with the section are the ones applied.
    sec["targets"] = {"cublas_median_min": 0.9, "cublas_min": 0.8}
    v = {x["target"]: x["met"] for x in matmul.verdicts(sec)}
    assert v["kjit / cuBLAS median >= 0.90x (LLM shapes, M >= 128)"] is True
    assert v["kjit / cuBLAS none under 0.80x (LLM shapes, M >= 128)"] is True


def test_matmul_verdicts_without_figures_or_without_a_second_compile():
    from kjit.bench import matmul

    assert all(x["met"] is None and x["value"] is None for x in matmul.verdicts({}))
    assert {matmul.verdict_text(x) for x in matmul.verdicts({"points": []})} == {"no figure"}
    sec = synthetic_matmul()["matmul"]
    sec["compile"]["cases"]["linear, same (N, K), M=8192 (another tile configuration)"]["compiles"] = 0
    second = matmul.verdicts(sec)[-1]
    assert second["met"] is None and "no compile" in second["detail"]
    assert matmul.verdict_text(second) == "not measured (0.900 s)"
    assert matmul.compile_figures({"error": "ProbeFailed: timed out"}) is None


def test_matmul_markdown_and_behind():
    md = report.markdown(synthetic_matmul())
    assert "## Matrix ops (bfloat16, TFLOP/s)" in md
    assert "KJIT_TUNE='' (no tuning)" in md and "the L2 (50 MiB)" in md
    assert (
        "- kjit / cuBLAS median >= 1.00x (LLM shapes, M >= 128): **missed (0.90x)** (min 0.80x at plain M=128 "
        "N=11008 K=4096; 3 points)"
    ) in md
    assert "- kjit / cuBLAS none under 0.92x (LLM shapes, M >= 128): **missed (0.80x)** (at plain M=128" in md
    assert "- swiglu: kjit / eager median >= 1.25x: **met (1.30x)**" in md
    assert "- first call of kjit.ops.linear, new (N, K), empty cache <= 1.5 s: **met (1.200 s)** (1 compile(s))" in md
    assert "- kjit / cuBLAS at 8192^3: 0.95x (no target)" in md
    assert "- kjit has no figure at 1 of 11 points" in md
    assert "- backward (dX + dW): kjit / eager none under 1.00x (every M): **missed (0.95x)**" in md
    assert "- backward: kjit / torch.compile median 1.05x, min 1.05x (no target)" in md
    assert "### Backward (dX + dW) of kjit.ops.linear(x, w)" in md
    assert (
        "| M | N | K | kjit TFLOP/s | cuBLAS TFLOP/s | torch.compile TFLOP/s | kjit / cuBLAS | kjit / torch.compile |"
    ) in md
    assert (
        "| M | F | K | kjit TFLOP/s | eager TFLOP/s | torch.compile TFLOP/s | kjit / eager | kjit / torch.compile |"
    ) in md
    assert "| 8192 | 14336 | 4096 | error: RuntimeError: CUDA out of memory | - | - | - | - |" in md
    assert "| 2048 | 11008 | 4096 | 369.4 | 284.1 | skipped | 1.30x | - |" in md
    assert "| 128 | 11008 | 4096 | 11.5 | 14.4 | 13.6 | 0.80x | 0.85x |" in md
    assert "| linear, new (N, K), M=16 | 1200 (1100-1300) | 1 | 1100 |" in md
    assert "- swiglu M=2048 N=11008 K=4096: torch.compile: skipped: the section's torch.compile budget" in md
    behind = md.split("## Where kjit is behind")[1]
    assert (
        "- matmul: TFLOP/s: plain M=128 N=11008 K=4096: cuBLAS is faster, kjit at 0.80x (11.5 TFLOP/s for kjit, "
        "14.4 TFLOP/s for cuBLAS)"
    ) in behind
    assert "matmul: TFLOP/s: plain M=16 " not in behind


def test_matmul_backward_times_the_backward_alone():
    """backward_of builds its forward once per operands and returns torch.autograd.grad's dX and dW each call
    (the graph retained); parts() gives them as float tensors to compare one by one."""
    import torch
    import torch.nn.functional as F

    from kjit.bench import matmul

    calls = []

    def forward(x, w):
        calls.append(1)
        return F.linear(x, w)

    x, w, dy = torch.randn(5, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True), torch.randn(5, 4)
    run = matmul.backward_of(forward)
    for _ in range(3):
        dx, dw = run(x, w, dy)
    assert len(calls) == 1
    torch.testing.assert_close(dx, dy @ w.detach())
    torch.testing.assert_close(dw, dy.T @ x.detach())
    got = matmul.parts((dx, dw.bfloat16()))
    assert [t.shape for t in got] == [(5, 3), (4, 3)] and all(t.dtype == torch.float32 for t in got)
    assert len(matmul.parts(dx)) == 1
    assert matmul._operand_bytes("backward", 5, 4, 3) == 2 * (5 * 4 + 2 * 5 * 3 + 2 * 4 * 3)


def test_matmul_report_round_trip_and_no_gpu(tmp_path, capsys):
    check_section_round_trip(tmp_path, capsys, synthetic_matmul(), "matmul")
    import torch

    if not torch.cuda.is_available():
        assert main(["--only", "matmul", "--out", str(tmp_path / "p")]) == 2
        assert NO_GPU in capsys.readouterr().err


def test_matmul_compile_probe_script_is_python():
    from kjit.bench import matmul

    src = matmul.probe_script()
    compile(src, "probe", "exec")
    assert "KJIT_CACHE_DIR" not in src  # the cache directory comes from the environment (compile_probe)
    assert "timed('linear, new (N, K), M=16'" in src and "ops.add_constant(x, 1.0)" in src


def _seq_ms(median):
    return {"median": median, "min": median, "max": median, "n": 3}


def test_sequence_points_verdicts_behind_and_markdown():
    from kjit.bench import SECTIONS, report, sequence

    assert "sequence" in SECTIONS
    conv = sequence.point(
        "causal_conv1d",
        "forward",
        "bfloat16",
        (4, 4096, 4096),
        2 * 4 * 4096 * 4096 * 2,
        {"kjit": _seq_ms(0.1), "eager": _seq_ms(0.6), "torch.compile": _seq_ms(0.4), "copy": _seq_ms(0.085)},
    )
    assert conv["speedup"] == {"eager": pytest.approx(6.0), "torch.compile": pytest.approx(4.0)}
    assert conv["of_copy"] == pytest.approx(0.85) and conv["gbps"]["kjit"] == pytest.approx(
        2 * 4 * 4096 * 4096 * 2 / 1e5
    )
    scan = sequence.point(
        "linear_scan",
        "forward",
        "float32",
        (8, 2048, 4096),
        3 * 8 * 2048 * 4096 * 4,
        {"kjit": _seq_ms(0.5), "copy": _seq_ms(0.3), "python loop": _seq_ms(98.0)},
    )
    bwd = sequence.point(
        "causal_conv1d",
        "forward+backward",
        "bfloat16",
        (4, 4096, 4096),
        None,
        {"kjit": _seq_ms(1.0), "eager": _seq_ms(0.8)},
    )
    sec = {"points": [conv, scan, bwd], "timing": {"inner": 10, "reps": 15}}
    v = {x["target"]: x for x in sequence.verdicts(sec)}
    assert v["causal_conv1d >= 5x eager"]["met"] and v["causal_conv1d >= 80% of copy"]["met"]
    assert not v["linear_scan >= 80% of copy"]["met"] and "float32 60%" in v["linear_scan >= 80% of copy"]["detail"]
    assert v["linear_scan >= 100x the Python loop"]["met"]
    # A target without its figure is not met, and says why.
    assert sequence.verdicts({"points": [conv]})[-1] == dict(
        target="linear_scan >= 100x the Python loop", met=False, detail="not measured"
    )
    behind = [b for b in report.behind({"sequence": sec}) if b["section"] == "sequence"]
    assert [(b["peer"], round(b["ratio"], 2)) for b in behind] == [("eager", 0.8)]
    md = report.markdown({"machine": {"gpu": "NVIDIA H200"}, "sequence": sec})
    assert (
        "## Sequence ops" in md and "**missed** (float32 60%)" in md and "| causal_conv1d | forward | bfloat16 |" in md
    )


def test_gemm_tiles_reads_the_tuning_log():
    from kjit.bench import gemm_tiles

    log = (
        "case plain 128 4096 4096\n"
        "kjit: kjit.ops.linear: timed M=128 N=4096 K=4096 (default wgmma:128x256:s3): wgmma:128x256:s3 10.5 us, "
        "wgmma-pingpong:64x256:s4 8.4 us\n"
        "kjit: kjit.ops.linear: tuned gemm|sm_90a|...: wgmma-pingpong:64x256:s4\n"
        "case swiglu 2048 4096 4096\n"
        "kjit: kjit.ops.linear_swiglu: timed M=2048 N=4096 K=4096 (default wgmma:128x128:s4): wgmma:128x128:s4 "
        "188.7 us\n"
    )
    points = gemm_tiles.parse(log)
    assert [(p["kind"], p["m"], p["fastest"]) for p in points] == [
        ("plain", 128, "wgmma-pingpong:64x256:s4"),
        ("swiglu", 2048, "wgmma:128x128:s4"),
    ]
    assert points[0]["us"] == {"wgmma:128x256:s3": 10.5, "wgmma-pingpong:64x256:s4": 8.4}
    assert points[0]["default_over_fastest"] == pytest.approx(1.25)
    md = gemm_tiles.markdown(points, "NVIDIA H200")
    assert "| plain | 128 | 4096 | 4096 | **8.4** |  | 10.5 | wgmma:128x256:s3 | 1.250 |" in md
    assert len(gemm_tiles.cases(False)) == 28 and len(gemm_tiles.cases(True)) == 14


def test_unet1d_markdown_names_each_miss_with_its_target():
    from kjit.bench import unet1d

    modes = ("eager", "eager in one CUDA graph", "torch.compile reduce-overhead", "kjit in one CUDA graph")
    forward = dict(zip(modes, (7.0, 1.5, 1.6, 0.4)))
    res = {
        "machine": {"gpu": "NVIDIA H200"},
        "date": "2026-12-04",
        "unet": [
            dict(
                dtype="float32",
                batch=1,
                forward_ms=forward,
                floor_ms=0.06,
                target=3.0,
                vs={p: forward[p] / 0.4 for p in unet1d.PEERS},
            ),
            dict(
                dtype="float32",
                batch=8,
                forward_ms=forward,
                floor_ms=0.06,
                target=None,
                vs={p: 0.5 for p in unet1d.PEERS},
            ),
        ],
        "blocks": [
            dict(
                block="block 256",
                dtype="bfloat16",
                batch=64,
                kjit_us=20.0,
                eager_graph_us=22.0,
                speedup=1.1,
                target=1.5,
                weight_floor_us=0.14,
                max_rel_err_vs_eager=1e-2,
            )
        ],
    }
    md = unet1d.markdown(res)
    assert "| float32 | 1 | 7.000 | 1.500 | - | 1.600 | - | 0.400 | 0.060 | 3.75x (met) | 4.00x (met) |" in md
    assert "| float32 | 8 |" in md and "0.50x | 0.50x |" in md  # no target at batch 8: the ratio alone
    assert "| block 256 | bfloat16 | 64 | 20.0 | 22.0 | 1.10x (miss, target 1.5x) | 0.14 | 1.0e-02 |" in md
