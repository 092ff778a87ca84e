"""`import kjit` without torch (issue 15): the torch-free module kjit._core and what it offers.

kjit's compiled code is two modules on one shared library (kjit/libkjit_core.so: the core, so one
engine, settings and cache per process): kjit._core needs no torch, kjit._C is torch's part (tensors,
kjit.ops, kjit.elementwise) and is loaded only when torch is installed. The child processes here
cannot import torch: a sitecustomize on their PYTHONPATH sets sys.modules['torch'] = None, which is
what an environment without torch looks like to `import torch` and to importlib.util.find_spec.
"""

import os
import pathlib
import shutil
import subprocess
import textwrap

import pytest

from support import run_python


def _without_torch(tmp_path, code, args=None):
    """Runs `code` (or `python ARGS`) in a child process where `import torch` fails."""
    site = tmp_path / "notorch"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    path = os.pathsep.join(p for p in [str(site), os.environ.get("PYTHONPATH")] if p)
    return run_python(args or ["-c", textwrap.dedent(code)], env={"PYTHONPATH": path}, check=False, cwd=tmp_path)


def test_import_and_compile_only_without_torch(tmp_path):
    pytest.importorskip("numpy")
    r = _without_torch(
        tmp_path,
        """
        import sys
        import kjit
        import numpy as np
        assert sys.modules["torch"] is None, "the sitecustomize did not take"
        assert "kjit._C" not in sys.modules, "the torch module was loaded"
        t = kjit.Template("template <typename T, int N> __global__ void k(T* x) { x[threadIdx.x] += T(N); }",
                          name="tf.cu")
        k = t.kernel("k").specialize(T=np.float32, N=3, arch="sm_90")
        assert k.target == "sm_90" and k.device is None, k
        assert k.args == {"T": "float32", "N": 3}, k.args
        assert t.kernel("k").specialize(T="float32", N=3, arch="sm_90").key == k.key
        s = kjit.stats()
        assert s["compiles"] + s["disk_hits"] + s["memory_hits"] >= 2, s
        assert "op_calls" not in s, s  # torch's counters come with kjit._C
        info = kjit.cache_info()
        assert info["writable"] and info["dir"], info
        print("OK", k.key)
    """,
    )
    assert r.returncode == 0, r
    assert "OK" in r.stdout, r


def test_torch_parts_say_torch_is_needed(tmp_path):
    r = _without_torch(
        tmp_path,
        """
        import kjit
        for name in ("kjit.ops", "kjit.elementwise", "kjit.Elementwise"):
            try:
                obj = eval(name)
            except ImportError as e:
                print(name, "|", e)
            else:
                print(name, "| NO ERROR", obj)
        try:
            import kjit.ops
        except ImportError as e:
            print("import kjit.ops |", e)
        exec("from kjit import *")  # __all__ names only what there is
        assert "Template" in dir() and "launcher" in dir() and "elementwise" not in dir()
    """,
    )
    assert r.returncode == 0, r
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 4, r
    for line in lines:
        assert "NO ERROR" not in line, line
        assert "needs PyTorch (torch)" in line and "pip install torch" in line, line


def test_cli_info_without_torch(tmp_path):
    r = _without_torch(tmp_path, None, args=["-m", "kjit", "info"])
    assert r.returncode == 0, r
    assert "kjit" in r.stdout, r


def _needed(path):
    """The DT_NEEDED entries of an ELF file (readelf, else pyelftools)."""
    if shutil.which("readelf"):
        out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
        return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    elffile = pytest.importorskip("elftools.elf.elffile")
    with open(path, "rb") as f:
        dynamic = elffile.ELFFile(f).get_section_by_name(".dynamic")
        return [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]


def test_core_module_does_not_link_torch():
    import kjit._core

    module = pathlib.Path(kjit._core.__file__)
    libs = [module] + sorted(module.parent.glob("libkjit_core.so*"))
    assert len(libs) == 2, libs
    for lib in libs:
        needed = _needed(lib)
        assert needed, lib
        bad = [n for n in needed if n.startswith(("libtorch", "libc10", "libcudart"))]
        assert not bad, f"{lib.name} needs {bad}"
