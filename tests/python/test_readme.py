"""The README's Python examples run as written: each ```python block in a fresh process with its own
cache. Blocks that use a CUDA device are GPU tests (skipped with the reason without one)."""

import importlib.util
import pathlib
import re

import pytest

from conftest import run_python

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def blocks():
    text = README.read_text()
    found = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(found) >= 4, "the README lost its Python examples"
    return found


def params():
    out = []
    for i, code in enumerate(blocks()):
        marks = [pytest.mark.gpu] if '"cuda"' in code else []
        # Examples with another framework's arrays: GPU tests, skipped where that framework is missing.
        frameworks = [m for m in ("cupy", "jax") if re.search(rf"^import {m}\b", code, flags=re.M)]
        if frameworks:
            marks.append(pytest.mark.gpu)
        missing = [m for m in frameworks if importlib.util.find_spec(m) is None]
        if missing:
            marks.append(pytest.mark.skip(reason=f"{', '.join(missing)} is not installed"))
        out.append(pytest.param(code, id=f"block{i}", marks=marks))
    return out


@pytest.mark.parametrize("code", params())
def test_readme_example_runs(code, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code)
    run_python([str(script)], env={"KJIT_CACHE_DIR": tmp_path / "cache"}, cwd=tmp_path)
