"""scikit-build-core metadata provider: kjit's `dependencies`, with torch pinned to the build's minor.

The compiled module links libtorch, whose C++ ABI changes between minor versions, so a kjit built
against torch 2.15 works with torch 2.15.x only. The wheel's Requires-Dist says so (torch==2.15.*) and
pip then keeps torch and kjit consistent. Builds run with --no-build-isolation, so the torch in the
build environment is the one CMake compiles against (python/CMakeLists.txt asks the same interpreter).
Without torch there (an sdist's metadata, a build with isolation that will fail anyway in CMake),
the requirement is the range kjit supports: torch>=<oldest>.

CCCL (CUB, thrust, libcu++) for a user without a system CUDA toolkit: the pip package of the build torch's
CUDA major.minor, as torch pins its own CUDA packages (its NVRTC is the one that compiles CCCL then):
torch +cu130 -> nvidia-cuda-cccl==13.0.* (headers in nvidia/cu13/include/cccl), +cu12x ->
nvidia-cuda-cccl-cu12==12.x.* (nvidia/cuda_cccl/include). A CPU torch, or none, adds nothing.

pyproject.toml, [tool.scikit-build.metadata.dependencies]:
    oldest = "2.11"           # the oldest torch kjit supports (CI and the GPU machine test it)
    others = ["tqdm", ...]    # the other dependencies, as they are
"""

from __future__ import annotations

import re
import subprocess
import sys


def _torch_versions() -> tuple[str | None, str | None]:
    """(torch.__version__, torch.version.cuda) of the build environment's torch; None for what is missing."""
    # A child process: importing torch into the build backend would keep its CUDA libraries loaded
    # for the rest of the build, and it fails loudly on broken installs we only want to ignore here.
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__); print(torch.version.cuda or '')"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return None, None
    lines = out.stdout.split("\n")
    version = lines[0].strip() or None
    cuda = lines[1].strip() if len(lines) > 1 else ""
    return version, cuda or None


def cccl_requirement(cuda: str | None) -> str | None:
    """The pip CCCL package for torch's CUDA version ("13.0"), or None (CPU torch, or a CUDA major without
    one: kjit then uses the system toolkit's CCCL)."""
    match = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", cuda or "")
    if not match:
        return None
    major, minor = match[1], match[2]
    package = {"13": "nvidia-cuda-cccl", "12": "nvidia-cuda-cccl-cu12"}.get(major)
    if package is None:
        return None
    return f'{package}=={major}.{minor}.*; platform_system == "Linux"'


def dynamic_metadata(field, settings=None, project=None):  # noqa: ARG001  (the provider signature)
    if field != "dependencies":
        raise RuntimeError(f"torch_requirement provides 'dependencies' only, not {field!r}")
    settings = dict(settings or {})
    oldest = settings.get("oldest")
    others = settings.get("others", [])
    if not isinstance(oldest, str) or not re.fullmatch(r"\d+\.\d+", oldest):
        raise RuntimeError(
            f"torch_requirement: 'oldest' must be a 'MAJOR.MINOR' string such as \"2.11\", got {oldest!r}"
        )
    if not isinstance(others, list):
        raise RuntimeError(f"torch_requirement: 'others' must be a list of requirements, got {others!r}")
    version, cuda = _torch_versions()
    match = re.match(r"(\d+)\.(\d+)", version or "")
    torch = f"torch=={match[1]}.{match[2]}.*" if match else f"torch>={oldest}"
    cccl = cccl_requirement(cuda) if match else None
    return [torch, *([cccl] if cccl else []), *others]
