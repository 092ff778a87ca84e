"""The convenience layer: a kernel family bound to a launch recipe, called like a function.

    add = kjit.launcher(
        kjit.Template.builtin("add_constant").kernel("add_constant"),
        grid=lambda x, y, c, n: kjit.cdiv(n, 4 * 256), block=256,
        T=kjit.arg("x").dtype, VEC=4)
    add(x, y, 5.0, x.numel())          # specialize (a memory hit after the first call) + launch

Template parameters are constants or are read from the call's arguments: ``kjit.arg("x").dtype``,
``kjit.arg("x").numel``, ``kjit.arg("x").shape[d]``, ``kjit.arg("x").stride[d]``, ``kjit.arg("n")``
(the value itself; by kernel parameter name or position), or any callable of the call's arguments.
``grid``, ``block`` and ``shared_mem`` are constants or callables of the call's arguments.

Arrays of other frameworks (CuPy, JAX, Numba, TensorFlow: ``__cuda_array_interface__`` or
``__dlpack__``) are taken where tensors are: ``kjit.arg("x").dtype`` is then the array's dtype (numpy /
JAX dtypes specialize like torch dtypes), ``.numel``, ``.shape[d]``, ``.stride[d]`` (in elements) and
``.ndim`` come from its shape and strides.

Every call checks its arrays: CUDA, one device, contiguous, and the dtype each pointer parameter
declares (e.g. ``const T*`` with T = float32 takes a torch.float32 tensor). A call whose grid has no
blocks (empty tensors) launches nothing. Launches go to the current stream of the tensors' device, or
``stream=`` (any stream Kernel.launch takes; a kernel parameter named ``stream`` takes precedence);
without tensors, to the arrays' producer stream (see Kernel.launch).
"""

from __future__ import annotations

import math
import operator

from . import _core

try:
    import torch
except ImportError:  # kjit without torch: arrays of other frameworks only
    torch = None

# isinstance() against this is False for everything when torch is absent.
_Tensor = torch.Tensor if torch is not None else type("_NoTensor", (), {})

__all__ = ["Launcher", "arg", "cdiv", "launcher"]

_DTYPES = (
    {}
    if torch is None
    else {
        "float32": torch.float32,
        "float64": torch.float64,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
        "int8": torch.int8,
        "int16": torch.int16,
        "int32": torch.int32,
        "int64": torch.int64,
        "uint8": torch.uint8,
        "uint16": torch.uint16,
        "uint32": torch.uint32,
        "uint64": torch.uint64,
        "bool": torch.bool,
    }
)


def _is_array(x) -> bool:
    """An array of another framework (not a tensor): it speaks the CUDA Array Interface or DLPack."""
    return hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__")


