"""The ImportError of kjit's torch-only parts (kjit.ops, kjit.elementwise) in an environment without torch.

`import kjit` works without torch (templates, compiling, Kernel.launch with other frameworks' arrays,
kjit.launcher, the cache, ``python -m kjit``); these parts are torch's and say so, with what to install.
"""

from __future__ import annotations

import importlib.util


def message(what: str) -> str:
    """The message of the ImportError raised for `what` (e.g. "kjit.ops") without torch."""
    try:
        from . import _build_info

        built = _build_info.TORCH_VERSION.split("+")[0].split(".")
        pin = f' ("torch=={built[0]}.{built[1]}.*", the torch this build of kjit serves)'
    except (ImportError, AttributeError, IndexError):
        pin = ""
    return (
        f"{what} needs PyTorch (torch), which is not installed in this environment: pip install torch{pin}. "
        "Without torch, kjit compiles templates and launches kernels on other frameworks' arrays (CuPy, JAX, "
        "Numba: kjit.Template, Kernel.launch, kjit.launcher)."
    )


def torch_available() -> bool:
    """Whether torch can be imported (a None entry in sys.modules counts as absent)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def require(what: str) -> None:
    """Raise ImportError naming torch and how to install it when torch is not installed."""
    if not torch_available():
        raise ImportError(message(what), name="torch")
