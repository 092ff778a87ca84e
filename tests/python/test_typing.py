"""Type information: the committed stubs of the compiled module(s) match the installed kjit, and mypy
checks a user program against the package as installed (py.typed, the stubs, the annotated modules).

They need the pinned tools of python/tools/requirements-typing.txt (pybind11-stubgen, mypy); each test
skips with the reason when its tool is missing."""

import importlib.util
import os
import pathlib
import re
import textwrap

import pytest

from support import run_python

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE_ROOT = REPO / "python"  # python/kjit: the package sources, stubs and py.typed as the wheel ships them
GEN_STUBS = PACKAGE_ROOT / "tools" / "gen_stubs.py"
INSTALL = "pip install -r python/tools/requirements-typing.txt"


def need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed ({INSTALL})")


def test_committed_stubs_match_the_installed_module():
    need("pybind11_stubgen")
    r = run_python([str(GEN_STUBS), "--check"], check=False, cwd=REPO)
    assert r.returncode == 0, (
        "python/kjit/**/*.pyi are not what python/tools/gen_stubs.py makes from the installed kjit: run it "
        f"and commit the stubs (or install the fresh build first).\n{r!r}"
    )


# A user program over the public API; every line must type-check.
GOOD = """
import torch

import kjit
import kjit.ops

SOURCE = "template <typename T, int VEC> __global__ void add(const T* x, T* y, T c, long long n) {}"

t: kjit.Template = kjit.Template(SOURCE, name="mine.cu")
builtin: kjit.Template = kjit.Template.builtin("add_constant")
names: list[str] = kjit.Template.builtin_names() + t.kernels
family: kjit.KernelFamily = t.kernel("add", std="c++17", fast_math=True, defines={"N": 1})
k: kjit.Kernel = family.specialize(arch="sm_90", T=torch.float32, VEC=4)
k2: kjit.Kernel = family.specialize(device=0, T="float16", VEC=1)
key: str = k.key + k.target + k.origin
x = torch.ones(16)
k.launch(1, (128, 1, 1), x, x, 5.0, x.numel())
k.launch([2, 2], 64, x, None, 1, 2, shared_mem=1024, stream=0)
blocks: int = kjit.cdiv(x.numel(), 128)
run = kjit.launcher(family, grid=lambda x, *_: kjit.cdiv(x.numel(), 128), T=kjit.arg(0).dtype)
counters: dict = kjit.stats()
kjit.reset_stats()
kjit.clear_memory()
info: dict = kjit.cache_info()
y: torch.Tensor = kjit.ops.softmax(x, dim=-1)
z: torch.Tensor = kjit.ops.layer_norm(x, None, None, eps=1e-5)
p: torch.Tensor = kjit.ops.max_pool2d(x, 2, stride=[2, 2])
dx, dw, db = kjit.ops.layer_norm_backward(x, x, None, True, 1e-5)
grad: torch.Tensor = dx
f = kjit.elementwise("a * x + y", "x, y", {"a": 2.0})
g = kjit.elementwise("x * s", ["x"], ("s",), dtype=torch.float16)
compiled: kjit.Kernel = f.compile(arch="sm_90", dtypes=(torch.float32, torch.float32))
try:
    k.launch(1, 1)
except kjit.CompileError as e:
    log: str = e.log
except kjit.CacheMissError as e:
    missed: str = e.key
except kjit.Error:
    pass
"""

# Each line a deliberate error and the mypy error code it must get.
BAD = [
    ("kjit.Template(42)", "arg-type"),  # source: a str
    ('kjit.Template.builtin("add_constant").kernel(name=3)', "arg-type"),
    ("fam.specialize(arch=90)", "arg-type"),  # arch: a str
    ("k.launch(1, 1, stram=None)", "call-arg"),  # a misspelt keyword of launch()
    ('kjit.ops.softmax(torch.ones(1), dim="last")', "arg-type"),  # dim: an int (the op's schema)
    ("n: int = kjit.stats()", "assignment"),  # stats() is a dict
    ('kjit.elementwise("x", inputs=3)', "arg-type"),
]
BAD_PRELUDE = "import torch\nimport kjit\nimport kjit.ops\n\n\ndef f(k: kjit.Kernel, fam: kjit.KernelFamily) -> None:\n"


@pytest.fixture(scope="module")
def mypy_result(tmp_path_factory):
    """mypy over good.py and bad.py, once: kjit comes from python/ first on the path, as an installed
    package (mypy then needs its py.typed marker, and errors inside kjit itself are not the user's)."""
    need("mypy")
    d = tmp_path_factory.mktemp("typing")
    (d / "good.py").write_text(textwrap.dedent(GOOD))
    (d / "bad.py").write_text(BAD_PRELUDE + "".join(f"    {line}\n" for line, _ in BAD))
    path = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    # The stubs are named too: mypy reports errors in them (not in the rest of an installed package).
    stubs = sorted(str(f) for f in (PACKAGE_ROOT / "kjit").rglob("*.pyi"))
    r = run_python(
        [
            "-m",
            "mypy",
            "--cache-dir",
            str(d / "cache"),
            "--hide-error-context",
            "--no-pretty",
            "--show-column-numbers",
            "good.py",
            "bad.py",
            *stubs,
        ],
        env={"PYTHONPATH": path, "MYPYPATH": None},
        check=False,
        cwd=d,
        timeout=600,
    )
    errors = re.findall(r"^(good|bad)\.py:(\d+):\d+: error: (.*)\[([a-z-]+)\]$", r.stdout, flags=re.M)
    return r, errors, stubs


def test_stubs_are_valid(mypy_result):
    r, _, stubs = mypy_result
    assert stubs, "no stubs under python/kjit/: run python/tools/gen_stubs.py"
    assert ".pyi:" not in r.stdout, f"mypy finds errors in the stubs:\n{r.stdout}"


def test_user_program_type_checks(mypy_result):
    r, errors, _ = mypy_result
    assert "installed, but missing library stubs or py.typed" not in r.stdout, r
    good = [e for e in errors if e[0] == "good"]
    assert not good, f"mypy finds errors in a correct program:\n{r.stdout}"
    assert r.returncode in (0, 1) and "good.py" not in r.stdout, r


def test_type_errors_are_reported(mypy_result):
    r, errors, _ = mypy_result
    found = {(int(line), code) for name, line, _, code in errors if name == "bad"}
    first = BAD_PRELUDE.count("\n") + 1
    missing = [
        f"bad.py:{first + i}: {line}  (expected [{code}])"
        for i, (line, code) in enumerate(BAD)
        if (first + i, code) not in found
    ]
    assert not missing, "mypy does not report:\n" + "\n".join(missing) + f"\n{r.stdout}"
