"""The kernel API without a GPU: Template / KernelFamily / Kernel, compile-only specialization (arch=...),
the cache across processes, and the exact messages of bad input. Launching those kernels on a GPU:
test_launch.py; kjit.launcher: test_launcher.py; strict mode and `kjit warm`: test_deployment.py."""

import json
import os
import re
import subprocess
import sys
import uuid

import pytest
import torch

import kjit
from support import error_of, unique_source


# ---- Template ---------------------------------------------------------------------------------------


def test_template_from_string_and_file(tmp_path):
    src = "template <typename T, int N = 2> __global__ void scale(T* x, T s, int n) {}\n__global__ void plain(float* p) {}"
    t = kjit.Template(src, name="mine.cu")
    assert t.name == "mine.cu"
    assert t.kernels == ["scale", "plain"]
    assert re.fullmatch(r"[0-9a-f]{64}", t.digest)
    f = tmp_path / "mine.cu"
    f.write_text(src)
    t2 = kjit.Template.from_file(f)
    assert t2.digest == t.digest and t2.kernels == t.kernels
    assert kjit.Template.from_file(str(f)).digest == t.digest
    fam = t.kernel("scale")
    assert fam.name == "scale"
    assert fam.params == [("T", "type", "typename", None), ("N", "integer", "int", "2")]
    assert fam.args == [("x", "T*"), ("s", "T"), ("n", "int")]
    assert fam.template.digest == t.digest
    assert "scale<T, N>" in repr(fam)


def test_template_includes_are_hashed(tmp_path):
    (tmp_path / "inc.cuh").write_text("#define VALUE 1\n")
    (tmp_path / "k.cu").write_text('#include "inc.cuh"\n__global__ void k(float* p) { p[0] = VALUE; }\n')
    d1 = kjit.Template.from_file(tmp_path / "k.cu").digest
    (tmp_path / "inc.cuh").write_text("#define VALUE 2\n")
    t = kjit.Template.from_file(tmp_path / "k.cu")
    assert t.headers == ["inc.cuh"]
    assert t.digest != d1


def test_kernel_options():
    t = kjit.Template.builtin("add_constant")
    f = t.kernel(
        "add_constant", std="c++17", fast_math=True, defines={"A": 1, "B": "x", "C": None, "D": True}, max_registers=64
    )
    assert f.options == {
        "std": "c++17",
        "fast_math": True,
        "line_info": False,
        "device_debug": False,
        "minimal": False,
        "default_device": False,
        "fast_compile": "off",
        "max_registers": 64,
        "defines": {"A": "1", "B": "x", "C": "1", "D": "1"},
    }
    assert t.kernel("add_constant", minimal=True).options["minimal"] is True
    assert t.kernel("add_constant", fast_compile="max").options["fast_compile"] == "max"
    with pytest.raises(ValueError, match="fast_compile='fast' is not valid: allowed off, min, mid, max"):
        t.kernel("add_constant", fast_compile="fast")
    # A define without a value is 1, as nvcc -DNAME and `kjit compile --define NAME` have it.
    assert t.kernel("add_constant", defines=["X", "Y=2", "Z="]).options["defines"] == {"X": "1", "Y": "2", "Z": ""}


def kernel_keywords():
    """The keyword-only parameters of Template.kernel(), from pybind11's signature line."""
    first = kjit.Template.kernel.__doc__.splitlines()[0]
    keyword_part = first.split("*, ", 1)[1].rsplit(") ->", 1)[0]
    return re.findall(r"(?:^|, )(\w+):", keyword_part)


def test_kernel_keywords_are_the_compile_option_fields():
    # One field table (compile_option_fields.hpp) names every option: Template.kernel() takes each as a keyword
    # (a row without its keyword, or a keyword without its row, fails here) and KernelFamily.options gives them all.
    fields = [f["name"] for f in kjit._core.compile_option_fields()]
    assert sorted(kernel_keywords()) == sorted(fields)
    assert list(kjit.Template.builtin("add_constant").kernel("add_constant").options) == fields
    assert list(kjit._core.library_compile_options()) == fields
    for f in kjit._core.compile_option_fields():
        assert kjit.Template.builtin("add_constant").kernel("add_constant").options[f["name"]] == f["default"], f


# The Python type a keyword of each kind has in the signature (what pybind11 writes for the C++ type the
# value is converted to); a kind's keyword that takes None shows `| None` where the type has no None.
KEYWORD_TYPES = {
    "bool": {"bool"},
    "int": {"typing.SupportsInt | typing.SupportsIndex | None"},
    "enum": {"str", "str | None"},
    "string": {"str", "str | None"},
    "defines": {"object"},
}


