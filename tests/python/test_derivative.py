"""kjit._derivative without a GPU: the expression parser, the C++ renderer and the symbolic derivatives.

The module is loaded by file path, so these tests run without the compiled kjit extension. Derivatives
are checked numerically: a small float64 evaluator of the AST (below) evaluates both the expression and
its derivative text, and the derivative must match a central finite difference. Every rule is compared
with torch.autograd at the edge values (0, -0, +-1, +-inf, NaN, 1e-30, -2.5, ties), alone and under an
inf or NaN gradient, by a float32 evaluation of the derivative text as the kernel computes it (issue 27,
item 4; test_elementwise.py runs the same cases compiled on the GPU). Expressions of any length and depth
are parsed and differentiated under Python's default recursion limit (issue 27, item 10).
"""

import importlib.util
import itertools
import math
import os
import pathlib
import subprocess
import sys

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[2] / "python" / "kjit" / "_derivative.py"


def _load():
    spec = importlib.util.spec_from_file_location("kjit_derivative", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


D = _load()
ONE, ZERO = "static_cast<C>(1)", "static_cast<C>(0)"

# ---- a float64 evaluator of the AST, with kernel_templates/math.cuh's definitions ----------------------


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def _mish(x):
    return x * math.tanh(math.log1p(math.exp(x)))


def _mish_backward(g, x):
    t = math.tanh(math.log1p(math.exp(x)))
    return g * (t + x * _sigmoid(x) * (1.0 - t * t))


def _gelu(x):
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def _gelu_backward(g, x):
    return g * (0.5 * (1.0 + math.erf(x / math.sqrt(2.0))) + x * math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))


_BETA, _KAPPA = math.sqrt(2.0 / math.pi), 0.044715


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + math.tanh(_BETA * (x + _KAPPA * x**3)))


def _gelu_tanh_backward(g, x):
    t = math.tanh(_BETA * (x + _KAPPA * x**3))
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _BETA * (1.0 + 3.0 * _KAPPA * x * x))


_FAMILY = {  # one function each, spelled f() (overloaded), ff() (float) and, for four, f_() (kjit_math)
    "exp": math.exp,
    "exp2": lambda x: 2.0**x,
    "expm1": math.expm1,
    "log": math.log,
    "log2": math.log2,
    "log10": math.log10,
    "log1p": math.log1p,
    "sqrt": math.sqrt,
    "rsqrt": lambda x: 1.0 / math.sqrt(x),
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "tanh": math.tanh,
    "erf": math.erf,
    "fabs": abs,
    "pow": math.pow,
    "fmax": max,
    "fmin": min,
}
FUNCTIONS = {
    **_FAMILY,
    **{name + "f": f for name, f in _FAMILY.items()},
    **{name + "_": _FAMILY[name] for name in ("exp", "log", "erf", "tanh")},
    "abs": abs,
    "max": max,
    "min": min,
    "relu": lambda x: x if x > 0 else 0.0,
    "relu_backward": lambda g, y: 0.0 if y <= 0 else g,
    "sigmoid": _sigmoid,
    "sigmoid_backward": lambda g, y: g * y * (1.0 - y),
    "tanh_backward": lambda g, y: g * (1.0 - y * y),
    "silu": lambda x: x * _sigmoid(x),
    "silu_backward": lambda g, x: g * _sigmoid(x) * (1.0 + x * (1.0 - _sigmoid(x))),
    "mish": _mish,
    "mish_backward": _mish_backward,
    "gelu": _gelu,
    "gelu_backward": _gelu_backward,
    "gelu_tanh": _gelu_tanh,
    "gelu_tanh_backward": _gelu_tanh_backward,
    "foo": lambda v: v * v + 1.0,  # an "unknown" function, fine on constants
}
_BINARY = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "<": lambda a, b: float(a < b),
    ">": lambda a, b: float(a > b),
    "<=": lambda a, b: float(a <= b),
    ">=": lambda a, b: float(a >= b),
    "==": lambda a, b: float(a == b),
    "!=": lambda a, b: float(a != b),
    "&&": lambda a, b: float(bool(a) and bool(b)),
    "||": lambda a, b: float(bool(a) or bool(b)),
}


def evaluate(node, env: dict) -> float:
    if isinstance(node, D.Num):
        return node.value
    if isinstance(node, D.Name):
        return env[node.name]
    if isinstance(node, D.Unary):
        v = evaluate(node.operand, env)
        return {"-": -v, "+": v, "!": float(not v)}[node.op]
    if isinstance(node, D.Binary):
        return _BINARY[node.op](evaluate(node.left, env), evaluate(node.right, env))
    if isinstance(node, D.Ternary):
        return evaluate(node.then if evaluate(node.cond, env) else node.other, env)
    if isinstance(node, D.Cast):
        assert node.type in ("C", "float", "double"), node
        return evaluate(node.operand, env)
    if isinstance(node, D.Call):
        return float(FUNCTIONS[node.base](*(evaluate(a, env) for a in node.args)))
    raise TypeError(node)


def value(text: str, env: dict) -> float:
    return evaluate(D.parse(text), env)


# ---- parser --------------------------------------------------------------------------------------------

a, b, c, d, e, x, y = (D.Name(n) for n in "abcdexy")


@pytest.mark.parametrize(
    "text, tree",
    [
        ("a + b * c", D.Binary("+", a, D.Binary("*", b, c))),
        ("a * b + c", D.Binary("+", D.Binary("*", a, b), c)),
        ("a - b - c", D.Binary("-", D.Binary("-", a, b), c)),
        ("a / b * c", D.Binary("*", D.Binary("/", a, b), c)),
        ("a ? b : c ? d : e", D.Ternary(a, b, D.Ternary(c, d, e))),
        ("a ? b ? c : d : e", D.Ternary(a, D.Ternary(b, c, d), e)),
        ("a || b && c", D.Binary("||", a, D.Binary("&&", b, c))),
        ("a & b | c ^ d", D.Binary("|", D.Binary("&", a, b), D.Binary("^", c, d))),
        ("a < b == c >= d", D.Binary("==", D.Binary("<", a, b), D.Binary(">=", c, d))),
        ("a << b + c", D.Binary("<<", a, D.Binary("+", b, c))),
        ("a % b * c", D.Binary("*", D.Binary("%", a, b), c)),
        ("-a * b", D.Binary("*", D.Unary("-", a), b)),
        ("a - -b", D.Binary("-", a, D.Unary("-", b))),
        ("a-b", D.Binary("-", a, b)),
        ("!a == ~b", D.Binary("==", D.Unary("!", a), D.Unary("~", b))),
        ("- -a", D.Unary("-", D.Unary("-", a))),
        ("(a + b) * c", D.Binary("*", D.Binary("+", a, b), c)),
        ("a > b ? a : b", D.Ternary(D.Binary(">", a, b), a, b)),
        ("(float)x * y", D.Binary("*", D.Cast("float", x, "c"), y)),
        ("(C)-x", D.Cast("C", D.Unary("-", x), "c")),
        ("(x) * y", D.Binary("*", x, y)),
        ("static_cast<C>(x + 1)", D.Cast("C", D.Binary("+", x, D.Num("1")))),
        ("static_cast<unsigned int>(x)", D.Cast("unsigned int", x)),
        ("float(x) + C(y)", D.Binary("+", D.Cast("float", x, "func"), D.Cast("C", y, "func"))),
        ("kjit_math::exp_(x) + ::expf(y)", D.Binary("+", D.Call("kjit_math::exp_", (x,)), D.Call("::expf", (y,)))),
        ("f() + g(a, b ? c : d, e)", D.Binary("+", D.Call("f", ()), D.Call("g", (a, D.Ternary(b, c, d), e)))),
        ("std::numbers::pi * M_PI", D.Binary("*", D.Name("std::numbers::pi"), D.Name("M_PI"))),
    ],
)
def test_parse_structure_and_round_trip(text, tree):
    assert D.parse(text) == tree
    assert D.parse(D.to_cpp(tree)) == tree


