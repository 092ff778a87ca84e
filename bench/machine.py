"""What the results were measured on: GPU, driver, versions of torch, CUDA, kjit and of each peer.

A peer that is missing or broken is recorded as "skipped: <reason>"; nothing here raises.
"""

from __future__ import annotations

import datetime
import importlib
import re
import shutil
import subprocess

from .stats import error_text


def detect_module(name: str) -> str:
    """The version of an importable module, or "skipped: <reason>"."""
    try:
        mod = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.split(".")[0] != e.name.split(".")[0]:
            return f"skipped: {name} import failed: {error_text(e)}"
        return f"skipped: {name} not installed"
    except Exception as e:  # noqa: BLE001  (a broken install counts as missing)
        return f"skipped: {name} import failed: {error_text(e)}"
    return str(getattr(mod, "__version__", "unknown version"))


def detect_torch_compile() -> str:
    """torch.compile with Inductor on CUDA needs Triton; the torch version when usable."""
    try:
        import torch
        import torch._inductor  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return f"skipped: inductor unavailable: {error_text(e)}"
    try:
        from torch.utils._triton import has_triton

        if not has_triton():
            return "skipped: inductor needs triton for CUDA, which is missing or broken"
    except Exception:  # noqa: BLE001  (older torch: fall back to importing triton)
        t = detect_module("triton")
        if t.startswith("skipped"):
            return "skipped: inductor needs triton: " + t[len("skipped: ") :]
    return torch.__version__


def detect_jiterator() -> str:
    try:
        import torch

        if not callable(getattr(importlib.import_module("torch.cuda.jiterator"), "_create_jit_fn", None)):
            return "skipped: torch.cuda.jiterator._create_jit_fn is missing"
    except Exception as e:  # noqa: BLE001
        return f"skipped: torch.cuda.jiterator unavailable: {error_text(e)}"
    return torch.__version__


def peers() -> dict:
    """{peer: version or "skipped: <reason>"} for triton, cupy, torch.compile and torch.cuda.jiterator."""
    return {
        "triton": detect_module("triton"),
        "cupy": detect_module("cupy"),
        "torch.compile": detect_torch_compile(),
        "jiterator": detect_jiterator(),
    }


def available(peer_versions: dict, peer: str) -> bool:
    v = peer_versions.get(peer)
    return isinstance(v, str) and not v.startswith("skipped")


def driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi, None without it."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        r = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except Exception:  # noqa: BLE001
        return None
    lines = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
    return lines[0] if r.returncode == 0 and lines else None


_DROP = re.compile(r"^(NVIDIA|GeForce|Tesla|Quadro|\d+GB|HBM\w*|PCIe|SXM\d*|NVL|MIG.*)$", re.IGNORECASE)


def gpu_slug(name: str | None) -> str:
    """A short file-name-safe name of a GPU: "NVIDIA H200" -> "H200", "NVIDIA H100 80GB HBM3" -> "H100"."""
    words = [w for w in re.split(r"[\s_]+", name or "") if w and not _DROP.match(w)]
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", "-".join(words)).strip("-")
    return slug or "gpu"


def today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def record() -> dict:
    """The machine and the versions, for the result file (call with a CUDA device present)."""
    out: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            out["gpu"] = props.name
            out["capability"] = f"{props.major}.{props.minor}"
            out["gpu_memory_gib"] = round(props.total_memory / (1 << 30), 1)
        else:
            out["gpu"] = None
    except Exception as e:  # noqa: BLE001
        out["torch"] = f"skipped: {error_text(e)}"
    out["driver"] = driver_version()
    try:
        import kjit

        out["kjit"] = kjit.__version__
    except Exception as e:  # noqa: BLE001
        out["kjit"] = f"skipped: {error_text(e)}"
    out["peers"] = peers()
    return out
