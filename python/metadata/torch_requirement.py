"""scikit-build-core metadata provider: kjit's `dependencies`, with torch pinned to the build's minor.

The compiled module links libtorch, whose C++ ABI changes between minor versions, so a kjit built
against torch 2.15 works with torch 2.15.x only. The wheel's Requires-Dist says so (torch==2.15.*) and
pip then keeps torch and kjit consistent. Builds run with --no-build-isolation, so the torch in the
build environment is the one CMake compiles against (python/CMakeLists.txt asks the same interpreter).
Without torch there (an sdist's metadata, a build with isolation that will fail anyway in CMake),
the requirement is the range kjit supports: torch>=<oldest>.

pyproject.toml, [tool.scikit-build.metadata.dependencies]:
    oldest = "2.11"           # the oldest torch kjit supports (CI and the GPU machine test it)
    others = ["tqdm", ...]    # the other dependencies, as they are
"""

from __future__ import annotations

import re
import subprocess
import sys


def _torch_version() -> str | None:
    # A child process: importing torch into the build backend would keep its CUDA libraries loaded
    # for the rest of the build, and it fails loudly on broken installs we only want to ignore here.
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() if out.returncode == 0 else None


def dynamic_metadata(field, settings=None, project=None):  # noqa: ARG001  (the provider signature)
    if field != "dependencies":
        raise RuntimeError(f"torch_requirement provides 'dependencies' only, not {field!r}")
    settings = dict(settings or {})
    oldest = settings.get("oldest")
    others = settings.get("others", [])
    if not isinstance(oldest, str) or not re.fullmatch(r"\d+\.\d+", oldest):
        raise RuntimeError(f"torch_requirement: 'oldest' must be a 'MAJOR.MINOR' string such as \"2.11\", got {oldest!r}")
    if not isinstance(others, list):
        raise RuntimeError(f"torch_requirement: 'others' must be a list of requirements, got {others!r}")
    version = _torch_version()
    match = re.match(r"(\d+)\.(\d+)", version or "")
    torch = f"torch=={match[1]}.{match[2]}.*" if match else f"torch>={oldest}"
    return [torch, *others]