@pytest.mark.parametrize(
    "tree, text",
    [
        (D.Binary("-", a, D.Binary("-", b, c)), "a - (b - c)"),
        (D.Binary("*", D.Binary("+", a, b), c), "(a + b) * c"),
        (D.Binary("/", a, D.Binary("*", b, c)), "a / (b * c)"),
        (D.Unary("-", D.Unary("-", a)), "-(-a)"),
        (D.Unary("-", D.Binary("+", a, b)), "-(a + b)"),
        (D.Ternary(D.Ternary(a, b, c), d, e), "(a ? b : c) ? d : e"),
        (D.Ternary(a, D.Ternary(b, c, d), e), "a ? (b ? c : d) : e"),
        (D.Ternary(a, b, D.Ternary(c, d, e)), "a ? b : c ? d : e"),
        (D.Binary("*", D.Ternary(a, b, c), d), "(a ? b : c) * d"),
        (D.Cast("float", D.Binary("*", a, b), "c"), "(float)(a * b)"),
        (D.Cast("C", D.Unary("-", D.Num("0.5"))), "static_cast<C>(-0.5)"),
    ],
)
def test_to_cpp_parenthesizes_where_needed(tree, text):
    assert D.to_cpp(tree) == text
    assert D.parse(text) == tree


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1", 1.0),
        ("42u", 42.0),
        ("10ul", 10.0),
        ("7LL", 7.0),
        ("017", 15.0),
        ("1.0", 1.0),
        ("3.", 3.0),
        (".5", 0.5),
        ("1.5f", 1.5),
        ("2.5e-3", 2.5e-3),
        ("1e5", 1e5),
        ("1E+2F", 100.0),
        ("1.0L", 1.0),
        ("0x10", 16.0),
        ("0xffu", 255.0),
        ("0x1.8p+1", 3.0),
        ("0x1p-2f", 0.25),
        ("0X.8P1", 1.0),
    ],
)
def test_literal_forms(text, expected):
    node = D.parse(text)
    assert node == D.Num(text) and node.value == expected
    assert D.to_cpp(node) == text


@pytest.mark.parametrize(
    "text, column, what",
    [
        ("a = b", 3, "'=' (assignment)"),
        ("a += b", 3, "'+=' (compound assignment)"),
        ("a <<= 1", 3, "'<<=' (compound assignment)"),
        ("x++", 2, "'++' (increment)"),
        ("--x", 1, "'--' (decrement)"),
        ("a, b", 2, "the comma operator is not supported"),
        ("f(a, (b, c))", 8, "expected ')', got ','"),
        ("a.b", 2, "'.' (member access)"),
        ("p->b", 2, "'->' (member access)"),
        ("a[0]", 2, "'[' (subscript)"),
        ('x * "s"', 5, "string literal"),
        ("x + 'c'", 5, "character literal"),
        ("a;", 2, "statement separator"),
        ("1f", 1, "'1f' is not a C++ number"),
        ("0x1.8", 1, "is not a C++ number"),
        ("08", 1, "'08' is not a C++ number"),
        ("(a", 3, "expected ')', got the end of the expression"),
        ("a +", 4, "got the end of the expression"),
        ("a b", 3, "expected an operator, got 'b'"),
        ("f(a)(b)", 5, "only a named function can be called"),
        ("static_cast<>(x)", 13, "expected a type name"),
        ("reinterpret_cast<float>(x)", 1, "reinterpret_cast is not supported"),
        ("x ? y", 6, "expected ':'"),
        ("x @ y", 3, "unexpected character '@'"),
        ("std:: + x", 7, "expected a name after '::'"),
        (":: 1", 4, "expected a name after '::'"),
        ("", 1, "got the end of the expression"),
    ],
)
def test_syntax_errors_name_the_column(text, column, what):
    with pytest.raises(ValueError) as info:
        D.parse(text)
    assert not isinstance(info.value, D.NotDifferentiable)
    message = str(info.value)
    assert message.startswith(f"kjit.elementwise: cannot parse {text!r} at column {column}: ")
    assert what in message
    assert "\n  " + " " * (column - 1) + "^\n" in message


# ---- derivatives: exact text ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, inputs, expected",
    [
        ("x * y", "xy", {"x": "y", "y": "x"}),
        ("x + y", "xy", {"x": ONE, "y": ONE}),
        ("x - y", "xy", {"x": ONE, "y": f"-{ONE}"}),
        ("0 - x", "x", {"x": f"-{ONE}"}),
        ("x * 2", "xy", {"x": "2", "y": ZERO}),
        ("silu(x) * y", "xy", {"x": "silu_backward(y, x)", "y": "silu(x)"}),  # the gradient into silu is y
        ("relu(x)", "x", {"x": f"relu_backward({ONE}, relu(x))"}),
        ("sigmoid(x)", "x", {"x": f"sigmoid_backward({ONE}, sigmoid(x))"}),
        ("silu(x * 2.0)", "x", {"x": f"silu_backward({ONE}, static_cast<C>(x * 2.0)) * 2.0"}),
        ("relu(expf(x))", "x", {"x": f"relu_backward({ONE}, static_cast<C>(relu(expf(x)))) * expf(x)"}),
        ("sqrtf(x)", "x", {"x": f"{ONE} / (static_cast<C>(2) * sqrtf(x))"}),
        ("expf(2.0f * x)", "x", {"x": "expf(2.0f * x) * 2.0f"}),
        ("log_(x)", "x", {"x": f"{ONE} / x"}),
        ("tanhf(x)", "x", {"x": f"{ONE} - tanhf(x) * tanhf(x)"}),
        ("erf(x)", "x", {"x": "static_cast<C>(1.1283791670955126) * exp(-(x * x))"}),
        ("erff(x)", "x", {"x": "static_cast<C>(1.1283791670955126) * expf(-(x * x))"}),
        ("kjit_math::erf_(x)", "x", {"x": "static_cast<C>(1.1283791670955126) * exp_(-(x * x))"}),
        ("sinf(x)", "x", {"x": "cosf(x)"}),
        ("cos(x)", "x", {"x": "-sin(x)"}),
        ("pow(x, 3.0)", "x", {"x": f"3.0 * pow(x, 3.0 - {ONE})"}),  # a literal exponent other than 0: no mask
        ("powf(2.0f, y)", "y", {"y": "powf(2.0f, y) * logf(2.0f)"}),  # a literal base other than 0: no mask
        # PyTorch's masks: d/dx is 0 where the exponent is 0, d/dy is 0 where the base is 0 and the exponent >= 0.
        (
            "pow(x, y)",
            "xy",
            {
                "x": f"y == {ZERO} ? {ZERO} : y * pow(x, y - {ONE})",
                "y": f"x == {ZERO} && y >= {ZERO} ? {ZERO} : pow(x, y) * log(x)",
            },
        ),
        ("powf(x, s)", "x", {"x": f"s == {ZERO} ? {ZERO} : s * powf(x, s - {ONE})"}),
        ("pow(x, 0) + powf(x, 0.0f) + pow(x, 0x0p0f)", "x", {"x": ZERO}),
        ("powf(0.0f, y)", "y", {"y": f"y >= {ZERO} ? {ZERO} : powf(0.0f, y) * logf(0.0f)"}),
        ("fmaxf(x, y)", "xy", {"x": f"x >= y || y != y ? {ONE} : {ZERO}", "y": f"x >= y || y != y ? {ZERO} : {ONE}"}),
        ("min(x, y)", "x", {"x": f"x <= y || y != y ? {ONE} : {ZERO}"}),
        ("fmax(x, 0.0f)", "x", {"x": f"x >= 0.0f ? {ONE} : {ZERO}"}),  # a literal is never NaN
        ("expm1f(x)", "x", {"x": f"expm1f(x) + {ONE}"}),
        ("log2(x)", "x", {"x": f"{ONE} / (x * static_cast<C>(0.6931471805599453))"}),
        ("log10f(x)", "x", {"x": f"{ONE} / (x * static_cast<C>(2.302585092994046))"}),
        ("fabsf(x)", "x", {"x": f"x > {ZERO} ? {ONE} : x < {ZERO} ? static_cast<C>(-1) : {ZERO}"}),
        ("x > 0 ? x * y : y", "xy", {"x": f"x > 0 ? y : {ZERO}", "y": f"x > 0 ? x : {ONE}"}),
        ("(x > y) + x", "xy", {"x": ONE, "y": ZERO}),
        ("foo(s) * x", "x", {"x": "foo(s)"}),
        ("x / y", "xy", {"x": f"{ONE} / y", "y": "-(x / y / y)"}),  # PyTorch's order: -(x / y) / y
        ("x / x", "x", {"x": f"{ONE} / x - x / x / x"}),
    ],
)
def test_derivative_text(expr, inputs, expected):
    assert D.derivatives(expr, list(inputs), ["s"]) == expected


