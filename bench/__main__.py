"""python -m kjit.bench: benchmark kjit against its peers; see kjit.bench's documentation."""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
import traceback

from . import COMPILE_ONLY, SECTIONS, machine, plots, report
from .stats import error_text

NO_GPU = "no CUDA device: nothing to measure; use --report FILE.json to render saved results"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m kjit.bench",
        description="Benchmark kjit against torch eager, torch.compile, Triton, CuPy and "
        "torch.cuda.jiterator; writes JSON, Markdown and PNG plots.",
    )
    ap.add_argument("--quick", action="store_true", help="fewer sizes, ops and repetitions (under 2 minutes)")
    ap.add_argument("--out", default="bench-results", help="output directory (default: ./bench-results)")
    ap.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections to run (default: all: {','.join(SECTIONS)})",
    )
    ap.add_argument(
        "--report",
        metavar="FILE.json",
        help="render the Markdown and plots of saved results (no GPU needed); measures nothing",
    )
    return ap


def _sections(text: str, ap: argparse.ArgumentParser) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in names if s not in SECTIONS]
    if bad or not names:
        ap.error(f"--only: unknown section(s) {bad or text!r}; choose from {','.join(SECTIONS)}")
    return [s for s in SECTIONS if s in names]


def _render(result: dict, out_dir: str) -> tuple[str, str, list[str]]:
    prefix = report.file_prefix(result)
    os.makedirs(out_dir, exist_ok=True)
    md = report.markdown(result)
    md_path = os.path.join(out_dir, prefix + ".md")
    with open(md_path, "w") as f:
        f.write(md)
    return md, md_path, plots.render(result, out_dir, prefix)


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    only = _sections(args.only, ap)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.report:
        try:
            result = report.load_json(args.report)
        except (OSError, ValueError) as e:
            log(f"kjit.bench: cannot read {args.report}: {e}")
            return 1
        md, md_path, pngs = _render(result, args.out)
        print(md, end="")
        log(f"kjit.bench: wrote {md_path}" + "".join(f", {p}" for p in pngs))
        return 0

    import torch

    if not torch.cuda.is_available():
        if not set(only) <= set(COMPILE_ONLY):
            log(NO_GPU)
            return 2
        log(f"kjit.bench: no CUDA device: compile-only section(s) {','.join(only)}")
    t0 = time.perf_counter()
    result: dict = {"schema": 1, "quick": args.quick, "sections": only, "machine": machine.record(), "elapsed_s": {}}
    peer_versions = result["machine"]["peers"]
    json_path = os.path.join(args.out, report.file_prefix(result) + ".json")
    log(f"kjit.bench: {result['machine'].get('gpu')}, sections {','.join(only)}" + (" (quick)" if args.quick else ""))
    for name in only:
        log(f"== {name} ({time.perf_counter() - t0:.0f} s)")
        t = time.perf_counter()
        try:
            mod = __import__(f"{__package__}.{name}", fromlist=["run"])
            kwargs = {}
            if "save" in inspect.signature(mod.run).parameters:
                # A section that measures for long saves what it has so far (a probe may hang or crash).
                def save(partial: dict, name: str = name) -> None:
                    result[name] = partial
                    report.write_json(result, json_path)

                kwargs["save"] = save
            result[name] = mod.run(args.quick, peer_versions=peer_versions, log=log, **kwargs)
        except Exception as e:  # noqa: BLE001  (one failed section never loses the others)
            traceback.print_exc()
            saved = result.get(name) if isinstance(result.get(name), dict) else {}
            result[name] = {**saved, "error": error_text(e)}  # what it saved before failing is kept
        result["elapsed_s"][name] = round(time.perf_counter() - t, 2)
        log(f"== {name} done in {result['elapsed_s'][name]:.0f} s")
        report.write_json(result, json_path)  # after each section: a crash keeps what was measured
    result["elapsed_s"]["total"] = round(time.perf_counter() - t0, 2)
    report.write_json(result, json_path)
    md, md_path, pngs = _render(result, args.out)
    print(md, end="")
    log(
        f"kjit.bench: done in {result['elapsed_s']['total']:.0f} s; wrote {json_path}, {md_path}"
        + "".join(f", {p}" for p in pngs)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
