"""kjit._derivative without a GPU: the expression parser, the C++ renderer and the symbolic derivatives.

The module is loaded by file path, so these tests run without the compiled kjit extension. Derivatives
are checked numerically: a small float64 evaluator of the AST (below) evaluates both the expression and
its derivative text, and the derivative must match a central finite difference.
"""

import importlib.util
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


def _gelu(x):
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def _gelu_backward(g, x):
    return g * (0.5 * (1.0 + math.erf(x / math.sqrt(2.0))) + x * math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))


_BETA, _KAPPA = math.sqrt(2.0 / math.pi), 0.044715


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + math.tanh(_BETA * (x + _KAPPA * x ** 3)))


def _gelu_tanh_backward(g, x):
    t = math.tanh(_BETA * (x + _KAPPA * x ** 3))
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _BETA * (1.0 + 3.0 * _KAPPA * x * x))


_FAMILY = {  # one function each, spelled f() (overloaded), ff() (float) and, for four, f_() (kjit_math)
    "exp": math.exp, "exp2": lambda x: 2.0 ** x, "expm1": math.expm1, "log": math.log, "log2": math.log2,
    "log10": math.log10, "log1p": math.log1p, "sqrt": math.sqrt, "rsqrt": lambda x: 1.0 / math.sqrt(x),
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "tanh": math.tanh, "erf": math.erf, "fabs": abs,
    "pow": math.pow, "fmax": max, "fmin": min,
}
FUNCTIONS = {
    **_FAMILY, **{name + "f": f for name, f in _FAMILY.items()},
    **{name + "_": _FAMILY[name] for name in ("exp", "log", "erf", "tanh")},
    "abs": abs, "max": max, "min": min,
    "relu": lambda x: x if x > 0 else 0.0, "relu_backward": lambda g, y: 0.0 if y <= 0 else g,
    "sigmoid": _sigmoid, "sigmoid_backward": lambda g, y: g * y * (1.0 - y),
    "tanh_backward": lambda g, y: g * (1.0 - y * y),
    "silu": lambda x: x * _sigmoid(x),
    "silu_backward": lambda g, x: g * _sigmoid(x) * (1.0 + x * (1.0 - _sigmoid(x))),
    "gelu": _gelu, "gelu_backward": _gelu_backward, "gelu_tanh": _gelu_tanh, "gelu_tanh_backward": _gelu_tanh_backward,
    "foo": lambda v: v * v + 1.0,  # an "unknown" function, fine on constants
}
_BINARY = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
    "<": lambda a, b: float(a < b), ">": lambda a, b: float(a > b), "<=": lambda a, b: float(a <= b),
    ">=": lambda a, b: float(a >= b), "==": lambda a, b: float(a == b), "!=": lambda a, b: float(a != b),
    "&&": lambda a, b: float(bool(a) and bool(b)), "||": lambda a, b: float(bool(a) or bool(b)),
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


@pytest.mark.parametrize("text, tree", [
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
])
def test_parse_structure_and_round_trip(text, tree):
    assert D.parse(text) == tree
    assert D.parse(D.to_cpp(tree)) == tree


@pytest.mark.parametrize("tree, text", [
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
])
def test_to_cpp_parenthesizes_where_needed(tree, text):
    assert D.to_cpp(tree) == text
    assert D.parse(text) == tree


@pytest.mark.parametrize("text, expected", [
    ("1", 1.0), ("42u", 42.0), ("10ul", 10.0), ("7LL", 7.0), ("017", 15.0), ("1.0", 1.0), ("3.", 3.0),
    (".5", 0.5), ("1.5f", 1.5), ("2.5e-3", 2.5e-3), ("1e5", 1e5), ("1E+2F", 100.0), ("1.0L", 1.0),
    ("0x10", 16.0), ("0xffu", 255.0), ("0x1.8p+1", 3.0), ("0x1p-2f", 0.25), ("0X.8P1", 1.0),
])
def test_literal_forms(text, expected):
    node = D.parse(text)
    assert node == D.Num(text) and node.value == expected
    assert D.to_cpp(node) == text


@pytest.mark.parametrize("text, column, what", [
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
])
def test_syntax_errors_name_the_column(text, column, what):
    with pytest.raises(ValueError) as info:
        D.parse(text)
    assert not isinstance(info.value, D.NotDifferentiable)
    message = str(info.value)
    assert message.startswith(f"kjit.elementwise: cannot parse {text!r} at column {column}: ")
    assert what in message
    assert "\n  " + " " * (column - 1) + "^\n" in message


# ---- derivatives: exact text ---------------------------------------------------------------------------


