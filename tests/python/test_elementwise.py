"""kjit.elementwise on real tensors: a C++ expression over named inputs and scalars made a kernel (flat,
vectorized, and strided ranks 1 to 6), with its derivatives. Complex tensors and functions of many inputs:
test_elementwise_complex.py.

Without a GPU: every form of a call compiles for real (NVRTC, sm_90): strided ranks and index types, integer,
bool and mixed dtypes, specialized scalar values (non-finite ones too), whatever the user's include path
holds; the definition's, the call's and compile()'s argument errors; the generated source. On a GPU (the tests
marked gpu): against PyTorch (in float64, rounded once: support.py's tolerances) at sizes 1 to 4097, aligned
and misaligned, broadcasting, non-contiguous and empty inputs, type promotion, integers, runtime scalars that
never recompile, defaults and keyword inputs, out=, the math functions, more than 2^31 elements; the derived
gradients (every derivative rule of kjit/_derivative.py at edge values, as torch.autograd), user gradients,
torch.compile(fullgraph=True), and specialized NaN / inf / signed zero.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from support import (
    COMPLEX_HALF_IS_EXPERIMENTAL,
    ORIGINS,
    close,
    dname,
    ew_tol,
    kernel_loads,
    meta,
    misaligned_like,
    randn,
    skip_unless_free_gpu_memory,
    ulp,
)

import kjit
from kjit import ops

DEV = "cuda"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
ALL_DTYPES = DTYPES + [torch.float64]
SIZES = [1, 7, 1000, 4097]


# ---- compile-only: every form of a call ----------------------------------------------------------------------


def test_elementwise_every_strided_rank_and_index_type_compiles():
    f = kjit.elementwise("x * y + s", "x, y", "s", name="test_ranks")
    for rank in range(1, 7):
        k = f.compile(arch="sm_90", dtypes=(torch.float32, torch.float16), out_dtype=torch.float32, rank=rank)
        assert k.name_expression.startswith(f"kjit_elementwise_strided{rank}<float, float, int, 0ull, float, __half")
    k = f.compile(arch="sm_90", dtypes=(torch.bfloat16, torch.bfloat16), vec=8, tail=True, index=torch.int64)
    assert k.name_expression == (
        "kjit_elementwise<__nv_bfloat16, float, 8, true, long long, 0ull, __nv_bfloat16, __nv_bfloat16>"
    )
    assert k.origin in ORIGINS


def test_elementwise_integer_bool_and_mixed_dtypes_compile():
    f = kjit.elementwise("x + y * k", "x, y", "k", specialize=["k"], name="test_int")
    k = f.compile(arch="sm_90", dtypes=(torch.int32, torch.int32), vec=4, specialized_values=(3,))
    assert k.name_expression.startswith("kjit_elementwise<int, int, 4, false, int, 0ull, int, int>")
    f.compile(arch="sm_90", dtypes=(torch.int64, torch.int64), vec=2, tail=True, specialized_values=(-7,))
    f.compile(arch="sm_90", dtypes=(torch.uint8, torch.int8), out_dtype=torch.int16, vec=1, specialized_values=(2,))
    where = kjit.elementwise("c ? x : y", "c, x, y", name="test_where")
    where.compile(arch="sm_90", dtypes=(torch.bool, torch.float16, torch.float16), out_dtype=torch.float16, vec=8)
    mixed = kjit.elementwise("x + y", "x, y", name="test_mixed")
    k = mixed.compile(arch="sm_90", dtypes=(torch.float16, torch.float32), out_dtype=torch.float32, vec=4)
    assert "<float, float, 4, false, int, 0ull, __half, float>" in k.name_expression


def test_elementwise_gets_kjits_headers_whatever_the_users_include_path_holds(tmp_path, run_py):
    # Hostile review 3, item 8: a user folder in KJIT_INCLUDE_PATH holding a header named like kjit's own
    # (elementwise.cuh, math.cuh, detail/numeric.cuh) replaced kjit's in every kjit.elementwise function,
    # which then failed to compile (or, with compatible names, compiled the user's code). Same key either way.
    user = tmp_path / "user-include"
    for name in ("elementwise.cuh", "math.cuh", "detail/numeric.cuh"):
        (user / name).parent.mkdir(parents=True, exist_ok=True)
        (user / name).write_text("#error \"the user's header, not kjit's\"\n")
    code = """
        import torch, kjit
        f = kjit.elementwise("x + 1", "x", name="shadowed")
        k = f.compile(arch="sm_90", dtypes=torch.float32)
        print("KEY", k.key)
    """
    keys = []
    for include_path in (None, user):
        r = run_py(code, env={"KJIT_INCLUDE_PATH": include_path, "KJIT_CACHE_MODE": "off"})
        keys.append([line for line in r.stdout.splitlines() if line.startswith("KEY ")])
    assert keys[0] and keys[0] == keys[1], keys


@pytest.mark.parametrize("value", [0.1, -2.5, 1e300, float("inf"), float("-inf"), float("nan")])
def test_elementwise_specialized_scalar_values_compile(value):
    f = kjit.elementwise("x * s", "x", "s", specialize=["s"], name="test_special_values")
    for dtype in (torch.float32, torch.float64):
        k = f.compile(arch="sm_90", dtypes=(dtype,), vec=1, specialized_values=(value,))
        assert k.origin in ORIGINS


# ---- argument errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs, exc, message",
    [
        (("x + 1", "1x"), {}, ValueError, r"input name '1x' is not usable"),
        (("x + 1", ["x", "out"]), {}, ValueError, r"input name 'out' is not usable"),
        (("x + 1", "x, kjit_tmp"), {}, ValueError, r"input name 'kjit_tmp' is not usable"),
        (("x + 1", "class"), {}, ValueError, r"input name 'class' is not usable"),
        (("x + 1", ["x", 3]), {}, ValueError, r"input name 3 is not usable"),
        (("x * s", "x", "2s"), {}, ValueError, r"scalar name '2s' is not usable"),
        (("x * s", "x", "s"), dict(specialize=["T_s"]), ValueError, r"specialized scalar name 'T_s' is not usable"),
        (("x * s", "x", "s"), dict(specialize="s, t"), ValueError, r"specialize=\['s', 't'\] names \['t'\]"),
        (("x + x", "x, x"), {}, ValueError, r"names \['x'\] are given more than once"),
        (("x * y", "x, y", "y"), {}, ValueError, r"names \['y'\] are given more than once"),
        (("x + 1; y", "x"), {}, ValueError, r"must be one C\+\+ expression"),
        (("{x}", "x"), {}, ValueError, r"must be one C\+\+ expression"),
        (("#define A 1\nx", "x"), {}, ValueError, r"must be one C\+\+ expression"),
        # The digraph of '#' after a line break used to inject an #include whose file came back in the log.
        (('x\n%:include "/etc/hostname"\n', "x"), {}, ValueError, r"on one line: no line breaks"),
        (("x %:%: y", "x, y"), {}, ValueError, r"must be one C\+\+ expression"),
        (("x ??= y", "x, y"), {}, ValueError, r"must be one C\+\+ expression"),
        (("x \\", "x"), {}, ValueError, r"backslashes"),
        (("x * 2", "x"), dict(grads={"x": "2\n%:include <x>"}), ValueError, r"grads\['x'\] .* must be one C\+\+"),
        (("x * 2", "x"), dict(grads={"y": "2"}), ValueError, r"grads names \['y'\], which are not inputs"),
        (("", "x"), {}, TypeError, r"the expression must be a non-empty string"),
        (("   ", "x"), {}, TypeError, r"the expression must be a non-empty string"),
        ((3, "x"), {}, TypeError, r"the expression must be a non-empty string"),
        (("x", 42), {}, TypeError, r"input must be a name, a list of names or a string of names"),
        (("x", ""), {}, ValueError, r"at least one input tensor is needed"),
        (
            ("x * s", "x", "s"),
            dict(specialize=["t"]),
            ValueError,
            r"specialize=\['t'\] names \['t'\], which are not scalars; the scalars are \['s'\]",
        ),
        (("x", "x"), dict(dtype=torch.complex32), TypeError, r"dtype=torch\.complex32 is not supported"),
    ],
)
def test_elementwise_definition_errors(args, kwargs, exc, message):
    with pytest.raises(exc, match=message) as info:
        kjit.elementwise(*args, **kwargs)
    assert isinstance(info.value, kjit.Error)


@pytest.fixture
def fma():
    return kjit.elementwise("x * y * s", "x, y", "s", name="test_errors")


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (
            lambda f, x: f(x, x, x, s=1.0),
            TypeError,
            r"takes 2 tensor\(s\) \(x, y\) and scalars \['s'\] by keyword, "
            r"got 3 positional",
        ),
        (lambda f, x: f(x, s=1.0), TypeError, r"is missing input 'y'"),
        (lambda f, x: f(x, x), TypeError, r"is missing scalar 's' \(pass s=<number>\)"),
        (lambda f, x: f(x, x, s="2"), TypeError, r"scalar 's' must be a Python int or float, got str '2'"),
        (lambda f, x: f(x, x, s=True), TypeError, r"scalar 's' must be a Python int or float"),
        (lambda f, x: f(x, x, s=torch.ones(2)), TypeError, r"scalar 's' must be a Python int or float"),
        (lambda f, x: f(x, x, s=1.0, z=2), TypeError, r"unexpected keyword arguments \['z'\]"),
        (lambda f, x: f(x, 2.0, s=1.0), TypeError, r"input 'y' must be a torch\.Tensor, got float 2\.0"),
        pytest.param(
            lambda f, x: f(x, x.to(torch.complex32), s=1.0),
            TypeError,
            r"input 'y' has dtype torch\.complex32, which is not supported",
            marks=COMPLEX_HALF_IS_EXPERIMENTAL,  # making the complex32 input, torch says so
        ),
        # Bound correctly, then rejected for the device.
        (
            lambda f, x: f(x, x, s=1.0),
            ValueError,
            r"expected all inputs on one CUDA device, got x on cpu, y on cpu; move them with \.to\('cuda'\)",
        ),
        (lambda f, x: f(y=x, x=x, s=2), ValueError, r"expected all inputs on one CUDA device"),
        (lambda f, x: f(x, x, s=torch.tensor(2.0)), ValueError, r"expected all inputs on one CUDA device"),
        (lambda f, x: f(meta(3), meta(3), s=1.0), ValueError, r"got x on meta, y on meta"),
    ],
)
def test_elementwise_call_errors(fma, call, exc, message):
    with pytest.raises(exc, match=message) as info:
        call(fma, torch.ones(4))
    assert isinstance(info.value, kjit.Error)
    assert str(info.value).startswith("kjit.elementwise('test_errors': 'x * y * s')")


def test_elementwise_compile_argument_errors(fma):
    with pytest.raises(ValueError, match=r"dtypes gives 1 dtypes for 2 inputs"):
        fma.compile(arch="sm_90", dtypes=(torch.float32,))
    with pytest.raises(kjit.Error):
        fma.compile(arch="sm_91x", dtypes=(torch.float32, torch.float32))


# ---- the generated source -----------------------------------------------------------------------------------


def test_elementwise_names_never_clash_with_generated_ones():
    # Inputs and scalars named like the strided kernel's own parameters used to break its compile.
    f = kjit.elementwise("n + size0 * x_stride0", inputs="n, x_stride0", scalars="size0", specialize="size0")
    for rank in (0, 1, 2):
        assert f.compile(arch="sm_90", dtypes=(torch.float32, torch.float32), rank=rank, specialized_values=(2.0,))


def test_elementwise_source_holds_the_expression_and_the_scalars():
    f = kjit.elementwise(
        "x * sigmoid(x) * scale + bias", inputs="x", scalars="scale, bias", specialize=["bias"], name="silu_scaled"
    )
    assert f.inputs == ("x",) and f.scalars == ("scale", "bias") and f.runtime == ("scale",)
    assert f.specialized == ("bias",)
    assert repr(f) == "kjit.elementwise('silu_scaled': 'x * sigmoid(x) * scale + bias')"
    src = f.source((0.5,))
    assert src.startswith("// kjit.elementwise silu_scaled: x * sigmoid(x) * scale + bias\n")
    assert '#include "elementwise.cuh"' in src
    assert "return static_cast<C>(x * sigmoid(x) * scale + bias);" in src
    assert f"const kjit_ew::scalar_t<C> bias = static_cast<kjit_ew::scalar_t<C>>({(0.5).hex()});" in src
    assert "  kjit_ew::scalar_t<C> scale;" in src
    assert ", double scale)" in src and "double bias" not in src
    assert "kjit_elementwise(TO* __restrict__ kjit_out, I kjit_n, const T_x* __restrict__ x, double scale)" in src
    for r in range(1, 7):
        assert f"kjit_elementwise_strided{r}(" in src
    assert "kjit_elementwise_strided7" not in src
    # Each specialized value is its own source (and template); the runtime scalar is not in it.
    assert f.source((0.25,)) != src and (0.25).hex() in f.source((0.25,))
    assert f.template((0.5,)) is f.template((0.5,))


def test_elementwise_names_as_strings_lists_and_default_scalars():
    f = kjit.elementwise("a + b * s", ["a", "b"], {"s": 2.0})
    assert f.inputs == ("a", "b") and f.scalars == ("s",) and f.defaults == {"s": 2.0}
    g = kjit.elementwise("a+b", " a ,b ")
    assert g.inputs == ("a", "b") and g.scalars == ()
    assert kjit.elementwise("x", "x").name == "elementwise"
    src = f.source()
    assert (
        "template <typename TO, typename C, int VEC, bool TAIL, typename I, unsigned long long kjit_cx, "
        "typename T_a, typename T_b>"
    ) in src
    # A default is still a runtime argument.
    assert ", double s)" in src
    with pytest.raises(ValueError, match="expected all inputs on one CUDA device"):
        f(torch.ones(2), torch.ones(2))  # s from its default: bound, then the device check


def test_elementwise_non_finite_defaults_and_specialized_values():
    f = kjit.elementwise("fmaxf(x, lo) + hi", "x", {"lo": float("-inf"), "hi": float("nan")})
    assert f.defaults["lo"] == float("-inf") and math.isnan(f.defaults["hi"])
    g = kjit.elementwise("x / s", "x", "s", specialize="s", name="non_finite")
    keys = {repr(g.template((v,))).split("digest=")[1] for v in (float("nan"), float("inf"), float("-inf"), 0.0, -0.0)}
    assert len(keys) == 5  # each value is its own source, template and kernel


def test_elementwise_expression_is_stripped():
    f = kjit.elementwise("  x * 2  ", "x")
    assert f.expr == "x * 2"
    assert "return static_cast<C>(x * 2);" in f.source()


# ---- on a GPU: against PyTorch -----------------------------------------------------------------------------


AXPY = kjit.elementwise("x * y + s * x", "x, y", "s", name="test_axpy")


def axpy_ref(x, y, s, dtype):
    return (x.double() * y.double() + s * x.double()).to(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dname)
def test_elementwise_sizes_and_alignment(dtype, n, misaligned):
    x, y = randn(n, dtype=dtype, misaligned=misaligned), randn(n, dtype=dtype)
    out = AXPY(x, y, s=0.75)
    assert out.dtype == dtype and out.shape == (n,) and out.is_contiguous()
    close(out, axpy_ref(x, y, 0.75, dtype), **ew_tol(dtype))
    # Both misaligned (every pointer but the output's) and a 2-D view of the same data.
    x2, y2 = misaligned_like(x), misaligned_like(y)
    close(AXPY(x2, y2, s=-2), axpy_ref(x2, y2, -2, dtype), **ew_tol(dtype))
    close(AXPY(x.view(1, n), y.view(1, n), s=1.5), axpy_ref(x, y, 1.5, dtype).view(1, n), **ew_tol(dtype))


@pytest.mark.gpu
@pytest.mark.big
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dname)
def test_elementwise_large(dtype):
    n = 65536 * 4096
    x, y = randn(n, dtype=dtype), randn(n, dtype=dtype)
    out = AXPY(x, y, s=0.5)
    if dtype == torch.float32:
        ref = torch.addcmul(0.5 * x.double(), x.double(), y.double()).float()
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    else:  # float math rounded once to bfloat16 (cheaper than float64 copies)
        xf = x.float()
        ref = (xf * y.float() + 0.5 * xf).bfloat16()
        close(out, ref, rtol=ulp(dtype), atol=1e-5)


@pytest.mark.gpu
def test_elementwise_broadcasting():
    f = kjit.elementwise("x - y", "x, y", name="test_sub")
    a, b = randn(4097, 1), randn(1, 33)
    out = f(a, b)
    assert out.shape == (4097, 33)
    torch.testing.assert_close(out, a - b, rtol=0, atol=0)
    c, d = randn(8, 1, 5), randn(5)
    torch.testing.assert_close(f(c, d), c - d, rtol=0, atol=0)
    torch.testing.assert_close(f(d, c), d - c, rtol=0, atol=0)
    # A 0-dim tensor broadcasts too, and size-1 dims everywhere.
    e = torch.tensor(2.5, device=DEV)
    torch.testing.assert_close(f(c, e), c - 2.5, rtol=0, atol=0)
    assert f(randn(1, 1), randn(1)).shape == (1, 1)
    # More than six dims that cannot be merged are materialized first.
    g, h = randn(2, 1, 3, 1, 2, 1, 3, 1), randn(1, 2, 1, 3, 1, 2, 1, 3)
    torch.testing.assert_close(f(g, h), g - h, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"the input shapes do not broadcast: x \[3\], y \[4\]"):
        f(randn(3), randn(4))


@pytest.mark.gpu
def test_elementwise_non_contiguous_inputs():
    f = kjit.elementwise("x * 2 + y", "x, y", name="test_strided")
    x = randn(33, 65).t()  # (65, 33), strides (1, 65)
    y = randn(65, 33)
    out = f(x, y)
    assert out.is_contiguous() and out.shape == (65, 33)
    torch.testing.assert_close(out, x * 2 + y, rtol=1e-6, atol=1e-6)
    z = randn(10, 20, 30)[:, ::2, 1::3]  # sliced: three dims that do not merge
    w = randn(10, 10, 10).permute(2, 0, 1)
    torch.testing.assert_close(f(z, w), z * 2 + w, rtol=1e-6, atol=1e-6)
    # Same shape, one of them expanded (stride 0).
    v = randn(1, 30).expand(20, 30)
    u = randn(20, 30)
    torch.testing.assert_close(f(v, u), v * 2 + u, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_elementwise_empty_tensors():
    for shape in [(0,), (3, 0), (0, 5, 7)]:
        out = AXPY(torch.empty(shape, device=DEV), torch.empty(shape, device=DEV), s=1.0)
        assert out.shape == shape and out.dtype == torch.float32
    out = AXPY(torch.empty(0, 1, device=DEV), torch.empty(1, 4, device=DEV), s=1.0)
    assert out.shape == (0, 4)


@pytest.mark.gpu
def test_elementwise_promotion():
    f = kjit.elementwise("x + y", "x, y", name="test_add")
    x16, y32 = randn(1001, dtype=torch.float16), randn(1001)
    out = f(x16, y32)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, x16.float() + y32, rtol=0, atol=0)
    xb = randn(1001, dtype=torch.bfloat16)
    out = f(x16, xb)
    assert out.dtype == torch.float32  # torch.promote_types(float16, bfloat16)
    torch.testing.assert_close(out, x16.float() + xb.float(), rtol=0, atol=0)
    i = torch.arange(1001, device=DEV, dtype=torch.int32)
    out = f(i, x16)
    assert out.dtype == torch.float16
    close(out, (i.double() + x16.double()).half(), **ew_tol(torch.float16))
    # dtype= fixes the result's dtype.
    g = kjit.elementwise("x + y", "x, y", dtype=torch.float16, name="test_add_half")
    out = g(y32, y32)
    assert out.dtype == torch.float16
    close(out, (2 * y32.double()).half(), **ew_tol(torch.float16))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=dname)
def test_elementwise_integers_with_a_specialized_scalar(dtype):
    f = kjit.elementwise("x + y * k", "x, y", "k", specialize=["k"], name=f"test_int_{dname(dtype)}")
    x = torch.randint(-1000, 1000, (4097,), device=DEV, dtype=dtype)
    y = torch.randint(-1000, 1000, (4097,), device=DEV, dtype=dtype)
    out = f(x, y, k=3)
    assert out.dtype == dtype
    assert torch.equal(out, x + y * 3)
    before = kernel_loads()
    assert torch.equal(f(x, y, k=3), x + y * 3)
    assert kernel_loads() == before  # the same value: the same kernel
    assert torch.equal(f(x, y, k=-7), x + y * -7)
    assert kernel_loads() == before + 1  # a new value of a specialized scalar: one more kernel


@pytest.mark.gpu
def test_changing_a_scalar_never_recompiles():
    f = kjit.elementwise("x * s + t", "x", "s, t", name="test_runtime_scalars")
    x = randn(10_000)
    torch.testing.assert_close(f(x, s=1.5, t=0.0), x * 1.5, rtol=1e-6, atol=1e-6)
    before = kernel_loads()
    for i in range(20):
        s, t = 0.25 * i - 2.0, float(i)
        torch.testing.assert_close(f(x, s=s, t=t), x * s + t, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(f(x, s=2, t=-1), x * 2 - 1, rtol=1e-6, atol=1e-6)  # ints for the scalars
    assert kernel_loads() == before


@pytest.mark.gpu
def test_scalar_defaults_and_keyword_inputs():
    f = kjit.elementwise("a * s + b", "a, b", {"s": 3.0}, name="test_defaults")
    a, b = randn(100), randn(100)
    torch.testing.assert_close(f(a, b), a * 3 + b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(f(b=b, a=a, s=-1.0), b - a, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_elementwise_out():
    x, y = randn(4097), randn(4097)
    out = torch.empty(4097, device=DEV)
    r = AXPY(x, y, s=2.0, out=out)
    assert r.data_ptr() == out.data_ptr()
    close(out, axpy_ref(x, y, 2.0, torch.float32), **ew_tol(torch.float32))
    with pytest.raises(ValueError, match=r"out must be a contiguous torch\.float32 tensor of shape \[4097\]"):
        AXPY(x, y, s=1.0, out=torch.empty(4096, device=DEV))
    with pytest.raises(ValueError, match=r"out must be a contiguous torch\.float32 tensor"):
        AXPY(x, y, s=1.0, out=torch.empty(4097, device=DEV, dtype=torch.float16))
    with pytest.raises(TypeError, match=r"out must be a torch\.Tensor"):
        AXPY(x, y, s=1.0, out=[1.0])


@pytest.mark.gpu
def test_elementwise_math_functions():
    f = kjit.elementwise("exp_(x) + log_(y) + erf_(x) + tanh_(y) + sigmoid(x) + gelu_tanh(y)", "x, y", name="test_math")
    x, y = randn(5000), randn(5000).abs() + 0.1
    x64, y64 = x.double(), y.double()
    ref = x64.exp() + y64.log() + torch.erf(x64) + y64.tanh() + x64.sigmoid() + F.gelu(y64, approximate="tanh")
    close(f(x, y), ref.float(), rtol=2e-5, atol=1e-5)
    close(f(x64, y64), ref, rtol=1e-10, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.big
def test_elementwise_more_than_2_pow_31_elements():
    skip_unless_free_gpu_memory(16)
    n = 2**31 + 1003  # 64-bit indexing, and a tail after the last whole vector
    f = kjit.elementwise("x * s", "x", "s", name="test_huge")
    x = torch.randn(n, dtype=torch.bfloat16, device=DEV)
    y = f(x, s=1.5)
    assert y.shape == (n,) and y.dtype == torch.bfloat16
    gen = torch.Generator().manual_seed(0)
    starts = [0, n - (1 << 20), 2**31 - 4096] + torch.randint(0, n - (1 << 20), (5,), generator=gen).tolist()
    for start in starts:
        sl = slice(start, start + (1 << 20))
        assert torch.equal(y[sl], (x[sl].float() * 1.5).bfloat16()), start
    assert torch.equal(y[-3:], (x[-3:].float() * 1.5).bfloat16())
    del x, y
    torch.cuda.empty_cache()


@pytest.mark.gpu
def test_specialized_nan_inf_and_signed_zero_are_each_their_own_kernel():
    f = kjit.elementwise("x / s", "x", "s", specialize="s", name="special_values")
    x = torch.ones(5, device="cuda")
    assert torch.equal(f(x, s=1.0), x)
    assert torch.isnan(f(x, s=float("nan"))).all()
    assert torch.equal(f(x, s=float("inf")), torch.zeros_like(x))
    assert torch.equal(f(x, s=-0.0), torch.full_like(x, float("-inf")))
    assert torch.equal(f(x, s=0.0), torch.full_like(x, float("inf")))


# ---- on a GPU: gradients ------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_elementwise_gradients_are_derived():
    f = kjit.elementwise("silu(a) * b * s", "a, b", "s", name="grad_silu_mul")
    a, b = randn(7, 33, dtype=torch.float64).requires_grad_(), randn(33, dtype=torch.float64).requires_grad_()
    torch.autograd.gradcheck(lambda a, b: f(a, b, s=0.5), (a, b))
    y = f(a, b, s=0.5)
    assert y.grad_fn is not None
    y.sum().backward()
    ref_a, ref_b = a.detach().requires_grad_(), b.detach().requires_grad_()
    (F.silu(ref_a) * ref_b * 0.5).sum().backward()
    torch.testing.assert_close(a.grad, ref_a.grad)
    torch.testing.assert_close(b.grad, ref_b.grad)  # summed over the broadcast dim


@pytest.mark.gpu
def test_elementwise_without_a_derivative_refuses_inputs_that_require_grad():
    f = kjit.elementwise("mystery(x)", "x", name="no_grad_fn")
    with pytest.raises(kjit.ValueError, match="input 'x' requires grad, but kjit has no derivative"):
        f(randn(4).requires_grad_())


@pytest.mark.gpu
def test_elementwise_derivative_rules_agree_with_torch_autograd_at_edge_values():
    """Every derivative rule of kjit/_derivative.py, compiled: the cases of test_derivative.py (which reads the rules
    from the module's tables, each with PyTorch's counterpart) and its compositions run through one kjit.elementwise
    function's backward kernels on the GPU, compared with torch.autograd on CUDA at 0, -0, +-1, +-inf, NaN, 1e-30,
    -2.5 (ties and NaN pairs for the two-argument rules), alone and times an outer factor w of inf or NaN. One
    function holds them all, `s == i ? (case_i) * w : ...`: the derivative of c ? a : b is the taken branch's, so
    each element gets exactly its case's derivative (3 compiles, not 300)."""
    from test_derivative import COMPOSITIONS, EDGES, OUTER, agrees, by_constants, rule_cases, torch_gradients

    exprs, refs, points = [], [], []  # points: (case index, x, y, k, w)
    for cases in rule_cases().values():
        for expr, fn, pts in cases:
            points += [(len(exprs), x, y, k, w) for x, y, k in pts for w in (1.0, *OUTER)]
            exprs.append(expr)
            refs.append(fn)
    for expr, fn in COMPOSITIONS:
        points += [(len(exprs), x, y, 0.0, 1.0) for x in EDGES for y in EDGES]
        exprs.append(expr)
        refs.append(lambda a, b, k, fn=fn: fn(a, b))
    chain = "".join(f"s == {i} ? ({e}) * w : " for i, e in enumerate(exprs)) + "static_cast<C>(0)"
    f = kjit.elementwise(chain, "x, y, k, w, s", name="derivative_rules_at_edges")
    assert not f.no_grad, f.no_grad
    ts, tx, ty, tk, tw = (torch.tensor(column, dtype=torch.float32, device="cuda") for column in zip(*points))
    tx.requires_grad_()
    ty.requires_grad_()
    gx, gy = torch.autograd.grad(f(tx, ty, tk, tw, ts), (tx, ty), torch.ones(len(points), device="cuda"))
    assert gx.dtype == torch.float32 and gy.dtype == torch.float32
    got = {"x": gx.tolist(), "y": gy.tolist()}
    by_case: dict = {}
    for n, (i, px, py, pk, pw) in enumerate(points):
        by_case.setdefault(i, []).append((px, py, pk, pw, n))
    wrong = []
    for i, mine in by_case.items():  # PyTorch's gradients of each case, a batch per value of k and w
        for k, w, pts in by_constants(mine):
            want = torch_gradients(refs[i], [p[0] for p in pts], [p[1] for p in pts], k, w, device="cuda")
            for name, expected_all in zip("xy", want):
                for (x, y, n), expected in zip(pts, expected_all):
                    if not agrees(got[name][n], expected):
                        wrong.append(
                            f"d(({exprs[i]}) * w)/d{name} at x={x}, y={y}, k={k}, w={w}: kjit "
                            f"{got[name][n]}, torch {expected}"
                        )
    assert not wrong, f"{len(wrong)} disagreements:\n" + "\n".join(wrong[:40])