def test_kernel_keywords_types_defaults_and_docs_come_from_the_table():
    # Template.kernel()'s signature and documentation are made from the compile option table
    # (python/src/core/option_keywords.hpp): one keyword per row, in its order, typed by its kind, its
    # default the row's (None where None stands for it), and one documentation line from the row's help.
    first, *doc = kjit.Template.kernel.__doc__.splitlines()
    keyword_part = first.split("*, ", 1)[1].rsplit(") ->", 1)[0]
    shown = re.findall(r"(\w+): ([^=,]+) = ('[^']*'|[^,]+)", keyword_part)
    fields = kjit._core.compile_option_fields()
    assert [name for name, _, _ in shown] == [f["name"] for f in fields]
    t = kjit.Template.builtin("add_constant")
    for (name, typ, default), f in zip(shown, fields):
        assert typ in KEYWORD_TYPES[f["kind"]], (name, typ)
        if default == "None":
            assert t.kernel("add_constant", **{name: None}).options[name] == f["default"], name
        else:
            assert default == repr(f["default"]), name
        assert any(line.startswith(f"{name}: {f['help']}") for line in doc), (name, doc)


INCOMPATIBLE = r"(?s)^kernel\(\): incompatible function arguments\. .*Invoked with: <kjit"


def test_kernel_keywords_convert_values_as_a_typed_signature_did():
    # Each value goes through pybind11's caster of its kind's C++ type (bool, std::optional<int>,
    # std::string), converting as a typed pybind11 signature does; what none takes, or a keyword no row
    # has, is pybind11's TypeError of a call that fits no signature.
    t = kjit.Template.builtin("add_constant")
    assert t.kernel(name="add_constant").options == t.kernel("add_constant").options
    assert t.kernel("add_constant", fast_math=None).options["fast_math"] is False
    assert t.kernel("add_constant", fast_math=2).options["fast_math"] is True
    assert t.kernel("add_constant", std=b"c++17").options["std"] == "c++17"
    assert t.kernel("add_constant", defines=("A", "B=2")).options["defines"] == {"A": "1", "B": "2"}
    for call in (
        lambda: t.kernel("add_constant", fast_compile=None),
        lambda: t.kernel("add_constant", max_registers=1.5),
        lambda: t.kernel("add_constant", max_registers=2**40),
        lambda: t.kernel("add_constant", fast_math="yes"),
        lambda: t.kernel("add_constant", name="add_constant"),
        lambda: t.kernel("add_constant", "c++17"),
        lambda: t.kernel(),
        # A value of the wrong type wins over defines of the wrong shape (read after the conversions).
        lambda: t.kernel("add_constant", defines="X", fast_math="yes"),
    ):
        with pytest.raises(TypeError, match=INCOMPATIBLE):
            call()


def test_type_macros_say_which_16_bit_float_types_a_specialization_names():
    # KJIT_USES_HALF / KJIT_USES_BFLOAT16 let a template parse cuda_fp16.h / cuda_bf16.h (1.6 MB) only
    # when the specialization needs them; a wrong value fails the compile (#error), without a GPU.
    src = """
#if KJIT_USES_HALF != WANT_HALF || KJIT_USES_BFLOAT16 != WANT_BF16
#error "kjit's type macros do not match the specialization"
#endif
#if KJIT_USES_HALF
#include <cuda_fp16.h>
#endif
#if KJIT_USES_BFLOAT16
#include <cuda_bf16.h>
#endif
template <typename T, typename U> __global__ void k(T* y, const U* x) {}
"""
    t = kjit.Template(src, name="type_macros.cu")
    cases = [
        ("float32", "float64", 0, 0),
        ("float16", "float32", 1, 0),
        ("float32", "bfloat16", 0, 1),
        ("float16", "bfloat16", 1, 1),
    ]
    for a, b, half, bf16 in cases:
        t.kernel("k", defines={"WANT_HALF": half, "WANT_BF16": bf16}).specialize(T=a, U=b, arch="sm_90")
    # A value the user defines is the user's.
    t.kernel("k", defines={"WANT_HALF": 1, "WANT_BF16": 0, "KJIT_USES_HALF": 1}).specialize(
        T="float32", U="float32", arch="sm_90"
    )
    # A template of one's own that names a 16-bit type in its source gets 1 whatever the name expression:
    # kernel_templates/detail/numeric.cuh then declares the type (review of 2026-11-24).
    own = kjit.Template(
        '#include "detail/numeric.cuh"\n'
        "__global__ void k(float* y) { y[0] = __bfloat162float(__float2bfloat16(y[0])); }\n",
        name="own_bf16.cu",
    )
    own.kernel("k").specialize(arch="sm_90")


