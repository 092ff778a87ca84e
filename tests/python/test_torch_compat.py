"""A build of kjit serves the torch minor (and CUDA major) it was compiled against, and says so.

libtorch has no stable C++ ABI across minor versions: kjit's compiled module loaded next to another
torch fails with an undefined symbol that names neither version. So the build records what it used
(kjit/_build_info.py), the package metadata pins that minor (Requires-Dist: torch==X.Y.*), and
`import kjit` with another torch raises an ImportError saying what was built against, what is
installed and what to do, before the compiled module is loaded (kjit/_compat.py).

The mismatches are real imports in a child process, with a `torch` package that reports another
version placed first on sys.path (installing a second real torch per test would cost gigabytes).
"""

import importlib.metadata
import importlib.util
import os
import pathlib
import re

import pytest
import torch

from support import run_python

_SOURCE = pathlib.Path(__file__).resolve().parents[2]


def _minor(version):
    return ".".join(version.split(".")[:2])


def _import_with_torch(tmp_path, version, cuda):
    """`import kjit` in a child whose `torch` is a package that reports `version` and `cuda`."""
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"__version__ = {version!r}\nfrom . import version\n")
    (fake / "version.py").write_text(f"__version__ = {version!r}\ncuda = {cuda!r}\n")
    path = os.pathsep.join(p for p in [str(tmp_path / "fake"), os.environ.get("PYTHONPATH")] if p)
    code = (
        "import sys\n"
        "try:\n"
        "    import kjit\n"
        "    print('IMPORTED')\n"
        "except ImportError as e:\n"
        "    print('IMPORTERROR', e)\n"
        "print('MODULE LOADED' if 'kjit._C' in sys.modules else 'MODULE NOT LOADED')\n"
    )
    return run_python(["-c", code], env={"PYTHONPATH": path}, check=False, cwd=tmp_path)


def test_build_info_records_the_torch_it_was_built_against():
    from kjit import _build_info

    assert _minor(_build_info.TORCH_VERSION) == _minor(torch.__version__)
    assert _build_info.TORCH_CUDA.split(".")[0] == (torch.version.cuda or "").split(".")[0]
    assert _build_info.CXX_STANDARD in (17, 20)


def test_metadata_pins_the_torch_minor_it_was_built_against():
    requires = importlib.metadata.requires("kjit") or []
    pins = [r for r in requires if re.match(r"torch\b", r)]
    assert pins == [f"torch=={_minor(torch.__version__)}.*"], requires


def test_import_with_another_torch_minor_is_a_clear_import_error(tmp_path):
    from kjit import _build_info

    major, minor = _minor(_build_info.TORCH_VERSION).split(".")
    other = f"{major}.{int(minor) + 7}.0"
    r = _import_with_torch(tmp_path, other, _build_info.TORCH_CUDA)
    assert "IMPORTERROR" in r.stdout, r
    message = r.stdout
    assert f"built against torch {_build_info.TORCH_VERSION}" in message  # what it was built against
    assert f"torch {other}" in message  # what is installed
    assert f'pip install "torch=={major}.{minor}.*"' in message  # what to do, two ways
    assert "pip install --no-build-isolation ." in message
    assert "MODULE NOT LOADED" in r.stdout, r  # refused before the compiled module was loaded


def test_import_with_a_torch_for_another_cuda_major_is_a_clear_import_error(tmp_path):
    from kjit import _build_info

    if not _build_info.TORCH_CUDA:
        pytest.skip("this kjit was built against a torch without CUDA")
    other = f"{int(_build_info.TORCH_CUDA.split('.')[0]) - 1}.8"
    r = _import_with_torch(tmp_path, _build_info.TORCH_VERSION, other)
    assert "IMPORTERROR" in r.stdout, r
    assert f"has torch {_build_info.TORCH_VERSION} (CUDA {other})" in r.stdout  # what is installed
    assert f"built for CUDA {_build_info.TORCH_CUDA.split('.')[0]}." in r.stdout  # what it needs
    assert "MODULE NOT LOADED" in r.stdout, r


def test_another_patch_release_or_local_label_of_the_same_minor_is_compatible():
    from kjit import _build_info, _compat

    assert (
        _compat.mismatch(
            _build_info.TORCH_VERSION,
            _build_info.TORCH_CUDA,
            _minor(_build_info.TORCH_VERSION) + ".99+local",
            _build_info.TORCH_CUDA,
        )
        is None
    )
    assert _compat.mismatch("2.15.0+cu132", "13.2", "2.15.1", "13.0") is None
    assert _compat.mismatch("2.15.0+cu132", "13.2", "2.11.0", "13.0") is not None
    assert "has torch 2.15.0+cpu (no CUDA)" in _compat.mismatch("2.15.0", "13.2", "2.15.0+cpu", None)


def _provider():
    path = _SOURCE / "python" / "metadata" / "torch_requirement.py"
    if not path.is_file():
        pytest.skip(f"needs the source tree ({path})")
    spec = importlib.util.spec_from_file_location("torch_requirement", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_metadata_provider_pins_the_build_environments_torch():
    provider = _provider()
    deps = provider.dynamic_metadata("dependencies", {"oldest": "2.11", "others": ["tqdm"]})
    cccl = provider.cccl_requirement(torch.version.cuda)  # the CCCL of the torch's CUDA (none for a CPU torch)
    assert deps == [f"torch=={_minor(torch.__version__)}.*", *([cccl] if cccl else []), "tqdm"]


@pytest.mark.parametrize(
    "cuda, expected",
    [
        ("13.0", 'nvidia-cuda-cccl==13.0.*; platform_system == "Linux"'),
        ("13.2", 'nvidia-cuda-cccl==13.2.*; platform_system == "Linux"'),
        ("12.8", 'nvidia-cuda-cccl-cu12==12.8.*; platform_system == "Linux"'),
        ("12.6.3", 'nvidia-cuda-cccl-cu12==12.6.*; platform_system == "Linux"'),
        (None, None),  # a CPU torch
        ("11.8", None),  # no pip CCCL package kjit knows for this major: the system toolkit's CCCL
        ("13", None),
    ],
)
def test_metadata_provider_adds_the_cccl_of_torchs_cuda(cuda, expected):
    assert _provider().cccl_requirement(cuda) == expected


@pytest.mark.parametrize(
    "field, settings, expected",
    [
        ("version", {"oldest": "2.11"}, "provides 'dependencies' only, not 'version'"),
        ("dependencies", {"oldest": "2"}, "'oldest' must be a 'MAJOR.MINOR' string such as \"2.11\", got '2'"),
        ("dependencies", {}, "'oldest' must be a 'MAJOR.MINOR' string"),
        ("dependencies", {"oldest": "2.11", "others": "tqdm"}, "'others' must be a list of requirements, got 'tqdm'"),
    ],
)
def test_metadata_provider_rejects_bad_settings(field, settings, expected):
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        _provider().dynamic_metadata(field, settings)
