"""Readable test output for .ci/test.sh (standard library only).

Runs ctest or pytest with its full output going to a log file, prints on the terminal what a person
needs (compact progress, failures in full, skip reasons grouped with counts), and at the end the two
summary lines, ctest's then pytest's, as the last lines.

  test_report.py ctest --log build/ctest.log --junit build/ctest-junit.xml -- ctest --test-dir build ...
      ctest's output goes to the log only; the terminal gets a progress line every 15 s (and one per
      failed test as it fails); at the end each failed test's output in full and the skip reasons (the
      GTEST_SKIP() messages, read from ctest's JUnit file) grouped by reason with counts.
  test_report.py pytest --log build/pytest.log -- python -m pytest -q -rfEsxX ...
      pytest's output goes to the log and to the terminal (its progress dots, failures, errors, xfail and
      xpass lines as pytest prints them), except the "SKIPPED [N] file:line: reason" lines, collapsed
      into one line per reason with its count, and the summary line, kept for `summary`; after 15 s
      without output, a line says it is still running.
  test_report.py summary --ctest-log L --ctest-status N --pytest-log L --pytest-status N
      prints ctest's summary line then pytest's (from the logs), and exits non-zero when either run
      failed (a non-zero status, or no summary line).

The run commands exit with the status of the command they ran. Neither is silent for longer than
quiet.QUIET_S (20 s, the promise of .ci/quiet.py): both speak after quiet.HEARTBEAT_S (15 s).
"""

import argparse
import collections
import os
import re
import select
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from quiet import HEARTBEAT_S, TICK_S

PROGRESS_EVERY_S = HEARTBEAT_S  # ctest: a progress line at least this often (--every)
PYTEST_QUIET_S = HEARTBEAT_S  # pytest: a "still running" line after this long without output (--every)

# "  7/485 Test  #7: Suite.Name ..........   Passed    0.01 sec" (or ***Failed, ***Skipped, ***Timeout,
# ***Exception: ..., ***Not Run ...). A name may hold spaces: a value-parameterized GoogleTest's is
# 'Modes/Suite.Name/off  # GetParam() = "off"'; the dots that pad it follow its last " ".
CTEST_RESULT = re.compile(r"^\s*(\d+)/(\d+) Test\s+#\d+: (.*) \.+\s*\**(\w.*?)\s+[\d.]+ sec\s*$")
CTEST_START = re.compile(r"^\s*Start\s+\d+: (.*?)\s*$")
# CMake 4 leaves out ", 0 tests failed" when none failed: "100% tests passed out of 5".
CTEST_SUMMARY = re.compile(r"^\d+% tests passed(?:, \d+ tests? failed)? out of \d+\s*$")
# GoogleTest's skip: "file:line: Skipped", then the message (any lines), then "[  SKIPPED ] Suite.Name".
GTEST_SKIP_LINE = re.compile(r"^.*: Skipped\s*$")
GTEST_SKIPPED_END = re.compile(r"^\[  SKIPPED \] ")
# pytest's last line: "1 failed, 3 passed, 6 skipped in 0.05s" (-q), "==== ... in 1.2s (0:00:01) ====",
# "no tests ran in 0.01s".
PYTEST_SUMMARY = re.compile(r"^=*\s*(?:no tests ran|\d+ \w+.*) in \d+(?:\.\d+)?s\b.*$")
PYTEST_SKIPPED = re.compile(r"^SKIPPED \[(\d+)\] (.*?): (.*)$")
PYTEST_SECTION = re.compile(r"^=+ (.*?) =+$")
PYTEST_PROGRESS_CHARS = re.compile(r"^[.sFEXxR]+$")


def out(text=""):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def clock(seconds):
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"


def run_streaming(cmd, log_path, on_chunk, on_tick, cwd=None):
    """Runs cmd (stderr into stdout), writes its output to log_path as it comes, hands each chunk
    (decoded text) to on_chunk, and calls on_tick(now) at least once a second. Returns the command's
    exit status."""
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd)
        except OSError as e:
            message = f"test_report.py: cannot run {cmd[0]!r} (in {cwd or os.getcwd()}): {e}"
            log.write((message + "\n").encode())
            out(message)
            return 127
        fd = proc.stdout.fileno()
        while True:
            ready, _, _ = select.select([fd], [], [], TICK_S)
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    break
                log.write(data)
                log.flush()
                on_chunk(data.decode("utf-8", errors="replace"))
            on_tick(time.monotonic())
        return proc.wait()


class Lines:
    """Splits a stream of chunks into lines; `partial` is the unfinished last line."""

    def __init__(self, on_line):
        self.partial = ""
        self.on_line = on_line

    def feed(self, chunk):
        self.partial += chunk
        *lines, self.partial = self.partial.split("\n")
        for line in lines:
            self.on_line(line.rstrip("\r"))

    def close(self):
        if self.partial:
            line, self.partial = self.partial, ""
            self.on_line(line)


