"""kjit: JIT CUDA kernels for PyTorch.

Kernel sources are ordinary CUDA C++ templates. kjit specializes them on the dtypes, shapes and
constants of a call, compiles each specialization once with NVRTC, caches the binary on disk and
launches it on PyTorch's current stream::

    import kjit, torch
    t = kjit.Template.from_file("my_kernels.cu")
    k = t.kernel("add_constant").specialize(T=torch.float32, VEC=4)
    k.launch(grid, block, x, y, 5.0, x.numel())
    kjit.stats()

`import kjit` loads neither NVRTC nor the CUDA driver: both are loaded on first use, NVRTC ahead of it on a
background thread once torch starts CUDA (KJIT_PRELOAD_COMPILER=0 turns that off). torch is optional:
without it, kjit compiles templates and launches kernels on other frameworks' arrays (CuPy, JAX,
Numba); kjit.ops and kjit.elementwise need torch.
"""

import os as _os
import typing as _typing

from . import _core
from . import _logging  # noqa: F401  (logging.getLogger("kjit"): records of compiles, loads, cache events)
from ._requires_torch import require as _require_torch, torch_available as _torch_available

if _torch_available():
    from . import _compat  # noqa: F401  (refuses a torch other than the one this build serves, before _C loads)
    import torch as _torch  # noqa: F401  (libtorch must be loaded before the extension)

    from . import _C  # noqa: F401  (torch's hooks into _core: tensors, dtypes, streams; kjit.ops, elementwise)
else:
    _torch = None
from ._core import (
    CacheMissError,
    CompileError,
    DriverError,
    Error,
    Kernel,
    KernelFamily,
    KjitWarning,
    LaunchError,
    Template,
    cache_info,
    clear_memory,
    reset_stats,
    stats,
)
from .launcher import Launcher, arg, cdiv, launcher

if _torch is not None:
    from .elementwise import Elementwise, elementwise

__version__ = _core.__version__

for _cls in (Template, KernelFamily, Kernel):
    _cls.__module__ = "kjit"


def _cuda_major():
    """torch's CUDA major ("13"), else the one kjit was built against, else ""."""
    if _torch is not None:
        return (_torch.version.cuda or "").split(".")[0]
    try:
        from . import _build_info
    except ImportError:
        return ""
    return (_build_info.TORCH_CUDA or "").split(".")[0]


def _cuda_roots():
    """CUDA roots of the pip `nvidia` packages (headers, libnvrtc, CCCL), torch's CUDA major first (without
    torch, the one this build recorded). CUDA 13's packages share nvidia/cu13 (CCCL in include/cccl); CUDA
    12's have a folder each (CCCL: nvidia/cuda_cccl/include/{cub,thrust,cuda})."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    major = _cuda_major()
    names = [f"cu{major}"] if major else []
    names += ["cu13", "cu12", "cuda_nvrtc", "cuda_runtime", "cuda_cccl"]
    roots = []
    for base in spec.submodule_search_locations:
        for name in dict.fromkeys(names):
            path = _os.path.join(base, name)
            if _os.path.isdir(path) and path not in roots:
                roots.append(path)
    return roots


def _cutlass_include_dir():
    """CUTLASS's include/ (cute/ and cutlass/) in pip's nvidia-cutlass: cutlass_library/source/include, found
    without importing cutlass_library; None without the package."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = _os.path.join(base, "source", "include")
        if _os.path.isfile(_os.path.join(path, "cutlass", "version.h")) and _os.path.isdir(_os.path.join(path, "cute")):
            return path
    return None


def _setup():
    for root in _cuda_roots():
        _core.register_toolkit_root(root)
    cutlass = _cutlass_include_dir()
    if cutlass is not None:
        _core.register_cutlass_dir(cutlass, "pip nvidia-cutlass")
    templates = _os.path.join(_os.path.dirname(__file__), "kernel_templates")
    if _os.path.isdir(templates):
        _core.set_builtin_templates_dir(templates)


_setup()


def _preload_compiler_when_cuda_starts():
    """Once torch starts CUDA (a process that will launch kernels), NVRTC is loaded and runs one tiny compile on
    a background thread (kjit/compiler_preload.hpp): the process's first kjit compile then costs what a later one
    does, without NVRTC's start-up (15-35 ms). KJIT_PRELOAD_COMPILER=0 turns it off; strict mode, whose process
    never compiles, never loads NVRTC."""
    import atexit

    def start():
        try:
            major, minor = _torch.cuda.get_device_capability()
            sm = major * 10 + minor
        except Exception:  # noqa: BLE001 (any failure: the preload picks its target itself)
            sm = 0
        _core._preload_compiler(sm)  # never raises: False when it does not run

    lazy_call = getattr(_torch.cuda, "_lazy_call", None)  # runs `start` when torch initializes CUDA
    if lazy_call is None:
        return
    # At exit, no NVRTC call may still run while the interpreter and the process's static objects go
    # (registered after _logging's hooks, so it runs before them).
    atexit.register(_core._wait_for_compiler_preload)
    lazy_call(start)


if _torch is not None:
    _preload_compiler_when_cuda_starts()

# kjit.ValueError / kjit.TypeError are subclasses of kjit.Error and of the builtins of the same name.
# Set last, so that nothing above sees them in place of the builtins.
if _typing.TYPE_CHECKING:  # what the two assignments below make them, for type checkers
    from ._core import TypeError, ValueError  # noqa: A004, F401
globals()["ValueError"] = _core.ValueError
globals()["TypeError"] = _core.TypeError

__all__ = [
    "CacheMissError",
    "CompileError",
    "DriverError",
    "Elementwise",
    "Error",
    "Kernel",
    "KernelFamily",
    "KjitWarning",
    "LaunchError",
    "Launcher",
    "Template",
    "arg",
    "cache_info",
    "cdiv",
    "clear_memory",
    "elementwise",
    "launcher",
    "reset_stats",
    "stats",
]

if _torch is not None:
    from . import ops  # noqa: E402,F401  (built-in ops; torch.ops.kjit.* come with the extension)
else:  # `from kjit import *` without torch: what there is
    __all__ = [n for n in __all__ if n not in ("Elementwise", "elementwise")]


def __getattr__(name):
    # Only reached without torch: kjit.ops, kjit.elementwise and kjit.Elementwise say what is missing.
    if name in ("ops", "elementwise", "Elementwise"):
        _require_torch(f"kjit.{name}")
    raise AttributeError(f"module 'kjit' has no attribute '{name}'")
