"""kjit.elementwise: fused elementwise kernels from a C++ expression, specialized per call.

    silu_scaled = kjit.elementwise("x * sigmoid(x) * scale", inputs="x", scalars="scale")
    y = silu_scaled(x, scale=0.5)          # one kernel; `scale` is a runtime argument

The expression is C++ over the named inputs and scalars, evaluated in the compute type ``C``: float
for float16 / bfloat16 results, otherwise the result dtype itself; with a complex input and a real
``dtype=``, complex128 where the result or an input is 64-bit, else complex64. The functions of
``kernel_templates/math.cuh`` are available (relu, sigmoid, silu, mish, gelu, gelu_tanh, their ``*_backward``,
exp_, log_, erf_, tanh_; real, imag, conj, angle) besides CUDA's own math functions (expf, tanhf, ...).

Complex tensors (torch.complex64, torch.complex128) compute with ``kernel_templates/detail/complex.cuh``:
+ - * / (c10::complex's division), unary -, == and != (complex values have no order), and real, imag,
conj, abs and angle (real results), norm, polar, exp, log, log2, log10, sqrt, rsqrt, pow, reciprocal,
square, sgn, sin, cos, tan, sinh, cosh, tanh, sigmoid, silu. A complex constant is ``C(re, im)`` (scalars
are real numbers: ``x * C(a, b)`` with scalars a and b). A function PyTorch has no complex form of (relu,
gelu, erf, floor, fmod, min, max, <, ...) or that kjit does not provide (asin, acos, atan and their
hyperbolic forms, expm1, log1p) fails to compile with a message naming the alternative. A complex result
stored in a real ``dtype=`` keeps its real part, as PyTorch's casts do. Gradients: kjit's derivatives
are of real functions; an input that requires grad in a complex call is refused (PyTorch's conjugate
Wirtinger gradients are not built).

Semantics:
- A function takes 1 to 32 input tensors (each flat kernel's template arguments fit the Engine's table key);
  derivative kernels take the incoming gradient and every input, so gradients exist up to 31 inputs (a
  gradient asked of a 32-input function is refused when asked, with the reason).
- Inputs follow PyTorch broadcasting; the result dtype is the promotion of the inputs' dtypes
  (``torch.promote_types``, so a complex64 and a float64 input give complex128) unless ``dtype=`` fixes it.
  Scalars take the compute type (its real type when that is complex).
- Scalars are runtime kernel arguments (changing one never recompiles) unless named in
  ``specialize=``: then each distinct value is compiled into the kernel once and cached.
- float16 / bfloat16 results use the hardware exp in kjit_math's functions (KJIT_FAST_EXP).
- Every call is specialized on the dtypes, on the vector width (16-byte loads and stores when every
  pointer is aligned and the inputs are contiguous with the output's shape; narrower otherwise), on
  whether the size is a multiple of that width, and on the index type (32-bit when every offset fits,
  64-bit otherwise). Broadcast and strided inputs are read through their strides (no copies).
- Calls go to the current stream of the tensors' device and are legal inside CUDA graph capture once
  warmed up.
- Autograd: the gradient of every input is derived symbolically from the expression (arithmetic,
  kjit_math's functions and CUDA's math functions; see kjit/_derivative.py) and runs as an elementwise
  kernel of its own, cached like any other; ``grads={"x": "<C++ expression of d expr / d x>"}`` gives
  or overrides it per input. An input that requires grad where kjit has no derivative is refused with
  the reason (never a result without its grad_fn). ``out=`` does not record gradients.
- A function is the registered op ``torch.ops.kjit.elementwise`` (its spec, the input tensors and the
  scalar values), so ``torch.compile(fullgraph=True)`` traces it with no graph break. A call with plain
  CUDA tensors that need no gradient runs directly in C++ (the key from dtypes, broadcast and layout
  class, alignment and index width is computed there); anything else goes through the dispatcher.
"""

from __future__ import annotations

import functools
import json
import keyword
import re
from collections.abc import Iterable

from ._requires_torch import require

require("kjit.elementwise")

import torch  # noqa: E402

from . import _C  # noqa: E402  (ElementwiseFunction)
from . import _core  # noqa: E402
from . import _derivative  # noqa: E402

