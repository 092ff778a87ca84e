"""kjit.elementwise on complex tensors and on functions of many inputs.

Without a GPU: complex kernels and functions of many inputs compile for real (NVRTC, sm_90) in every form a
call can take (flat, strided ranks 1..6, mixed real and complex dtypes); functions with no complex form fail
to compile with a message naming the alternative; the input limit is checked at definition; and every
message that names a dtype names it as PyTorch users write it (torch.complex64), never by c10's C++ name
(ComplexFloat).

On a GPU (the tests marked gpu): complex tensors (arithmetic, math functions, promotion with real inputs,
constants, comparisons, gradients refused), functions of many inputs (12, 31 and 32, forward against
PyTorch, gradients where a derivative kernel can be built, refused with the reason where not), and the
dtype names of the messages of the C++ call paths (torch.complex32, never c10's ComplexHalf).

Tolerances: complex results are compared with PyTorch's own complex kernels on the same inputs; the
formulas are those of c10::complex / C99 Annex G for finite values, so results differ by a few roundings
of the real type at most (assert_close's defaults for complex64 / complex128, loosened where the
function's condition number is large: tan and tanh near their poles are avoided by the input range).
"""

import json
import re

import pytest
import torch

import kjit
from kjit import ops
from support import COMPLEX_HALF_IS_EXPERIMENTAL, ORIGINS, error_of, meta

DEV = "cuda"
COMPLEX = [torch.complex64, torch.complex128]
SIZES = [1, 7, 1000, 4097]
CPP_DTYPE_NAMES = re.compile(
    r"\b(Float|Double|Half|BFloat16|ComplexFloat|ComplexDouble|ComplexHalf|Long|Int|Short|"
    r"Char|Byte|Bool|Float8_e4m3fn)\b"
)