def print_groups(title, reasons, noun):
    """reasons: {reason: (count, [where, ...])}; one line per reason, the most frequent first, with where
    (the one place, or how many `noun`s and the first)."""
    if not reasons:
        return
    total = sum(n for n, _ in reasons.values())
    out(f"{title} {total} test{'s' if total != 1 else ''}, by reason:")
    width = len(str(max(n for n, _ in reasons.values())))
    for reason, (n, where) in sorted(reasons.items(), key=lambda kv: (-kv[1][0], kv[0])):
        places = sorted(set(where))
        at = places[0] if len(places) == 1 else f"{len(places)} {noun}, e.g. {places[0]}"
        out(f"  {n:>{width}} x {reason}  [{at}]")


# ---- ctest -----------------------------------------------------------------------------------------


def gtest_skip_message(output):
    """The message of a GTEST_SKIP() in a test's output (lines joined with " / "), "" when it has none,
    None when the output holds no GoogleTest skip."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if GTEST_SKIP_LINE.match(line):
            msg = []
            for follow in lines[i + 1 :]:
                if GTEST_SKIPPED_END.match(follow):
                    break
                if follow.strip():
                    msg.append(follow.strip())
            return " / ".join(msg)
    return None


def read_junit(path):
    """{test name: (status, skipped message or None, output)} from ctest's --output-junit file."""
    tests = {}
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return tests
    for case in root.iter("testcase"):
        skipped = case.find("skipped")
        output = case.findtext("system-out") or ""
        tests[case.get("name")] = (case.get("status"), None if skipped is None else skipped.get("message"), output)
    return tests


def skip_reason(message, output):
    """Why ctest skipped a test: the GTEST_SKIP() message, else the last line the test printed with how
    ctest saw the skip (SKIP_RETURN_CODE=N, SKIP_REGULAR_EXPRESSION_MATCHED)."""
    gtest = gtest_skip_message(output)
    if gtest:
        return gtest
    if gtest == "":
        return "(GTEST_SKIP() without a message)"
    last = [line.strip() for line in output.splitlines() if line.strip()]
    how = message or "skipped"
    return f"{last[-1]} ({how})" if last else f"(no output; {how})"


def run_ctest(args):
    if os.path.exists(args.junit):
        os.remove(args.junit)
    state = {"done": 0, "total": 0, "failed": [], "skipped": [], "running": {}}
    start = time.monotonic()

    def progress():
        line = (
            f"ctest: {state['done']}/{state['total'] or '?'} done, {len(state['failed'])} failed, "
            f"{len(state['skipped'])} skipped ({clock(time.monotonic() - start)})"
        )
        if state["running"]:
            name, since = min(state["running"].items(), key=lambda kv: kv[1])
            line += f"; running {name} for {clock(time.monotonic() - since)}"
        out(line)

    def on_line(line):
        m = CTEST_START.match(line)
        if m:
            state["running"][m.group(1)] = time.monotonic()
            return
        m = CTEST_RESULT.match(line)
        if not m:
            return
        state["done"], state["total"], name, status = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
        state["running"].pop(name, None)
        if status.startswith(("Skipped", "Not Run (Disabled)")):
            state["skipped"].append(name)
        elif not status.startswith("Passed"):
            state["failed"].append(name)
            out(f"ctest: FAILED {name} ({status}; its output follows when ctest is done)")

    lines = Lines(on_line)
    last_progress = [start]

    def on_tick(now):
        if now - last_progress[0] >= args.every:
            progress()
            last_progress[0] = now

    status = run_streaming(args.command, args.log, lines.feed, on_tick)
    lines.close()
    state["running"].clear()
    progress()

    junit = read_junit(args.junit)
    for name in state["failed"]:
        out(f"---- ctest FAILED: {name}; its output:")
        if name in junit:
            sys.stdout.write(junit[name][2].rstrip("\n") + "\n")
        else:
            out(f"(not in {args.junit}: see {args.log})")
        out(f"---- end of {name}")
    if status != 0 and state["done"] == 0:
        # ctest itself failed (no build, no tests found, a bad argument): its own words.
        with open(args.log, encoding="utf-8", errors="replace") as f:
            tail = f.read().splitlines()[-20:]
        out(f"ctest exited with status {status} before running a test; the end of {args.log}:")
        for line in tail:
            out("  " + line)
    reasons = {}
    for name in state["skipped"]:
        if name in junit:
            _, message, output = junit[name]
            reason = skip_reason(message, output)
        else:
            reason = f"(reason not found: see {args.log})"
        n, where = reasons.get(reason, (0, []))
        reasons[reason] = (n + 1, where + [name])
    print_groups("ctest skipped", reasons, "tests")
    return status


# ---- pytest ----------------------------------------------------------------------------------------


