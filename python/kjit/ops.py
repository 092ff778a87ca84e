"""Built-in ops: JIT-specialized CUDA kernels registered with PyTorch as ``torch.ops.kjit.*``.

Each op is defined once, in C++ (python/src/ops/, see docs/adding-an-op.md): its schema, its CUDA
implementation (argument checks, launch geometry, the in-memory kernel table, one ``cuLaunchKernelEx`` on
the current stream), a Meta implementation (fake tensors, ``torch.compile(fullgraph=True)``) and, where a
backward exists, C++ autograd. ``kjit.ops.<name>`` is the op's direct entry, a C function: when nothing
needs the dispatcher (plain CUDA tensors, no tensor that requires grad, no fake / functional / vmap
tensor or dispatch mode, no TorchFunctionMode, arguments of their schema types) it runs the CUDA
implementation itself; otherwise it calls ``torch.ops.kjit.<name>.default`` with the same arguments, so
autograd, subclasses, modes and the dispatcher's argument errors behave as through torch.ops. Under
``torch.compile``, Dynamo traces ``torch.ops.kjit.<name>.default`` in its place (no graph break).
``kjit.stats()["op_calls"]`` counts the calls each way. Inside CUDA graph capture they work after a
warm-up call (compiling during capture is an error).

Every op, its arguments, its gradient and what it is specialized on: docs/ops.md ("Every op", a table that
tests/python/ops/test_op_table.py holds to the registry). ``__all__`` is the registry: the ops KJIT_OP
registered, sorted. Arguments that do not fit an op's schema are rejected by the PyTorch dispatcher (its
``RuntimeError`` names the argument, the type it found and the declaration); anything else wrong (a CPU tensor,
mixed devices, a dtype, a shape) is a ``kjit.ValueError`` / ``kjit.TypeError`` saying what was received and
what to do. Row kernels specialize on the row length up to ``KJIT_MAX_SPECIALIZATIONS`` distinct lengths per
kernel, then run a generic variant (a warning says so once; ``kjit.stats()["specializations"]``).
"""

import importlib.abc
import importlib.util
import sys
from typing import TYPE_CHECKING

from ._requires_torch import require

require("kjit.ops")

import torch  # noqa: E402

from . import _C  # noqa: E402
from . import _core  # noqa: E402

# The registry of what KJIT_OP registered (python/src/ops/), sorted: every op, once.
__all__ = list(_C.ops.__all__)

globals().update({name: getattr(_C.ops, name) for name in __all__})
if TYPE_CHECKING:  # the same functions as type checkers see them (their stubs: kjit/_C/ops.pyi)
    from ._C.ops import *  # noqa: F403


def registered(name: str) -> "torch._ops.OpOverload":
    """The registered operator behind kjit.ops.<name> (torch.ops.kjit.<name>.default)."""
    return getattr(torch.ops.kjit, name).default


def _polyfill(op):
    def traced(*args, **kwargs):
        return op(*args, **kwargs)

    return traced


_registered_with_dynamo = False


def _register_with_dynamo() -> None:
    """Dynamo traces torch.ops.kjit.<name>.default where the code calls the direct entry kjit.ops.<name>.
    Never fails the import it runs in: a torch without substitute_in_graph gets a warning (kjit.ops then
    break torch.compile graphs; torch.ops.kjit.* do not)."""
    global _registered_with_dynamo
    if _registered_with_dynamo:
        return
    _registered_with_dynamo = True
    try:
        from torch._dynamo import substitute_in_graph

        for name in __all__:
            substitute_in_graph(getattr(_C.ops, name), skip_signature_check=True)(_polyfill(registered(name)))
    except Exception as e:  # noqa: BLE001  (whatever this torch does, its own import must go on)
        import warnings

        warnings.warn(
            f"kjit: could not register kjit.ops with torch.compile ({type(e).__name__}: {e}); under "
            "torch.compile call torch.ops.kjit.<name> instead",
            _core.KjitWarning,
            stacklevel=2,
        )


class _AfterDynamoImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Registers the direct entries with Dynamo right after torch._dynamo is imported (importing it
    costs seconds, which `import kjit` must not pay)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        module.__spec__.loader = module.__loader__ = self._inner  # torch._dynamo keeps its own loader
        self._inner.exec_module(module)
        _register_with_dynamo()


if "torch._dynamo" in sys.modules:
    _register_with_dynamo()
else:
    sys.meta_path.insert(0, _AfterDynamoImport())
