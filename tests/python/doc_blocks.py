"""The runner of the documentation's code blocks (README.md and docs/*.md; used by test_readme.py and
test_docs.py): every ```python and ```bash block runs as written, in a fresh process with a cache of
its own, in a fresh temporary directory.

- A python block is a script run by this test's interpreter.
- A bash block runs under `bash -euo pipefail`, with this interpreter's folder first on PATH (so
  `python` and `kjit` are the ones under test), in a folder that links the repository's top-level
  entries (`examples/deploy/workload.py` and `kernel_templates/...` resolve; what a block writes stays
  in the temporary folder).
- A block that uses a CUDA device is a GPU test (skipped with the reason where there is none): a
  python block that names "cuda" or imports another framework's arrays (cupy, jax; skipped with the
  reason where that framework is missing), or any block marked `gpu`.
- A marker is an HTML comment on the line right above the fence (invisible on the rendered page):
    <!-- doc-test: gpu -->                        the block needs a CUDA device
    <!-- doc-test: illustrative: REASON -->       the block cannot run in a test (a cluster, a package
                                                  install, the set-up scripts themselves); skipped
                                                  with REASON. Use it sparingly.
Other fenced languages (cpp, text, none) are not run; ```sh, ```shell, ```console and ```py are refused
so that a block is never silently left out.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

from support import run_python

REPO = pathlib.Path(__file__).resolve().parents[2]
RUN_LANGS = ("python", "bash")
REFUSED_LANGS = ("sh", "shell", "console", "py", "python3", "zsh")
MARKER = re.compile(r"<!-- doc-test: (?P<what>.*?) -->")
FENCE = re.compile(r"^```(?P<lang>[A-Za-z0-9_+-]*)[ \t]*$")


@dataclasses.dataclass
class Block:
    path: pathlib.Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # the text of the doc-test marker above the fence, if any

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def fenced_blocks(path: pathlib.Path) -> list[Block]:
    """Every fenced block of the file (all languages), with the doc-test marker right above it."""
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path.relative_to(REPO)}:{start + 1}: a code fence that is never closed")
        marker = None
        if start > 0:
            mm = MARKER.fullmatch(lines[start - 1].strip())
            if mm:
                marker = mm.group("what").strip()
        out.append(Block(path, start + 1, m.group("lang"), "\n".join(lines[start + 1 : j]) + "\n", marker))
        i = j + 1
    return out


def runnable_blocks(path: pathlib.Path) -> list[Block]:
    """The python and bash blocks of the file; refuses the spellings the runner would not run."""
    found = []
    for b in fenced_blocks(path):
        if b.lang in REFUSED_LANGS:
            raise AssertionError(
                f"{b.where}: a ```{b.lang} block is not run by the docs tests; write "
                f"```{'python' if b.lang.startswith('py') else 'bash'}"
            )
        if b.lang in RUN_LANGS:
            found.append(b)
        elif b.marker is not None:
            raise AssertionError(f"{b.where}: a doc-test marker above a ```{b.lang} block, which is never run")
    return found


def _marks(b: Block) -> list:
    marks = []
    if b.marker is not None:
        if b.marker == "gpu":
            marks.append(pytest.mark.gpu)
        elif b.marker.startswith("illustrative:") and b.marker[len("illustrative:") :].strip():
            marks.append(pytest.mark.skip(reason=f"illustrative only: {b.marker[len('illustrative:') :].strip()}"))
        else:
            raise AssertionError(
                f"{b.where}: unknown doc-test marker {b.marker!r}; allowed: 'gpu', 'illustrative: REASON'"
            )
    if b.lang == "python":
        if '"cuda"' in b.code and pytest.mark.gpu not in marks:
            marks.append(pytest.mark.gpu)
        # Examples with another framework's arrays: GPU tests, skipped where that framework is missing.
        frameworks = [m for m in ("cupy", "jax") if re.search(rf"^import {m}\b", b.code, flags=re.M)]
        if frameworks and pytest.mark.gpu not in marks:
            marks.append(pytest.mark.gpu)
        missing = [m for m in frameworks if importlib.util.find_spec(m) is None]
        if missing:
            marks.append(pytest.mark.skip(reason=f"{', '.join(missing)} is not installed"))
    return marks


def params(paths: list[pathlib.Path]) -> list:
    out = []
    for path in paths:
        stem = path.relative_to(REPO).as_posix()
        for b in runnable_blocks(path):
            out.append(pytest.param(b, id=f"{stem}:{b.line}:{b.lang}", marks=_marks(b)))
    return out


def _work_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    """A fresh folder that links the repository's top-level entries (read them, write beside them)."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name in (".git", "build", ".venv") or entry.name.startswith("build-"):
            continue
        (work / entry.name).symlink_to(entry)
    return work


def run_block(b: Block, tmp_path: pathlib.Path) -> None:
    env = {"KJIT_CACHE_DIR": tmp_path / "cache"}
    if b.lang == "python":
        script = tmp_path / "example.py"
        script.write_text(b.code)
        run_python([str(script)], env=env, cwd=tmp_path)
        return
    assert b.lang == "bash", b.lang
    work = _work_dir(tmp_path)
    script = tmp_path / "example.sh"
    script.write_text(b.code)
    full_env = {k: v for k, v in os.environ.items()}
    full_env.update({k: str(v) for k, v in env.items()})
    full_env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", str(script)], env=full_env, cwd=work, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (
        f"{b.where}: the bash block failed (exit {proc.returncode})\n"
        f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