def _layout(x) -> tuple:
    """(shape, strides in elements): a tensor's own; an array's from its CUDA Array Interface, else its
    .shape and numpy-style .strides (bytes), else C-contiguous (JAX, TensorFlow)."""
    if isinstance(x, _Tensor):
        return tuple(x.shape), x.stride()
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        shape, byte_strides, itemsize = tuple(cai["shape"]), cai.get("strides"), int(cai["typestr"][2:])
    else:
        shape, byte_strides = tuple(int(s) for s in x.shape), getattr(x, "strides", None)
        itemsize = x.dtype.itemsize if byte_strides is not None else 1
    if byte_strides is not None:
        return shape, tuple(int(b) // itemsize for b in byte_strides)
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return shape, tuple(reversed(strides))


def _dtype(x):
    """A tensor's or array's dtype; for a bare __cuda_array_interface__ producer, its dtype name."""
    if not isinstance(x, _Tensor) and not hasattr(x, "dtype") and hasattr(x, "__cuda_array_interface__"):
        return _core.array_info(x)["dtype"]
    return x.dtype


def _numel(x) -> int:
    return x.numel() if isinstance(x, _Tensor) else math.prod(_layout(x)[0])


def _is_contiguous(x) -> bool:
    shape, strides = _layout(x)
    if 0 in shape:
        return True
    step = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


def cdiv(a: int, b: int) -> int:
    """Ceiling division: the number of blocks of `b` that cover `a`."""
    return -(-a // b)


class arg:
    """An argument of the call, by kernel parameter name (``arg("x")``) or position (``arg(0)``).

    As a template parameter value it stands for the argument itself; ``.dtype``, ``.numel``,
    ``.shape[d]``, ``.stride[d]`` and ``.ndim`` stand for those properties of a tensor argument.
    """

    __slots__ = ("which",)

    def __init__(self, which: str | int):
        if isinstance(which, bool) or not isinstance(which, (str, int)):
            raise _core.TypeError(f"kjit.arg() takes a parameter name or position, got {which!r}")
        self.which = which

    @property
    def dtype(self) -> _Derived:
        return _Derived(self, "dtype", None)

    @property
    def numel(self) -> _Derived:
        return _Derived(self, "numel", None)

    @property
    def ndim(self) -> _Derived:
        return _Derived(self, "ndim", None)

    @property
    def shape(self) -> _Indexed:
        return _Indexed(self, "shape")

    @property
    def stride(self) -> _Indexed:
        return _Indexed(self, "stride")

    def _getter(self, index: int):
        return operator.itemgetter(index)

    def _describe(self) -> str:
        return f"kjit.arg({self.which!r})"

    def __repr__(self) -> str:
        return self._describe()


class _Indexed:
    __slots__ = ("ref", "what")

    def __init__(self, ref: arg, what: str):
        self.ref, self.what = ref, what

    def __getitem__(self, d: int) -> _Derived:
        if isinstance(d, bool) or not isinstance(d, int):
            raise _core.TypeError(f"{self.ref._describe()}.{self.what}[...] takes an int dimension, got {d!r}")
        return _Derived(self.ref, self.what, d)

    def __repr__(self) -> str:
        return f"{self.ref._describe()}.{self.what}"


class _Derived:
    """A property of a tensor argument (dtype, numel, ndim, shape[d], stride[d])."""

    __slots__ = ("ref", "what", "dim")

    def __init__(self, ref: arg, what: str, dim: int | None):
        self.ref, self.what, self.dim = ref, what, dim

    def _getter(self, i: int):
        what, d = self.what, self.dim
        if what == "dtype":
            return lambda a: _dtype(a[i])
        if what == "numel":
            return lambda a: _numel(a[i])
        # Tensors first, through their own methods (the common case, kept cheap).
        if what == "ndim":
            return lambda a: a[i].dim() if isinstance(a[i], _Tensor) else len(_layout(a[i])[0])
        if what == "shape":
            return lambda a: a[i].shape[d] if isinstance(a[i], _Tensor) else _layout(a[i])[0][d]
        return lambda a: a[i].stride(d) if isinstance(a[i], _Tensor) else _layout(a[i])[1][d]

    def _describe(self) -> str:
        tail = f"[{self.dim}]" if self.dim is not None else ""
        return f"{self.ref._describe()}.{self.what}{tail}"

    def __repr__(self) -> str:
        return self._describe()


def _shape(t) -> str:
    return "[" + ", ".join(str(s) for s in _layout(t)[0]) + "]"


def _strides(t) -> str:
    return "[" + ", ".join(str(s) for s in _layout(t)[1]) + "]"


def _device_message(named: list[tuple[str, str]]) -> str:
    """ "expected all tensors on one CUDA device, got cuda:0 (x) and cpu (y); ..." (as the C++ core says it)."""
    groups: dict[str, list[str]] = {}
    first_cuda = None
    for name, dev in named:
        if first_cuda is None and dev.startswith("cuda"):
            first_cuda = dev
        groups.setdefault(dev, []).append(name)
    parts = [f"{dev} ({', '.join(names)})" for dev, names in groups.items()]
    got = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"expected all tensors on one CUDA device, got {got}; move them with .to('{first_cuda or 'cuda'}')"


def _dims(value, what: str):
    if isinstance(value, bool):
        raise _core.TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    if isinstance(value, int):
        return value
    if (
        isinstance(value, (tuple, list))
        and 1 <= len(value) <= 3
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return tuple(value)
    raise _core.TypeError(
        f"{what} must be an int or a tuple of 1 to 3 ints (or a callable of the call's "
        f"arguments returning one), got {value!r}"
    )


def _empty(grid) -> bool:
    return grid == 0 if isinstance(grid, int) else any(g == 0 for g in grid)


class Launcher:
    """A kernel family with a launch recipe; see kjit.launcher()."""

    def __init__(self, family: _core.KernelFamily, *, grid, block=256, shared_mem=0, specialize: dict):
        if not isinstance(family, _core.KernelFamily):
            raise _core.TypeError(
                f"kjit.launcher() takes a kjit.KernelFamily (template.kernel(name)), got {type(family).__name__}"
            )
        self.family = family
        self.name = family.name
        self._names = [name for name, _ in family.args]
        self._signature = "(" + ", ".join(self._names) + ")"
        template_params = {p[0] for p in family.params}
        self._const: dict = {}
        self._dynamic: list = []  # (template parameter, getter(args), source)
        for key, value in specialize.items():
            if key not in template_params:
                raise _core.ValueError(
                    f"kernel '{self.name}' has no template parameter '{key}'; its parameters are {family.param_summary}"
                )
            if isinstance(value, (arg, _Derived)):
                self._dynamic.append((key, value._getter(self._index(value)), value._describe()))
            elif (
                callable(value)
                and not isinstance(value, type)
                and not (torch is not None and isinstance(value, torch.dtype))
            ):  # np.float32 is a type
                self._dynamic.append((key, lambda a, f=value: f(*a), getattr(value, "__name__", repr(value))))
            else:
                self._const[key] = value
        self._grid = grid if callable(grid) else _dims(grid, "grid")
        self._block = block if callable(block) else _dims(block, "block")
        if isinstance(shared_mem, bool) or not (callable(shared_mem) or isinstance(shared_mem, int)):
            raise _core.TypeError(f"shared_mem must be an int or a callable, got {shared_mem!r}")
        self._shared_mem = shared_mem
        self._dtype_checks: dict = {}  # Kernel -> [(position, torch.dtype, cpp type)]

    def _index(self, ref) -> int:
        which = ref.ref.which if isinstance(ref, _Derived) else ref.which
        if isinstance(which, int):
            if not -len(self._names) <= which < len(self._names):
                raise _core.ValueError(
                    f"{ref!r}: kernel '{self.name}' has {len(self._names)} parameters {self._signature}"
                )
            return which % len(self._names)
        try:
            return self._names.index(which)
        except ValueError:
            raise _core.ValueError(
                f"{ref!r}: kernel '{self.name}' has no parameter '{which}'; its parameters are {self._signature}"
            ) from None

    def _bind(self, args: tuple, kwargs: dict) -> tuple:
        values = list(args) + [_MISSING] * (len(self._names) - len(args))
        if len(args) > len(self._names):
            self._wrong_count(len(args) + len(kwargs))
        for key, value in kwargs.items():
            try:
                i = self._names.index(key)
            except ValueError:
                raise _core.TypeError(
                    f"kernel {self.name} has no parameter '{key}'; its parameters are {self._signature}"
                ) from None
            if values[i] is not _MISSING:
                raise _core.TypeError(f"kernel {self.name} got argument '{key}' twice")
            values[i] = value
        missing = [n for n, v in zip(self._names, values) if v is _MISSING]
        if missing:
            raise _core.TypeError(
                f"kernel {self.name} takes {len(self._names)} arguments {self._signature}, missing {', '.join(missing)}"
            )
        return tuple(values)

    def _wrong_count(self, n: int):
        raise _core.TypeError(f"kernel {self.name} takes {len(self._names)} arguments {self._signature}, got {n}")

    def _device(self, args: tuple):
        """The CUDA device of the call's tensors and arrays (None when there are none); checks them."""
        device = None
        bad = False
        named = []  # (name, device) of each tensor and array, for the message
        arrays = []
        for name, a in zip(self._names, args):
            if isinstance(a, _Tensor):
                named.append((name, str(a.device)))
                if not a.is_cuda:
                    bad = True
                    continue
                d = a.get_device()
            elif _is_array(a):
                # Refuses arrays outside CUDA memory, naming them; None: an empty array, no memory.
                d = _core.array_info(a, f"argument '{name}' of {self.name}")["device"]
                arrays.append((name, a))
                if d is None:
                    continue
                named.append((name, f"cuda:{d}"))
            else:
                continue
            if device is None:
                device = d
            elif d != device:
                bad = True
        if bad:
            raise _core.ValueError(f"{self.name}: {_device_message(named)}")
        for name, a in zip(self._names, args):
            if isinstance(a, _Tensor) and not a.is_contiguous():
                raise _core.ValueError(
                    f"{self.name}: argument '{name}' is not contiguous (shape {_shape(a)}, "
                    f"strides {_strides(a)}): call {name}.contiguous() first"
                )
        for name, a in arrays:
            if not _is_contiguous(a):
                raise _core.ValueError(
                    f"{self.name}: argument '{name}' is not contiguous (shape {_shape(a)}, "
                    f"strides {_strides(a)} in elements): pass a C-contiguous copy (e.g. "
                    f"cupy.ascontiguousarray({name}))"
                )
        return device

    def specialize(self, *args, **kwargs) -> _core.Kernel:
        """The kernel a call with these arguments launches (checks them as a call does)."""
        if kwargs:
            args = self._bind(args, kwargs)
        elif len(args) != len(self._names):
            self._wrong_count(len(args))
        device = self._device(args)
        params = self._const
        if self._dynamic:
            params = dict(params)
            for key, get, source in self._dynamic:
                try:
                    params[key] = get(args)
                except (AttributeError, TypeError, IndexError) as e:
                    raise _core.TypeError(f"{self.name}: {key}={source} cannot be read from this call: {e}") from None
        kernel = self.family.specialize(device=device, **params)
        checks = self._dtype_checks.get(kernel)
        if checks is None:
            checks = [
                (i, _DTYPES[dt], cpp)
                for i, (_, kind, cpp, dt) in enumerate(kernel.params)
                if kind == "pointer" and dt is not None and torch is not None
            ]
            self._dtype_checks[kernel] = checks
        for i, dtype, cpp in checks:
            a = args[i]
            if isinstance(a, _Tensor) and a.dtype != dtype:  # arrays: Kernel.launch checks them
                name = self._names[i]
                raise _core.TypeError(
                    f"{self.name}: argument '{name}' has dtype {a.dtype}, but "
                    f"{kernel.name_expression} takes it as {cpp} ({dtype}); convert it with "
                    f"{name}.to({dtype})"
                )
        return kernel

    def __call__(self, *args, **kwargs) -> None:
        stream = None
        if kwargs:
            if "stream" in kwargs and "stream" not in self._names:
                stream = kwargs.pop("stream")
            if kwargs:
                args = self._bind(args, kwargs)
        kernel = self.specialize(*args)
        grid = _dims(self._grid(*args), "grid") if callable(self._grid) else self._grid
        if _empty(grid):
            return
        block = _dims(self._block(*args), "block") if callable(self._block) else self._block
        shared_mem = self._shared_mem(*args) if callable(self._shared_mem) else self._shared_mem
        if stream is None:
            kernel.launch(grid, block, *args, shared_mem=shared_mem)
        else:
            kernel.launch(grid, block, *args, shared_mem=shared_mem, stream=stream)

    def __repr__(self) -> str:
        return f"<kjit.Launcher {self.name}{self._signature}>"


_MISSING = object()


def launcher(family: _core.KernelFamily, *, grid, block=256, shared_mem=0, **specialize) -> Launcher:
    """`family` bound to a launch recipe: call the result with the kernel's arguments.

    grid, block, shared_mem: constants or callables of the call's arguments (see kjit.cdiv).
    **specialize: template parameters: constants, kjit.arg(...) references, or callables of the
    call's arguments.
    """
    return Launcher(family, grid=grid, block=block, shared_mem=shared_mem, specialize=specialize)