INF, NAN = float("inf"), float("nan")


@pytest.mark.gpu
def test_elementwise_backward_masks_an_inf_or_nan_incoming_gradient_as_torch_does():
    """The backward kernel of a derived derivative runs the gradient with kjit_grad flowing in at the top: where
    PyTorch masks the incoming gradient (relu's threshold_backward, fmax's masked_fill, pow's exponent-0 mask), an
    inf or NaN gradient gives 0, not inf * 0 = NaN. Every rule case of test_derivative.py (at w = 1), through the
    same function as the test above (its kernels are cached), each point under kjit_grad = inf, -inf, NaN."""
    from test_derivative import agrees, rule_cases, torch_gradient_for

    exprs, refs, points = [], [], []  # points: (case index, x, y, k, g)
    for cases in rule_cases().values():
        for expr, fn, pts in cases:
            points += [(len(exprs), x, y, k, g) for x, y, k in pts for g in (INF, -INF, NAN)]
            exprs.append(expr)
            refs.append(fn)
    from test_derivative import COMPOSITIONS

    exprs += [e for e, _ in COMPOSITIONS]  # the same chain as the test above
    chain = "".join(f"s == {i} ? ({e}) * w : " for i, e in enumerate(exprs)) + "static_cast<C>(0)"
    f = kjit.elementwise(chain, "x, y, k, w, s", name="derivative_rules_at_edges")
    ts, tx, ty, tk, tg = (torch.tensor(column, dtype=torch.float32, device="cuda") for column in zip(*points))
    tx.requires_grad_()
    ty.requires_grad_()
    gx, gy = torch.autograd.grad(f(tx, ty, tk, torch.ones_like(tk), ts), (tx, ty), tg)
    got = {"x": gx.tolist(), "y": gy.tolist()}
    wrong = []
    for n, (i, x, y, k, g) in enumerate(points):
        for name, expected in zip("xy", torch_gradient_for(refs[i], x, y, k, g, device="cuda")):
            if not agrees(got[name][n], expected):
                wrong.append(
                    f"gradient of {name} in {exprs[i]} at x={x}, y={y}, k={k}, kjit_grad={g}: kjit "
                    f"{got[name][n]}, torch {expected}"
                )
    assert not wrong, f"{len(wrong)} disagreements:\n" + "\n".join(wrong[:40])