def test_an_elementwise_expression_may_use_the_16_bit_intrinsics_on_float_tensors():
    f = kjit.elementwise("__bfloat162float(__float2bfloat16(x)) + __half2float(__float2half(x))", ["x"])
    f.compile(arch="sm_90", dtypes=torch.float32)


def test_phase_times_say_where_a_cold_start_went():
    # NVRTC loaded first: its loading counts in the compile phase, not in compile_ms (compared below).
    kjit.Template(f"__global__ void k() {{ /* {uuid.uuid4()} */ }}\n", name="nvrtc_up.cu").kernel("k").specialize(
        arch="sm_90"
    )
    kjit.reset_stats()
    assert set(kjit.stats()["phase_ms"].values()) == {0.0}
    # A source of its own: compiled here, whatever this session's cache holds.
    t = kjit.Template(f"template <typename T> __global__ void k(T* y) {{ /* {uuid.uuid4()} */ }}\n", name="phases.cu")
    t.kernel("k").specialize(T="float32", arch="sm_90")  # compile-only: no module is loaded
    phases = kjit.stats()["phase_ms"]
    assert set(phases) == {"template", "key", "store", "compile", "module_load"}
    assert phases["template"] > 0 and phases["key"] > 0 and phases["store"] > 0
    assert phases["compile"] > 0 and phases["module_load"] == 0
    assert phases["compile"] <= kjit.stats()["compile_ms"] + 1.0  # the same NVRTC run, timed around it
    kjit.reset_stats()
    assert set(kjit.stats()["phase_ms"].values()) == {0.0}


def test_a_new_process_keys_a_template_without_reading_its_headers_again(tmp_path):
    # The header index (in the cache root) vouches for the CUDA headers and kjit's own: a warm start reads
    # none of them, keys the template as the first process did, and still compiles a new specialization.
    probe = (
        "import json, sys, kjit\n"
        "t = kjit.Template.builtin('add_constant')\n"
        "k = t.kernel('add_constant', defines={'KJIT_TEST_NONCE': sys.argv[1]}).specialize(T='float16', VEC=4, "
        "arch='sm_90')\n"
        "print(json.dumps({'headers': kjit.stats()['headers'], 'digest': t.digest, 'origin': k.origin}))\n"
    )
    env = dict(os.environ, KJIT_CACHE_DIR=str(tmp_path / "cache"), KJIT_CACHE_MODE="readwrite")
    # The index vouches only for files on a local filesystem (not NFS, FUSE...): the headers here must be.
    local = {"ef53", "58465342", "9123683e", "1021994", "858458f6", "794c7630", "2fc12fc1", "73717368", "f2f52010"}
    for d in [kjit._core.builtin_templates_dir()] + kjit._core.toolkit()["include_dirs"]:
        fs_type = subprocess.run(["stat", "-f", "-c", "%t", str(d)], capture_output=True, text=True).stdout.strip()
        if fs_type not in local:
            pytest.skip(f"{d} is on a filesystem (type 0x{fs_type}) the header index does not vouch for")

    def run(nonce):
        out = subprocess.run(
            [sys.executable, "-c", probe, nonce], env=env, capture_output=True, text=True, check=True
        ).stdout
        return json.loads(out.strip().splitlines()[-1])

    first, second = run(uuid.uuid4().hex), run(uuid.uuid4().hex)
    assert first["headers"]["read"] > 0 and first["origin"] == "compiled"
    assert second["headers"] == {"read": 0, "from_index": first["headers"]["read"] + first["headers"]["from_index"]}
    assert second["digest"] == first["digest"]
    assert second["origin"] == "compiled"  # a new define: its headers' bytes were read for NVRTC, and checked
    assert (tmp_path / "cache" / "v1" / "header-index.json").is_file()


