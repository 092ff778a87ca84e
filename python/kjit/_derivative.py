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

Rules (u an argument, du its derivative; a sub-expression without the input has derivative 0):
- `+ - * /` and unary `-`: the usual sum, product and quotient rules.
- comparisons, `!`, `&&`, `||`: 0 (piecewise constant); `c ? a : b` -> `c ? da : db`.
- casts to C, float or double pass du through; other casts, `% << >> & | ^ ~` are not differentiable.
- chain rule for exp, exp2, expm1, log, log2, log10, log1p, sqrt, rsqrt, sin, cos, tan, tanh, erf
  (each in its float `expf`, overloaded `exp` and kjit_math `exp_` spelling: the derivative uses the
  same family), pow (both arguments), fabs/abs (sign rule of PyTorch: 0 at 0), max/fmax and min/fmin
  (ties go to the first argument), and the kjit_math activations relu, sigmoid, silu, gelu, gelu_tanh
  (through their *_backward helpers). Any other function of an input is NotDifferentiable.
Literals the rules introduce are written `static_cast<C>(...)` so that kjit_math's templates deduce C.
Results are lightly simplified (no `* 1`, `+ 0`, `0 - u`) and deterministic.
"""

import math
import re
from dataclasses import dataclass, field
from typing import Optional, Sequence


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
_NUMBER = re.compile("|".join([
    r"0[xX](?:[0-9a-fA-F]*\.[0-9a-fA-F]+|[0-9a-fA-F]+\.?)[pP][+-]?\d+[fFlL]?",  # hex float
    r"0[xX][0-9a-fA-F]+" + _INT_SUFFIX,  # hex int
    r"(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?[fFlL]?|\d+[eE][+-]?\d+[fFlL]?",  # decimal float
    r"\d+" + _INT_SUFFIX,  # decimal int
]))
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REJECTED = {  # the longest match wins
    **{op + "=": "compound assignment" for op in ["<<", ">>", "+", "-", "*", "/", "%", "&", "|", "^"]},
    "<=>": "three-way comparison", "->*": "member access", "->": "member access", ".*": "member access",
    "...": "pack expansion", "++": "increment", "--": "decrement", "=": "assignment", ".": "member access",
    "[": "subscript", "]": "subscript", "{": "a brace", "}": "a brace", ";": "a statement separator",
    '"': "a string literal", "'": "a character literal",
}
_OPERATORS = ["::", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", *"+-*/%<>!~&^|?:(),"]
_BINARY_PREC = {"||": 3, "&&": 4, "|": 5, "^": 6, "&": 7, "==": 8, "!=": 8, "<": 9, ">": 9, "<=": 9,
                ">=": 9, "<<": 10, ">>": 10, "+": 11, "-": 11, "*": 12, "/": 12, "%": 12}
_TERNARY, _UNARY, _PRIMARY = 2, 13, 14
_TYPE_WORDS = {"C", "float", "double", "int", "unsigned", "signed", "long", "short", "char", "bool",
               "size_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t",
               "uint64_t"}
_DIFFERENTIABLE_CASTS = {"C", "float", "double"}


def _syntax_error(src: str, pos: int, what: str) -> ValueError:
    return ValueError(f"kjit.elementwise: cannot parse {src!r} at column {pos + 1}: {what}\n  {src}\n  "
                      f"{' ' * pos}^\nwrite one C++ expression of the inputs and scalars, such as 'x * y + 1.0f'")


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
                raise _syntax_error(src, i, f"{src[i:end + 1]!r} is not a C++ number")
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


# ---- parser -------------------------------------------------------------------------------------------


class _Parser:
    """Recursive descent with precedence climbing over the tokens of one expression."""

    def __init__(self, src: str):
        self.src, self.tokens, self.i = src, _tokenize(src), 0

    def peek(self, k: int = 0) -> tuple:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def take(self) -> tuple:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def error(self, what: str, tok: Optional[tuple] = None) -> ValueError:
        tok = tok or self.peek()
        got = "the end of the expression" if tok[0] == "end" else repr(tok[1])
        return _syntax_error(self.src, tok[2], f"{what}, got {got}")

    def expect(self, text: str) -> tuple:
        if self.peek()[1] != text or self.peek()[0] == "num":
            raise self.error(f"expected {text!r}")
        return self.take()

    def parse(self) -> Node:
        node = self.ternary()
        if self.peek()[0] != "end":
            what = "the comma operator is not supported" if self.peek()[1] == "," else "expected an operator"
            raise self.error(what)
        return node

    def ternary(self) -> Node:
        cond = self.binary(_TERNARY + 1)
        if self.peek()[:2] != ("op", "?"):
            return cond
        pos = self.take()[2]
        then = self.ternary()
        self.expect(":")
        return Ternary(cond, then, self.ternary(), pos=pos)

    def binary(self, min_prec: int) -> Node:
        left = self.unary()
        while True:
            kind, op, pos = self.peek()
            prec = _BINARY_PREC.get(op, 0) if kind == "op" else 0
            if prec < min_prec:
                return left
            self.take()
            left = Binary(op, left, self.binary(prec + 1), pos=pos)

    def unary(self) -> Node:
        kind, text, pos = self.peek()
        if kind == "op" and text in "+-!~":
            self.take()
            return Unary(text, self.unary(), pos=pos)
        if kind == "op" and text == "(" and self.peek(1)[1] in _TYPE_WORDS:
            n = 1
            while self.peek(n)[1] in _TYPE_WORDS:
                n += 1
            if self.peek(n)[1] == ")":  # a C cast: (float)x
                words = [self.tokens[self.i + k][1] for k in range(1, n)]
                self.i += n + 1
                return Cast(" ".join(words), self.unary(), "c", pos=pos)
        return self.primary()

    def primary(self) -> Node:
        kind, text, pos = self.take()
        node: Node
        if kind == "num":
            node = Num(text, pos=pos)
        elif text == "(":
            node = self.ternary()
            self.expect(")")
        elif text == "static_cast":
            node = self.static_cast(pos)
        elif text in ("reinterpret_cast", "const_cast", "dynamic_cast"):
            raise _syntax_error(self.src, pos, f"{text} is not supported; use static_cast<C>(...)")
        elif kind == "id" or text == "::":
            node = self.name_or_call(text, pos)
        else:
            raise self.error("expected a number, a name, '(' or a unary operator", (kind, text, pos))
        if self.peek()[1] == "(":
            raise self.error("only a named function can be called")
        return node

    def static_cast(self, pos: int) -> Node:
        self.expect("<")
        words = []
        while self.peek()[0] == "id":
            words.append(self.take()[1])
        if not words:
            raise self.error("expected a type name after 'static_cast<'")
        self.expect(">")
        self.expect("(")
        operand = self.ternary()
        self.expect(")")
        return Cast(" ".join(words), operand, "static", pos=pos)

    def name_or_call(self, first: str, pos: int) -> Node:
        name = first + self.identifier() if first == "::" else first
        while self.peek()[1] == "::":
            name += self.take()[1] + self.identifier()
        if self.peek()[1] != "(":
            return Name(name, pos=pos)
        args = self.arguments()
        if name in _DIFFERENTIABLE_CASTS and len(args) == 1:  # C(x), float(x): a functional cast
            return Cast(name, args[0], "func", pos=pos)
        return Call(name, tuple(args), pos=pos)

    def identifier(self) -> str:
        if self.peek()[0] != "id":
            raise self.error("expected a name after '::'")
        return self.take()[1]

    def arguments(self) -> list:
        self.expect("(")
        args = [] if self.peek()[1] == ")" else [self.ternary()]
        while args and self.peek()[1] == ",":
            self.take()
            args.append(self.ternary())
        self.expect(")")
        return args


def parse(expr: str) -> Node:
    """The AST of one C++ expression; ValueError with the column on a syntax error."""
    return _Parser(expr).parse()


# ---- rendering ----------------------------------------------------------------------------------------


def _render(node: Node) -> tuple:
    """(C++ text, precedence of its outermost operator)."""
    if isinstance(node, Num):
        return node.text, _PRIMARY
    if isinstance(node, Name):
        return node.name, _PRIMARY
    if isinstance(node, Call):
        return f"{node.func}({', '.join(to_cpp(a) for a in node.args)})", _PRIMARY
    if isinstance(node, Cast):
        if node.style == "c":
            return f"({node.type}){_wrap(node.operand, _UNARY)}", _UNARY
        if node.style == "func":
            return f"{node.type}({to_cpp(node.operand)})", _PRIMARY
        return f"static_cast<{node.type}>({to_cpp(node.operand)})", _PRIMARY
    if isinstance(node, Unary):
        inner = _wrap(node.operand, _UNARY)
        if inner[:1] in "+-" and node.op in "+-":  # '- -x' must not become '--x'
            inner = f"({inner})"
        return node.op + inner, _UNARY
    if isinstance(node, Binary):
        prec = _BINARY_PREC[node.op]
        return f"{_wrap(node.left, prec)} {node.op} {_wrap(node.right, prec + 1)}", prec
    if isinstance(node, Ternary):
        return (f"{_wrap(node.cond, _TERNARY + 1)} ? {_wrap(node.then, _TERNARY + 1)} : "
                f"{_wrap(node.other, _TERNARY)}", _TERNARY)
    raise TypeError(f"to_cpp: expected an expression node, got {type(node).__name__}")


def _wrap(node: Node, min_prec: int) -> str:
    text, prec = _render(node)
    return text if prec >= min_prec else f"({text})"


def to_cpp(node: Node) -> str:
    """C++ text of a node, parenthesized where precedence requires."""
    return _render(node)[0]


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
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Unary) and x.op == "-":
            return _neg(_mul(x.operand, y))
    if _is_one(a) or _is_one(b):
        return b if _is_one(a) else a
    return Binary("*", a, b)


def _div(a, b):
    if a is None:
        return None
    if isinstance(a, Unary) and a.op == "-":
        return _neg(_div(a.operand, b))
    return a if _is_one(b) else Binary("/", a, b)


# ---- differentiation ----------------------------------------------------------------------------------

_INTEGER_OPS = {"%", "<<", ">>", "&", "|", "^"}
_PIECEWISE_CONSTANT = {"<", ">", "<=", ">=", "==", "!=", "&&", "||"}
_QUALIFIERS = {"", "::", "std::", "kjit_math::"}
_UNARY_RULES = {  # base -> f'(u) as a function of (differentiator, the call, u, name in the call's family)
    "exp": lambda D, c, u, F: c,
    "exp2": lambda D, c, u, F: _mul(_lit(repr(math.log(2))), c),
    "expm1": lambda D, c, u, F: Call(F("exp"), (u,)),
    "log": lambda D, c, u, F: _div(ONE, u),
    "log2": lambda D, c, u, F: _div(_lit(repr(1 / math.log(2))), u),
    "log10": lambda D, c, u, F: _div(_lit(repr(1 / math.log(10))), u),
    "log1p": lambda D, c, u, F: _div(ONE, Binary("+", ONE, u)),
    "sqrt": lambda D, c, u, F: _div(_lit("0.5"), c),
    "rsqrt": lambda D, c, u, F: Binary("*", _lit("-0.5"), Binary("*", Binary("*", c, c), c)),
    "sin": lambda D, c, u, F: Call(F("cos"), (u,)),
    "cos": lambda D, c, u, F: _neg(Call(F("sin"), (u,))),
    "tan": lambda D, c, u, F: Binary("+", ONE, Binary("*", c, c)),
    "tanh": lambda D, c, u, F: Binary("-", ONE, Binary("*", c, c)),
    "erf": lambda D, c, u, F: _mul(_lit(repr(2 / math.sqrt(math.pi))), Call(F("exp"), (_neg(Binary("*", u, u)),))),
    "fabs": lambda D, c, u, F: Ternary(Binary(">", u, ZERO), ONE,  # PyTorch's sign rule: 0 at 0
                                       Ternary(Binary("<", u, ZERO), _lit("-1"), ZERO)),
    "relu": lambda D, c, u, F: Call("relu_backward", (ONE, D.as_c(c, u))),
    "sigmoid": lambda D, c, u, F: Call("sigmoid_backward", (ONE, D.as_c(c, u))),
    "silu": lambda D, c, u, F: Call("silu_backward", (ONE, D.as_c(u, u))),
    "gelu": lambda D, c, u, F: Call("gelu_backward", (ONE, D.as_c(u, u))),
    "gelu_tanh": lambda D, c, u, F: Call("gelu_tanh_backward", (ONE, D.as_c(u, u))),
}
_BINARY_RULES = {"pow", "fmax", "fmin", "max", "min"}
_FLOAT_FAMILY = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
                 "tan", "tanh", "erf", "fabs", "pow", "fmax", "fmin"}
_KJIT_FAMILY = {"exp", "log", "erf", "tanh"}  # kjit_math::exp_ and friends
_TEMPLATES = {"relu", "sigmoid", "silu", "gelu", "gelu_tanh"}


def _function(name: str) -> Optional[tuple]:
    """(base, family) of a known differentiable function name, family in 'std', 'float', 'kjit'."""
    if name in _UNARY_RULES or name in _BINARY_RULES:
        return name, "std"
    if name == "abs":
        return "fabs", "std"
    if name.endswith("f") and name[:-1] in _FLOAT_FAMILY:
        return name[:-1], "float"
    if name.endswith("_") and name[:-1] in _KJIT_FAMILY:
        return name[:-1], "kjit"
    return None


def _family_name(base: str, family: str) -> str:
    if family == "float":
        return base + "f"
    return base + "_" if family == "kjit" and base in _KJIT_FAMILY else base


def _children(node: Node) -> tuple:
    if isinstance(node, Call):
        return node.args
    fields = ("operand", "left", "right", "cond", "then", "other")
    return tuple(getattr(node, f) for f in fields if hasattr(node, f))


class _Differentiator:
    """d(node)/d(var) for one input `var` of the expression `src`."""

    def __init__(self, src: str, var: str, typed_c: set):
        self.src, self.var, self.typed_c = src, var, typed_c

    def depends(self, node: Node) -> bool:
        return (isinstance(node, Name) and node.name == self.var) or any(map(self.depends, _children(node)))

    def is_c(self, node: Node) -> bool:
        """True when the node's C++ type is certainly C (so kjit_math templates deduce C from it)."""
        if isinstance(node, Name):
            return node.name in self.typed_c
        if isinstance(node, Cast):
            return node.type == "C"
        if isinstance(node, Unary):
            return node.op in "+-" and self.is_c(node.operand)
        if isinstance(node, Binary):
            return node.op in "+-*/" and self.is_c(node.left) and self.is_c(node.right)
        if isinstance(node, Ternary):
            return self.is_c(node.then) and self.is_c(node.other)
        if isinstance(node, Call):
            known = _function(node.base)
            overloaded = node.base in _TEMPLATES or (known is not None and known[1] != "float")
            return overloaded and all(self.is_c(a) for a in node.args)
        return False

    def as_c(self, node: Node, typed_by: Node) -> Node:
        return node if self.is_c(typed_by) else Cast("C", node)

    def fail(self, node: Node, what: str, why: str) -> NotDifferentiable:
        return NotDifferentiable(
            f"kjit.elementwise: cannot differentiate {what} at column {node.pos + 1} of {self.src!r} with "
            f"respect to '{self.var}': {why}; give the gradient yourself with grads={{'{self.var}': '...'}}")

    def d(self, node: Node):
        if not self.depends(node):
            return None
        if isinstance(node, Name):
            return ONE
        if isinstance(node, Unary):
            if node.op == "~":
                raise self.fail(node, "'~'", "'~' is an integer-only operator")
            du = None if node.op == "!" else self.d(node.operand)
            return _neg(du) if node.op == "-" else du
        if isinstance(node, Cast):
            if node.type not in _DIFFERENTIABLE_CASTS:
                raise self.fail(node, f"the cast to {node.type}",
                                "only casts to C, float and double are differentiable")
            return self.d(node.operand)
        if isinstance(node, Ternary):
            dt, do = self.d(node.then), self.d(node.other)
            return None if dt is None and do is None else Ternary(node.cond, dt or ZERO, do or ZERO)
        if isinstance(node, Binary):
            return self.d_binary(node)
        assert isinstance(node, Call), node  # a Num depends on nothing: returned above
        return self.d_call(node)

    def d_binary(self, node: Binary):
        a, b, op = node.left, node.right, node.op
        if op in _PIECEWISE_CONSTANT:
            return None
        if op in _INTEGER_OPS:
            raise self.fail(node, f"'{op}'", f"'{op}' is an integer-only operator")
        da, db = self.d(a), self.d(b)
        if op == "+":
            return _add(da, db)
        if op == "-":
            return _sub(da, db)
        if op == "*":
            return _add(_mul(da, b), _mul(a, db))
        if db is None:  # '/'
            return _div(da, b)
        return _div(_sub(_mul(da, b), _mul(a, db)), Binary("*", b, b))

    def d_call(self, node: Call):
        qualifier = node.func[: len(node.func) - len(node.base)]
        known = _function(node.base) if qualifier in _QUALIFIERS else None
        if known is None:
            why = ("it is itself a derivative helper" if node.base.endswith("_backward")
                   else f"{node.func} has no known derivative")
            raise self.fail(node, f"{node.func}(...)", why)
        base, family = known
        arity = 2 if base in _BINARY_RULES else 1
        if len(node.args) != arity:
            raise self.fail(node, f"{node.func}(...)", f"{node.func} takes {arity} argument(s), "
                                                       f"got {len(node.args)}")
        F = lambda b: _family_name(b, family)  # noqa: E731
        if arity == 1:
            u = node.args[0]
            return _mul(_UNARY_RULES[base](self, node, u, F), self.d(u))
        a, b = node.args
        da, db = self.d(a), self.d(b)
        if base == "pow":
            if db is None:
                return _mul(_mul(b, Call(F("pow"), (a, Binary("-", b, ONE)))), da)
            return _mul(node, _add(_mul(db, Call(F("log"), (a,))), _div(_mul(b, da), a)))
        if da is None and db is None:
            return None
        return Ternary(Binary(">=" if base.endswith("max") else "<=", a, b), da or ZERO, db or ZERO)


def derivatives(expr: str, inputs: Sequence[str], scalars: Sequence[str] = ()) -> dict:
    """For every name in `inputs`, a C++ expression of d(expr)/d(name), valid in the functor's scope
    (the inputs, the scalars and C are in scope). Scalars are constants. Raises NotDifferentiable when
    an input's derivative cannot be derived, ValueError when `expr` does not parse."""
    tree = parse(expr)
    typed_c = set(inputs) | set(scalars)
    result = {}
    for name in inputs:
        d = _Differentiator(expr, name, typed_c).d(tree)
        result[name] = to_cpp(d if d is not None else ZERO)
    return result
