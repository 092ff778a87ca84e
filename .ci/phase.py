"""One phase of kjit's set-up, run so that a person watching knows what is happening and for how long.

    python3 .ci/phase.py NAME [--what TEXT] [--first-time TEXT] -- COMMAND [ARG...]

Prints "== NAME: TEXT" (and, given --first-time, what the phase costs the first time, e.g. "about 10 min
on 2 CPUs"), runs
COMMAND with its output passed through line by line, and then "== NAME: done in 2m05s" (or, when the
command fails, "== NAME failed after 2m05s (exit 1)" and the exit status). When the command prints nothing
for quiet.HEARTBEAT_S seconds (15; KJIT_SETUP_HEARTBEAT=S sets another), a line says the phase is still
running and for how long, so that no phase is silent for more than quiet.QUIET_S (20 s: the set-up's
promise, .ci/quiet.py). Progress redrawn in place ('\r', pip's and ninja's bars) is passed on as one line
every 10 s at most. On a terminal the command keeps the terminal (pip's and ninja's own progress bars), and
the heartbeat is left to them.

    python3 .ci/phase.py --watch [SECONDS] -- COMMAND [ARG...]

Runs COMMAND, passing its output through, and fails (exit 1, after the command has finished) when it was
silent for more than SECONDS (default quiet.QUIET_S) at any point: how CI checks that the set-up keeps
its promise.

Standard library only: it runs with the system's python3 before any environment exists.
"""

import argparse
import os
import subprocess
import sys
import threading
import time

from quiet import HEARTBEAT_S, QUIET_S, TICK_S


def fmt(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Relay:
    """Copies a child's output to stdout, '\r'-redrawn progress throttled, and remembers when it last did."""

    def __init__(self, stream, redraw_every: float = 10.0):
        self.stream = stream
        self.redraw_every = redraw_every
        self.last_output = time.monotonic()
        self.longest_silence = 0.0
        self.lock = threading.Lock()
        self.mid_line = False
        self._last_redraw = 0.0

    def emit(self, text: str, heartbeat: bool = False) -> None:
        with self.lock:
            now = time.monotonic()
            if not heartbeat:
                self.longest_silence = max(self.longest_silence, now - self.last_output)
                self.last_output = now
            if heartbeat and self.mid_line:
                text = "\n" + text
            sys.stdout.write(text)
            sys.stdout.flush()
            if not heartbeat:
                self.mid_line = not text.endswith("\n")

    def run(self) -> None:
        pending = b""
        redrawing = False  # a '\r' came since the last '\n': the text after it is a progress bar being redrawn
        while True:
            chunk = os.read(self.stream.fileno(), 65536)
            if not chunk:
                break
            pending += chunk
            while True:
                cut = min((i for i in (pending.find(b"\n"), pending.find(b"\r")) if i >= 0), default=-1)
                if cut < 0:
                    break
                piece, sep, pending = pending[:cut], pending[cut : cut + 1], pending[cut + 1 :]
                text = piece.decode(errors="replace")
                if sep == b"\n":
                    redrawing = False
                    self.emit(text + "\n")
                else:
                    redrawing = True
                    if text.strip() and time.monotonic() - self._last_redraw >= self.redraw_every:
                        self._last_redraw = time.monotonic()
                        self.emit(text.strip() + "\n")
            # Text of a line still being written (pytest's dots) is passed on as it comes.
            if pending and not redrawing:
                self.emit(pending.decode(errors="replace"))
                pending = b""
        if pending and not redrawing:
            self.emit(pending.decode(errors="replace") + "\n")


def run_piped(cmd: list[str], heartbeat: float | None, name: str, start: float) -> tuple[int, float]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    relay = Relay(proc.stdout)
    reader = threading.Thread(target=relay.run, daemon=True)
    reader.start()
    last_beat = start
    while proc.poll() is None:
        time.sleep(TICK_S)
        now = time.monotonic()
        if heartbeat and now - max(relay.last_output, last_beat) >= heartbeat:
            last_beat = now
            relay.emit(f"   ... {name}: still running ({fmt(now - start)} so far)\n", heartbeat=True)
    reader.join()
    with relay.lock:
        relay.longest_silence = max(relay.longest_silence, time.monotonic() - relay.last_output)
    return proc.returncode, relay.longest_silence


def heartbeat_s() -> float:
    """Seconds of silence after which a phase says it is still running: quiet.HEARTBEAT_S, or
    KJIT_SETUP_HEARTBEAT (for tests of this script)."""
    return float(os.environ.get("KJIT_SETUP_HEARTBEAT") or HEARTBEAT_S)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(
            "phase.py: usage: phase.py NAME [--first-time TEXT] -- COMMAND... | phase.py --watch [S] -- COMMAND...",
            file=sys.stderr,
        )
        return 2
    split = argv.index("--")
    cmd = argv[split + 1 :]
    parser = argparse.ArgumentParser(prog="phase.py")
    parser.add_argument("name", nargs="?")
    parser.add_argument("--what", default="")
    parser.add_argument("--first-time", default="")
    parser.add_argument("--watch", type=float, nargs="?", const=float(QUIET_S))
    args = parser.parse_args(argv[:split])
    if not cmd:
        print("phase.py: no command after --", file=sys.stderr)
        return 2
    start = time.monotonic()
    if args.watch is not None:
        rc, silence = run_piped(cmd, None, "", start)
        print(f"== longest silence: {silence:.1f} s (allowed: {args.watch:g} s)", flush=True)
        if rc == 0 and silence > args.watch:
            print(f"phase.py: the command was silent for {silence:.1f} s, more than {args.watch:g} s", file=sys.stderr)
            return 1
        return rc
    if not args.name:
        print("phase.py: a phase needs a NAME", file=sys.stderr)
        return 2
    heartbeat = heartbeat_s()
    head = f"== {args.name}" + (f": {args.what}" if args.what else "")
    print(head + (f" (first time: {args.first_time})" if args.first_time else ""), flush=True)
    if sys.stdout.isatty():
        rc = subprocess.call(cmd)
    else:
        rc, _ = run_piped(cmd, heartbeat, args.name, start)
    took = fmt(time.monotonic() - start)
    if rc == 0:
        print(f"== {args.name}: done in {took}", flush=True)
    else:
        print(f"== {args.name} failed after {took} (exit {rc}): the lines above say why", file=sys.stderr, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