def test_template_errors():
    assert (
        error_of(kjit.ValueError, lambda: kjit.Template.builtin("add_constant").kernel("nope"))
        == "template 'add_constant' has no __global__ kernel named 'nope' (it declares: add_constant)"
    )
    msg = error_of(kjit.ValueError, lambda: kjit.Template.builtin("nope"))
    assert msg.startswith("there is no built-in template 'nope' in ")
    assert "available: add_constant" in msg
    assert (
        error_of(kjit.ValueError, lambda: kjit.Template.from_file("/nonexistent.cu"))
        == "cannot read template file '/nonexistent.cu': it does not exist or is not readable. Pass the path of a "
        ".cu/.cuh file."
    )
    assert (
        error_of(kjit.ValueError, lambda: kjit.Template.builtin("add_constant").kernel("add_constant", std="c++11"))
        == "compile option std='c++11' is not valid: allowed c++17, c++20"
    )
    assert (
        error_of(kjit.TypeError, lambda: kjit.Template.builtin("add_constant").kernel("add_constant", defines="X"))
        == "defines must be a dict {name: value} or a list of 'NAME' / 'NAME=VALUE' strings, got a str"
    )


# ---- specialize: errors -----------------------------------------------------------------------------

ALLOWED = "float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool"


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        (
            dict(T=torch.float32, VEC=4, X=1),
            kjit.ValueError,
            "kernel 'add_constant' has no template parameter 'X'; its parameters are T (type), VEC (int)",
        ),
        (
            dict(VEC=4),
            kjit.ValueError,
            "kernel 'add_constant' needs template parameter T; its parameters are T (type), VEC (int)",
        ),
        (
            dict(T=torch.float32),
            kjit.ValueError,
            "kernel 'add_constant' needs template parameter VEC; its parameters are T (type), VEC (int)",
        ),
        (
            dict(T=4, VEC=4),
            kjit.TypeError,
            "template parameter 'T' of kernel 'add_constant' is a type: pass a torch.dtype, a numpy / CuPy / JAX "
            "dtype or a dtype name (e.g. torch.float32, numpy.float32, 'bfloat16'), got the int 4",
        ),
        (
            dict(T=torch.zeros(1), VEC=4),
            kjit.TypeError,
            "template parameter 'T' of kernel 'add_constant' is a type: pass a torch.dtype, a numpy / CuPy / JAX "
            "dtype or a dtype name (e.g. torch.float32, numpy.float32, 'bfloat16'), got a torch.Tensor (pass the tensor's .dtype)",
        ),
        (
            dict(T=torch.float32, VEC=True),
            kjit.TypeError,
            "template parameter 'VEC' of kernel 'add_constant' is an integer (int): pass an int, got the bool True",
        ),
        (
            dict(T=torch.float32, VEC=2.0),
            kjit.TypeError,
            "template parameter 'VEC' of kernel 'add_constant' is an integer (int): pass an int, got the float 2.0",
        ),
        (
            dict(T=torch.float32, VEC="4"),
            kjit.TypeError,
            "template parameter 'VEC' of kernel 'add_constant' is an integer (int): pass an int, got the str '4'",
        ),
        (
            dict(T=torch.complex64, VEC=4),
            kjit.TypeError,
            f"template parameter 'T' of kernel 'add_constant' got torch.complex64, which kjit cannot specialize on; "
            f"allowed dtypes: {ALLOWED}",
        ),
        (
            dict(T="flot32", VEC=4),
            kjit.ValueError,
            f"template parameter 'T' of kernel 'add_constant': unknown dtype name 'flot32'; allowed: {ALLOWED} (or a "
            f"torch.dtype)",
        ),
        (
            dict(T=torch.float32, VEC=2**40),
            kjit.ValueError,
            "template parameter 'VEC' of kernel 'add_constant' is int: the value 1099511627776 is out of its range "
            "[-2147483648, 2147483647]. Declare it with a wider type (e.g. long long, or unsigned long long for values "
            "from 2^63 up) or pass a value in that range.",
        ),
        (
            dict(T=torch.float32, VEC=2**63),
            kjit.ValueError,
            "template parameter 'VEC' of kernel 'add_constant' is int: the value 9223372036854775808 is out of its range "
            "[-2147483648, 2147483647]. Declare it with a wider type (e.g. long long, or unsigned long long for values "
            "from 2^63 up) or pass a value in that range.",
        ),
        (
            dict(T=torch.float32, VEC=2**70),
            kjit.ValueError,
            "template parameter 'VEC' of kernel 'add_constant' is int: the value 1180591620717411303424 does not fit "
            "in 64 bits (allowed: [-2^63, 2^64), and the range of int)",
        ),
    ],
)
def test_specialize_argument_errors(add, kwargs, exc, message):
    assert error_of(exc, lambda: add.specialize(arch="sm_90", **kwargs)) == message