__all__ = ["Elementwise", "elementwise"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names the generated code declares (template parameters of the kernels and of the expression's
# functor), `out` (the call's keyword for the output) and C++ keywords; the generated kernel's own parameters all start with "kjit_".
_RESERVED = {"C", "TO", "I", "VEC", "TAIL", "out"} | {
    "alignas",
    "alignof",
    "auto",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "class",
    "const",
    "constexpr",
    "const_cast",
    "continue",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "nullptr",
    "operator",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "while",
}
_SUPPORTED = (
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
)
_COMPLEX = (torch.complex64, torch.complex128)
_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}
_HALF = (torch.float16, torch.bfloat16)

# Input or scalar names as elementwise() takes them: "x, y", ["x", "y"] or ("x", "y"); scalars may
# also be a dict of names to default values.
Names = str | list[str] | tuple[str, ...]
ScalarNames = Names | dict[str, float]

# Scalars are real numbers (runtime kernel arguments of type double); a complex value is two of them.
_COMPLEX_SCALAR_HINT = (
    "; a complex value is two real scalars: pass its parts (e.g. re=v.real, im=v.imag) and write "
    "C(re, im) in the expression"
)
# The rules of a definition, stated once in C++ (python/src/ops/elementwise/function.hpp), which checks a saved
# spec by them too: at most this many inputs (a derivative takes the gradient and every input: up to 31 inputs),
# and one C++ expression on one line (no statement, block, comment or preprocessor token in any spelling).
_MAX_INPUTS = _C.ElementwiseFunction.max_inputs
_NOT_AN_EXPRESSION = _C.ElementwiseFunction.not_an_expression


def _names(value, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in re.split(r"[\s,]+", value) if v]
    if not isinstance(value, (list, tuple, dict)):
        raise _core.TypeError(
            f"kjit.elementwise: {what} must be a name, a list of names or a string of names "
            f"separated by commas, got {value!r}"
        )
    names = tuple(value)
    for name in names:
        if (
            not isinstance(name, str)
            or not _IDENT.match(name)
            or keyword.iskeyword(name)
            or name in _RESERVED
            or name.startswith(("kjit_", "T_", "__"))
        ):
            raise _core.ValueError(
                f"kjit.elementwise: {what} name {name!r} is not usable: names are C++ identifiers, "
                "not C++ keywords, not C, TO, I, VEC, TAIL or out, and not starting with 'kjit_', 'T_' or "
                "'__'"
            )
    return names


@functools.cache
def _torch_ties() -> str:
    """How the installed torch's autograd splits a tie of fmax (and fmin): "split" (half to each argument, torch
    2.15) or "first" (all to the first, torch 2.11). kjit's derivatives of fmax/fmin/max/min follow it, so that
    they agree with torch.autograd whichever torch runs. Asked once, on the CPU."""
    from torch.utils._python_dispatch import _disable_current_modes  # a function defined under a FakeTensorMode

    with _disable_current_modes(), torch.inference_mode(False), torch.enable_grad():
        a, b = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
        _, gb = torch.autograd.grad(torch.fmax(a, b), (a, b))
        return "split" if gb.item() != 0 else "first"


def _compute_dtype(out: torch.dtype, inputs: tuple = ()) -> torch.dtype:
    """The expression's compute type, as ElementwiseFn computes it (python/src/ops/elementwise/function.cpp)."""
    if out in _COMPLEX:
        return out
    if any(d in _COMPLEX for d in inputs):
        return torch.complex128 if out == torch.float64 or torch.complex128 in inputs else torch.complex64
    return torch.float32 if out in _HALF else out


def _tensor_desc(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {list(t.shape)} on {t.device}"
    return f"{type(t).__name__} {t!r}"


class Elementwise:
    """A fused elementwise function; see kjit.elementwise()."""

    def __init__(
        self,
        expr: str,
        inputs: Names,
        scalars: ScalarNames = (),
        *,
        specialize: Iterable[str] = (),
        dtype: torch.dtype | None = None,
        name: str | None = None,
        grads: dict | None = None,
    ):
        if not isinstance(expr, str) or not expr.strip():
            raise _core.TypeError(f"kjit.elementwise: the expression must be a non-empty string of C++, got {expr!r}")
        _check_expression(expr, "the expression")
        if name is not None and not isinstance(name, str):
            raise _core.TypeError(
                f"kjit.elementwise: name must be a str (it names the kernel in messages and the "
                f"cache), got {_tensor_desc(name)}"
            )
        self.expr = expr.strip()
        self.inputs = _names(inputs, "input")
        if not self.inputs:
            raise _core.ValueError("kjit.elementwise: at least one input tensor is needed")
        if len(self.inputs) > _MAX_INPUTS:
            raise _core.ValueError(f"kjit.elementwise: at most {_MAX_INPUTS} input tensors, got {len(self.inputs)}")
        self.defaults: dict[str, float] = dict(scalars) if isinstance(scalars, dict) else {}
        self.scalars = _names(scalars, "scalar")
        for s, v in self.defaults.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _core.TypeError(
                    f"kjit.elementwise: the default of scalar '{s}' must be a Python int or float, "
                    f"got {_tensor_desc(v)}{_COMPLEX_SCALAR_HINT if isinstance(v, complex) else ''}"
                )
        dup = sorted({n for n in self.inputs + self.scalars if (self.inputs + self.scalars).count(n) > 1})
        if dup:
            raise _core.ValueError(f"kjit.elementwise: names {dup} are given more than once")
        if specialize is None:
            specialize = ()
        elif not isinstance(specialize, (str, list, tuple, dict)) and hasattr(specialize, "__iter__"):
            specialize = tuple(specialize)  # a set, a generator ...
        self.specialized = _names(specialize, "specialized scalar")
        dup = sorted({s for s in self.specialized if self.specialized.count(s) > 1})
        if dup:
            raise _core.ValueError(f"kjit.elementwise: specialize names {dup} more than once")
        unknown = [s for s in self.specialized if s not in self.scalars]
        if unknown:
            raise _core.ValueError(
                f"kjit.elementwise: specialize={list(self.specialized)} names {unknown}, which are "
                f"not scalars; the scalars are {list(self.scalars)}"
            )
        self.runtime = tuple(s for s in self.scalars if s not in self.specialized)
        if dtype is not None and dtype not in _SUPPORTED:
            raise _core.TypeError(
                f"kjit.elementwise: dtype={dtype} is not supported; allowed: {', '.join(str(d) for d in _SUPPORTED)}"
            )
        self.dtype = dtype
        self.name = name or "elementwise"
        self.grads, self.no_grad, backward = self._derivatives(grads)
        spec = {
            "name": self.name,
            "expr": self.expr,
            "inputs": list(self.inputs),
            "scalars": list(self.scalars),
            "specialize": list(self.specialized),
            "dtype": str(dtype).split(".")[-1] if dtype is not None else None,
            "grads": self.grads,
            "backward": backward,
            "no_grad": self.no_grad,
            "defaults": {k: _json_float(v) for k, v in self.defaults.items()},
        }
        self._fn = _C.ElementwiseFunction(json.dumps(spec, sort_keys=True))
        self.spec = self._fn.spec  # the key of torch.ops.kjit.elementwise for this function
        self._templates: dict[tuple, _core.Template] = {}

    def _derivatives(self, given) -> tuple[dict, dict, dict]:
        """Each input's derivative expression (given, else derived); where there is none, why; and, for the
        derived ones, the input's gradient given the incoming gradient kjit_grad, which the backward kernel
        runs (PyTorch's masks then hold for an inf or NaN kjit_grad too; a given derivative is multiplied)."""
        if given is None:
            given = {}
        if not isinstance(given, dict):
            raise _core.TypeError(
                f"kjit.elementwise: grads must be a dict of input name to a C++ expression of the "
                f"derivative, got {_tensor_desc(given)}"
            )
        unknown = sorted(k for k in given if k not in self.inputs)
        if unknown:
            raise _core.ValueError(
                f"kjit.elementwise: grads names {unknown}, which are not inputs; the inputs are {list(self.inputs)}"
            )
        grads, why, backward = {}, {}, {}
        if len(self.inputs) >= _MAX_INPUTS:  # the derivative kernel takes the gradient and every input
            why = {
                name: f"a function of {len(self.inputs)} inputs has no derivative kernel: it would take the "
                f"gradient and every input, at most {_MAX_INPUTS} tensors"
                for name in self.inputs
            }
            return {}, why, {}
        for name in self.inputs:
            if name in given:
                if not isinstance(given[name], str) or not given[name].strip():
                    raise _core.TypeError(
                        f"kjit.elementwise: grads['{name}'] must be a non-empty string of C++, got "
                        f"{_tensor_desc(given[name])}"
                    )
                _check_expression(given[name], f"grads['{name}']")
                grads[name] = given[name].strip()
                continue
            try:
                ties = _torch_ties()
                grads[name] = _derivative.derivatives(self.expr, [name], self.scalars, ties=ties)[name]
                backward[name] = _derivative.derivatives(self.expr, [name], self.scalars, grad="kjit_grad", ties=ties)[
                    name
                ]
            except ValueError as e:  # NotDifferentiable, or an expression the differentiator does not parse
                why[name] = str(e)
        return grads, why, backward

    # -- source ------------------------------------------------------------------------------------
    def source(self, specialized_values: tuple = ()) -> str:
        """The generated CUDA source for these specialized scalar values (one flat and six strided kernels)."""
        self._check_specialized_values(specialized_values)
        return self._fn.source([float(v) for v in specialized_values])

    def _check_specialized_values(self, values) -> None:
        if (
            not isinstance(values, (list, tuple))
            or len(values) != len(self.specialized)
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values)
        ):
            raise _core.ValueError(
                f"{self!r}: specialized_values must be a tuple of one number per specialized scalar "
                f"{list(self.specialized)}, got {_tensor_desc(values)}"
            )

    def template(self, specialized_values: tuple = ()) -> _core.Template:
        """The kjit.Template of the generated source (one per tuple of specialized scalar values, kept)."""
        self._check_specialized_values(specialized_values)
        values = [float(v) for v in specialized_values]
        key = tuple(v.hex() for v in values)  # -0.0 and 0.0 are two values (and two kernels), NaN is one
        t = self._templates.get(key)
        if t is None:  # the C++ function keeps the Template; this keeps its Python object
            t = self._templates.setdefault(key, self._fn.template(values))
        return t

    # -- call --------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            out = self._fn.call(*args, **kwargs)  # C++: None when the call needs the dispatcher
            if out is not None:
                return out
        return self._dispatch(args, kwargs)

    def _dispatch(self, args: tuple, kwargs: dict) -> torch.Tensor:
        """The call through torch.ops.kjit.elementwise (autograd, torch.compile, fake tensors, modes)."""
        tensors, scalars, out = self._bind(args, kwargs)
        if not torch.compiler.is_compiling():
            device = tensors[0].device
            if device.type != "cuda" or any(t.device != device for t in tensors):
                placed = ", ".join(f"{n} on {t.device}" for n, t in zip(self.inputs, tensors))
                raise _core.ValueError(
                    f"{self!r}: expected all inputs on one CUDA device, got {placed}; move them with .to('cuda')"
                )
        values = [float(scalars[s]) for s in self.scalars]
        if out is not None:
            if not isinstance(out, torch.Tensor):
                raise _core.TypeError(f"{self!r}: out must be a torch.Tensor, got {_tensor_desc(out)}")
            if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
                raise _core.ValueError(
                    f"{self!r}: out= does not record gradients, and an input requires grad; call "
                    "it without out= (or under torch.no_grad())"
                )
            # The dispatcher is needed (the direct call declined): compute through it, then copy.
            result = torch.ops.kjit.elementwise.default(self.spec, tensors, values)
            if out.shape != result.shape or out.dtype != result.dtype or out.device != result.device:
                raise _core.ValueError(
                    f"{self!r}: out must be a {result.dtype} tensor of shape {list(result.shape)} on "
                    f"{result.device}, got {_tensor_desc(out)}"
                )
            return out.copy_(result)
        return torch.ops.kjit.elementwise.default(self.spec, tensors, values)

    def _bind(self, args: tuple, kwargs: dict):
        if len(args) > len(self.inputs):
            raise _core.TypeError(
                f"{self!r} takes {len(self.inputs)} tensor(s) ({', '.join(self.inputs)}) and scalars "
                f"{list(self.scalars)} by keyword, got {len(args)} positional arguments"
            )
        kwargs = dict(kwargs)
        tensors = list(args)
        twice = [n for n in self.inputs[: len(args)] if n in kwargs]
        if twice:
            raise _core.TypeError(
                f"{self!r} got input '{twice[0]}' twice, by position and by keyword (inputs: {', '.join(self.inputs)})"
            )
        for name in self.inputs[len(args) :]:
            if name not in kwargs:
                raise _core.TypeError(f"{self!r} is missing input '{name}' (inputs: {', '.join(self.inputs)})")
            tensors.append(kwargs.pop(name))
        scalars = {}
        for s in self.scalars:
            if s in kwargs:
                v = kwargs.pop(s)
            elif s in self.defaults:
                v = self.defaults[s]
            else:
                raise _core.TypeError(f"{self!r} is missing scalar '{s}' (pass {s}=<number>)")
            if isinstance(v, torch.Tensor) and v.numel() == 1 and v.device.type == "cpu":
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _core.TypeError(
                    f"{self!r}: scalar '{s}' must be a Python int or float, got {_tensor_desc(v)}"
                    f"{_COMPLEX_SCALAR_HINT if isinstance(v, complex) else ''}"
                )
            scalars[s] = v
        out = kwargs.pop("out", None)
        if kwargs:
            raise _core.TypeError(
                f"{self!r} got unexpected keyword arguments {sorted(kwargs)}; inputs "
                f"{list(self.inputs)}, scalars {list(self.scalars)}, out="
            )
        for name, t in zip(self.inputs, tensors):
            if not isinstance(t, torch.Tensor):
                raise _core.TypeError(
                    f"{self!r}: input '{name}' must be a torch.Tensor, got {_tensor_desc(t)}; pass numbers as scalars"
                )
            if t.dtype not in _SUPPORTED:
                raise _core.TypeError(
                    f"{self!r}: input '{name}' has dtype {t.dtype}, which is not supported; "
                    f"allowed: {', '.join(str(d) for d in _SUPPORTED)}; convert it with "
                    f"{name}.to(torch.float32)"
                )
        return tensors, scalars, out

    def compile(
        self,
        *,
        arch: str,
        dtypes: torch.dtype | list[torch.dtype] | tuple[torch.dtype, ...],
        out_dtype: torch.dtype | None = None,
        vec: int = 1,
        tail: bool = False,
        index: torch.dtype = torch.int32,
        rank: int = 0,
        specialized_values: tuple = (),
    ) -> _core.Kernel:
        """Compiles one specialization for `arch` without a GPU (rank 0: the flat kernel; 1..6: strided)."""
        if isinstance(dtypes, torch.dtype):
            dtypes = (dtypes,)
        if not isinstance(dtypes, (list, tuple)):
            raise _core.TypeError(
                f"{self!r}: dtypes must be a tuple of torch.dtype, one per input "
                f"({', '.join(self.inputs)}), got {_tensor_desc(dtypes)}"
            )
        dtypes = tuple(dtypes)
        self._check_specialized_values(specialized_values)
        if len(dtypes) != len(self.inputs):
            raise _core.ValueError(f"{self!r}: dtypes gives {len(dtypes)} dtypes for {len(self.inputs)} inputs")
        out_dtype = out_dtype or self.dtype or functools.reduce(torch.promote_types, dtypes)
        for what, d in [*(("input '" + n + "'", d) for n, d in zip(self.inputs, dtypes)), ("out_dtype", out_dtype)]:
            if d not in _SUPPORTED:
                raise _core.TypeError(
                    f"{self!r}: {what} has dtype {d}, which is not supported; allowed: "
                    f"{', '.join(str(a) for a in _SUPPORTED)}"
                )
        # Type parameters name real types; kjit_cx marks the complex ones (bit 0 the result, 1 the compute
        # type, 2 + i input i), as the C++ call passes them.
        real = lambda d: _REAL_OF.get(d, d)  # noqa: E731
        params = {f"T_{n}": real(d) for n, d in zip(self.inputs, dtypes)}
        compute = _compute_dtype(out_dtype, dtypes)
        mask = (out_dtype in _COMPLEX) | (compute in _COMPLEX) << 1
        for i, d in enumerate(dtypes):
            mask |= (d in _COMPLEX) << (2 + i)
        # The family a call of this result dtype and rank uses (its template and compile options: C++ decides).
        family = self._fn.kernel_family([float(v) for v in specialized_values], rank, out_dtype)
        if rank == 0:
            return family.specialize(
                arch=arch, TO=real(out_dtype), C=real(compute), VEC=vec, TAIL=tail, I=index, kjit_cx=mask, **params
            )
        return family.specialize(arch=arch, TO=real(out_dtype), C=real(compute), I=index, kjit_cx=mask, **params)

    def __repr__(self) -> str:
        return f"kjit.elementwise({self.name!r}: {self.expr!r})"


def _json_float(v) -> float | str:
    """A default for the JSON spec: a number, or 'nan' / 'inf' / '-inf' (JSON has no such numbers)."""
    v = float(v)
    return v if v == v and v not in (float("inf"), float("-inf")) else repr(v)


def _check_expression(expr: str, what: str) -> None:
    if any(tok in expr for tok in _NOT_AN_EXPRESSION):
        raise _core.ValueError(
            f"kjit.elementwise: {what} {expr!r} must be one C++ expression (no ';', braces, "
            "comments or preprocessor lines) on one line: no line breaks, backslashes, '#' or its "
            "digraphs and trigraph ('%:', '<%', '%>', '??=')"
        )


def elementwise(
    expr: str,
    inputs: Names,
    scalars: ScalarNames = (),
    *,
    specialize: Iterable[str] = (),
    dtype: torch.dtype | None = None,
    name: str | None = None,
    grads: dict | None = None,
) -> Elementwise:
    """A fused elementwise function of `inputs` (tensor names) and `scalars` (names, or a dict of
    names to default values); `grads` gives the derivative of the expression for some inputs (a C++
    expression each; the others are derived); see the module documentation."""
    return Elementwise(expr, inputs, scalars, specialize=specialize, dtype=dtype, name=name, grads=grads)