# ---- derivatives: numerically, against a central finite difference ---------------------------------------

SCALARS = {"scale": 1.7, "s": 0.6, "k": 3.0, "M_PI": math.pi}
ANY = [(0.7, 1.3), (-0.45, 0.85), (1.6, -0.35), (-1.2, -0.8)]
POSITIVE = [(0.7, 1.3), (0.3, 2.1), (1.6, 0.45)]
CASES = [
    ("silu(x) * y", ANY),
    ("x * sigmoid(x) * scale", ANY),
    ("expf(-x*x) / (1.0f + y)", ANY),
    ("pow(x, 3.0) + pow(2.0, y)", ANY),
    ("gelu_tanh(x * s) - log_(y)", POSITIVE),
    ("x > 0 ? x * y : -x / y", ANY),
    ("fmaxf(x, y) * x", ANY),
    ("tanh_(x) * tanhf(y)", ANY),
    ("sqrtf(x*x + y*y)", ANY),
    ("relu(x - y)", ANY),
    ("erf_(x) + erff(y)", ANY),
    ("1.0f / (1.0f + x)", ANY),
    ("abs(x) * y", ANY),
    ("static_cast<C>(x) * 2", ANY),
    ("(float)x * y", ANY),
    ("pow(x, y)", POSITIVE),
    ("powf(x + 1.0f, y * 0.5f) * k", POSITIVE),
    ("pow(x, k) * y", POSITIVE),
    ("gelu(x) + gelu_tanh(y)", ANY),
    ("gelu(x) * gelu_tanh(x) * silu(x)", ANY),
    ("sigmoid(x * y) - silu(y)", ANY),
    ("mish(x) * y + mish(y * 2.0)", ANY),
    ("exp(x) * log(y) + exp_(y)", POSITIVE),
    ("log1pf(x * x) + expm1f(y)", ANY),
    ("exp2f(x) * log2f(y) + log10(y)", POSITIVE),
    ("rsqrtf(x) + rsqrt(y)", POSITIVE),
    ("sin(x) * cosf(y) + tanf(x * 0.5)", ANY),
    ("fminf(x, y) + min(x * 2.0, y) + max(x, s)", ANY),
    ("fabsf(x - y) / (1.0f + y * y)", ANY),
    ("x * x * x - x / y + y", ANY),
    ("(x - y) * (x + y) / (x * y)", ANY),
    ("kjit_math::exp_(x) * ::sqrtf(y) + kjit_math::silu(x)", POSITIVE),
    ("x < y && x > 0 ? sigmoid(x) : tanh(y) * scale", ANY),
    ("x > y ? (x > 0 ? x : -x) : y * y", ANY),
    ("foo(s) * x + M_PI * y - !x", ANY),
    ("static_cast<float>(x * y) + C(x) + double(y) - -x * +y", ANY),
    ("x * relu(y * 2.0)", ANY),
    ("0x1.8p+1 * x + 1e-3 * y + .5f * x * y", ANY),
]


def _finite_difference(expr: str, env: dict, name: str) -> float:
    h = 1e-6 * max(1.0, abs(env[name]))
    return (value(expr, {**env, name: env[name] + h}) - value(expr, {**env, name: env[name] - h})) / (2 * h)


@pytest.mark.parametrize("expr, points", CASES)
def test_derivative_matches_finite_difference(expr, points):
    grads = D.derivatives(expr, ["x", "y"], ["scale", "s", "k"])
    assert list(grads) == ["x", "y"]
    for name, text in grads.items():
        assert D.to_cpp(D.parse(text)) == text  # the derivative is valid, stable C++ of the subset
        for px, py in points:
            env = {**SCALARS, "x": px, "y": py}
            got, want = value(text, env), _finite_difference(expr, env, name)
            assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-7), (expr, name, text, env, got, want)


@pytest.mark.parametrize("expr", [case[0] for case in CASES])
def test_to_cpp_round_trip_evaluates_equal(expr):
    tree = D.parse(expr)
    text = D.to_cpp(tree)
    assert D.parse(text) == tree
    env = {**SCALARS, "x": 0.7, "y": 1.3}
    assert value(text, env) == value(expr, env)


# ---- what cannot be differentiated --------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, column, what",
    [
        ("x % 3", 3, "'%' is an integer-only operator"),
        ("x << 1", 3, "'<<' is an integer-only operator"),
        ("x & y", 3, "'&' is an integer-only operator"),
        ("y * (x | 1)", 8, "'|' is an integer-only operator"),
        ("~x", 1, "'~' is an integer-only operator"),
        ("foo(x)", 1, "foo has no known derivative"),
        ("y + bar::exp(x)", 5, "bar::exp has no known derivative"),
        ("silu_backward(y, x)", 1, "it is itself a derivative helper"),
        ("relu_backward(x, y)", 1, "it is itself a derivative helper"),
        ("static_cast<int>(x) * y", 1, "only casts to C, float and double are differentiable"),
        ("(long)x", 1, "only casts to C, float and double are differentiable"),
        ("fmaxf(x, y, 1)", 1, "fmaxf takes 2 argument(s), got 3"),
    ],
)
def test_not_differentiable(expr, column, what):
    with pytest.raises(D.NotDifferentiable, match="^kjit.elementwise: cannot differentiate ") as info:
        D.derivatives(expr, ["x", "y"])
    assert isinstance(info.value, ValueError)
    assert f" at column {column} of {expr!r} with respect to 'x': " in str(info.value)
    assert what in str(info.value)


