"""kjit.elementwise: fused elementwise kernels from a C++ expression, specialized per call.

    silu_scaled = kjit.elementwise("x * sigmoid(x) * scale", inputs="x", scalars="scale")
    y = silu_scaled(x, scale=0.5)          # one kernel; `scale` is a runtime argument

The expression is C++ over the named inputs and scalars, evaluated in the compute type ``C``: float
for float16 / bfloat16 results, otherwise the result dtype itself. The functions of
``kernel_templates/math.cuh`` are available (relu, sigmoid, silu, gelu, gelu_tanh, their ``*_backward``,
exp_, log_, erf_, tanh_) besides CUDA's own math functions (expf, tanhf, ...).

Semantics:
- Inputs follow PyTorch broadcasting; the result dtype is the promotion of the inputs' dtypes
  (``torch.promote_types``) unless ``dtype=`` fixes it. Scalars take the compute type.
- Scalars are runtime kernel arguments (changing one never recompiles) unless named in
  ``specialize=``: then each distinct value is compiled into the kernel once and cached.
- float16 / bfloat16 results use the hardware exp in kjit_math's functions (KJIT_FAST_EXP).
- Every call is specialized on the dtypes, on the vector width (16-byte loads and stores when every
  pointer is aligned and the inputs are contiguous with the output's shape; narrower otherwise), on
  whether the size is a multiple of that width, and on the index type (32-bit when every offset fits,
  64-bit otherwise). Broadcast and strided inputs are read through their strides (no copies).
- Calls go to the current stream of the tensors' device and are legal inside CUDA graph capture once
  warmed up. Functions built here are plain callables (as torch.cuda.jiterator's are): use the
  built-in ops (kjit.ops.*) under torch.compile.
"""

from __future__ import annotations

import keyword
import math
import re
import threading
from typing import Iterable

import torch

from . import _C