@pytest.mark.parametrize("expr, inputs, expected", [
    ("x * y", "xy", {"x": "y", "y": "x"}),
    ("x + y", "xy", {"x": ONE, "y": ONE}),
    ("x - y", "xy", {"x": ONE, "y": f"-{ONE}"}),
    ("0 - x", "x", {"x": f"-{ONE}"}),
    ("x * 2", "xy", {"x": "2", "y": ZERO}),
    ("silu(x) * y", "xy", {"x": f"silu_backward({ONE}, x) * y", "y": "silu(x)"}),
    ("relu(x)", "x", {"x": f"relu_backward({ONE}, relu(x))"}),
    ("sigmoid(x)", "x", {"x": f"sigmoid_backward({ONE}, sigmoid(x))"}),
    ("silu(x * 2.0)", "x", {"x": f"silu_backward({ONE}, static_cast<C>(x * 2.0)) * 2.0"}),
    ("relu(expf(x))", "x", {"x": f"relu_backward({ONE}, static_cast<C>(relu(expf(x)))) * expf(x)"}),
    ("sqrtf(x)", "x", {"x": "static_cast<C>(0.5) / sqrtf(x)"}),
    ("expf(2.0f * x)", "x", {"x": "expf(2.0f * x) * 2.0f"}),
    ("log_(x)", "x", {"x": f"{ONE} / x"}),
    ("tanhf(x)", "x", {"x": f"{ONE} - tanhf(x) * tanhf(x)"}),
    ("erf(x)", "x", {"x": "static_cast<C>(1.1283791670955126) * exp(-(x * x))"}),
    ("erff(x)", "x", {"x": "static_cast<C>(1.1283791670955126) * expf(-(x * x))"}),
    ("kjit_math::erf_(x)", "x", {"x": "static_cast<C>(1.1283791670955126) * exp_(-(x * x))"}),
    ("sinf(x)", "x", {"x": "cosf(x)"}),
    ("cos(x)", "x", {"x": "-sin(x)"}),
    ("pow(x, 3.0)", "x", {"x": f"3.0 * pow(x, 3.0 - {ONE})"}),
    ("powf(2.0f, y)", "y", {"y": "powf(2.0f, y) * logf(2.0f)"}),
    ("fmaxf(x, y)", "xy", {"x": f"x >= y ? {ONE} : {ZERO}", "y": f"x >= y ? {ZERO} : {ONE}"}),
    ("min(x, y)", "x", {"x": f"x <= y ? {ONE} : {ZERO}"}),
    ("fabsf(x)", "x", {"x": f"x > {ZERO} ? {ONE} : x < {ZERO} ? static_cast<C>(-1) : {ZERO}"}),
    ("x > 0 ? x * y : y", "xy", {"x": f"x > 0 ? y : {ZERO}", "y": f"x > 0 ? x : {ONE}"}),
    ("(x > y) + x", "xy", {"x": ONE, "y": ZERO}),
    ("foo(s) * x", "x", {"x": "foo(s)"}),
    ("x / y", "xy", {"x": f"{ONE} / y", "y": "-(x / (y * y))"}),
])
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


@pytest.mark.parametrize("expr, column, what", [
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
])
def test_not_differentiable(expr, column, what):
    with pytest.raises(D.NotDifferentiable, match="^kjit.elementwise: cannot differentiate ") as info:
        D.derivatives(expr, ["x", "y"])
    assert isinstance(info.value, ValueError)
    assert f" at column {column} of {expr!r} with respect to 'x': " in str(info.value)
    assert what in str(info.value)


def test_not_differentiable_message():
    with pytest.raises(D.NotDifferentiable) as info:
        D.derivatives("foo(x) * y", ["x", "y"])
    assert str(info.value) == ("kjit.elementwise: cannot differentiate foo(...) at column 1 of 'foo(x) * y' with "
                               "respect to 'x': foo has no known derivative; give the gradient yourself with "
                               "grads={'x': '...'}")


def test_constant_subexpressions_may_use_anything():
    assert D.derivatives("foo(s) * x + (s % 3) * y", ["x", "y"], ["s"]) == {"x": "foo(s)", "y": "s % 3"}
    assert D.derivatives("(y % 2 == 0 ? x : -x) * (y << 1 > 3)", ["x"]) == {
        "x": f"(y % 2 == 0 ? {ONE} : -{ONE}) * (y << 1 > 3)"}
    assert D.derivatives("x * 2", ["x", "y"])["y"] == ZERO


def test_syntax_error_is_a_value_error_not_not_differentiable():
    with pytest.raises(ValueError) as info:
        D.derivatives("x = y", ["x", "y"])
    assert not isinstance(info.value, D.NotDifferentiable)


def test_output_is_deterministic_across_processes():
    code = (f"import importlib.util as u, sys; s = u.spec_from_file_location('m', {str(_PATH)!r}); "
            "m = u.module_from_spec(s); sys.modules['m'] = m; s.loader.exec_module(m); "
            "print(m.derivatives('x * sigmoid(x) * scale + fmaxf(x, y) * abs(y) / pow(x, y)', ['x', 'y'], ['scale']))")
    outputs = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                              capture_output=True, text=True, check=True).stdout for seed in ("1", "2")}
    assert len(outputs) == 1
    assert outputs.pop().strip() == str(D.derivatives("x * sigmoid(x) * scale + fmaxf(x, y) * abs(y) / pow(x, y)",
                                                      ["x", "y"], ["scale"]))
