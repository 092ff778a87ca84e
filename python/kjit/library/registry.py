"""Registration of the Python-implemented built-in ops with torch.library, and their shared checks.

Each op gets its schema in the ``kjit`` namespace (next to the C++ ops), a CUDA implementation (the
kernels), a CPU implementation (also registered as CompositeExplicitAutograd: every other backend, and
calls without a tensor) that raises kjit.ValueError saying to move the tensors to CUDA, or kjit.TypeError
for None where a Tensor goes (instead of the dispatcher's "could not run with arguments from the CPU
backend" / "There were no tensor arguments"), a fake implementation (shapes only, for FakeTensor /
torch.compile; it makes the CUDA implementation's checks) and, where given, autograd.
"""

from __future__ import annotations

import functools

import torch

from .. import _C

_lib = torch.library.Library("kjit", "FRAGMENT")

FLOATING = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def define(schema: str, cuda, fake, *, backward=None, setup_context=None):
    """Defines kjit::<name> from `schema` with these implementations; returns the OpOverload."""
    name = schema.split("(", 1)[0]
    _lib.define(schema)
    _lib.impl(name, cuda, "CUDA")
    reject = _reject(name, schema)
    _lib.impl(name, reject, "CPU")
    # Every other backend, and calls without any tensor (None for x): kjit's message instead of the
    # dispatcher's "could not run with arguments from the ... backend" / "There were no tensor arguments".
    _lib.impl(name, reject, "CompositeExplicitAutograd")
    torch.library.register_fake(f"kjit::{name}", fake, lib=_lib)
    if backward is not None:
        torch.library.register_autograd(f"kjit::{name}", backward, setup_context=setup_context, lib=_lib)
    return getattr(torch.ops.kjit, name).default


def _reject(name: str, schema: str):
    """The implementation for every device but CUDA (and for calls without a tensor): a kjit error that
    says what was received, as the C++ ops say it ("expected all tensors on one CUDA device, got cpu (x,
    weight); ...")."""
    arguments = torch._C.parse_schema(f"kjit::{schema}").arguments
    arg_names = [a.name for a in arguments]
    required_tensors = {a.name for a in arguments if isinstance(a.type, torch._C.TensorType)}

    def reject(*args, **kwargs):
        named = list(zip(arg_names, args)) + list(kwargs.items())
        for arg, value in named:
            if arg in required_tensors and not isinstance(value, torch.Tensor):
                raise _C.TypeError(f"kjit.ops.{name}: {arg} must be a torch.Tensor, got {type(value).__name__}")
        groups: dict[str, list[str]] = {}
        for arg, value in named:
            if isinstance(value, torch.Tensor):
                groups.setdefault(str(value.device), []).append(arg)
        parts = [f"{dev} ({', '.join(args_)})" for dev, args_ in groups.items()] or ["no tensor"]
        got = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        raise _C.ValueError(f"kjit.ops.{name}: expected all tensors on one CUDA device, got {got}; move them with "
                            ".to('cuda') (kjit ops run CUDA kernels only)")

    return reject


def check_tensor(op: str, arg: str, t, allowed=FLOATING) -> None:
    if not isinstance(t, torch.Tensor):
        raise _C.TypeError(f"kjit.ops.{op}: {arg} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in allowed:
        names = ", ".join(str(d) for d in allowed)
        raise _C.TypeError(f"kjit.ops.{op}: {arg} has dtype {t.dtype}, which is not supported; allowed: {names}; "
                           f"convert it with {arg}.to({allowed[0]})")


def check_like(op: str, arg: str, t, ref_arg: str, ref: torch.Tensor, *, shape=None) -> None:
    """`t` has ref's dtype and device, and `shape` (ref's shape unless given)."""
    check_tensor(op, arg, t)
    if not isinstance(ref, torch.Tensor):  # None for a Tensor argument reaches the CUDA implementation
        raise _C.TypeError(f"kjit.ops.{op}: {ref_arg} must be a torch.Tensor, got {type(ref).__name__}")
    if t.dtype != ref.dtype:
        raise _C.TypeError(f"kjit.ops.{op}: {arg} has dtype {t.dtype} but {ref_arg} has dtype {ref.dtype}: the dtypes "
                           f"must match; convert with {arg}.to({ref_arg}.dtype)")
    if t.device != ref.device:
        target = next((d for d in (ref.device, t.device) if d.type == "cuda"), "cuda")  # never "move them to cpu"
        raise _C.ValueError(f"kjit.ops.{op}: expected all tensors on one CUDA device, got {ref.device} ({ref_arg}) and "
                            f"{t.device} ({arg}); move them with .to('{target}')")
    want = tuple(ref.shape if shape is None else shape)
    if tuple(t.shape) != want:
        raise _C.ValueError(f"kjit.ops.{op}: {arg} has shape {list(t.shape)} but must have shape {list(want)}")


def normalize_dim(op: str, dim: int, ndim: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise _C.TypeError(f"kjit.ops.{op}: dim must be an int, got {dim!r}")
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise _C.ValueError(f"kjit.ops.{op}: dim {dim} is out of range for a tensor of {ndim} dims "
                            f"(allowed: {-rank} to {rank - 1})")
    return dim % rank


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The accumulation dtype of the kernels: float64 for float64, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


class KernelCache:
    """Loaded kernels of one built-in template by specialization, without the specialize() call."""

    def __init__(self, template: str):
        self.template_name = template
        self._template = None
        self._families: dict[str, _C.KernelFamily] = {}
        self._kernels: dict[tuple, _C.Kernel] = {}

    def family(self, kernel: str) -> _C.KernelFamily:
        f = self._families.get(kernel)
        if f is None:
            if self._template is None:
                self._template = _C.Template.builtin(self.template_name)
            f = self._families[kernel] = self._template.kernel(kernel)
        return f

    def get(self, kernel: str, device: int, **params) -> _C.Kernel:
        key = (kernel, device, *params.items())
        k = self._kernels.get(key)
        if k is None:
            k = self._kernels[key] = self.family(kernel).specialize(device=device, **params)
        return k


def admit(kernel: str, param: str, value: int) -> int:
    """The value to specialize `kernel` on, or 0 for its generic variant (KJIT_MAX_SPECIALIZATIONS)."""
    return _C.admit_shape(kernel, param, value)