def z(*shape, dtype=torch.complex64, scale=1.0, offset=0, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    n = int(torch.tensor(shape).prod()) + offset if shape else 1 + offset
    parts = (torch.rand(n, 2, generator=g, dtype=real) * 2 - 1) * scale
    flat = torch.complex(parts[:, 0], parts[:, 1]).to(DEV)
    return flat[offset:].view(shape)


def close(a, b, **kw):
    torch.testing.assert_close(a, b, **kw)


# ---- complex: compiles -------------------------------------------------------------------------------------


def test_complex_flat_and_strided_kernels_compile_with_the_complex_mask():
    f = kjit.elementwise("a * b + a / b - conj(b) * s", "a, b", "s", name="cx_compile")
    # complex64 x complex64 -> complex64: result, compute type and both inputs complex (mask 0b1111).
    k = f.compile(arch="sm_90", dtypes=(torch.complex64, torch.complex64), vec=2)
    assert k.origin in ORIGINS
    assert k.name_expression == "kjit_elementwise<float, float, 2, false, int, 15ull, float, float>", k.name_expression
    # float16 x complex128 -> complex128: the first input is real (bit 2 clear).
    k = f.compile(arch="sm_90", dtypes=(torch.float16, torch.complex128))
    assert k.name_expression == "kjit_elementwise<double, double, 1, false, int, 11ull, __half, double>", (
        k.name_expression
    )
    for rank in range(1, 7):
        k = f.compile(arch="sm_90", dtypes=(torch.complex128, torch.float32), rank=rank, index=torch.int64)
        assert k.name_expression == f"kjit_elementwise_strided{rank}<double, double, long long, 7ull, double, float>"
    # Real calls keep their name expressions' types, with a zero mask.
    k = f.compile(arch="sm_90", dtypes=(torch.bfloat16, torch.bfloat16), vec=8, tail=True)
    assert k.name_expression == (
        "kjit_elementwise<__nv_bfloat16, float, 8, true, int, 0ull, __nv_bfloat16, __nv_bfloat16>"
    )


def test_complex_result_into_a_real_dtype_compiles_computing_in_complex():
    f = kjit.elementwise("abs(z) + angle(z)", "z", dtype=torch.float32, name="cx_real_out")
    k = f.compile(arch="sm_90", dtypes=(torch.complex64,))
    # result real (bit 0 clear), compute complex64 (bit 1), input complex (bit 2).
    assert k.name_expression == "kjit_elementwise<float, float, 1, false, int, 6ull, float>", k.name_expression
    k = f.compile(arch="sm_90", dtypes=(torch.complex64,), out_dtype=torch.float64)
    assert k.name_expression == "kjit_elementwise<double, double, 1, false, int, 6ull, float>", k.name_expression
    f.compile(arch="sm_90", dtypes=(torch.complex128,), out_dtype=torch.bool)
    f.compile(arch="sm_90", dtypes=(torch.complex64,), out_dtype=torch.float16)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_every_complex_function_compiles(dtype):
    expr = (
        "exp(z) + log(z) + log2(z) + log10(z) + sqrt(z) + rsqrt(z) + pow(z, w) + pow(z, 2) + pow(2.0, z) + "
        "reciprocal(z) + square(z) + sgn(z) + sin(z) + cos(z) + tan(z) + sinh(z) + cosh(z) + tanh(z) + "
        "sigmoid(z) + silu(z) + tanh_(z) + exp_(z) + log_(z) + conj(z) + polar(abs(z), angle(z)) + real(z) + "
        "imag(z) + norm(z) + arg(z) + (z == w) + (z != 1.0) + (2 == w) + -z + +z + z * 2 + 2 * z + z / 2 + "
        "2 / z + z - 1 + 1 - z + C(s, 1)"
    )
    f = kjit.elementwise(expr, "z, w", "s", name="cx_functions")
    k = f.compile(arch="sm_90", dtypes=(dtype, dtype))
    assert k.origin in ORIGINS


@pytest.mark.parametrize(
    "expr, match",
    [
        (
            "relu(z)",
            r"relu of a complex value: PyTorch has no complex form of it either; apply it to real\(z\), "
            r"imag\(z\) or abs\(z\)",
        ),
        ("gelu_tanh(z)", r"gelu_tanh of a complex value"),
        ("erf_(z)", r"erf_ of a complex value"),
        (
            "z < w",
            r"complex values have no order \(operator <\), as in PyTorch; compare real\(z\), imag\(z\) or "
            r"abs\(z\) instead",
        ),
        ("z >= 1", r"complex values have no order \(operator >=\)"),
        ("max(z, w)", r"max of a complex value: PyTorch has no complex form of it either"),
        ("floor(z)", r"floor of a complex value"),
        (
            "asin(z)",
            r"asin of a complex value: kjit does not provide it for complex values; compute it with torch\.asin",
        ),
        ("atanh(z)", r"compute it with torch\.atanh"),
        ("expm1(z)", r"write exp\(z\) - 1 or use torch\.expm1"),
    ],
)
def test_functions_without_a_complex_form_fail_to_compile_with_the_alternative(expr, match):
    f = kjit.elementwise(expr, "z, w", name="cx_refused")
    with pytest.raises(kjit.CompileError, match=match):
        f.compile(arch="sm_90", dtypes=(torch.complex64, torch.complex64))
    # The same expression of real values compiles (relu, <, max, floor ... are real functions).
    f.compile(arch="sm_90", dtypes=(torch.float32, torch.float32))


def test_real_forms_of_real_imag_conj_angle_compile():
    f = kjit.elementwise("real(x) + imag(x) + conj(x) + angle(x)", "x", name="real_of_real")
    for d in (torch.float32, torch.float64, torch.float16, torch.int32):
        f.compile(arch="sm_90", dtypes=(d,))


def test_a_complex_scalar_value_is_refused_with_the_way_to_pass_it():
    f = kjit.elementwise("z * C(re, im)", "z", "re, im", name="cx_scalar")
    with pytest.raises(
        kjit.TypeError,
        match=r"scalar 're' must be a Python int or float, got complex \(1\+2j\); a "
        r"complex value is two real scalars: pass its parts \(e\.g\. re=v\.real, "
        r"im=v\.imag\) and write C\(re, im\) in the expression",
    ):
        f(meta(4, dtype=torch.complex64), re=1 + 2j, im=0.0)
    with pytest.raises(
        kjit.TypeError,
        match=r"the default of scalar 's' must be a Python int or float, got complex "
        r"1j; a complex value is two real scalars",
    ):
        kjit.elementwise("z * s", "z", {"s": 1j})


def test_complex_dtype_is_accepted_by_definition_and_spec():
    f = kjit.elementwise("z * 2", "z", dtype=torch.complex128, name="cx_dtype")
    assert json.loads(f.spec)["dtype"] == "complex128"
    assert (
        f.compile(arch="sm_90", dtypes=(torch.complex64,)).name_expression
        == "kjit_elementwise<double, double, 1, false, int, 7ull, float>"
    )


# ---- complex: results on a GPU -----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("offset", [0, 1])
def test_complex_arithmetic_matches_torch(dtype, n, offset):
    f = kjit.elementwise("a * b + a / b - (-a) * 2", "a, b", name="cx_arith")
    a, b = z(n, dtype=dtype, offset=offset, seed=1), z(n, dtype=dtype, offset=offset, seed=2)
    out = f(a, b)
    assert out.dtype == dtype and out.shape == (n,)
    close(out, a * b + a / b - (-a) * 2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", COMPLEX)
def test_complex_broadcast_and_strided_inputs(dtype):
    f = kjit.elementwise("a * conj(b) + s", "a, b", "s", name="cx_strided")
    a = z(64, 33, dtype=dtype, seed=3).t()  # strided
    b = z(64, dtype=dtype, seed=4)  # broadcast over the first dim
    close(f(a, b, s=0.5), a * b.conj() + 0.5)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "real, cx, expected",
    [
        (torch.float64, torch.complex64, torch.complex128),
        (torch.float32, torch.complex64, torch.complex64),
        (torch.float16, torch.complex64, torch.complex64),
        (torch.bfloat16, torch.complex128, torch.complex128),
        (torch.int64, torch.complex64, torch.complex64),
        (torch.bool, torch.complex64, torch.complex64),
    ],
)
def test_mixed_real_and_complex_inputs_promote_as_torch(real, cx, expected):
    assert torch.promote_types(real, cx) == expected
    f = kjit.elementwise("x * w + x", "x, w", name="cx_promote")
    x = (torch.rand(1000, device=DEV) * 4 - 2).to(real)
    w = z(1000, dtype=cx, seed=5)
    out = f(x, w)
    assert out.dtype == expected
    close(out, x * w + x)


@pytest.mark.gpu
def test_complex_comparisons_give_bool_and_ordering_is_refused():
    eq = kjit.elementwise("a == b", "a, b", dtype=torch.bool, name="cx_eq")
    ne = kjit.elementwise("a != b", "a, b", dtype=torch.bool, name="cx_ne")
    a = z(1000, seed=6)
    b = a.clone()
    b[::3] = b[::3] * 2
    assert torch.equal(eq(a, b), a == b)
    assert torch.equal(ne(a, b), a != b)
    lt = kjit.elementwise("a < b", "a, b", dtype=torch.bool, name="cx_lt")
    with pytest.raises(
        kjit.CompileError,
        match=r"complex values have no order \(operator <\), as in PyTorch; compare "
        r"real\(z\), imag\(z\) or abs\(z\) instead",
    ):
        lt(a, b)
    assert torch.equal(eq(a, b), a == b)  # the process stays usable


@pytest.mark.gpu
def test_complex_constants_from_real_scalars_and_the_compute_type():
    f = kjit.elementwise("z * C(re, im) + C(0, 1)", "z", "re, im", name="cx_const")
    x = z(1000, dtype=torch.complex128, seed=7)
    close(f(x, re=0.5, im=-2.0), x * complex(0.5, -2.0) + 1j)
    close(f(x, re=3, im=0.25), x * complex(3, 0.25) + 1j)  # runtime scalars: no recompile
    g = kjit.elementwise("z * s", "z", "s", specialize="s", name="cx_spec")
    close(g(x, s=1.5), x * 1.5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize(
    "expr, ref",
    [
        ("exp(z)", torch.exp),
        ("log(z)", torch.log),
        ("sqrt(z)", torch.sqrt),
        ("sin(z)", torch.sin),
        ("cos(z)", torch.cos),
        ("tan(z)", torch.tan),
        ("sinh(z)", torch.sinh),
        ("cosh(z)", torch.cosh),
        ("tanh(z)", torch.tanh),
        ("conj(z)", lambda v: v.conj().resolve_conj()),
        ("reciprocal(z)", torch.reciprocal),
        ("log2(z)", torch.log2),
        ("log10(z)", torch.log10),
        ("rsqrt(z)", torch.rsqrt),
        ("sgn(z)", torch.sgn),
        ("square(z)", torch.square),
        ("sigmoid(z)", torch.sigmoid),
        ("silu(z)", torch.nn.functional.silu),
        ("pow(z, w)", None),
        ("pow(z, 2.5)", lambda v: torch.pow(v, 2.5)),
        ("1 / z", lambda v: 1 / v),
    ],
)
def test_complex_math_functions_match_torch(dtype, expr, ref):
    # |re|, |im| <= 1: away from the poles of tan (re = pi/2), tanh and sigmoid (im = pi/2, pi), where both
    # kjit's and PyTorch's formulas lose digits to cancellation, each differently.
    x = z(4097, dtype=dtype, scale=1.0, seed=8)
    if ref is None:
        w = z(4097, dtype=dtype, seed=9)
        f = kjit.elementwise(expr, "z, w", name="cx_fn2")
        close(f(x, w), torch.pow(x, w))
        return
    f = kjit.elementwise(expr, "z", name="cx_fn")
    close(f(x), ref(x))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize(
    "expr, ref",
    [
        ("abs(z)", torch.abs),
        ("angle(z)", torch.angle),
        ("real(z)", torch.real),
        ("imag(z)", torch.imag),
        ("norm(z)", lambda v: v.abs() ** 2),
    ],
)
def test_complex_functions_with_real_results(dtype, expr, ref):
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    f = kjit.elementwise(expr, "z", dtype=real, name="cx_real_result")
    x = z(4097, dtype=dtype, scale=3.0, seed=10)
    out = f(x)
    assert out.dtype == real
    close(out, ref(x).to(real))


@pytest.mark.gpu
def test_real_functions_of_real_values_agree_with_torch():
    f = kjit.elementwise("real(x) + imag(x) + conj(x) + angle(x)", "x", name="real_of_real")
    x = torch.randn(1000, device=DEV, dtype=torch.float64)
    close(f(x), x + 0 + x + torch.angle(x))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "expr, match",
    [
        ("relu(z)", r"relu of a complex value: PyTorch has no complex form of it either"),
        ("gelu(z)", r"gelu of a complex value"),
        (
            "asin(z)",
            r"asin of a complex value: kjit does not provide it for complex values; compute it with torch\.asin",
        ),
        ("floor(z)", r"floor of a complex value: PyTorch has no complex form of it either"),
    ],
)
def test_complex_functions_without_a_complex_form_are_refused_with_the_alternative(expr, match):
    f = kjit.elementwise(expr, "z", name="cx_refused")
    with pytest.raises(kjit.CompileError, match=match):
        f(z(8))


@pytest.mark.gpu
def test_complex_out_and_16_bit_inputs():
    f = kjit.elementwise("x * w", "x, w", name="cx_out")
    x = torch.randn(1000, device=DEV, dtype=torch.float16)
    w = z(1000, seed=11)
    out = torch.empty(1000, device=DEV, dtype=torch.complex64)
    assert f(x, w, out=out) is out
    close(out, x.to(torch.complex64) * w)


@pytest.mark.gpu
def test_complex_result_into_a_real_dtype_keeps_the_real_part():
    f = kjit.elementwise("z * 2", "z", dtype=torch.float32, name="cx_to_real")
    x = z(1000, seed=12)
    close(f(x), (x * 2).real)


@pytest.mark.gpu
def test_complex_inputs_that_require_grad_are_refused_with_the_reason():
    f = kjit.elementwise("a * b", "a, b", name="cx_grad")
    a = z(8, seed=13).requires_grad_()
    b = z(8, seed=14)
    with pytest.raises(kjit.ValueError) as e:
        f(a, b)
    msg = str(e.value)
    assert (
        "input 'a' requires grad, but this call is complex (inputs a torch.complex64, b torch.complex64, result "
        "torch.complex64)" in msg
    ), msg
    assert "conjugate Wirtinger" in msg and "a.detach()" in msg and "torch.no_grad()" in msg, msg
    # A real input that requires grad, with a complex result, is refused too; the forward works without grad.
    x = torch.randn(8, device=DEV, requires_grad=True)
    with pytest.raises(
        kjit.ValueError,
        match=r"input 'a' requires grad, but this call is complex \(inputs a "
        r"torch\.float32, b torch\.complex64, result torch\.complex64\)",
    ):
        f(x, b)
    with torch.no_grad():
        close(f(x, b), x * b)
    close(f(a.detach(), b), a.detach() * b)


# ---- many inputs ---------------------------------------------------------------------------------------


def _names(n):
    return [f"a{i}" for i in range(n)]


@pytest.mark.parametrize("n", [12, 32])
def test_many_inputs_compile_flat_and_strided(n):
    names = _names(n)
    f = kjit.elementwise(" + ".join(names), names, name=f"many_{n}")
    k = f.compile(arch="sm_90", dtypes=(torch.float32,) * n, vec=4)
    assert k.name_expression.startswith("kjit_elementwise<float, float, 4, false, int, 0ull, float, float")
    assert k.name_expression.count("float") == 2 + n
    k = f.compile(arch="sm_90", dtypes=(torch.complex64,) + (torch.float16,) * (n - 1), rank=6)
    assert k.name_expression.startswith("kjit_elementwise_strided6<float, float, int, 7ull, float, __half")


def test_a_function_of_32_inputs_has_no_derivative_and_31_have():
    names = _names(32)
    spec = json.loads(kjit.elementwise(" * ".join(names), names, name="many_grad32").spec)
    assert spec["grads"] == {} and set(spec["no_grad"]) == set(names)
    assert "a function of 32 inputs has no derivative kernel" in spec["no_grad"]["a0"]
    spec = json.loads(kjit.elementwise(" * ".join(names[:31]), names[:31], name="many_grad31").spec)
    assert set(spec["grads"]) == set(names[:31]) and spec["no_grad"] == {}


def test_more_than_32_inputs_are_refused_at_definition():
    names = _names(33)
    with pytest.raises(kjit.ValueError, match=r"^kjit\.elementwise: at most 32 input tensors, got 33$"):
        kjit.elementwise(" + ".join(names), names)
    spec = {"expr": "a0", "inputs": names}
    with pytest.raises(kjit.ValueError, match=r"a function takes 1 to 32 input tensors, got 33"):
        kjit._C.ElementwiseFunction(json.dumps(spec))


@pytest.mark.gpu
def test_twelve_inputs_without_gradient_match_torch():
    names = _names(12)
    f = kjit.elementwise(" + ".join(f"{n} * {i + 1}" for i, n in enumerate(names)), names, name="twelve")
    args = [torch.randn(4097, device=DEV) for _ in names]
    ref = sum(a * (i + 1) for i, a in enumerate(args))
    close(f(*args), ref)
    # Strided, broadcast and mixed dtypes: the strided kernels take 12 inputs too.
    args[0] = torch.randn(4097, 3, device=DEV)[:, 1]
    args[1] = torch.randn(1, device=DEV)
    args[2] = args[2].to(torch.float16)
    args[3] = args[3].to(torch.float64)
    ref = sum(a.double() * (i + 1) for i, a in enumerate(args))
    out = f(*args)
    assert out.dtype == torch.float64
    close(out, ref)


@pytest.mark.gpu
def test_thirty_two_inputs_forward_and_gradient_refused_when_asked():
    names = _names(32)
    f = kjit.elementwise(" * ".join(names), names, name="thirty_two")
    args = [torch.rand(1000, device=DEV) + 0.5 for _ in names]
    ref = args[0].clone()
    for a in args[1:]:
        ref = ref * a
    close(f(*args), ref)
    args[5].requires_grad_()
    with pytest.raises(
        kjit.ValueError,
        match=r"input 'a5' requires grad, but a function of 32 inputs has no "
        r"derivative kernel \(it would take the gradient and every input: at "
        r"most 32 tensors\); split the function, or pass a5\.detach\(\)",
    ):
        f(*args)


@pytest.mark.gpu
def test_thirty_one_inputs_have_gradients():
    # The derivative kernel of an input takes the incoming gradient and all 31 inputs (38 template arguments).
    names = _names(31)
    f = kjit.elementwise(" + ".join(f"{n} * {n}" for n in names), names, name="thirty_one")
    args = [torch.randn(100, device=DEV, dtype=torch.float64) for _ in names]
    for i in (0, 30):
        args[i].requires_grad_()
    out = f(*args)
    close(out, sum(a.detach() * a.detach() for a in args))
    out.sum().backward()
    for i in (0, 30):
        close(args[i].grad, 2 * args[i].detach())


# ---- dtype names in messages -----------------------------------------------------------------------------


def _message(call):
    return error_of(kjit.Error, call)


def check_dtype_names(messages):
    """Every message names its dtypes as PyTorch users write them (torch.complex32), never by c10's C++ name;
    the element-wise calls with a complex32 and with a float8 input say which input, and what is allowed."""
    for label, msg in messages.items():
        assert not CPP_DTYPE_NAMES.search(msg), (label, msg)
        assert "torch." in msg, (label, msg)
    complex32, float8 = messages["elementwise call complex32"], messages["elementwise call float8"]
    assert "input 'y' has dtype torch.complex32, which is not supported; allowed: torch.float32" in complex32
    assert "torch.complex64, torch.complex128" in complex32
    assert "input 'x' has dtype torch.float8_e4m3fn" in float8


@COMPLEX_HALF_IS_EXPERIMENTAL
def test_messages_name_dtypes_as_pytorch_users_write_them():
    f = kjit.elementwise("x * y", "x, y", name="dtype_names")
    add = kjit.Template.builtin("add_constant").kernel("add_constant")
    messages = {
        "elementwise call complex32": _message(lambda: f(meta(4), meta(4, dtype=torch.complex32))),
        "elementwise call float8": _message(lambda: f(meta(4, dtype=torch.float8_e4m3fn), meta(4))),
        "elementwise dtype=": _message(lambda: kjit.elementwise("x", "x", dtype=torch.complex32)),
        "elementwise compile": _message(lambda: f.compile(arch="sm_90", dtypes=(torch.float32, torch.complex32))),
        "elementwise spec": _message(
            lambda: kjit._C.ElementwiseFunction(json.dumps({"expr": "x", "inputs": ["x"], "dtype": "complex32"}))
        ),
        "template complex64": _message(lambda: add.specialize(T=torch.complex64, VEC=1)),
        "template float8": _message(lambda: add.specialize(T=torch.float8_e5m2, VEC=1)),
        "ops.add_constant complex64": _message(lambda: ops.add_constant(meta(3, dtype=torch.complex64), 1.0)),
        "ops.add_constant int64": _message(lambda: ops.add_constant(meta(3, dtype=torch.int64), 1.0)),
        "ops.softmax half/int": _message(lambda: ops.softmax(meta(3, 4, dtype=torch.int16), -1)),
        "ops.outer mixed": _message(lambda: ops.outer(meta(2, 3), meta(2, 4, dtype=torch.bfloat16))),
        "ops.rgb_to_gray": _message(lambda: ops.rgb_to_gray(meta(4, 4, 3, dtype=torch.float64))),
    }
    check_dtype_names(messages)
    assert "dtype=torch.complex32 is not supported" in messages["elementwise dtype="]
    assert "input 'y' has dtype torch.complex32, which is not supported" in messages["elementwise compile"]
    assert (
        "dtype 'complex32' of the function spec is not supported; allowed: torch.float32"
        in messages["elementwise spec"]
    )
    assert "got torch.complex64, which kjit cannot specialize on" in messages["template complex64"]
    assert "x has dtype torch.complex64, which is not supported" in messages["ops.add_constant complex64"]
    assert "x has dtype torch.int64, which is not supported" in messages["ops.add_constant int64"]
    assert "b has dtype torch.bfloat16 but a has dtype torch.float32" in messages["ops.outer mixed"]
    assert "img has dtype torch.float64" in messages["ops.rgb_to_gray"]


@pytest.mark.gpu
@COMPLEX_HALF_IS_EXPERIMENTAL
def test_cpp_call_paths_name_dtypes_as_torch_does():
    f = kjit.elementwise("x * y", "x, y", name="dtype_names_gpu")
    x = torch.ones(4, device=DEV)
    k = kjit.Template.builtin("add_constant").kernel("add_constant").specialize(T=torch.float32, VEC=1)
    messages = {
        "elementwise call complex32": _message(lambda: f(x, x.to(torch.complex32))),
        "elementwise call float8": _message(lambda: f(x.to(torch.float8_e4m3fn), x)),
        "launch half": _message(lambda: k.launch(1, 32, x.half(), x, 1.0, 4)),
        "launch int64": _message(lambda: k.launch(1, 32, x.long(), x, 1.0, 4)),
        "ops.softmax int64": _message(lambda: kjit.ops.softmax(x.long(), -1)),
        "ops.add_constant complex64": _message(lambda: kjit.ops.add_constant(x.to(torch.complex64), 1.0)),
    }
    check_dtype_names(messages)
    assert "points to torch.float32 elements, got a torch.float16 tensor" in messages["launch half"]
    assert "got a torch.int64 tensor" in messages["launch int64"]
    assert "has dtype torch.complex64" in messages["ops.add_constant complex64"]
