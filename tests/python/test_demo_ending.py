"""What `python -m kjit demo` prints at its end (issue 31): the command that activates its environment
works in a fresh shell and finds this kjit, the cache line is the cache the demo used, the sections it
points at exist, and without a GPU it says so in one calm line (never torch's driver error). README.md
shows the demo's last lines with and without a GPU; the block for this machine's case must match a real
run (paths and timings normalized).

The full demo runs once for the module (about 10-60 s without a GPU: 12 compiles and a second process)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
import torch

from doc_blocks import REPO, fenced_blocks

HAS_GPU = torch.cuda.is_available()
IN_VENV = sys.prefix != sys.base_prefix
CALM = "no GPU here: compiled for sm_90 only (choose with --arch); run on a GPU machine to launch"


def _kjit_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KJIT_")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(stdout, stderr, cache dir) of one full demo run (with the second process) on a fresh cache, run
    from another folder as .ci/demo.sh runs it."""
    cache = tmp_path_factory.mktemp("demo") / "cache"
    proc = subprocess.run(
        [sys.executable, "-m", "kjit", "demo"],
        cwd=cache.parent,
        env=_kjit_env(KJIT_CACHE_DIR=str(cache)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"the demo failed (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout, proc.stderr, cache


def _field(out: str, label: str) -> str:
    m = re.search(rf"^  {label}:\s+(.*)$", out, flags=re.M)
    assert m, f"the demo's ending has no '{label}:' line:\n{out}"
    return m.group(1)


def _fresh_shell(command: str) -> subprocess.CompletedProcess:
    """`command` in a login-free bash with nothing of this process's environment but HOME, and the loader path
    where the machine needs one for kjit's system libraries (a GPU machine whose hiredis is not installed
    system-wide: set for every shell there, not by the set-up)."""
    keep = [f"HOME={os.environ.get('HOME', '/root')}", "PATH=/usr/bin:/bin"]
    if os.environ.get("LD_LIBRARY_PATH"):
        keep.append(f"LD_LIBRARY_PATH={os.environ['LD_LIBRARY_PATH']}")
    return subprocess.run(["env", "-i", *keep, "bash", "-c", command], capture_output=True, text=True, timeout=300)


def _this_kjit() -> str:
    import kjit

    return str(pathlib.Path(kjit.__file__).resolve())


def test_the_printed_activation_works_in_a_fresh_shell(demo):
    out, _, _ = demo
    if not IN_VENV:
        pytest.skip(f"the tests run outside a virtual environment ({sys.prefix}): the demo prints no activation")
    activate = _field(out, "environment")
    assert activate == f"source {shlex.quote(str(pathlib.Path(sys.prefix).absolute() / 'bin' / 'activate'))}"
    r = _fresh_shell(f'{activate} && python -c "import kjit; print(kjit.__file__)" && kjit info')
    assert r.returncode == 0, f"{activate!r} then python and kjit in a fresh shell failed:\n{r.stdout}\n{r.stderr}"
    first, rest = r.stdout.split("\n", 1)
    assert str(pathlib.Path(first).resolve()) == _this_kjit(), r.stdout
    assert rest.startswith("kjit "), rest  # `kjit info`'s header: the console script of that environment


def test_the_printed_python_command_works_in_a_fresh_shell(demo):
    out, _, _ = demo
    m = re.search(r"^\s+\(or without activating: (.*) -m kjit info\)$", out, flags=re.M) or re.search(
        r"^  python:\s+(.*) \(kjit is installed for this Python\)$", out, flags=re.M
    )
    assert m, f"the demo's ending names no Python to run kjit with:\n{out}"
    python = m.group(1)
    r = _fresh_shell(f'{python} -c "import kjit; print(kjit.__file__)" && {python} -m kjit info')
    assert r.returncode == 0, f"{python!r} in a fresh shell failed:\n{r.stdout}\n{r.stderr}"
    first, rest = r.stdout.split("\n", 1)
    assert str(pathlib.Path(first).resolve()) == _this_kjit(), r.stdout
    assert rest.startswith("kjit "), rest


def test_outside_a_virtual_environment_it_names_this_python(monkeypatch):
    from kjit import demo

    monkeypatch.setattr(sys, "base_prefix", sys.prefix)
    out = "\n".join(demo.next_steps())
    assert "environment:" not in out and "activate" not in out, out
    python = _field(out, "python")
    assert python == f"{shlex.quote(os.path.abspath(sys.executable))} (kjit is installed for this Python)"
    assert f"  try:          {shlex.quote(os.path.abspath(sys.executable))} -m kjit info " in out, out
    r = _fresh_shell(f'{python.split(" (")[0]} -c "import kjit; print(kjit.__file__)"')
    assert r.returncode == 0 and str(pathlib.Path(r.stdout.strip()).resolve()) == _this_kjit(), r


def test_the_cache_line_is_the_cache_the_demo_used(demo):
    out, _, cache = demo
    assert _field(out, "cache") == f"{cache} (from KJIT_CACHE_DIR)"
    assert any(cache.rglob("*")), f"the demo wrote nothing under {cache}"


def test_the_default_cache_is_named_with_where_it_comes_from(tmp_path):
    env = _kjit_env(HOME=str(tmp_path))
    env.pop("XDG_CACHE_HOME", None)
    r = subprocess.run(
        [sys.executable, "-c", "from kjit.demo import next_steps; print('\\n'.join(next_steps()))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert _field(r.stdout, "cache") == f"{tmp_path}/.cache/kjit (from HOME)"


def test_the_sections_it_points_at_exist(demo):
    out, _, _ = demo
    ending = out[out.index("\nnext:\n") :]
    pointers = re.findall(r"([\w/.-]+\.md)(#[\w-]+)", ending)
    assert len(pointers) == 2, ending  # the five-minute example and the warm deployment recipe
    for path, anchor in pointers:
        headings = re.findall(r"^#+ (.*)$", (REPO / path).read_text(), flags=re.M)
        # GitHub's anchor of a heading: lower case, spaces to '-', punctuation dropped.
        anchors = {"#" + re.sub(r"[^\w -]", "", h.strip().lower()).replace(" ", "-") for h in headings}
        assert anchor in anchors, f"{path}{anchor}: no such heading in {path} ({sorted(anchors)})"


def test_without_a_gpu_one_calm_line_and_never_the_driver_error(demo):
    if HAS_GPU:
        pytest.skip("a CUDA device is present: the demo runs the scenarios")
    out, err, _ = demo
    assert CALM in out.splitlines(), out
    for text in (out, err):
        assert "NVIDIA driver" not in text and "nvidia.com" not in text, text
        assert "error" not in text.lower(), text


def test_demo_without_a_device_compiles_and_says_what_it_did_not_run(capsys):
    # In this process, for another target than the module's run: kjit.demo.main itself, on sm_80.
    if HAS_GPU:
        pytest.skip("a CUDA device is present: the demo runs the scenarios")
    from kjit import demo

    assert demo.main(["--arch", "sm_80", "--once"]) == 0
    out = capsys.readouterr().out
    assert "no GPU here: compiled for sm_80 only (choose with --arch); run on a GPU machine to launch" in out
    assert "NVIDIA driver" not in out  # torch's driver error is not the demo's message


# A cache it could not use (issue 40): an unwritable home. As root, permission bits stop nothing, so the home
# is a regular file there (the cache cannot be created under it); as a user (CI's nonroot run), a chmod 0555
# folder, the reviewer's case.


@pytest.fixture(scope="module")
def demo_unusable_home(tmp_path_factory):
    """(stdout, the cache dir, the engine's reason) of a full demo run whose default cache cannot be made."""
    base = tmp_path_factory.mktemp("unusable-home")
    if os.geteuid() == 0:
        home = base / "home-is-a-file"
        home.write_text("a regular file where the home folder should be")
        reason = "Not a directory"
    else:
        home = base / "read-only-home"
        home.mkdir()
        home.chmod(0o555)
        reason = "Permission denied"
    env = _kjit_env(HOME=str(home))
    env.pop("XDG_CACHE_HOME", None)
    try:
        # What the engine says about that cache, asked on its own (the demo must report the same).
        info = subprocess.run(
            [sys.executable, "-c", "import json, kjit; print(json.dumps(kjit._core.cache_info()))"],
            env=env,
            cwd=base,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert info.returncode == 0, info.stderr
        cache = json.loads(info.stdout)
        proc = subprocess.run(
            [sys.executable, "-m", "kjit", "demo"], cwd=base, env=env, capture_output=True, text=True, timeout=600
        )
    finally:
        if home.is_dir():
            home.chmod(0o755)
    assert proc.returncode == 0, f"the demo failed (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}"
    assert cache["dir"] == f"{home}/.cache/kjit" and cache["dir_source"] == "HOME", cache
    assert not cache["writable"] and cache["problem"] and reason in cache["problem"], cache
    return proc.stdout, cache["dir"], cache["problem"]


def test_a_cache_it_could_not_use_is_said_in_the_summary(demo_unusable_home):
    out, _, problem = demo_unusable_home
    lines = out.splitlines()
    summary = next(i for i, line in enumerate(lines) if line.startswith("summary: "))
    assert lines[summary + 1] == (
        f"warning: the cache could not be used ({problem}): kernels were kept in memory only, "
        "and every new process compiles them again"
    ), out


def test_the_second_process_says_why_it_had_no_disk_hits(demo_unusable_home):
    out, _, problem = demo_unusable_home
    line = next(line for line in out.splitlines() if line.startswith("second process, same cache: "))
    assert " 0 disk hits " in line, line
    assert line.endswith(f"; no disk hits because the cache could not be used ({problem})"), line


def test_the_next_block_names_no_unusable_folder_as_the_cache_and_says_what_to_set(demo_unusable_home):
    out, cache_dir, problem = demo_unusable_home
    ending = out[out.index("\nnext:\n") :]
    assert _field(ending, "cache") == f"none: {cache_dir} (from HOME) could not be used", ending
    assert f"\n                ({problem})\n" in ending, ending
    assert "set KJIT_CACHE_DIR=<a folder you can write>, or XDG_CACHE_HOME=<folder>" in ending, ending
    assert "(the cache is then <folder>/kjit), and run the demo again" in ending, ending


def test_a_readonly_mode_explains_the_second_process_compiles():
    from kjit import demo

    cache = {"dir": "/c", "dir_source": "KJIT_CACHE_DIR", "mode": "readonly", "writable": False, "problem": None}
    assert demo.cache_not_kept(cache) == "KJIT_CACHE_MODE=readonly writes nothing to the cache"
    assert demo.cache_not_kept({**cache, "mode": "readwrite", "writable": True}) is None


# README.md: the demo's last lines, as they appear.


def _normalize(lines: list[str]) -> list[str]:
    """Paths and timings that differ between machines and runs."""
    out = []
    for line in lines:
        line = re.sub(r"source \S+/bin/activate$", "source VENV/bin/activate", line)
        line = re.sub(r"without activating: \S+ -m kjit info", "without activating: PYTHON -m kjit info", line)
        # The cache's source too: the test's run uses KJIT_CACHE_DIR, the README a default cache (from HOME);
        # test_the_cache_line_* check both.
        line = re.sub(r"^(  cache:\s+)\S+ \(from \w+\)$", r"\1DIR (from SOURCE)", line)
        line = re.sub(r"\(\d+ ms\)", "(N ms)", line)
        line = re.sub(r"; \d+\.\d+ s$", "; N s", line)
        out.append(line.rstrip())
    return out


def _readme_ending(with_gpu: bool) -> list[str]:
    found = [
        b
        for b in fenced_blocks(REPO / "README.md")
        if b.lang == "text" and "\nnext:\n" in b.code and ("no GPU here:" in b.code) != with_gpu
    ]
    assert len(found) == 1, (
        f"README.md: expected one ```text block of the demo's ending {'with' if with_gpu else 'without'} a GPU"
    )
    return found[0].code.rstrip("\n").splitlines()


def test_readme_shows_both_endings():
    for with_gpu in (False, True):
        lines = _readme_ending(with_gpu)
        assert lines[0].startswith("summary: "), lines
        assert any(line.startswith("second process, same cache: ") for line in lines), lines
        assert (CALM in lines) != with_gpu, lines


def test_readme_ending_matches_a_real_run(demo):
    if not IN_VENV:
        pytest.skip("the tests run outside a virtual environment: the ending's first lines differ from the README's")
    out, _, _ = demo
    shown = _normalize(_readme_ending(HAS_GPU))
    real = _normalize(out.rstrip("\n").splitlines()[-len(shown) :])
    assert real == shown, "README.md's demo ending differs from a real run:\n" + "\n".join(real)


# Which "could not launch" is calm and which is an error (the GPUs the kernel driver shows, faked).


def test_gpus_that_torch_cannot_use_are_a_loud_error(monkeypatch, capsys):
    if HAS_GPU:
        pytest.skip("a CUDA device is present: torch can use it")
    from kjit import demo

    monkeypatch.setattr(demo, "_visible_gpus", lambda: ["0000:01:00.0"])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    state = demo._device_state()
    assert state.kind == "error" and state.detail, state  # torch's own error, in full
    assert demo.main(["--once"]) == 1
    out, err = capsys.readouterr()
    assert "no GPU here" not in out, out
    assert "error: this machine has NVIDIA GPUs (0000:01:00.0) but torch cannot use them" in err, err
    assert state.detail in err, err
    assert "\nnext:\n" in out, out


def test_gpus_hidden_by_cuda_visible_devices_are_calm_and_say_so(monkeypatch):
    if HAS_GPU:
        pytest.skip("a CUDA device is present: torch can use it")
    from kjit import demo

    monkeypatch.setattr(demo, "_visible_gpus", lambda: ["0000:01:00.0"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    state = demo._device_state()
    assert state.kind == "none", state
    assert state.detail == "1 GPU(s) here, hidden by CUDA_VISIBLE_DEVICES=''", state


def test_no_gpu_at_all_is_calm_with_no_detail(monkeypatch):
    if HAS_GPU:
        pytest.skip("a CUDA device is present: torch can use it")
    from kjit import demo

    monkeypatch.setattr(demo, "_visible_gpus", lambda: [])
    assert demo._device_state() == demo.DeviceState("none", "")