__all__ = ["Elementwise", "elementwise"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names the generated code declares (template parameters of the kernels and of the expression's
# functor), `out` (the call's keyword for the output) and C++ keywords; the generated kernel's own parameters all start with "kjit_".
_RESERVED = {"C", "TO", "I", "VEC", "TAIL", "out"} | {
    "alignas", "alignof", "auto", "bool", "break", "case", "catch", "char", "class", "const", "constexpr",
    "const_cast", "continue", "decltype", "default", "delete", "do", "double", "dynamic_cast", "else", "enum",
    "explicit", "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable",
    "namespace", "new", "noexcept", "nullptr", "operator", "private", "protected", "public", "register",
    "reinterpret_cast", "return", "short", "signed", "sizeof", "static", "static_assert", "static_cast", "struct",
    "switch", "template", "this", "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned",
    "using", "virtual", "void", "volatile", "while"}
_SUPPORTED = (
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16, torch.int32,
    torch.int64, torch.uint8, torch.bool,
)
_HALF = (torch.float16, torch.bfloat16)
_MAX_RANK = 6  # strided kernels exist for 1..6 coalesced dims; more are made contiguous first
_INT32_LIMIT = 2**31 - 1
_BLOCK, _UNROLL = 256, 1  # kjit_ew::kBlock, kjit_ew::kUnroll


def _names(value, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in re.split(r"[\s,]+", value) if v]
    if not isinstance(value, (list, tuple, dict)):
        raise _C.TypeError(f"kjit.elementwise: {what} must be a name, a list of names or a string of names "
                           f"separated by commas, got {value!r}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not _IDENT.match(name) or keyword.iskeyword(name) or name in _RESERVED \
                or name.startswith(("kjit_", "T_", "__")):
            raise _C.ValueError(f"kjit.elementwise: {what} name {name!r} is not usable: names are C++ identifiers, "
                                "not C++ keywords, not C, TO, I, VEC, TAIL or out, and not starting with 'kjit_', 'T_' or "
                                "'__'")
    return names


def _cpp_float(value: float) -> str:
    if math.isnan(value):
        return "__int_as_float(0x7fffffff)"
    if math.isinf(value):
        return "(1.0 / 0.0)" if value > 0 else "(-1.0 / 0.0)"
    return float(value).hex()


def _compute_dtype(out: torch.dtype) -> torch.dtype:
    return torch.float32 if out in _HALF else out


def _tensor_desc(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {list(t.shape)} on {t.device}"
    return f"{type(t).__name__} {t!r}"


class Elementwise:
    """A fused elementwise function; see kjit.elementwise()."""

    def __init__(self, expr: str, inputs, scalars=(), *, specialize: Iterable[str] = (),
                 dtype: torch.dtype | None = None, name: str | None = None):
        if not isinstance(expr, str) or not expr.strip():
            raise _C.TypeError(f"kjit.elementwise: the expression must be a non-empty string of C++, got {expr!r}")
        if any(tok in expr for tok in (";", "{", "}", "#", "//", "/*")):
            raise _C.ValueError(f"kjit.elementwise: the expression {expr!r} must be one C++ expression "
                                "(no ';', braces, comments or preprocessor lines)")
        if name is not None and not isinstance(name, str):
            raise _C.TypeError(f"kjit.elementwise: name must be a str (it names the kernel in messages and the "
                               f"cache), got {_tensor_desc(name)}")
        self.expr = expr.strip()
        self.inputs = _names(inputs, "input")
        if not self.inputs:
            raise _C.ValueError("kjit.elementwise: at least one input tensor is needed")
        self.defaults: dict[str, float] = dict(scalars) if isinstance(scalars, dict) else {}
        self.scalars = _names(scalars, "scalar")
        for s, v in self.defaults.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _C.TypeError(f"kjit.elementwise: the default of scalar '{s}' must be a Python int or float, "
                                   f"got {_tensor_desc(v)}")
        dup = sorted({n for n in self.inputs + self.scalars if (self.inputs + self.scalars).count(n) > 1})
        if dup:
            raise _C.ValueError(f"kjit.elementwise: names {dup} are given more than once")
        if specialize is None:
            specialize = ()
        elif not isinstance(specialize, (str, list, tuple, dict)) and hasattr(specialize, "__iter__"):
            specialize = tuple(specialize)  # a set, a generator ...
        self.specialized = _names(specialize, "specialized scalar")
        dup = sorted({s for s in self.specialized if self.specialized.count(s) > 1})
        if dup:
            raise _C.ValueError(f"kjit.elementwise: specialize names {dup} more than once")
        unknown = [s for s in self.specialized if s not in self.scalars]
        if unknown:
            raise _C.ValueError(f"kjit.elementwise: specialize={list(self.specialized)} names {unknown}, which are "
                                f"not scalars; the scalars are {list(self.scalars)}")
        self.runtime = tuple(s for s in self.scalars if s not in self.specialized)
        if dtype is not None and dtype not in _SUPPORTED:
            raise _C.TypeError(f"kjit.elementwise: dtype={dtype} is not supported; allowed: "
                               f"{', '.join(str(d) for d in _SUPPORTED)}")
        self.dtype = dtype
        self.name = name or "elementwise"
        self._lock = threading.Lock()
        self._templates: dict[tuple, _C.Template] = {}  # specialized scalar values -> Template
        self._kernels: dict[tuple, _C.Kernel] = {}       # full specialization -> loaded Kernel

    # -- source ------------------------------------------------------------------------------------
    def source(self, specialized_values: tuple = ()) -> str:
        """The generated CUDA source for these specialized scalar values (one flat and six strided kernels)."""
        self._check_specialized_values(specialized_values)
        members = "".join(f"  C {s};\n" for s in self.runtime)
        consts = "".join(f"    const C {s} = static_cast<C>({_cpp_float(v)});\n"
                         for s, v in zip(self.specialized, specialized_values))
        params = ", ".join(f"C {n}" for n in self.inputs)
        init = ", ".join(f"static_cast<C>({s})" for s in self.runtime)
        scalar_params = "".join(f", double {s}" for s in self.runtime)
        types = ", ".join(f"typename T_{n}" for n in self.inputs)
        lines = [
            # One comment line: a multi-line expression (or name) must not spill out of it into the code.
            f"// kjit.elementwise {self.name}: {self.expr}".replace("\r", " ").replace("\n", " "),
            '#include "elementwise.cuh"',
            "",
            "template <typename C>",
            "struct kjit_expr {",
            members.rstrip("\n"),
            f"  __device__ __forceinline__ C operator()({params}) const {{",
            "    using namespace kjit_math;",
            consts.rstrip("\n"),
            f"    return static_cast<C>({self.expr});",
            "  }",
            "};",
            "",
            f"template <typename TO, typename C, int VEC, bool TAIL, typename I, {types}>",
            "__global__ void __launch_bounds__(kjit_ew::kBlock) kjit_elementwise(TO* __restrict__ kjit_out, I kjit_n"
            + "".join(f", const T_{n}* __restrict__ {n}" for n in self.inputs) + scalar_params + ") {",
            f"  kjit_ew::flat<C, VEC, TAIL>(kjit_expr<C>{{{init}}}, kjit_out, kjit_n, {', '.join(self.inputs)});",
            "}",
        ]
        for r in range(1, _MAX_RANK + 1):
            sizes = ", ".join(f"I kjit_size{d}" for d in range(r))
            strided = "".join(
                f", const T_{n}* __restrict__ {n}" + "".join(f", I kjit_stride{d}_{n}" for d in range(r))
                for n in self.inputs)
            ins = ", ".join(
                f"kjit_ew::StridedIn<T_{n}, I, {r}>{{{n}, {{{', '.join(f'kjit_stride{d}_{n}' for d in range(r))}}}}}"
                for n in self.inputs)
            lines += [
                "",
                f"template <typename TO, typename C, typename I, {types}>",
                f"__global__ void __launch_bounds__(kjit_ew::kBlock) kjit_elementwise_strided{r}("
                f"TO* __restrict__ kjit_out, I kjit_n, {sizes}{strided}{scalar_params}) {{",
                f"  const I kjit_size[{r}] = {{{', '.join(f'kjit_size{d}' for d in range(r))}}};",
                f"  kjit_ew::strided<C, {r}>(kjit_expr<C>{{{init}}}, kjit_out, kjit_n, kjit_size, {ins});",
                "}",
            ]
        return "\n".join(line for line in lines if line != "") + "\n"

    def _check_specialized_values(self, values) -> None:
        if not isinstance(values, (list, tuple)) or len(values) != len(self.specialized) or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
            raise _C.ValueError(f"{self!r}: specialized_values must be a tuple of one number per specialized scalar "
                                f"{list(self.specialized)}, got {_tensor_desc(values)}")

    def template(self, specialized_values: tuple = ()) -> _C.Template:
        """The kjit.Template of the generated source (one per tuple of specialized scalar values)."""
        t = self._templates.get(specialized_values)
        if t is None:
            with self._lock:
                t = self._templates.get(specialized_values)
                if t is None:
                    t = _C.Template(self.source(specialized_values), name=f"kjit_elementwise_{self.name}")
                    self._templates[specialized_values] = t
        return t

    # -- call --------------------------------------------------------------------------------------
    def _bind(self, args: tuple, kwargs: dict):
        if len(args) > len(self.inputs):
            raise _C.TypeError(f"{self!r} takes {len(self.inputs)} tensor(s) ({', '.join(self.inputs)}) and scalars "
                               f"{list(self.scalars)} by keyword, got {len(args)} positional arguments")
        tensors = list(args)
        twice = [n for n in self.inputs[:len(args)] if n in kwargs]
        if twice:
            raise _C.TypeError(f"{self!r} got input '{twice[0]}' twice, by position and by keyword "
                               f"(inputs: {', '.join(self.inputs)})")
        for name in self.inputs[len(args):]:
            if name not in kwargs:
                raise _C.TypeError(f"{self!r} is missing input '{name}' (inputs: {', '.join(self.inputs)})")
            tensors.append(kwargs.pop(name))
        scalars = {}
        for s in self.scalars:
            if s in kwargs:
                v = kwargs.pop(s)
            elif s in self.defaults:
                v = self.defaults[s]
            else:
                raise _C.TypeError(f"{self!r} is missing scalar '{s}' (pass {s}=<number>)")
            if isinstance(v, torch.Tensor) and v.numel() == 1 and v.device.type == "cpu":
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _C.TypeError(f"{self!r}: scalar '{s}' must be a Python int or float, got {_tensor_desc(v)}")
            scalars[s] = v
        out = kwargs.pop("out", None)
        if kwargs:
            raise _C.TypeError(f"{self!r} got unexpected keyword arguments {sorted(kwargs)}; inputs "
                               f"{list(self.inputs)}, scalars {list(self.scalars)}, out=")
        for name, t in zip(self.inputs, tensors):
            if not isinstance(t, torch.Tensor):
                raise _C.TypeError(f"{self!r}: input '{name}' must be a torch.Tensor, got {_tensor_desc(t)}; "
                                   "pass numbers as scalars")
            if t.dtype not in _SUPPORTED:
                raise _C.TypeError(f"{self!r}: input '{name}' has dtype {t.dtype}, which is not supported; "
                                   f"allowed: {', '.join(str(d) for d in _SUPPORTED)}")
        return tensors, scalars, out

    def __call__(self, *args, **kwargs) -> torch.Tensor:
        tensors, scalars, out = self._bind(args, kwargs)
        device = tensors[0].device
        if device.type != "cuda" or any(t.device != device for t in tensors):
            placed = ", ".join(f"{n} on {t.device}" for n, t in zip(self.inputs, tensors))
            raise _C.ValueError(f"{self!r}: expected all inputs on one CUDA device, got {placed}; move them with "
                                ".to('cuda')")
        dtype = self.dtype
        if dtype is None:
            dtype = tensors[0].dtype
            for t in tensors[1:]:
                dtype = torch.promote_types(dtype, t.dtype)
        shape = tensors[0].shape
        same = all(t.shape == shape for t in tensors)
        if not same:
            try:
                shape = torch.broadcast_shapes(*(t.shape for t in tensors))
            except RuntimeError:
                shapes = ", ".join(f"{n} {list(t.shape)}" for n, t in zip(self.inputs, tensors))
                raise _C.ValueError(f"{self!r}: the input shapes do not broadcast: {shapes}") from None
        if out is None:
            out = torch.empty(shape, dtype=dtype, device=device)
        else:
            self._check_out(out, shape, dtype, device, tensors)
        n = out.numel()
        if n == 0:
            return out
        spec_values = tuple(float(scalars[s]) for s in self.specialized)
        runtime = [scalars[s] for s in self.runtime]
        if same and all(t.is_contiguous() for t in tensors):
            self._launch_flat(tensors, out, n, dtype, spec_values, runtime)
        else:
            self._launch_strided(tensors, out, n, dtype, spec_values, runtime)
        return out

    def _check_out(self, out, shape, dtype, device, tensors):
        if not isinstance(out, torch.Tensor):
            raise _C.TypeError(f"{self!r}: out must be a torch.Tensor, got {_tensor_desc(out)}")
        if out.shape != shape or out.dtype != dtype or out.device != device or not out.is_contiguous():
            raise _C.ValueError(f"{self!r}: out must be a contiguous {dtype} tensor of shape {list(shape)} on "
                                f"{device}, got {_tensor_desc(out)} (contiguous: {out.is_contiguous()})")
        # In place (out is an input, element for element) is fine; any other overlap is not.
        lo, hi = out.data_ptr(), out.data_ptr() + out.numel() * out.element_size()
        for name, t in zip(self.inputs, tensors):
            if t.data_ptr() == lo and t.shape == out.shape and t.stride() == out.stride() and t.dtype == out.dtype:
                continue
            span = (max(t.shape[d] - 1, 0) * t.stride(d) for d in range(t.dim()))
            t_hi = t.data_ptr() + (sum(span) + 1) * t.element_size()
            if t.numel() and t.data_ptr() < hi and lo < t_hi:
                raise _C.ValueError(f"{self!r}: out overlaps input '{name}' without being that very tensor; pass a "
                                    "separate out (or the input itself, for in place)")

    @staticmethod
    def _options(out_dtype: torch.dtype) -> dict:
        # 16-bit results: kjit_math's exp_ uses the hardware exp (far below one rounding of the result).
        return {"defines": {"KJIT_FAST_EXP": "1"}} if out_dtype in _HALF else {}

    def _kernel(self, key: tuple, spec_values: tuple, kernel_name: str, device: torch.device, **params):
        k = self._kernels.get(key)
        if k is None:
            family = self.template(spec_values).kernel(kernel_name, **self._options(params["TO"]))
            k = family.specialize(device=device, **params)
            self._kernels[key] = k
        return k

    def _launch_flat(self, tensors, out, n, dtype, spec_values, runtime):
        vec = 16 // max(t.element_size() for t in (out, *tensors))
        while vec > 1 and any(t.data_ptr() % (vec * t.element_size()) for t in (out, *tensors)):
            vec //= 2
        index = torch.int32 if n <= _INT32_LIMIT else torch.int64
        tail = n % vec != 0
        dtypes = tuple(t.dtype for t in tensors)
        key = ("flat", out.device.index, dtypes, dtype, vec, tail, index, spec_values)
        k = self._kernel(key, spec_values, "kjit_elementwise", out.device, TO=dtype, C=_compute_dtype(dtype),
                         VEC=vec, TAIL=tail, I=index,
                         **{f"T_{name}": t.dtype for name, t in zip(self.inputs, tensors)})
        blocks = max(1, -(-(n // vec) // (_BLOCK * _UNROLL)))
        k.launch(blocks, _BLOCK, out, n, *tensors, *runtime)

    def _launch_strided(self, tensors, out, n, dtype, spec_values, runtime):
        shape = list(out.shape)
        strides = [list(t.expand(out.shape).stride()) if t.shape != out.shape else list(t.stride())
                   for t in tensors]
        # Coalesce: drop size-1 dims, merge neighbours that are contiguous with each other in every input.
        dims = [d for d in range(len(shape)) if shape[d] != 1] or [len(shape) - 1 if shape else None]
        sizes: list[int] = []
        per_input: list[list[int]] = [[] for _ in tensors]
        for d in dims:
            size = shape[d] if d is not None else 1
            st = [s[d] if d is not None else 0 for s in strides]
            if sizes and all(p[-1] == s * size for p, s in zip(per_input, st)):
                sizes[-1] *= size
                for p, s in zip(per_input, st):
                    p[-1] = s
                continue
            sizes.append(size)
            for p, s in zip(per_input, st):
                p.append(s)
        if len(sizes) > _MAX_RANK:
            # Rare: more than 6 dims that cannot be merged. Materialize the inputs in the output's shape.
            tensors = [t.expand(out.shape).contiguous() for t in tensors]
            return self._launch_flat(tensors, out, n, dtype, spec_values, runtime)
        reach = max(sum((sz - 1) * s for sz, s in zip(sizes, p)) for p in per_input)
        index = torch.int32 if max(n, reach) <= _INT32_LIMIT else torch.int64
        r = len(sizes)
        dtypes = tuple(t.dtype for t in tensors)
        key = ("strided", out.device.index, dtypes, dtype, r, index, spec_values)
        k = self._kernel(key, spec_values, f"kjit_elementwise_strided{r}", out.device, TO=dtype,
                         C=_compute_dtype(dtype), I=index,
                         **{f"T_{name}": t.dtype for name, t in zip(self.inputs, tensors)})
        args = [out, n, *sizes]
        for t, p in zip(tensors, per_input):
            args += [t, *p]
        blocks = -(-n // (_BLOCK * _UNROLL))
        k.launch(blocks, _BLOCK, *args, *runtime)

    def compile(self, *, arch: str, dtypes, out_dtype: torch.dtype | None = None, vec: int = 1, tail: bool = False,
                index: torch.dtype = torch.int32, rank: int = 0, specialized_values: tuple = ()):
        """Compiles one specialization for `arch` without a GPU (rank 0: the flat kernel; 1..6: strided)."""
        if isinstance(dtypes, torch.dtype):
            dtypes = (dtypes,)
        if not isinstance(dtypes, (list, tuple)):
            raise _C.TypeError(f"{self!r}: dtypes must be a tuple of torch.dtype, one per input "
                               f"({', '.join(self.inputs)}), got {_tensor_desc(dtypes)}")
        dtypes = tuple(dtypes)
        self._check_specialized_values(specialized_values)
        if len(dtypes) != len(self.inputs):
            raise _C.ValueError(f"{self!r}: dtypes gives {len(dtypes)} dtypes for {len(self.inputs)} inputs")
        out_dtype = out_dtype or self.dtype or dtypes[0]
        if out_dtype is None:
            raise _C.ValueError("out_dtype is needed")
        params = {f"T_{n}": d for n, d in zip(self.inputs, dtypes)}
        t = self.template(tuple(float(v) for v in specialized_values))
        if rank == 0:
            return t.kernel("kjit_elementwise", **self._options(out_dtype)).specialize(arch=arch, TO=out_dtype, C=_compute_dtype(out_dtype),
                                                          VEC=vec, TAIL=tail, I=index, **params)
        return t.kernel(f"kjit_elementwise_strided{rank}", **self._options(out_dtype)).specialize(
            arch=arch, TO=out_dtype, C=_compute_dtype(out_dtype), I=index, **params)

    def __repr__(self) -> str:
        return f"kjit.elementwise({self.name!r}: {self.expr!r})"


def elementwise(expr: str, inputs, scalars=(), *, specialize: Iterable[str] = (), dtype: torch.dtype | None = None,
                name: str | None = None) -> Elementwise:
    """A fused elementwise function of `inputs` (tensor names) and `scalars` (names, or a dict of
    names to default values); see the module documentation."""
    return Elementwise(expr, inputs, scalars, specialize=specialize, dtype=dtype, name=name)
