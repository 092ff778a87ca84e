"""Symbolic derivatives of kjit.elementwise expressions (pure Python, standard library only).

`derivatives(expr, inputs, scalars)` parses the one-line C++ expression of a kjit.elementwise function
and returns, for every input tensor, a C++ expression of d(expr)/d(input). The text is valid in the
scope of the generated functor (the inputs, the scalars, C and kjit_math are in scope), so a backward
kernel computes `kjit_grad * (derivative)`.

Parsing: a hand-written tokenizer and a precedence-climbing parser for the C++ expression subset kjit
accepts: numeric literals (decimal, exponent, hex int, hex float, suffixes), names, calls (`f(a, b)`,
`::f(a)`, `kjit_math::f(a)`), `static_cast<T>(e)`, `(T)e` and `T(e)` casts, unary `+ - ! ~`, the binary
operators of C++ with C++ precedence, `?:` (right-associative) and parentheses. Anything else
(assignment, `++`, the comma operator, member access, `[]`, string literals) is a ValueError that
names the column.

Rules. kjit differentiates in reverse, as autograd does: the gradient g flowing into each operation (1 at the
top; the backward kernel multiplies the result by kjit_grad) becomes its operands' gradients by PyTorch's own
backward formula (tools/autograd/derivatives.yaml, FunctionsManual.cpp), with PyTorch's masks where PyTorch
has them, so that kjit agrees with torch.autograd at 0, -0, +-1, +-inf and NaN, also where g is inf or NaN
(tests/python/test_derivative.py compares every rule with torch.autograd, alone and composed):
- `a + b`, `a - b`, unary `-`: g, -g; `a * b`: g * b and g * a; `a / b`: g / b and -g * (a / b / b).
- comparisons, `!`, `&&`, `||`: 0 (piecewise constant). Sub-expressions without the input: 0.
- `c ? a : b`: `c ? da : db`, the branch taken only, as autograd gives for a per-element `a if c else b`.
  torch.where(c, a, b) also passes a 0 into the other branch, and 0 times that branch's derivative is NaN
  where the derivative is inf or NaN (sqrt's at 0, log's below 0): there kjit gives the taken branch's.
- casts to C, float or double pass g through; other casts, `% << >> & | ^ ~` are not differentiable.
- exp, exp2, expm1, log, log2, log10, log1p, sqrt, rsqrt, sin, cos, tan, tanh, erf, in each spelling
  (float `expf`, overloaded `exp`, kjit_math `exp_`; the derivative uses the same family): PyTorch's
  formulas, e.g. expm1: g * (expm1(u) + 1), log2: g / (u * ln 2), sqrt: g / (2 * sqrt(u)).
- fabs/abs: g * sgn(u), sgn 0 at 0 and at NaN. relu, sigmoid, silu, mish, gelu, gelu_tanh: kjit_math's
  *_backward(g, ...), PyTorch's kernels (relu: threshold_backward, 0 where relu(u) <= 0 even for an
  inf or NaN g, and g at a NaN u).
- pow(a, b): d/da = (b == 0 ? 0 : g * (b * pow(a, b - 1))), a mask of the gradient (0 where the exponent
  is 0, at a = 0 and a = NaN too); d/db = g * (a == 0 && b >= 0 ? 0 : pow(a, b) * log(a)), a mask that
  g multiplies (so an inf g gives NaN there, as in PyTorch). A literal exponent or base other than 0
  needs no mask; pow(x, 0) has derivative 0.
- fmax/fmin, and max/min, which CUDA defines as fmax/fmin for floating-point values (a NaN operand is
  ignored): as torch.fmax/torch.fmin, g goes to a where `a > b || b != b` (`<` for the minimum), else
  to b: to the argument returned, never to a NaN operand; a tie (a == b) as the torch in use does, which
  changed: torch 2.11 gives it all to a (`ties="first"`: `a >= b || b != b`), torch 2.15 half to each
  (`ties="split"`); kjit.elementwise asks the installed torch. torch.maximum/minimum differ from max/min
  at a NaN operand: they propagate NaN (their forward differs there too), and with torch 2.11 at a tie.
Any other function of an input is NotDifferentiable, with the reason. Literals the rules introduce are
written `static_cast<C>(...)` so that kjit_math's templates deduce C; a NaN test is written `b != b` (no
header needed under NVRTC). Results are lightly simplified (no `* 1`, `+ 0`, `0 - u`) and deterministic.
The backward kernel of a derivative kjit derived runs `derivatives(..., grad="kjit_grad")`: the incoming
gradient flows in at the top, so an inf or NaN kjit_grad is masked where PyTorch masks it; a derivative the
user gave (grads=) is multiplied: kjit_grad * (derivative). Where kjit still differs from PyTorch: a term that
uses the input n times gets its n contributions added in kjit's order, not PyTorch's (rounding only).

No pass recurses in Python per operator or per nesting level (the parser, the differentiator and the
renderer keep their recursion on an explicit stack), so expressions of any length and nesting depth are
parsed, differentiated and rendered (a 10 000-term sum, 20 000 nested parentheses).
"""