def test_specialize_call_errors(add):
    assert (
        error_of(kjit.TypeError, lambda: add.specialize(torch.float32, 4))
        == "specialize() takes keyword arguments only (the template parameters by name, and device= or arch=), got 2 "
        "positional; the parameters of 'add_constant' are T (type), VEC (int)"
    )
    assert (
        error_of(kjit.ValueError, lambda: add.specialize(T=torch.float32, VEC=4, arch="sm_90", device=0))
        == "specialize() takes device= (to launch) or arch= (to compile only), not both"
    )
    assert (
        error_of(kjit.TypeError, lambda: add.specialize(T=torch.float32, VEC=4, arch=90))
        == "arch must be a str such as 'sm_90', 'sm_90a' or 'compute_90', got the int 90"
    )
    msg = error_of(kjit.ValueError, lambda: add.specialize(T=torch.float32, VEC=4, arch="sm_91"))
    assert "cannot compile for sm_91" in msg and "sm_90" in msg
    assert (
        error_of(kjit.ValueError, lambda: add.specialize(T=torch.float32, VEC=4, device="cpu"))
        == "kernels run on CUDA devices, got the device 'cpu'"
    )
    assert (
        error_of(kjit.TypeError, lambda: add.specialize(T=torch.float32, VEC=4, device=[0]))
        == "device must be None (the current device), an int, a torch.device or a str such as 'cuda:0', got a list"
    )


def test_specialize_without_device_says_how_to_compile(add):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    msg = error_of(kjit.ValueError, lambda: add.specialize(T=torch.float32, VEC=4))
    assert msg.startswith("no CUDA device is available (")
    assert msg.endswith("); to compile without a GPU, pass the target architecture, e.g. specialize(arch='sm_90', ...)")