@pytest.mark.gpu
def test_elementwise_of_a_1000_term_expression_is_defined_and_differentiated():
    # 13 KB: the derivation raised RecursionError, so the function could not be defined (issue 27, item 10)
    f = kjit.elementwise(" + ".join(f"x * {i}.0f" for i in range(1000)), "x", name="long_sum")
    assert not f.no_grad and f.grads["x"] == " + ".join(f"{i}.0f" for i in range(1000))
    x = torch.tensor([1.0, 2.0, -1.0, 0.0], device="cuda", requires_grad=True)
    y = f(x)
    assert torch.equal(y, x.detach() * 499500.0)  # small integers: every sum is exact in float
    y.sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 499500.0))


@pytest.mark.gpu
def test_elementwise_user_gradient():
    f = kjit.elementwise("x * x", "x", grads={"x": "static_cast<C>(3) * x"}, name="user_grad")
    x = randn(5).requires_grad_()
    f(x).sum().backward()
    torch.testing.assert_close(x.grad, 3 * x.detach())


@pytest.mark.gpu
def test_nine_input_function_has_gradients_and_32_inputs_refuse_them_with_the_reason():
    # Issue #28: up to 31 inputs have derivative kernels (the gradient and every input: 32 tensors).
    names = [f"a{i}" for i in range(9)]
    f = kjit.elementwise(" + ".join(names), names, name="nine_inputs")
    args = [randn(4) for _ in names]
    torch.testing.assert_close(f(*args), sum(args))
    args[0].requires_grad_()
    f(*args).sum().backward()
    torch.testing.assert_close(args[0].grad, torch.ones_like(args[0]))
    names = [f"a{i}" for i in range(32)]
    f = kjit.elementwise(" + ".join(names), names, name="thirty_two_inputs")
    args = [randn(4) for _ in names]
    torch.testing.assert_close(f(*args), sum(args))
    args[0].requires_grad_()
    with pytest.raises(kjit.ValueError, match="32 inputs has no derivative kernel"):
        f(*args)


@pytest.mark.gpu
def test_elementwise_under_torch_compile_fullgraph():
    f = kjit.elementwise("silu(a) * b", "a, b", name="compiled_silu_mul")

    def fn(a, b):
        return f(a, b) + ops.rms_norm(a, None)

    a, b = randn(8, 256).requires_grad_(), randn(8, 256).requires_grad_()
    compiled = torch.compile(fn, fullgraph=True)
    y = compiled(a, b)
    torch.testing.assert_close(y, F.silu(a) * b + F.rms_norm(a, (256,), eps=1e-6))
    y.sum().backward()
    assert a.grad is not None and b.grad is not None
    explanation = torch._dynamo.explain(fn)(a, b)
    assert explanation.graph_break_count == 0, explanation.break_reasons