import math
import re
from dataclasses import dataclass, field
from collections.abc import Sequence


class NotDifferentiable(ValueError):
    """An input's derivative cannot be derived from the expression."""


# ---- the AST ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """Base of the expression nodes; `pos` is the 0-based offset in the source (not part of equality)."""

    pos: int = field(default=-1, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class Num(Node):
    text: str  # as written: '1.0f', '0x1.8p+1'

    @property
    def value(self) -> float:
        return _literal_value(self.text)


@dataclass(frozen=True)
class Name(Node):
    name: str  # possibly qualified: 'M_PI', 'std::numbers::pi'


@dataclass(frozen=True)
class Unary(Node):
    op: str
    operand: Node


@dataclass(frozen=True)
class Binary(Node):
    op: str
    left: Node
    right: Node  # pos: of the operator


@dataclass(frozen=True)
class Ternary(Node):
    cond: Node
    then: Node
    other: Node


@dataclass(frozen=True)
class Call(Node):
    func: str  # as written: 'expf', '::expf', 'kjit_math::exp_'
    args: tuple

    @property
    def base(self) -> str:
        return self.func.rpartition("::")[2]


@dataclass(frozen=True)
class Cast(Node):
    type: str
    operand: Node
    style: str = "static"  # 'static': static_cast<T>(e), 'c': (T)e, 'func': T(e)


def _literal_value(text: str) -> float:
    t = text.lower()
    if t.startswith("0x") and "p" in t:
        return float.fromhex(t.rstrip("fl"))
    if t.startswith("0x"):
        return float(int(t.rstrip("ul"), 16))
    if "." in t or "e" in t:
        return float(t.rstrip("fl"))
    t = t.rstrip("ul")
    return float(int(t, 8) if len(t) > 1 and t.startswith("0") else int(t))


# ---- tokenizer ----------------------------------------------------------------------------------------

_INT_SUFFIX = r"(?:[uU](?:ll|LL|[lL])?|(?:ll|LL|[lL])[uU]?)?"
_NUMBER = re.compile(
    "|".join(
        [
            r"0[xX](?:[0-9a-fA-F]*\.[0-9a-fA-F]+|[0-9a-fA-F]+\.?)[pP][+-]?\d+[fFlL]?",  # hex float
            r"0[xX][0-9a-fA-F]+" + _INT_SUFFIX,  # hex int
            r"(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?[fFlL]?|\d+[eE][+-]?\d+[fFlL]?",  # decimal float
            r"\d+" + _INT_SUFFIX,  # decimal int
        ]
    )
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REJECTED = {  # the longest match wins
    **{op + "=": "compound assignment" for op in ["<<", ">>", "+", "-", "*", "/", "%", "&", "|", "^"]},
    "<=>": "three-way comparison",
    "->*": "member access",
    "->": "member access",
    ".*": "member access",
    "...": "pack expansion",
    "++": "increment",
    "--": "decrement",
    "=": "assignment",
    ".": "member access",
    "[": "subscript",
    "]": "subscript",
    "{": "a brace",
    "}": "a brace",
    ";": "a statement separator",
    '"': "a string literal",
    "'": "a character literal",
}
_OPERATORS = ["::", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", *"+-*/%<>!~&^|?:(),"]
_BINARY_PREC = {
    "||": 3,
    "&&": 4,
    "|": 5,
    "^": 6,
    "&": 7,
    "==": 8,
    "!=": 8,
    "<": 9,
    ">": 9,
    "<=": 9,
    ">=": 9,
    "<<": 10,
    ">>": 10,
    "+": 11,
    "-": 11,
    "*": 12,
    "/": 12,
    "%": 12,
}
_TERNARY, _UNARY, _PRIMARY = 2, 13, 14
_TYPE_WORDS = {
    "C",
    "float",
    "double",
    "int",
    "unsigned",
    "signed",
    "long",
    "short",
    "char",
    "bool",
    "size_t",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
}
_DIFFERENTIABLE_CASTS = {"C", "float", "double"}


def _syntax_error(src: str, pos: int, what: str) -> ValueError:
    return ValueError(
        f"kjit.elementwise: cannot parse {src!r} at column {pos + 1}: {what}\n  {src}\n  "
        f"{' ' * pos}^\nwrite one C++ expression of the inputs and scalars, such as 'x * y + 1.0f'"
    )


def _tokenize(src: str) -> list:
    """(kind, text, pos) tuples, kind in 'num', 'id', 'op', ending with ('end', '', len(src))."""
    tokens, i = [], 0
    while i < len(src):
        if src[i].isspace():
            i += 1
            continue
        m = _NUMBER.match(src, i)
        if m:
            end = m.end()
            if end < len(src) and (src[end].isalnum() or src[end] in "_."):
                raise _syntax_error(src, i, f"{src[i : end + 1]!r} is not a C++ number")
            try:
                _literal_value(m.group())
            except ValueError:
                raise _syntax_error(src, i, f"{m.group()!r} is not a C++ number") from None
            tokens.append(("num", m.group(), i))
            i = end
            continue
        m = _IDENT.match(src, i)
        if m:
            tokens.append(("id", m.group(), i))
            i = m.end()
            continue
        bad = max((r for r in _REJECTED if src.startswith(r, i)), key=len, default=None)
        op = next((o for o in _OPERATORS if src.startswith(o, i)), None)
        if bad and (op is None or len(bad) > len(op)):
            raise _syntax_error(src, i, f"{bad!r} ({_REJECTED[bad]}) is not allowed in a kjit expression")
        if op is None:
            raise _syntax_error(src, i, f"unexpected character {src[i]!r}")
        tokens.append(("op", op, i))
        i += len(op)
    tokens.append(("end", "", len(src)))
    return tokens


# ---- running recursive passes without Python recursion ----------------------------------------------------


def _run(gen):
    """Runs a recursive pass written as generators, on an explicit stack instead of Python's: a generator
    yields the generator of a sub-call (`value = yield self.f(...)`) and is resumed with that call's
    result. Any depth of nesting then costs memory, not Python frames (no RecursionError)."""
    stack, value = [gen], None
    while True:
        try:
            call = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            value = done.value
        else:
            stack.append(call)
            value = None


# ---- parser -------------------------------------------------------------------------------------------


class _Parser:
    """Recursive descent with precedence climbing over the tokens of one expression. The methods that
    parse a sub-expression are generators run by _run (a sub-call is `yield self.method(...)`)."""

    def __init__(self, src: str):
        self.src, self.tokens, self.i = src, _tokenize(src), 0

    def peek(self, k: int = 0) -> tuple:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def take(self) -> tuple:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def error(self, what: str, tok: tuple | None = None) -> ValueError:
        tok = tok or self.peek()
        got = "the end of the expression" if tok[0] == "end" else repr(tok[1])
        return _syntax_error(self.src, tok[2], f"{what}, got {got}")

    def expect(self, text: str) -> tuple:
        if self.peek()[1] != text or self.peek()[0] == "num":
            raise self.error(f"expected {text!r}")
        return self.take()

    def parse(self) -> Node:
        return _run(self.whole())

    def whole(self):
        node = yield self.ternary()
        if self.peek()[0] != "end":
            what = "the comma operator is not supported" if self.peek()[1] == "," else "expected an operator"
            raise self.error(what)
        return node

    def ternary(self):
        cond = yield self.binary(_TERNARY + 1)
        if self.peek()[:2] != ("op", "?"):
            return cond
        pos = self.take()[2]
        then = yield self.ternary()
        self.expect(":")
        other = yield self.ternary()
        return Ternary(cond, then, other, pos=pos)

    def binary(self, min_prec: int):
        left = yield self.unary()
        while True:
            kind, op, pos = self.peek()
            prec = _BINARY_PREC.get(op, 0) if kind == "op" else 0
            if prec < min_prec:
                return left
            self.take()
            right = yield self.binary(prec + 1)
            left = Binary(op, left, right, pos=pos)

    def unary(self):
        kind, text, pos = self.peek()
        if kind == "op" and text in "+-!~":
            self.take()
            operand = yield self.unary()
            return Unary(text, operand, pos=pos)
        if kind == "op" and text == "(" and self.peek(1)[1] in _TYPE_WORDS:
            n = 1
            while self.peek(n)[1] in _TYPE_WORDS:
                n += 1
            if self.peek(n)[1] == ")":  # a C cast: (float)x
                words = [self.tokens[self.i + k][1] for k in range(1, n)]
                self.i += n + 1
                operand = yield self.unary()
                return Cast(" ".join(words), operand, "c", pos=pos)
        return (yield self.primary())

    def primary(self):
        kind, text, pos = self.take()
        if kind == "num":
            node = Num(text, pos=pos)
        elif text == "(":
            node = yield self.ternary()
            self.expect(")")
        elif text == "static_cast":
            node = yield self.static_cast(pos)
        elif text in ("reinterpret_cast", "const_cast", "dynamic_cast"):
            raise _syntax_error(self.src, pos, f"{text} is not supported; use static_cast<C>(...)")
        elif kind == "id" or text == "::":
            node = yield self.name_or_call(text, pos)
        else:
            raise self.error("expected a number, a name, '(' or a unary operator", (kind, text, pos))
        if self.peek()[1] == "(":
            raise self.error("only a named function can be called")
        return node

    def static_cast(self, pos: int):
        self.expect("<")
        words = []
        while self.peek()[0] == "id":
            words.append(self.take()[1])
        if not words:
            raise self.error("expected a type name after 'static_cast<'")
        self.expect(">")
        self.expect("(")
        operand = yield self.ternary()
        self.expect(")")
        return Cast(" ".join(words), operand, "static", pos=pos)

    def name_or_call(self, first: str, pos: int):
        name = first + self.identifier() if first == "::" else first
        while self.peek()[1] == "::":
            name += self.take()[1] + self.identifier()
        if self.peek()[1] != "(":
            return Name(name, pos=pos)
        args = yield self.arguments()
        if name in _DIFFERENTIABLE_CASTS and len(args) == 1:  # C(x), float(x): a functional cast
            return Cast(name, args[0], "func", pos=pos)
        return Call(name, tuple(args), pos=pos)

    def identifier(self) -> str:
        if self.peek()[0] != "id":
            raise self.error("expected a name after '::'")
        return self.take()[1]

    def arguments(self):
        self.expect("(")
        args = []
        if self.peek()[1] != ")":
            args.append((yield self.ternary()))
        while args and self.peek()[1] == ",":
            self.take()
            args.append((yield self.ternary()))
        self.expect(")")
        return args


def parse(expr: str) -> Node:
    """The AST of one C++ expression; ValueError with the column on a syntax error."""
    return _Parser(expr).parse()


# ---- rendering ----------------------------------------------------------------------------------------


def _precedence(node: Node) -> int:
    """The precedence of the node's outermost operator as rendered."""
    if isinstance(node, (Num, Name, Call)):
        return _PRIMARY
    if isinstance(node, Cast):
        return _UNARY if node.style == "c" else _PRIMARY
    if isinstance(node, Unary):
        return _UNARY
    if isinstance(node, Binary):
        return _BINARY_PREC[node.op]
    if isinstance(node, Ternary):
        return _TERNARY
    raise TypeError(f"to_cpp: expected an expression node, got {type(node).__name__}")


def _first_char(node: Node, min_prec: int) -> str:
    """The first character of the node's text where its context needs precedence min_prec."""
    while True:
        if _precedence(node) < min_prec:
            return "("
        if isinstance(node, Num):
            return node.text[:1]
        if isinstance(node, Name):
            return node.name[:1]
        if isinstance(node, Call):
            return node.func[:1]
        if isinstance(node, Cast):
            return {"c": "(", "func": node.type[:1]}.get(node.style, "s")
        if isinstance(node, Unary):
            return node.op
        if isinstance(node, Binary):
            min_prec = _BINARY_PREC[node.op]
            node = node.left
        else:
            assert isinstance(node, Ternary), node
            min_prec = _TERNARY + 1
            node = node.cond


def _pieces(node: Node) -> list:
    """The node's text as strings and (operand, the precedence its place needs) pairs."""
    if isinstance(node, Num):
        return [node.text]
    if isinstance(node, Name):
        return [node.name]
    if isinstance(node, Call):
        pieces: list = [node.func + "("]
        for k, arg in enumerate(node.args):
            pieces += [", ", (arg, 0)] if k else [(arg, 0)]
        return pieces + [")"]
    if isinstance(node, Cast):
        if node.style == "c":
            return [f"({node.type})", (node.operand, _UNARY)]
        if node.style == "func":
            return [f"{node.type}(", (node.operand, 0), ")"]
        return [f"static_cast<{node.type}>(", (node.operand, 0), ")"]
    if isinstance(node, Unary):
        if node.op in "+-" and _first_char(node.operand, _UNARY) in "+-":  # '- -x' must not become '--x'
            return [f"{node.op}(", (node.operand, _UNARY), ")"]
        return [node.op, (node.operand, _UNARY)]
    if isinstance(node, Binary):
        prec = _BINARY_PREC[node.op]
        return [(node.left, prec), f" {node.op} ", (node.right, prec + 1)]
    assert isinstance(node, Ternary), node
    return [(node.cond, _TERNARY + 1), " ? ", (node.then, _TERNARY + 1), " : ", (node.other, _TERNARY)]


def to_cpp(node: Node) -> str:
    """C++ text of a node, parenthesized where precedence requires (written from an explicit stack)."""
    out: list = []
    todo: list = [(node, 0)]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        node, min_prec = item
        pieces = _pieces(node) if _precedence(node) >= min_prec else ["(", *_pieces(node), ")"]
        todo.extend(reversed(pieces))
    return "".join(out)


# ---- building simplified nodes (None is an exact zero) ---------------------------------------------------


def _lit(value: str) -> Node:
    num = Num(value.lstrip("-"))
    return Cast("C", Unary("-", num) if value.startswith("-") else num)


ONE, ZERO = _lit("1"), _lit("0")


def _is_one(node: Node) -> bool:
    inner = node.operand if isinstance(node, Cast) and node.type == "C" else node
    return isinstance(inner, Num) and inner.value == 1


def _neg(a):
    if a is None:
        return None
    return a.operand if isinstance(a, Unary) and a.op == "-" else Unary("-", a)


def _add(a, b):
    if a is None or b is None:
        return b if a is None else a
    return _sub(a, _neg(b))


def _sub(a, b):
    if b is None:
        return a
    if a is None:
        return _neg(b)
    if isinstance(b, Unary) and b.op == "-":
        return Binary("+", a, b.operand)
    return Binary("-", a, b)


def _mul(a, b):
    if a is None or b is None:
        return None
    negations = 0  # a leading '-' of either factor moves out of the product (a loop: any depth of them)
    while True:
        if isinstance(a, Unary) and a.op == "-":
            a = a.operand
        elif isinstance(b, Unary) and b.op == "-":
            a, b = b.operand, a
        else:
            break
        negations += 1
    product = b if _is_one(a) else a if _is_one(b) else Binary("*", a, b)
    return _neg(product) if negations % 2 else product


def _div(a, b):
    if a is None:
        return None
    negations = 0
    while isinstance(a, Unary) and a.op == "-":
        a, negations = a.operand, negations + 1
    quotient = a if _is_one(b) else Binary("/", a, b)
    return _neg(quotient) if negations % 2 else quotient


# ---- differentiation ----------------------------------------------------------------------------------

_INTEGER_OPS = {"%", "<<", ">>", "&", "|", "^"}
_PIECEWISE_CONSTANT = {"<", ">", "<=", ">=", "==", "!=", "&&", "||"}
_UNARY_OPERATORS = {"+", "-", "!"}  # '~' is integer-only
_QUALIFIERS = {"", "::", "std::", "kjit_math::"}
_LN2, _LN10 = repr(math.log(2)), repr(math.log(10))
# PyTorch's backward formulas, as what the gradient g flowing into a function becomes for its argument(s) (see
# the module documentation): a mask PyTorch applies to g (where, masked_fill) zeroes an inf or NaN g too.
_UNARY_RULES = {  # base -> the gradient of u from (differentiator, the call, u, g, name in the call's family)
    "exp": lambda D, c, u, g, F: _mul(g, c),
    "exp2": lambda D, c, u, g, F: _mul(_mul(g, c), _lit(_LN2)),
    "expm1": lambda D, c, u, g, F: _mul(g, Binary("+", c, ONE)),
    "log": lambda D, c, u, g, F: _div(g, u),
    "log2": lambda D, c, u, g, F: _div(g, Binary("*", u, _lit(_LN2))),
    "log10": lambda D, c, u, g, F: _div(g, Binary("*", u, _lit(_LN10))),
    "log1p": lambda D, c, u, g, F: _div(g, Binary("+", u, ONE)),
    "sqrt": lambda D, c, u, g, F: _div(g, Binary("*", _lit("2"), c)),
    "rsqrt": lambda D, c, u, g, F: _mul(_mul(_lit("-0.5"), g), Binary("*", Binary("*", c, c), c)),
    "sin": lambda D, c, u, g, F: _mul(g, Call(F("cos"), (u,))),
    "cos": lambda D, c, u, g, F: _mul(g, _neg(Call(F("sin"), (u,)))),
    "tan": lambda D, c, u, g, F: _mul(g, Binary("+", ONE, Binary("*", c, c))),
    "tanh": lambda D, c, u, g, F: _mul(g, Binary("-", ONE, Binary("*", c, c))),
    "erf": lambda D, c, u, g, F: _mul(
        _mul(_lit(repr(2 / math.sqrt(math.pi))), Call(F("exp"), (_neg(Binary("*", u, u)),))), g
    ),
    "fabs": lambda D, c, u, g, F: _mul(
        g,
        Ternary(
            Binary(">", u, ZERO),
            ONE,  # sgn: 0 at 0 and at NaN
            Ternary(Binary("<", u, ZERO), _lit("-1"), ZERO),
        ),
    ),
    # kjit_math's *_backward(g, ...) are PyTorch's (relu: threshold_backward, 0 where relu(u) <= 0, else g)
    "relu": lambda D, c, u, g, F: Call("relu_backward", (D.as_c(g, g), D.as_c(c, u))),
    "sigmoid": lambda D, c, u, g, F: Call("sigmoid_backward", (D.as_c(g, g), D.as_c(c, u))),
    "silu": lambda D, c, u, g, F: Call("silu_backward", (D.as_c(g, g), D.as_c(u, u))),
    "mish": lambda D, c, u, g, F: Call("mish_backward", (D.as_c(g, g), D.as_c(u, u))),
    "gelu": lambda D, c, u, g, F: Call("gelu_backward", (D.as_c(g, g), D.as_c(u, u))),
    "gelu_tanh": lambda D, c, u, g, F: Call("gelu_tanh_backward", (D.as_c(g, g), D.as_c(u, u))),
}


def _is_literal(node: Node, value: float | None = None) -> bool:
    """True for a numeric literal (of that value); a literal is never NaN."""
    return isinstance(node, Num) and (value is None or node.value == value)


def _pow_rule(D, c: Call, a: Node, b: Node, g: Node, F) -> tuple:
    """PyTorch's pow_backward_self: where(b == 0, 0, g * (b * pow(a, b - 1))), a mask of the gradient (pow_backward
    of a constant exponent: 0 for b == 0, else the product); pow_backward_exponent: g * where(a == 0 && b >= 0,
    0, pow(a, b) * log(a)), a mask multiplied by the gradient. b * pow(a, b - 1) and pow(a, b) * log(a) are
    NaN where those masks are 0. A literal other than 0 needs no mask."""
    g_a: Node | None = None
    if not _is_literal(b, 0):
        g_a = _mul(g, Binary("*", b, Call(F("pow"), (a, Binary("-", b, ONE)))))
        if not _is_literal(b):
            g_a = Ternary(Binary("==", b, ZERO), ZERO, g_a)
    g_b: Node = _mul(c, Call(F("log"), (a,)))
    if _is_literal(a, 0):
        g_b = Ternary(Binary(">=", b, ZERO), ZERO, g_b)
    elif not _is_literal(a):
        g_b = Ternary(Binary("&&", Binary("==", a, ZERO), Binary(">=", b, ZERO)), ZERO, g_b)
    return g_a, _mul(g, g_b)


def _select_rule(beats: str):
    """fmax (a `beats` b: '>') and fmin ('<'), and CUDA's max/min of floating-point values, which are fmax/fmin:
    the gradient goes to the argument returned, as torch.fmax/torch.fmin send it: to a where a beats b or b is
    NaN (fmax(a, NaN) is a), else to b. A tie (a == b, 0 and -0 too) as the torch kjit runs with does it (the
    differentiator's `ties`): "first" gives it all to a (torch 2.11), "split" half to each (torch 2.15)."""

    def rule(D, c, a, b, g, F):
        takes_a = Binary(beats + "=" if D.ties == "first" else beats, a, b)  # a tie to a, or to neither here
        if not _is_literal(b):
            takes_a = Binary("||", takes_a, Binary("!=", b, b))  # b != b: b is NaN (no isnan needed)
        g_a, g_b = Ternary(takes_a, g, ZERO), Ternary(takes_a, ZERO, g)
        if D.ties == "first":
            return g_a, g_b
        tie, half = Binary("==", a, b), _mul(g, _lit("0.5"))
        return Ternary(tie, half, g_a), Ternary(tie, half, g_b)

    return rule


_BINARY_RULES = {
    "pow": _pow_rule,
    "fmax": _select_rule(">"),
    "fmin": _select_rule("<"),
    "max": _select_rule(">"),
    "min": _select_rule("<"),
}
TIES = ("first", "split")  # what a tie of fmax/fmin/max/min gives: all to the first argument, or half each
_FLOAT_FAMILY = {
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "tanh",
    "erf",
    "fabs",
    "pow",
    "fmax",
    "fmin",
}
_KJIT_FAMILY = {"exp", "log", "erf", "tanh"}  # kjit_math::exp_ and friends
_TEMPLATES = {"relu", "sigmoid", "silu", "mish", "gelu", "gelu_tanh"}
_FUNCTIONS = {  # every function name kjit differentiates -> (its rule, its family: 'std', 'float', 'kjit')
    **{base: (base, "std") for base in (*_UNARY_RULES, *_BINARY_RULES)},
    "abs": ("fabs", "std"),
    **{base + "f": (base, "float") for base in sorted(_FLOAT_FAMILY)},
    **{base + "_": (base, "kjit") for base in sorted(_KJIT_FAMILY)},
}


def _function(name: str) -> tuple | None:
    """(base, family) of a known differentiable function name, family in 'std', 'float', 'kjit'."""
    return _FUNCTIONS.get(name)


def _family_name(base: str, family: str) -> str:
    if family == "float":
        return base + "f"
    return base + "_" if family == "kjit" and base in _KJIT_FAMILY else base


def _children(node: Node) -> tuple:
    if isinstance(node, Call):
        return node.args
    fields = ("operand", "left", "right", "cond", "then", "other")
    return tuple(getattr(node, f) for f in fields if hasattr(node, f))


_OPERATOR_RULES = {  # op -> the gradients of a and b from (a, b, g), PyTorch's formulas
    "+": lambda a, b, g: (g, g),
    "-": lambda a, b, g: (g, _neg(g)),
    "*": lambda a, b, g: (_mul(g, b), _mul(g, a)),
    "/": lambda a, b, g: (_div(g, b), _mul(_neg(g), Binary("/", Binary("/", a, b), b))),  # -g * (a / b / b)
}


class _Differentiator:
    """d(node)/d(var) for one input `var` of the expression `src`. The recursive methods are generators
    run by _run (a sub-call is `yield self.method(...)`)."""

    def __init__(self, src: str, var: str, typed_c: set, ties: str = "first"):
        self.src, self.var, self.typed_c, self.ties = src, var, typed_c, ties
        self._depends: dict = {}  # id(node) -> (node, depends): each node of the tree is visited once

    def depends(self, node: Node) -> bool:
        memo = self._depends
        if id(node) in memo:
            return memo[id(node)][1]
        todo = [(node, False)]
        while todo:
            n, children_done = todo.pop()
            if id(n) in memo:
                continue
            kids = _children(n)
            if children_done or not kids:
                memo[id(n)] = (n, (isinstance(n, Name) and n.name == self.var) or any(memo[id(k)][1] for k in kids))
            else:
                todo.append((n, True))
                todo.extend((k, False) for k in kids)
        return memo[id(node)][1]

    def is_c(self, node: Node) -> bool:
        """True when the node's C++ type is certainly C (so kjit_math templates deduce C from it)."""
        todo = [node]  # every node reached must keep the type C
        while todo:
            n = todo.pop()
            if isinstance(n, Name):
                ok = n.name in self.typed_c
            elif isinstance(n, Cast):
                ok = n.type == "C"
            elif isinstance(n, Unary):
                ok = n.op in ("+", "-")
                todo.append(n.operand)
            elif isinstance(n, Binary):
                ok = n.op in ("+", "-", "*", "/")
                todo += [n.left, n.right]
            elif isinstance(n, Ternary):
                ok = True
                todo += [n.then, n.other]
            elif isinstance(n, Call):
                known = _function(n.base)
                ok = n.base in _TEMPLATES or (known is not None and known[1] != "float")
                todo += n.args
            else:
                ok = False
            if not ok:
                return False
        return True

    def as_c(self, node: Node, typed_by: Node) -> Node:
        return node if self.is_c(typed_by) else Cast("C", node)

    def fail(self, node: Node, what: str, why: str) -> NotDifferentiable:
        return NotDifferentiable(
            f"kjit.elementwise: cannot differentiate {what} at column {node.pos + 1} of {self.src!r} with "
            f"respect to '{self.var}': {why}; give the gradient yourself with grads={{'{self.var}': '...'}}"
        )

    def d(self, node: Node, seed: Node = ONE):
        """d(node)/d(var) times `seed` (the gradient flowing in at the top), None for an exact 0."""
        return _run(self.derive(node, seed))

    def derive(self, node: Node, g: Node | None):
        """The part of d(expression)/d(var) that goes through `node`, when d(expression)/d(node) is g (the
        gradient flowing into node, as in PyTorch's backward; None: exactly 0)."""
        if g is None or not self.depends(node):
            return None
        if isinstance(node, Name):
            return g
        if isinstance(node, Unary):
            if node.op not in _UNARY_OPERATORS:
                raise self.fail(node, f"'{node.op}'", f"'{node.op}' is an integer-only operator")
            if node.op == "!":
                return None
            return (yield self.derive(node.operand, _neg(g) if node.op == "-" else g))
        if isinstance(node, Cast):
            if node.type not in _DIFFERENTIABLE_CASTS:
                raise self.fail(
                    node, f"the cast to {node.type}", "only casts to C, float and double are differentiable"
                )
            return (yield self.derive(node.operand, g))
        if isinstance(node, Ternary):  # only the branch taken (torch.where would also pass 0 to the other)
            dt = yield self.derive(node.then, g)
            do = yield self.derive(node.other, g)
            return None if dt is None and do is None else Ternary(node.cond, dt or ZERO, do or ZERO)
        if isinstance(node, Binary):
            return (yield self.derive_binary(node, g))
        assert isinstance(node, Call), node  # a Num depends on nothing: returned above
        return (yield self.derive_call(node, g))

    def derive_binary(self, node: Binary, g: Node):
        a, b, op = node.left, node.right, node.op
        if op in _PIECEWISE_CONSTANT:
            return None
        if op in _INTEGER_OPS:
            raise self.fail(node, f"'{op}'", f"'{op}' is an integer-only operator")
        g_a, g_b = _OPERATOR_RULES[op](a, b, g)
        da = yield self.derive(a, g_a)
        db = yield self.derive(b, g_b)
        return _add(da, db)

    def derive_call(self, node: Call, g: Node):
        qualifier = node.func[: len(node.func) - len(node.base)]
        known = _function(node.base) if qualifier in _QUALIFIERS else None
        if known is None:
            why = (
                "it is itself a derivative helper"
                if node.base.endswith("_backward")
                else f"{node.func} has no known derivative"
            )
            raise self.fail(node, f"{node.func}(...)", why)
        base, family = known
        arity = 2 if base in _BINARY_RULES else 1
        if len(node.args) != arity:
            raise self.fail(node, f"{node.func}(...)", f"{node.func} takes {arity} argument(s), got {len(node.args)}")
        F = lambda b: _family_name(b, family)  # noqa: E731
        if arity == 1:
            u = node.args[0]
            return (yield self.derive(u, _UNARY_RULES[base](self, node, u, g, F)))
        a, b = node.args
        g_a, g_b = _BINARY_RULES[base](self, node, a, b, g, F)
        da = yield self.derive(a, g_a)
        db = yield self.derive(b, g_b)
        return _add(da, db)


def derivatives(
    expr: str, inputs: Sequence[str], scalars: Sequence[str] = (), grad: str | None = None, ties: str = "first"
) -> dict:
    """For every name in `inputs`, a C++ expression of d(expr)/d(name), valid in the functor's scope
    (the inputs, the scalars and C are in scope). Scalars are constants. Raises NotDifferentiable when
    an input's derivative cannot be derived, ValueError when `expr` does not parse.
    With `grad` (the name of a C-typed value in scope, the incoming gradient): the gradient of each input
    itself, `grad` flowing in at the top instead of 1, as PyTorch's backward computes it (its masks then
    give 0 where `grad` is inf or NaN, where `grad * d(expr)/d(name)` would give NaN).
    `ties`: what a tie of fmax/fmin/max/min gives, "first" (all to the first argument) or "split" (half to each),
    as the torch in use does (kjit.elementwise asks it: PyTorch changed between 2.11 and 2.15)."""
    if ties not in TIES:
        raise ValueError(f"ties={ties!r} is not valid: allowed {', '.join(TIES)}")
    tree = parse(expr)
    typed_c = set(inputs) | set(scalars) | ({grad} if grad else set())
    seed = Name(grad) if grad else ONE
    result = {}
    for name in inputs:
        d = _Differentiator(expr, name, typed_c, ties).d(tree, seed)
        result[name] = to_cpp(d if d is not None else ZERO)
    return result