def test_not_differentiable_message():
    with pytest.raises(D.NotDifferentiable) as info:
        D.derivatives("foo(x) * y", ["x", "y"])
    assert str(info.value) == (
        "kjit.elementwise: cannot differentiate foo(...) at column 1 of 'foo(x) * y' with "
        "respect to 'x': foo has no known derivative; give the gradient yourself with "
        "grads={'x': '...'}"
    )


def test_constant_subexpressions_may_use_anything():
    assert D.derivatives("foo(s) * x + (s % 3) * y", ["x", "y"], ["s"]) == {"x": "foo(s)", "y": "s % 3"}
    assert D.derivatives("(y % 2 == 0 ? x : -x) * (y << 1 > 3)", ["x"]) == {
        "x": "y % 2 == 0 ? y << 1 > 3 : -(y << 1 > 3)"
    }
    assert D.derivatives("x * 2", ["x", "y"])["y"] == ZERO


def test_syntax_error_is_a_value_error_not_not_differentiable():
    with pytest.raises(ValueError) as info:
        D.derivatives("x = y", ["x", "y"])
    assert not isinstance(info.value, D.NotDifferentiable)


def test_output_is_deterministic_across_processes():
    code = (
        f"import importlib.util as u, sys; s = u.spec_from_file_location('m', {str(_PATH)!r}); "
        "m = u.module_from_spec(s); sys.modules['m'] = m; s.loader.exec_module(m); "
        "print(m.derivatives('x * sigmoid(x) * scale + fmaxf(x, y) * abs(y) / pow(x, y)', ['x', 'y'], ['scale']))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
    assert outputs.pop().strip() == str(
        D.derivatives("x * sigmoid(x) * scale + fmaxf(x, y) * abs(y) / pow(x, y)", ["x", "y"], ["scale"])
    )


# ---- every rule against torch.autograd at the edge values, in float32 --------------------------------------
#
# The derivative text is evaluated as the backward kernel does (`static_cast<C>(kjit_grad * (derivative))`,
# kjit_grad = 1, C = float): IEEE float32 arithmetic with C++'s types (a literal without `f` is a double, an
# integer literal an int, `expf` computes in float, `pow(float, float)` too), through numpy. The reference is
# PyTorch's autograd of the same function on float32 tensors (CPU here; on CUDA in test_elementwise.py). The
# rules are read from _derivative.py's own tables, so a rule added without a PyTorch counterpart fails here.

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:  # the parser and the tests above need neither
    np = torch = F = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch and numpy (PyTorch's autograd is the reference)")

INF, NAN = math.inf, math.nan
EDGES = [0.0, -0.0, 1.0, -1.0, INF, -INF, NAN, 1e-30, -2.5]
OUTER = [INF, NAN]  # an outer factor of the rule (the gradient flowing into it)


def _ctype(*values):
    """The C++ type of an arithmetic expression of these values: np.float64 (double), np.float32 (float)
    or int (int literals, bool results)."""
    if any(isinstance(v, np.float64) for v in values):
        return np.float64
    return np.float32 if any(isinstance(v, np.float32) for v in values) else int


def _overloaded(fn):
    """A CUDA math function overloaded for float and double (an integer argument calls the double one)."""

    def call(*args):
        t = _ctype(*args)
        t = np.float64 if t is int else t
        return t(fn(*(t(a) for a in args)))

    return call


def _in_float(fn):
    """The float spelling (expf, powf): converts its arguments to float."""
    return lambda *args: np.float32(fn(*(np.float32(a) for a in args)))


def _erf(v):
    return type(v)(math.erf(float(v)))


def _rsqrt(v):
    return type(v)(1) / np.sqrt(v)


def _template(fn):
    """A kjit_math template of C (math.cuh), C deduced from its arguments."""

    def call(*args):
        t = _ctype(*args)
        t = np.float64 if t is int else t
        return fn(t, *(t(a) for a in args))

    return call


def _f32_sigmoid(C, x):
    return C(1) / (C(1) + np.exp(-x))


def _f32_gelu(C, x):
    return C(0.5) * x * (C(1) + _erf(x * C(0.70710678118654752440)))


def _f32_gelu_backward(C, g, x):
    cdf = C(0.5) * (C(1) + _erf(x * C(0.70710678118654752440)))
    pdf = C(0.39894228040143267794) * np.exp(C(-0.5) * x * x)
    return g * (cdf + x * pdf)


def _f32_gelu_tanh(C, x):
    inner = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x)
    return C(0.5) * x * (C(1) + np.tanh(inner))


def _f32_gelu_tanh_backward(C, g, x):
    kBeta, kKappa = C(0.79788456080286535588), C(0.044715)
    x2 = x * x
    t = np.tanh(kBeta * (x + kKappa * x2 * x))
    dinner = kBeta * (C(1) + C(3) * kKappa * x2)
    return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * dinner)


def _f32_silu_backward(C, g, x):
    s = _f32_sigmoid(C, x)
    return g * s * (C(1) + x * (C(1) - s))


def _f32_mish_backward(C, g, x):
    t = np.tanh(np.log1p(np.exp(x)))
    return g * (t + x * _f32_sigmoid(C, x) * (C(1) - t * t))


if np is not None:
    _MATH = {
        "exp": np.exp,
        "exp2": np.exp2,
        "expm1": np.expm1,
        "log": np.log,
        "log2": np.log2,
        "log10": np.log10,
        "log1p": np.log1p,
        "sqrt": np.sqrt,
        "rsqrt": _rsqrt,
        "sin": np.sin,
        "cos": np.cos,
        "tan": np.tan,
        "tanh": np.tanh,
        "erf": _erf,
        "fabs": np.abs,
        "pow": np.power,
        "fmax": np.fmax,
        "fmin": np.fmin,
    }
    F32_FUNCTIONS = {
        **{name: _overloaded(fn) for name, fn in _MATH.items()},
        **{name + "f": _in_float(fn) for name, fn in _MATH.items()},
        **{name + "_": _overloaded(_MATH[name]) for name in ("exp", "log", "erf", "tanh")},
        "abs": _overloaded(np.abs),
        "max": _overloaded(np.fmax),
        "min": _overloaded(np.fmin),  # CUDA: max(float, float) is fmaxf
        "relu": _template(lambda C, x: x if (x > C(0) or x != x) else C(0)),
        "relu_backward": _template(lambda C, g, y: C(0) if y <= C(0) else g),
        "sigmoid": _template(_f32_sigmoid),
        "sigmoid_backward": _template(lambda C, g, y: g * y * (C(1) - y)),
        "silu": _template(lambda C, x: x / (C(1) + np.exp(-x))),
        "silu_backward": _template(_f32_silu_backward),
        "mish": _template(lambda C, x: x * np.tanh(np.log1p(np.exp(x)))),
        "mish_backward": _template(_f32_mish_backward),
        "gelu": _template(_f32_gelu),
        "gelu_backward": _template(_f32_gelu_backward),
        "gelu_tanh": _template(_f32_gelu_tanh),
        "gelu_tanh_backward": _template(_f32_gelu_tanh_backward),
    }


