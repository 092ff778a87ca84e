"""One specialization, one key, whichever front end names it (issue 14 items 18 and 21).

The engine resolves every specialization (skipped defaults, defines, 64-bit values): the command line
(`kjit compile`) and the Python API must get the same name expression and the same cache key for the
same arguments. Compile-only for a named arch: no GPU needed.
"""

import json

import pytest
import torch

import kjit
from support import compile_add_constant

# Defaults that name earlier parameters (M, U, K) and one left at its default before a given one (B).
SOURCE = r"""
template <typename T, int N, int M = N * 2, typename U = T, int K = sizeof(U) + M, bool B = false,
          unsigned long long BIG = 1ull>
__global__ void scale(T* x, U* y, int n) {
  static_assert(M == N * 2, "M is twice N");
  static_assert(K == sizeof(U) + M, "K follows U and M");
#ifndef FLAG
#error "FLAG must be defined"
#endif
#if FLAG != 1
#error "a bare define is 1, as with nvcc -DFLAG"
#endif
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<T>(y[i]) * static_cast<T>(B ? K : M) + static_cast<T>(BIG > 1ull ? 1 : 0);
}
"""

CASES = [
    # (CLI --param values, Python keyword arguments)
    (["T=float32", "N=4", "B=true"], dict(T=torch.float32, N=4, B=True)),
    (["T=float64", "N=3", "M=6", "BIG=18446744073709551615"], dict(T=torch.float64, N=3, M=6, BIG=2**64 - 1)),
    (["T=int32", "N=1", "BIG=9223372036854775808"], dict(T=torch.int32, N=1, BIG=2**63)),
    (["T=float32", "N=2"], dict(T=torch.float32, N=2)),
]


@pytest.mark.parametrize("params,kwargs", CASES, ids=["skipped-defaults", "max-u64", "2^63", "prefix"])
def test_cli_and_python_give_the_same_key(tmp_path, run_kjit, params, kwargs):
    src = tmp_path / "scale.cu"
    src.write_text(SOURCE)
    args = ["compile", str(src), "--kernel", "scale", "--define", "FLAG", "--arch", "sm_90", "--json"]
    for p in params:
        args += ["--param", p]
    r = run_kjit(*args)
    cli = json.loads(r.stdout)

    k = kjit.Template.from_file(src).kernel("scale", defines=["FLAG"]).specialize(arch="sm_90", **kwargs)
    assert k.name_expression == cli["name_expression"]
    assert k.key == cli["results"][0]["key"]


def test_skipped_defaults_are_rendered_from_their_text():
    fam = kjit.Template(SOURCE, name="scale.cu").kernel("scale", defines={"FLAG": None})
    k = fam.specialize(arch="sm_90", T=torch.float32, N=4, B=True)
    # The defaults as written, with the earlier parameters they name replaced by their values.
    assert k.name_expression == "scale<float, 4, (4)* 2, float, sizeof ( float ) + ((4)* 2), true>"
    assert fam.options["defines"] == {"FLAG": "1"}


def test_a_bare_define_is_one_in_every_spelling():
    t = kjit.Template(SOURCE, name="scale.cu")
    keys = {
        t.kernel("scale", defines=d).specialize(arch="sm_90", T=torch.float32, N=2).key
        for d in (["FLAG"], ["FLAG=1"], {"FLAG": 1}, {"FLAG": True}, {"FLAG": None}, {"FLAG": "1"})
    }
    assert len(keys) == 1


@pytest.fixture
def cli_key(run_kjit):
    """cli_key(*options): the key `kjit compile` gives add_constant<float, 4> for sm_90 with these options."""

    def key(*extra):
        return json.loads(run_kjit(*compile_add_constant("--json", *extra)).stdout)["results"][0]["key"]

    return key


def test_the_lean_front_end_gives_the_same_key_from_the_cli_and_python(cli_key):
    # What kjit.ops compile (minimal=True, NVRTC's --minimal) can be warmed from the command line and Python alike.
    fam = kjit.Template.builtin("add_constant").kernel("add_constant", minimal=True)
    assert fam.options["minimal"] is True
    assert kjit.Template.builtin("add_constant").kernel("add_constant").options["minimal"] is False
    lean = fam.specialize(T=torch.float32, VEC=4, arch="sm_90").key
    full = (
        kjit.Template.builtin("add_constant")
        .kernel("add_constant")
        .specialize(T=torch.float32, VEC=4, arch="sm_90")
        .key
    )
    assert lean != full
    assert cli_key("--minimal") == lean
    assert cli_key() == full


def test_the_fast_compile_level_gives_the_same_key_from_the_cli_and_python(cli_key):
    def py_key(**options):
        fam = kjit.Template.builtin("add_constant").kernel("add_constant", **options)
        return fam.specialize(T=torch.float32, VEC=4, arch="sm_90").key

    keys = {level: py_key(fast_compile=level) for level in ("off", "min", "mid", "max")}
    assert len(set(keys.values())) == 4
    assert keys["off"] == py_key()
    assert cli_key("--fast-compile", "mid") == keys["mid"]
    assert cli_key() == keys["off"]


@pytest.mark.parametrize("level", ["off", "mid"])
def test_the_librarys_options_follow_kjit_library_fast_compile(run_py, level):
    # kjit.ops and kjit.elementwise compile with _core.library_compile_options(): off unless the setting says otherwise.
    env = {"KJIT_LIBRARY_FAST_COMPILE": level if level != "off" else None}
    r = run_py("import kjit; print(kjit._core.library_compile_options()['fast_compile'])", env=env)
    assert r.stdout.strip() == level


def non_default(field):
    """A value of `field` (a row of kjit._core.compile_option_fields()) other than its default: for Python,
    and as `kjit compile` arguments."""
    kind = field["kind"]
    if kind == "bool":
        return True, [field["cli"]]
    if kind == "int":
        return field["max"], [field["cli"], str(field["max"])]
    if kind == "enum":
        value = next(c for c in field["choices"] if c != field["default"])
        return value, [field["cli"], value]
    if kind == "string":
        return "x", [field["cli"], "x"]
    assert kind == "defines", field
    return {"KJIT_A": "1"}, [field["cli"], "KJIT_A=1"]


@pytest.mark.parametrize("field", kjit._core.compile_option_fields(), ids=lambda f: f["name"])
def test_every_option_python_takes_kjit_compile_takes_with_the_same_key(cli_key, field):
    # `kjit compile` has every option Template.kernel() has (both come from the field table), and gives it the
    # same meaning: a value other than the default makes the same key from either.
    value, cli_args = non_default(field)
    fam = kjit.Template.builtin("add_constant").kernel("add_constant", **{field["name"]: value})
    assert fam.options[field["name"]] == value
    k = fam.specialize(T=torch.float32, VEC=4, arch="sm_90")
    assert k.key == cli_key(*cli_args)
    default = (
        kjit.Template.builtin("add_constant").kernel("add_constant").specialize(T=torch.float32, VEC=4, arch="sm_90")
    )
    assert k.key != default.key