def run_pytest(args):
    skips = collections.OrderedDict()
    state = {"section": None, "echoed": 0, "summary": None, "skips_printed": False}

    def print_skips():
        if not state["skips_printed"]:
            print_groups("pytest skipped", skips, "locations")
            state["skips_printed"] = True

    def flush_summary():
        if state["summary"] is not None:  # a summary-like line that was not the last line after all
            out(state["summary"])
            state["summary"] = None

    def on_line(line):
        flush_summary()
        echoed, state["echoed"] = state["echoed"], 0
        if echoed:  # the start of this progress line is on the terminal already
            sys.stdout.write(line[echoed:] + "\n")
            sys.stdout.flush()
            return
        m = PYTEST_SECTION.match(line)
        if m:
            state["section"] = m.group(1)
        if PYTEST_SUMMARY.match(line):
            print_skips()
            state["summary"] = line
            return
        m = PYTEST_SKIPPED.match(line)
        if m and state["section"] == "short test summary info":
            n, where = skips.get(m.group(3), (0, []))
            skips[m.group(3)] = (n + int(m.group(1)), where + [m.group(2)])
            return
        out(line)

    lines = Lines(on_line)

    start = time.monotonic()
    last_output = [start]

    def on_chunk(chunk):
        last_output[0] = time.monotonic()
        lines.feed(chunk)
        # Progress dots as they come, not a line (about 70 tests) later.
        partial = lines.partial
        if len(partial) > state["echoed"] and PYTEST_PROGRESS_CHARS.match(partial):
            flush_summary()
            sys.stdout.write(partial[state["echoed"] :])
            sys.stdout.flush()
            state["echoed"] = len(partial)

    def on_tick(now):
        if now - last_output[0] < args.every:
            return
        last_output[0] = now
        if state["echoed"]:
            sys.stdout.write("\n")
            lines.partial = lines.partial[state["echoed"] :]
            state["echoed"] = 0
        out(f"pytest: still running, no output for {args.every:g}s ({clock(now - start)} so far)")

    status = run_streaming(args.command, args.log, on_chunk, on_tick, cwd=args.cwd)
    lines.close()
    print_skips()
    if state["summary"] is None:
        out(f"pytest exited with status {status} without its summary line: see {args.log}")
    return status


# ---- both summaries --------------------------------------------------------------------------------


def summary_line(path, pattern, last_only):
    """The last line of the log that matches pattern (last_only: the log's last non-empty line, if it
    does), without pytest's "=" padding; None when there is none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return None
    for line in reversed(lines[-1:] if last_only else lines):
        if pattern.match(line):
            return line.strip("= ")
    return None


def summary(args):
    ok = True
    for tool, path, status, pattern, last_only in (
        ("ctest", args.ctest_log, args.ctest_status, CTEST_SUMMARY, False),
        ("pytest", args.pytest_log, args.pytest_status, PYTEST_SUMMARY, True),
    ):
        line = summary_line(path, pattern, last_only)
        if line is None:
            line = f"{tool}: no summary line (exit status {status}; see {path})"
            ok = False
        elif status != 0 and not re.search(r"\b[1-9]\d* (?:tests? )?(?:failed|errors?)\b", line):
            line += f"  ({tool} exit status {status})"  # a failure the summary line does not show
        ok = ok and status == 0
        out(line)
    return 0 if ok else 1


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("ctest", help="run ctest (the command after --), full output to --log")
    c.add_argument("--log", required=True)
    c.add_argument("--junit", required=True, help="the --output-junit file the ctest command writes")
    c.add_argument("--every", type=float, default=PROGRESS_EVERY_S, help="seconds between progress lines")
    c.add_argument("command", nargs="+")
    p = sub.add_parser("pytest", help="run pytest (the command after --), full output to --log")
    p.add_argument("--log", required=True)
    p.add_argument("--cwd", default=None, help="the folder to run it in")
    p.add_argument("--every", type=float, default=PYTEST_QUIET_S, help="seconds without output before a line")
    p.add_argument("command", nargs="+")
    s = sub.add_parser("summary", help="print ctest's and pytest's summary lines from their logs")
    for tool in ("ctest", "pytest"):
        s.add_argument(f"--{tool}-log", required=True)
        s.add_argument(f"--{tool}-status", type=int, required=True)
    return parser


def main(argv=None):
    parser = make_parser()
    args = parser.parse_args(argv)
    if getattr(args, "every", 1) <= 0:
        parser.error(f"--every is {args.every:g}: it must be a number of seconds above 0 (default {HEARTBEAT_S:g})")
    try:
        if args.what == "ctest":
            return run_ctest(args)
        if args.what == "pytest":
            return run_pytest(args)
        return summary(args)
    except KeyboardInterrupt:
        # Ctrl-C reached the command too; die of SIGINT as it did, so that test.sh stops as well.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        raise


if __name__ == "__main__":
    sys.exit(main())