def _f32_literal(text: str):
    t = text.lower()
    value = D.Num(text).value
    if t.startswith("0x") and "p" not in t or not any(c in t for c in ".ep"):
        return int(value)  # an integer literal
    return np.float32(value) if t.endswith("f") else np.float64(value)


def _f32_arith(op, a, b):
    if isinstance(a, int) and isinstance(b, int):
        if op == "/":
            return int(a / b)  # C++ truncates
        return {"+": a + b, "-": a - b, "*": a * b}[op]
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b}[op]()


_COMPARE = {
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "&&": lambda a, b: bool(a) and bool(b),
    "||": lambda a, b: bool(a) or bool(b),
}
_CASTS = {"C": "float32", "float": "float32", "double": "float64"}


def evaluate_f32(node, env: dict):
    """The value of the node as the kernel computes it in C = float (C++ types, IEEE float32/float64)."""
    if isinstance(node, D.Num):
        return _f32_literal(node.text)
    if isinstance(node, D.Name):
        return env[node.name]
    if isinstance(node, D.Unary):
        v = evaluate_f32(node.operand, env)
        return {"-": lambda: -v, "+": lambda: v, "!": lambda: int(not v)}[node.op]()
    if isinstance(node, D.Binary):
        a, b = evaluate_f32(node.left, env), evaluate_f32(node.right, env)
        if node.op in _COMPARE:
            return int(bool(_COMPARE[node.op](a, b)))
        return _f32_arith(node.op, a, b)
    if isinstance(node, D.Ternary):
        then, other = evaluate_f32(node.then, env), evaluate_f32(node.other, env)
        common = _ctype(then, other)  # C++ converts the branch taken to the branches' common type
        return common(then if evaluate_f32(node.cond, env) else other)
    if isinstance(node, D.Cast):
        return getattr(np, _CASTS[node.type])(evaluate_f32(node.operand, env))
    if isinstance(node, D.Call):
        return F32_FUNCTIONS[node.base](*(evaluate_f32(a, env) for a in node.args))
    raise TypeError(node)


def kernel_gradient(text: str, x: float, y: float, k: float, w: float = 1.0) -> float:
    """What the backward kernel computes for the derivative text at this point: C(kjit_grad * (text))."""
    env = {"x": np.float32(x), "y": np.float32(y), "k": np.float32(k), "w": np.float32(w)}
    with np.errstate(all="ignore"):
        return float(np.float32(np.float32(1) * evaluate_f32(D.parse(text), env)))