# ---- specialize(arch=...): compile only --------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, "float64"])
def test_compile_only_add_constant(add, dtype):
    k = add.specialize(T=dtype, VEC=2, arch="sm_90")
    # Compiled here, or by an earlier test of this process (from memory) or of this session (from the disk).
    assert k.origin in ("compiled", "disk", "memory")
    assert k.device is None
    assert k.target == "sm_90"
    assert re.fullmatch(r"[0-9a-f]{64}", k.key)
    name = {torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16", "float64": "double"}
    assert k.name_expression == f"add_constant<{name[dtype]}, 2>"
    assert k.meta["name_expression"] == k.name_expression
    assert k.meta["target"] == "sm_90" and k.meta["output"] == "cubin"
    assert k.meta["template"] == "add_constant"
    # One key per field of the entry's metadata block, as its JSON names them (entry_metadata_fields.hpp).
    assert list(k.meta) == [
        "template",
        "template_digest",
        "kernel",
        "name_expression",
        "lowered_name",
        "options",
        "target",
        "requested_target",
        "nvrtc_version",
        "output",
        "note",
        "compile_ms",
        "created",
        "kjit_version",
    ]
    assert isinstance(k.meta["options"], list) and isinstance(k.meta["compile_ms"], float)
    kjit.reset_stats()
    again = add.specialize(T=dtype, VEC=2, arch="sm_90")
    assert again.origin == "memory" and again.key == k.key
    assert kjit.stats()["memory_hits"] == 1
    msg = error_of(kjit.LaunchError, lambda: k.launch(1, 1, None, None, 1.0, 1))
    assert msg == f"{k.name_expression} is compiled for sm_90 only (arch='sm_90'); specialize with a device to launch"


def test_compile_only_params_and_args(add):
    k = add.specialize(T=torch.float16, VEC=8, arch="sm_90")
    assert k.params == [
        ("x", "pointer", "const __half* __restrict__", "float16"),
        ("y", "pointer", "__half* __restrict__", "float16"),
        ("c", "scalar", "__half", "float16"),
        ("n", "scalar", "long long", "int64"),
    ]
    assert k.args == {"T": "float16", "VEC": 8}
    assert k.param_sizes is None


def test_compile_only_rgb_to_gray():
    f = kjit.Template.builtin("rgb_to_gray").kernel("rgb_to_gray")
    k = f.specialize(H=480, W=640, arch="sm_80")
    assert k.name_expression == "rgb_to_gray<480, 640>"
    assert k.target == "sm_80"
    assert [p[1] for p in k.params] == ["pointer", "pointer"]
    assert k.params[0][3] == "uint8"
    assert f.specialize(H=480, W=640, arch="sm_80").origin == "memory"


def test_compile_counts_once_per_specialization():
    f = kjit.Template(
        unique_source("template <int N> __global__ void fill(float* y) { y[threadIdx.x] = N; }"), name="fill.cu"
    ).kernel("fill")
    kjit.reset_stats()
    origins = [f.specialize(N=n, arch="sm_90").origin for n in [1, 2, 1, 3, 2, 1]]
    assert origins == ["compiled", "compiled", "memory", "compiled", "memory", "memory"]
    s = kjit.stats()
    assert s["compiles"] == 3 and s["memory_hits"] == 3 and s["compile_ms"] > 0


def test_defaults_and_other_kinds():
    src = unique_source("""
        template <typename T, int N = 4, bool FLAG = false, float S = 1.5f>
        __global__ void k(T* p, T v) { if (FLAG) p[0] = v * S + N; }
    """)
    f = kjit.Template(src, name="kinds.cu").kernel("k")
    assert f.specialize(T="float", arch="sm_90").name_expression == "k<float>"
    k = f.specialize(T=torch.int32, FLAG=True, arch="sm_90")  # N comes before FLAG: its default is used
    assert k.name_expression == "k<int, 4, true>"
    assert k.args == {"T": "int32", "FLAG": True}  # what was given: N is its default's text, as in the CLI
    k = f.specialize(T=torch.float32, S=2, arch="sm_90")  # an int for a float parameter
    assert k.name_expression.startswith("k<float, 4, false, ")
    assert k.args["S"] == 2.0
    assert (
        error_of(kjit.TypeError, lambda: f.specialize(T=torch.float32, FLAG=1, arch="sm_90"))
        == "template parameter 'FLAG' of kernel 'k' is a bool: pass True or False, got the int 1"
    )


def test_compile_error_has_the_data():
    t = kjit.Template(
        unique_source("template <typename T>\n__global__ void broken(T* x) { x[0] = undefined_name; }\n"),
        name="broken.cu",
    )
    with pytest.raises(kjit.CompileError) as e:
        t.kernel("broken").specialize(T=torch.float32, arch="sm_90")
    err = e.value
    assert isinstance(err, kjit.Error)
    assert "undefined_name" in err.log and "error" in err.log
    assert err.name_expression == "broken<float>"
    assert "--gpu-architecture=sm_90" in err.options
    assert "undefined_name" in err.source_excerpt and "broken.cu:3" in err.source_excerpt
    assert "broken(T=float32) from template broken.cu" in str(err)
    # The process is still usable.
    ok = kjit.Template(unique_source("__global__ void fine(float* p) { p[0] = 1; }"), name="fine.cu")
    assert ok.kernel("fine").specialize(arch="sm_90").origin == "compiled"


# ---- across processes -------------------------------------------------------------------------------

SNIPPET = """
    import kjit, torch
    k = kjit.Template.builtin('{tmpl}').kernel('{tmpl}').specialize({params}, arch='sm_90')
    s = kjit.stats()
    print(k.origin, k.key, s['compiles'], s['disk_hits'])
"""


@pytest.mark.parametrize("tmpl, params", [("add_constant", "T=torch.float32, VEC=4"), ("rgb_to_gray", "H=32, W=48")])
def test_second_process_finds_it_on_disk(run_py, cache_dir, tmpl, params):
    first = run_py(SNIPPET.format(tmpl=tmpl, params=params)).stdout.split()
    assert first[0] == "compiled" and first[2:] == ["1", "0"]
    second = run_py(SNIPPET.format(tmpl=tmpl, params=params)).stdout.split()
    assert second[0] == "disk" and second[1] == first[1] and second[2:] == ["0", "1"]
    entries = list(cache_dir.rglob("*.kjit"))
    assert [p.stem for p in entries] == [first[1]]
    assert entries[0].parent.parent.name == "sm_90"


def test_damaged_entry_is_a_warning_and_a_recompile(run_py, cache_dir):
    snippet = """
        import warnings, kjit, torch
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            k = kjit.Template.builtin('add_constant').kernel('add_constant').specialize(
                T=torch.float32, VEC=4, arch='sm_90')
        print(k.origin)
        for x in w:
            print(x.category.__name__, '|', x.message)
    """
    assert run_py(snippet).stdout.split()[0] == "compiled"
    (entry,) = cache_dir.rglob("*.kjit")
    data = bytearray(entry.read_bytes())
    data[-10] ^= 0xFF
    entry.write_bytes(bytes(data))
    out = run_py(snippet).stdout
    assert out.split()[0] == "compiled", out
    assert "KjitWarning |" in out, out