# PyTorch's counterpart of every rule, as a function of x, y (float32 tensors) and the constant k (a float).
if torch is not None:

    def _tensor_args(fn):
        """fn of tensors; a constant argument becomes a tensor like the other one."""

        def call(a, b):
            like = a if isinstance(a, torch.Tensor) else b
            return fn(*(v if isinstance(v, torch.Tensor) else torch.full_like(like, v) for v in (a, b)))

        return call

    TORCH_FUNCTIONS = {  # a rule of _derivative._FUNCTIONS (its base) -> PyTorch's function
        "exp": torch.exp,
        "exp2": torch.exp2,
        "expm1": torch.expm1,
        "log": torch.log,
        "log2": torch.log2,
        "log10": torch.log10,
        "log1p": torch.log1p,
        "sqrt": torch.sqrt,
        "rsqrt": torch.rsqrt,
        "sin": torch.sin,
        "cos": torch.cos,
        "tan": torch.tan,
        "tanh": torch.tanh,
        "erf": torch.erf,
        "fabs": torch.abs,
        "relu": torch.relu,
        "sigmoid": torch.sigmoid,
        "silu": F.silu,
        "mish": F.mish,
        "gelu": F.gelu,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        # A constant argument becomes a tensor: torch.pow(x, 0.5) with a Python float computes sqrt(x) (and -0.5
        # rsqrt), whose sign at -0 and value at -inf differ from C's pow, forward and backward alike; kjit's pow
        # is CUDA's, C's, as torch.pow of two tensors is. The masks are the same (pow_backward: 0 where the
        # exponent is 0; pow_backward_exponent: 0 where the base is 0 and the exponent >= 0).
        "pow": _tensor_args(torch.pow),
        "fmax": _tensor_args(torch.fmax),
        "fmin": _tensor_args(torch.fmin),
        # CUDA's max/min of floats are fmaxf/fminf (NaN ignored), so torch.fmax/fmin, not torch.maximum/minimum
        # (test_max_and_min_are_fmax_and_fmin_not_torch_maximum_and_minimum).
        "max": _tensor_args(torch.fmax),
        "min": _tensor_args(torch.fmin),
    }
    TORCH_OPERATORS = {"+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.div}
    TORCH_UNARY_OPERATORS = {"-": torch.neg, "+": torch.positive, "!": torch.logical_not}
    TORCH_PIECEWISE_CONSTANT = {
        "<": torch.lt,
        ">": torch.gt,
        "<=": torch.le,
        ">=": torch.ge,
        "==": torch.eq,
        "!=": torch.ne,
        "&&": torch.logical_and,
        "||": torch.logical_or,
    }
    TORCH_CASTS = {"C": lambda t: t.to(torch.float32), "float": lambda t: t.float(), "double": lambda t: t.double()}


def _torch_ties() -> str:
    """How this torch's autograd splits a tie of fmax: "split" (half each, torch 2.15) or "first" (torch 2.11)."""
    a, b = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
    _, gb = torch.autograd.grad(torch.fmax(a, b), (a, b))
    return "split" if gb.item() != 0 else "first"


TIES = _torch_ties() if torch is not None else "first"  # kjit.elementwise derives with the same answer


def _grid():
    return [(a, b, 0.0) for a in EDGES for b in EDGES]


def _along_x():
    return [(a, 0.5, 0.0) for a in EDGES]


def rule_cases() -> dict:
    """Every rule of _derivative.py (read from its tables) -> cases (kjit expression of x, y and the constant
    k; PyTorch's function of x, y and k; points (x, y, k)). A rule without a PyTorch counterpart gets None."""
    cases = {}
    for name, (base, _family) in D._FUNCTIONS.items():
        fn = TORCH_FUNCTIONS.get(base)
        if fn is None:
            cases[f"function {name}"] = None
        elif base not in D._BINARY_RULES:
            cases[f"function {name}"] = [(f"{name}(x)", lambda x, y, k, fn=fn: fn(x), _along_x())]
        else:
            cases[f"function {name}"] = [
                (f"{name}(x, y)", lambda x, y, k, fn=fn: fn(x, y), _grid()),
                (f"{name}(x, x)", lambda x, y, k, fn=fn: fn(x, x), _along_x()),
                # a constant argument (a scalar of the function) at every edge value, and literals
                (f"{name}(x, k)", lambda x, y, k, fn=fn: fn(x, k), [(a, 0.5, c) for a in EDGES for c in EDGES]),
                (f"{name}(k, y)", lambda x, y, k, fn=fn: fn(k, y), [(0.5, b, c) for b in EDGES for c in EDGES]),
                # literals (no mask needed for those other than 0; CUDA has pow(float, int), not max(float, int))
                *[
                    (f"{name}(x, {lit})", lambda x, y, k, fn=fn, v=v: fn(x, v), _along_x())
                    for lit, v in (("0", 0.0), ("2", 2.0))
                    if base == "pow"
                ],
                *[
                    (f"{name}(x, {lit})", lambda x, y, k, fn=fn, v=v: fn(x, v), _along_x())
                    for lit, v in (("0.0f", 0.0), ("2.0f", 2.0), ("0.5f", 0.5))
                ],
                *[
                    (f"{name}({lit}, y)", lambda x, y, k, fn=fn, v=v: fn(v, y), [(0.5, b, 0.0) for b in EDGES])
                    for lit, v in (("0.0f", 0.0), ("2.0f", 2.0), ("0.5f", 0.5))
                ],
            ]
    for op in D._OPERATOR_RULES:
        fn = TORCH_OPERATORS.get(op)
        cases[f"operator {op}"] = fn and [
            (f"x {op} y", lambda x, y, k, fn=fn: fn(x, y), _grid()),
            (f"x {op} x", lambda x, y, k, fn=fn: fn(x, x), _along_x()),
            (f"2.0f {op} x", lambda x, y, k, fn=fn: fn(2.0, x), _along_x()),
            (f"x {op} 0.0f", lambda x, y, k, fn=fn: fn(x, 0.0), _along_x()),
        ]
    for op in D._UNARY_OPERATORS:
        fn = TORCH_UNARY_OPERATORS.get(op)
        cases[f"unary {op}"] = fn and [(f"{op}x", lambda x, y, k, fn=fn: fn(x), _along_x())]
    for op in D._PIECEWISE_CONSTANT:
        fn = TORCH_PIECEWISE_CONSTANT.get(op)
        cases[f"operator {op}"] = fn and [(f"x {op} y", lambda x, y, k, fn=fn: fn(x, y), _grid())]
    for t in D._DIFFERENTIABLE_CASTS:
        fn = TORCH_CASTS.get(t)
        cases[f"cast {t}"] = fn and [
            (text, lambda x, y, k, fn=fn: fn(x) * y, _grid())
            for text in (f"static_cast<{t}>(x) * y", f"({t})x * y", f"{t}(x) * y")
        ]
    # c ? a : b differentiates the branch taken, as torch.where(c, a, b) does where the other branch's
    # derivative is finite (test_ternary_differs_from_torch_where_only_where_the_other_branch_is_inf_or_nan).
    cases["ternary ?:"] = [
        ("x > y ? x : y", lambda x, y, k: torch.where(x > y, x, y), _grid()),
        ("x != x ? y : x * 2.0f", lambda x, y, k: torch.where(x != x, y, x * 2.0), _grid()),
    ]
    return cases


def torch_gradients(fn, xs, ys, k: float, w=None, device="cpu") -> tuple:
    """PyTorch's d/dx and d/dy of fn (times w, when given) at the points (xs[i], ys[i]), float32, as two lists; 0
    where the output does not depend on an input."""
    tx, ty = (torch.tensor(v, dtype=torch.float32, device=device, requires_grad=True) for v in (xs, ys))
    out = fn(tx, ty, k) if w is None else fn(tx, ty, k) * w
    if not out.requires_grad:
        return [0.0] * len(xs), [0.0] * len(ys)
    grads = torch.autograd.grad(out, (tx, ty), torch.ones_like(out), allow_unused=True)
    return tuple([0.0] * len(xs) if g is None else g.tolist() for g in grads)


def torch_gradient(fn, x: float, y: float, k: float, w=None, device="cpu") -> tuple:
    """torch_gradients at one point: (d/dx, d/dy). On the CPU, one point at a time: PyTorch's CPU kernels have a
    vectorized path for longer tensors, and its gelu(approximate='tanh') backward there computes dy * a + dy * b
    (NaN for dy = inf, b = -0) where the scalar path, and the CUDA kernel, compute dy * (a + b), as kjit does."""
    gx, gy = torch_gradients(fn, [x], [y], k, w, device)
    return gx[0], gy[0]


def by_constants(points) -> list:
    """Points (x, y, k, w, ...) grouped by k and w, for torch_gradients: [(k, w, [(x, y, ...)])]. 0.0 and -0.0
    are two groups, every NaN one."""
    groups: dict = {}
    for x, y, k, w, *rest in points:
        groups.setdefault((repr(k), repr(w)), (k, w, []))[2].append((x, y, *rest))
    return list(groups.values())


def agrees(got: float, want: float) -> bool:
    """Both NaN, the same infinity, or equal to float32 rounding (the formulas and libm's differ in ulps)."""
    if math.isnan(got) or math.isnan(want):
        return math.isnan(got) and math.isnan(want)
    if math.isinf(got) or math.isinf(want):
        return got == want
    return math.isclose(got, want, rel_tol=1e-5, abs_tol=0.0)


RULES = sorted(rule_cases()) if torch is not None else []


@needs_torch
def test_every_rule_has_a_torch_counterpart_and_no_counterpart_is_stale():
    cases = rule_cases()
    assert not [r for r, c in cases.items() if c is None], "rules of _derivative.py without a PyTorch counterpart here"
    assert set(TORCH_FUNCTIONS) == {base for base, _ in D._FUNCTIONS.values()}
    assert set(TORCH_OPERATORS) == set(D._OPERATOR_RULES)
    assert set(TORCH_UNARY_OPERATORS) == set(D._UNARY_OPERATORS)
    assert set(TORCH_PIECEWISE_CONSTANT) == set(D._PIECEWISE_CONSTANT)
    assert set(TORCH_CASTS) == set(D._DIFFERENTIABLE_CASTS)
    # the families the parser knows, each spelled as the rules' table has it
    assert {"exp", "expf", "exp_", "abs", "fabsf", "pow", "powf", "max", "fmaxf", "gelu_tanh"} <= set(D._FUNCTIONS)


@needs_torch
@pytest.mark.parametrize("rule", RULES)
def test_rule_agrees_with_torch_autograd_at_edge_values(rule):
    cases = rule_cases()[rule]
    assert cases is not None, f"{rule}: no PyTorch counterpart in this test; add one to the TORCH_* tables"
    wrong = []
    for expr, fn, points in cases:
        # alone, and times an outer factor w of inf or NaN: where PyTorch masks the gradient flowing in (where,
        # masked_fill, threshold_backward) the result stays 0; where it multiplies by a mask it is NaN
        for text, outer in ((expr, [None]), (f"({expr}) * w", OUTER)):
            grads = D.derivatives(text, ["x", "y"], ["k", "w"], ties=TIES)
            for (x, y, k), w in itertools.product(points, outer):
                for name, expected in zip("xy", torch_gradient(fn, x, y, k, w)):
                    got = kernel_gradient(grads[name], x, y, k, 1.0 if w is None else w)
                    if not agrees(got, expected):
                        wrong.append(
                            f"d({text})/d{name} at x={x}, y={y}, k={k}, w={w}: kjit {got} ({grads[name]}), "
                            f"torch {expected}"
                        )
    assert not wrong, f"{len(wrong)} disagreements:\n" + "\n".join(wrong[:40])


def seeded_gradient(text: str, x: float, y: float, k: float, g: float) -> float:
    """What the backward kernel computes for a gradient text of derivatives(..., grad="kjit_grad"): the text
    itself, with the incoming gradient kjit_grad = g."""
    env = {"x": np.float32(x), "y": np.float32(y), "k": np.float32(k), "kjit_grad": np.float32(g)}
    with np.errstate(all="ignore"):
        return float(np.float32(evaluate_f32(D.parse(text), env)))


def torch_gradient_for(fn, x: float, y: float, k: float, g: float, device="cpu") -> tuple:
    """PyTorch's gradients of x and y at one point when g flows into fn's output (0 where unused)."""
    tx, ty = (torch.tensor([v], dtype=torch.float32, device=device, requires_grad=True) for v in (x, y))
    out = fn(tx, ty, k)
    if not out.requires_grad:
        return 0.0, 0.0
    grads = torch.autograd.grad(out, (tx, ty), torch.full_like(out, g), allow_unused=True)
    return tuple(0.0 if d is None else d.item() for d in grads)


@needs_torch
@pytest.mark.parametrize("rule", RULES)
def test_rule_agrees_with_torch_autograd_when_an_inf_or_nan_gradient_flows_in(rule):
    """The backward kernel of a derived derivative runs the gradient text with kjit_grad flowing in at the top
    (not kjit_grad * (derivative)): where PyTorch masks the incoming gradient (threshold_backward, where,
    masked_fill) an inf or NaN kjit_grad gives 0 there too, and NaN where PyTorch multiplies by a mask."""
    wrong = []
    for expr, fn, points in rule_cases()[rule]:
        grads = D.derivatives(expr, ["x", "y"], ["k"], grad="kjit_grad", ties=TIES)
        for (x, y, k), g in itertools.product(points, (INF, -INF, NAN, -2.5)):
            for name, expected in zip("xy", torch_gradient_for(fn, x, y, k, g)):
                got = seeded_gradient(grads[name], x, y, k, g)
                if not agrees(got, expected):
                    wrong.append(
                        f"gradient of {name} in {expr} at x={x}, y={y}, k={k}, kjit_grad={g}: kjit {got} "
                        f"({grads[name]}), torch {expected}"
                    )
    assert not wrong, f"{len(wrong)} disagreements:\n" + "\n".join(wrong[:40])


def test_the_gradient_text_seeds_the_incoming_gradient_at_the_top():
    assert D.derivatives("relu(x) * s", ["x"], ["s"], grad="kjit_grad") == {
        "x": "relu_backward(kjit_grad * s, relu(x))"
    }
    assert D.derivatives("x * y", ["x", "y"], grad="kjit_grad") == {"x": "kjit_grad * y", "y": "kjit_grad * x"}
    assert D.derivatives("y * 2.0f", ["x"], grad="kjit_grad") == {"x": "static_cast<C>(0)"}


COMPOSITIONS = [  # expressions of several rules, and PyTorch's same function
    ("sqrtf(x*x + y*y)", lambda x, y: torch.sqrt(x * x + y * y)),
    ("x * sigmoid(x) * y", lambda x, y: x * torch.sigmoid(x) * y),
    ("powf(relu(x), 2.0f) * y", lambda x, y: torch.pow(torch.relu(x), torch.full_like(x, 2.0)) * y),
    ("log1pf(expf(x)) + y", lambda x, y: torch.log1p(torch.exp(x)) + y),
    ("x / (1.0f + expf(-x)) * y", lambda x, y: x / (1.0 + torch.exp(-x)) * y),
    ("fmaxf(x, 0.0f) * y", lambda x, y: torch.fmax(x, torch.zeros_like(x)) * y),
    ("silu(x) * y", lambda x, y: F.silu(x) * y),
    ("powf(x, y) * x", lambda x, y: torch.pow(x, y) * x),
    ("expf(-x*x) / (1.0f + y)", lambda x, y: torch.exp(-x * x) / (1.0 + y)),
    ("tanhf(x * y) * x", lambda x, y: torch.tanh(x * y) * x),
    ("fminf(x, y) * fmaxf(x, y)", lambda x, y: torch.fmin(x, y) * torch.fmax(x, y)),
    ("(x > y ? x : y) * y", lambda x, y: torch.where(x > y, x, y) * y),
    ("gelu(x) * gelu_tanh(y) - logf(y) * x", lambda x, y: F.gelu(x) * F.gelu(y, approximate="tanh") - torch.log(y) * x),
    ("abs(x - y) / (x * y)", lambda x, y: torch.abs(x - y) / (x * y)),
    ("pow(x, y) / pow(y, x)", lambda x, y: torch.pow(x, y) / torch.pow(y, x)),
]


@needs_torch
@pytest.mark.parametrize("expr, fn", COMPOSITIONS, ids=[c[0] for c in COMPOSITIONS])
def test_compositions_agree_with_torch_autograd_at_edge_values(expr, fn):
    """kjit differentiates in reverse, as autograd does: masks apply to the gradient flowing in."""
    grads = D.derivatives(expr, ["x", "y"], ties=TIES)
    wrong = []
    for x, y, _ in _grid():
        for name, expected in zip("xy", torch_gradient(lambda a, b, k: fn(a, b), x, y, 0.0)):
            got = kernel_gradient(grads[name], x, y, 0.0)
            if not agrees(got, expected):
                wrong.append(f"d/d{name} at x={x}, y={y}: kjit {got} ({grads[name]}), torch {expected}")
    assert not wrong, f"{len(wrong)} disagreements:\n" + "\n".join(wrong[:40])


# ---- the documented differences ----------------------------------------------------------------------------


@needs_torch
def test_max_and_min_are_fmax_and_fmin_not_torch_maximum_and_minimum():
    """CUDA's max(float, float) is fmaxf: the derivative follows torch.fmax (a NaN operand: none to it; a tie as
    this torch's fmax: half each with torch 2.15, all to the first argument with torch 2.11). torch.maximum differs
    at a NaN operand (it propagates NaN) and, with torch 2.11, at a tie (it splits it)."""
    for name, fmax_like, maximum_like in (("max", torch.fmax, torch.maximum), ("min", torch.fmin, torch.minimum)):
        grads = D.derivatives(f"{name}(x, y)", ["x", "y"], ties=TIES)
        for x, y, k in _grid():
            got = tuple(kernel_gradient(grads[n], x, y, k) for n in "xy")
            assert got == torch_gradient(lambda a, b, k, f=fmax_like: f(a, b), x, y, k), (name, x, y)
            theirs = torch_gradient(lambda a, b, k, f=maximum_like: f(a, b), x, y, k)
            if x == y:  # a tie (also 0 and -0)
                assert (got, theirs) == ({"first": (1.0, 0.0), "split": (0.5, 0.5)}[TIES], (0.5, 0.5)), (name, x, y)
            elif math.isnan(x) or math.isnan(y):  # torch.maximum returns NaN and sends the gradient to both
                assert theirs == (1.0, 1.0) and got in ((1.0, 0.0), (0.0, 1.0)), (name, x, y)
            else:
                assert got == theirs, (name, x, y)


@needs_torch
@pytest.mark.parametrize("ties", ["first", "split"])
def test_both_tie_rules_of_fmax_and_fmin(ties):
    """PyTorch changed how fmax/fmin split a tie (2.11: all to the first argument; 2.15: half each);
    kjit.elementwise asks the installed torch which, and both rules are right whatever torch runs here."""
    want = {"first": (1.0, 0.0), "split": (0.5, 0.5)}[ties]
    for name in ("fmax", "fminf", "max", "min"):
        grads = D.derivatives(f"{name}(x, y)", ["x", "y"], ties=ties)
        seeded = D.derivatives(f"{name}(x, y)", ["x", "y"], grad="kjit_grad", ties=ties)
        for x in (0.0, -0.0, 1.0, INF, -INF, 1e-30):
            for y in (x, -x):
                if x == y:  # a tie; 0 and -0 are one
                    assert tuple(kernel_gradient(grads[n], x, y, 0.0) for n in "xy") == want, (name, ties, x, y)
                    assert tuple(seeded_gradient(seeded[n], x, y, 0.0, INF) for n in "xy") == tuple(
                        INF * w if w else 0.0 for w in want
                    ), (name, ties, x, y)
        nan_side = tuple(kernel_gradient(grads[n], 1.0, NAN, 0.0) for n in "xy")
        assert nan_side == (1.0, 0.0), (name, ties, "the gradient never goes to a NaN operand")
    with pytest.raises(ValueError, match="ties='half' is not valid: allowed first, split"):
        D.derivatives("fmax(x, y)", ["x"], ties="half")


@needs_torch
def test_ternary_differs_from_torch_where_only_where_the_other_branch_is_inf_or_nan():
    """kjit differentiates the branch taken, as autograd does for a per-element `a if c else b`;
    torch.where(c, a, b) multiplies the other branch's derivative by 0, which is NaN where it is inf or NaN."""
    grads = D.derivatives("x > 0.0f ? sqrtf(x) : y", ["x", "y"])
    for x in EDGES:
        got = kernel_gradient(grads["x"], x, 1.0, 0.0)

        def per_element_if(a, b, k):
            return torch.sqrt(a) if a.item() > 0.0 else b

        assert agrees(got, torch_gradient(per_element_if, x, 1.0, 0.0)[0]), x
        where = torch_gradient(lambda a, b, k: torch.where(a > 0.0, torch.sqrt(a), b), x, 1.0, 0.0)[0]
        if x > 0.0:
            assert agrees(got, where), x
        else:  # sqrt's derivative at 0, -0, < 0 and NaN is inf or NaN: 0 times it is NaN in torch.where
            assert got == 0.0 and math.isnan(where), (x, got, where)


# ---- long and deeply nested expressions: no RecursionError ------------------------------------------------


@pytest.fixture
def default_recursion_limit():
    """Python's default recursion limit (1000), whatever the test runner set."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(old)


@pytest.mark.parametrize("n", [1000, 10000])
def test_a_long_sum_parses_renders_and_differentiates(default_recursion_limit, n):
    # 1000 terms are 13 KB, the size that raised RecursionError (issue 27, item 10)
    expr = " + ".join(f"x * {i}.0f" for i in range(n))
    assert D.to_cpp(D.parse(expr)) == expr
    assert D.derivatives(expr, ["x", "y"]) == {"x": " + ".join(f"{i}.0f" for i in range(n)), "y": ZERO}


def test_a_long_product_and_quotient_differentiate(default_recursion_limit):
    n = 5000
    product = " * ".join(["x"] + [f"{i}.5f" for i in range(n)])
    grads = D.derivatives(product + " / y", ["x", "y"])
    # reverse, as autograd: the gradient flowing into x is 1 / y, times each factor from the outside in
    assert grads == {
        "x": f"{ONE} / y * " + " * ".join(f"{i}.5f" for i in reversed(range(n))),
        "y": f"-({product} / y / y)",
    }


def _nested(n, open_, inner, close):
    return open_ * n + inner + close * n


@pytest.mark.parametrize(
    "expr, expected",
    [
        (_nested(20000, "(", "x * y", ")"), {"x": "y", "y": "x"}),
        (_nested(2000, "static_cast<C>(", "x * y", ")"), {"x": "y", "y": "x"}),
        (_nested(2000, "(float)(", "x", ")") + " * y", {"x": "y", "y": "(float)" * 2000 + "x"}),
        (_nested(2001, "-(", "x", ")") + " + y", {"x": f"-{ONE}", "y": ONE}),
        (_nested(2000, "!", "x", "") + " + y", {"x": ZERO, "y": ONE}),
        # the derivative of a nesting is a nesting (rendered with its parentheses)
        (
            _nested(2000, "x + (", "x", ")"),
            {"x": _nested(2000, f"{ONE} + (", ONE, ")").replace(f"({ONE})", ONE), "y": ZERO},
        ),
        # a call nesting in a constant factor, and 2000 chained ?:
        ("x * " + _nested(2000, "foo(", "s", ")"), {"x": _nested(2000, "foo(", "s", ")"), "y": ZERO}),
        (
            " ".join(f"x > {i} ? x * {i}.0f :" for i in range(2000)) + " y",
            {
                "x": " ".join(f"x > {i} ? {i}.0f :" for i in range(2000)) + f" {ZERO}",
                "y": " ".join(f"x > {i} ? {ZERO} :" for i in range(2000)) + f" {ONE}",
            },
        ),
        (_nested(2000, "x > 0 ? (", "x * y", ") : y"), None),
    ],
    ids=[
        "parentheses",
        "static_casts",
        "c_casts",
        "minus",
        "not",
        "right_nested_sum",
        "calls",
        "ternary_chain",
        "ternary_nesting",
    ],
)
def test_deep_nesting_differentiates(default_recursion_limit, expr, expected):
    grads = D.derivatives(expr, ["x", "y"], ["s"])
    if expected is not None:
        assert grads == expected
    for text in grads.values():
        assert D.to_cpp(D.parse(text)) == text  # the derivative parses back, as deep as it is
    text = D.to_cpp(D.parse(expr))
    assert D.to_cpp(D.parse(text)) == text


def _constant_value(text: str) -> float:
    """The value of a derivative made of literals, + - * and casts to C, evaluated without recursion."""
    values: list = []
    todo: list = [(D.parse(text), False)]
    while todo:
        node, children_done = todo.pop()
        kids = [c for c in (getattr(node, f, None) for f in ("operand", "left", "right")) if c is not None]
        if kids and not children_done:
            todo.append((node, True))
            todo.extend((k, False) for k in reversed(kids))
        elif isinstance(node, D.Num):
            values.append(node.value)
        elif isinstance(node, D.Cast):
            assert node.type == "C"
        elif isinstance(node, D.Unary):
            values.append(-values.pop())
        else:
            right, left = values.pop(), values.pop()
            values.append({"+": left + right, "-": left - right, "*": left * right}[node.op])
    (value,) = values
    return value


def test_deep_nesting_of_differences_has_the_right_sign(default_recursion_limit):
    # f_n = x - f_(n-1), f_0 = x: f_n' = 1 - f_(n-1)' is 1 for n even, 0 for n odd
    for n in (2000, 2001):
        grads = D.derivatives(_nested(n, "x - (", "x", ")"), ["x"])
        assert _constant_value(grads["x"]) == (1.0 if n % 2 == 0 else 0.0)


def test_deep_nesting_keeps_syntax_errors_and_refusals(default_recursion_limit):
    with pytest.raises(ValueError, match=r"expected '\)', got the end of the expression") as info:
        D.derivatives(_nested(3000, "(", "x", ""), ["x"])
    assert not isinstance(info.value, D.NotDifferentiable)
    with pytest.raises(D.NotDifferentiable, match=r"at column 3003 of .* '%' is an integer-only operator"):
        D.derivatives(_nested(3000, "(", "x % 2", ")"), ["x"])
