"""Where kjit takes CCCL (CUB, thrust, libcu++) and CUTLASS / CuTe headers from, and `python -m kjit info`
showing it (docs/header-libraries.md). Fake packages are real files in a temp dir put on PYTHONPATH.
Kernels built on these libraries: test_header_library_kernels.py."""

import importlib.util
import json
import os
import pathlib
import re

import pytest

import kjit
from support import run_python

NOT_FOUND = "not found: pip install nvidia-cutlass, or add CUTLASS's include/ to KJIT_INCLUDE_PATH"


def _pip_cutlass_include():
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "source" / "include"
    return path if (path / "cutlass" / "version.h").is_file() else None


def _cutlass_version(include: pathlib.Path) -> str:
    text = (include / "cutlass" / "version.h").read_text()
    return ".".join(re.search(rf"#define CUTLASS_{part} (\d+)", text)[1] for part in ("MAJOR", "MINOR", "PATCH"))


def _fake_cutlass_package(site: pathlib.Path, version=(9, 8, 7)) -> pathlib.Path:
    """site/cutlass_library as nvidia-cutlass lays it out; returns its include/."""
    package = site / "cutlass_library"
    include = package / "source" / "include"
    (include / "cutlass").mkdir(parents=True)
    (include / "cute").mkdir()
    (package / "__init__.py").write_text("raise ImportError('kjit must not import cutlass_library')\n")
    (include / "cutlass" / "version.h").write_text(
        "#pragma once\n#define CUTLASS_MAJOR {}\n#define CUTLASS_MINOR {}\n#define CUTLASS_PATCH {} \n".format(*version)
    )
    (include / "cute" / "tensor.hpp").write_text("#pragma once\n")
    return include


def _pythonpath(*dirs):
    return os.pathsep.join([*map(str, dirs), *filter(None, [os.environ.get("PYTHONPATH")])])


def test_toolkit_reports_cccl_and_cutlass():
    tk = kjit._core.toolkit()
    cccl = tk["cccl"]
    if cccl is not None:
        assert set(cccl) == {"include_dir", "version", "from"}
        assert cccl["include_dir"] in tk["include_dirs"]
        assert re.fullmatch(r"\d+\.\d+\.\d+|unknown", cccl["version"]), cccl
    if tk["headers_from"]:
        assert tk["include_dirs"][0] == os.path.join(tk["headers_from"], "include")  # cuda_fp16.h's folder first
    pip = _pip_cutlass_include()
    if pip is None:
        assert tk["cutlass"] is None
    else:
        assert tk["cutlass"] == {
            "include_dir": str(pip),
            "version": _cutlass_version(pip),
            "from": "pip nvidia-cutlass",
        }
        assert tk["include_dirs"][-1] == str(pip)  # appended last: the toolkit's include/ stays first


def test_pip_cutlass_is_found_without_importing_it(run_py, tmp_path):
    include = _fake_cutlass_package(tmp_path)
    r = run_py(
        """
        import json, sys, kjit
        assert 'cutlass_library' not in sys.modules
        print(json.dumps(kjit._core.toolkit()))
    """,
        env={"PYTHONPATH": _pythonpath(tmp_path)},
    )
    tk = json.loads(r.stdout)
    assert tk["cutlass"] == {"include_dir": str(include), "version": "9.8.7", "from": "pip nvidia-cutlass"}
    assert tk["include_dirs"][-1] == str(include)
    assert tk["include_dirs"][0].endswith("include")  # cuda_fp16.h's folder first


def test_info_shows_cccl_and_cutlass(run_kjit, tmp_path):
    include = _fake_cutlass_package(tmp_path, (4, 2, 0))
    env = {"PYTHONPATH": _pythonpath(tmp_path), "KJIT_INCLUDE_PATH": None}
    facts = json.loads(run_kjit("info", "--json", env=env).stdout)
    assert facts["cutlass"] == {
        "found": True,
        "include_dir": str(include),
        "version": "4.2.0",
        "from": "pip nvidia-cutlass",
        "hint": None,
        "shadowed": [],
    }
    text = run_kjit("info", env=env).stdout
    assert re.search(
        rf"^  CUTLASS: +{re.escape(str(include))}, version 4\.2\.0 \(from pip nvidia-cutlass\)$", text, re.M
    ), text
    tk = kjit._core.toolkit()
    if tk["cccl"] is None:
        assert facts["cccl"]["found"] is False
        assert re.search(r"^  CCCL: +not found: .*nvidia-cuda-cccl", text, re.M), text
    else:
        c = tk["cccl"]
        assert facts["cccl"] == {
            "found": True,
            "include_dir": c["include_dir"],
            "version": c["version"],
            "from": c["from"],
            "hint": None,
        }
        line = f"{c['include_dir']}, version {c['version']} (from {c['from']})"
        assert re.search(rf"^  CCCL: +{re.escape(line)}$", text, re.M), text


def test_info_prefers_a_cutlass_on_kjit_include_path(run_kjit, tmp_path):
    pip = _fake_cutlass_package(tmp_path / "site", (4, 2, 0))
    mine = tmp_path / "mine" / "include"
    (mine / "cutlass").mkdir(parents=True)
    (mine / "cute").mkdir()
    (mine / "cutlass" / "version.h").write_text(
        "#define CUTLASS_MAJOR 3\n#define CUTLASS_MINOR 9\n#define CUTLASS_PATCH 2\n"
    )
    env = {"PYTHONPATH": _pythonpath(tmp_path / "site"), "KJIT_INCLUDE_PATH": str(mine)}
    facts = json.loads(run_kjit("info", "--json", env=env).stdout)["cutlass"]
    assert (facts["include_dir"], facts["version"], facts["from"]) == (str(mine), "3.9.2", "KJIT_INCLUDE_PATH")
    assert facts["shadowed"] == [
        {"found": True, "include_dir": str(pip), "version": "4.2.0", "from": "pip nvidia-cutlass"}
    ]
    text = run_kjit("info", env=env).stdout
    assert f"CUTLASS:       {mine}, version 3.9.2 (from KJIT_INCLUDE_PATH); also {pip}, version 4.2.0" in text, text


def test_info_without_cutlass_says_what_to_install(run_kjit, tmp_path):
    # A cutlass_library without headers (not nvidia-cutlass's layout) shadows any installed one: not found.
    (tmp_path / "cutlass_library").mkdir()
    (tmp_path / "cutlass_library" / "__init__.py").write_text("")
    env = {"PYTHONPATH": _pythonpath(tmp_path), "KJIT_INCLUDE_PATH": None}
    facts = json.loads(run_kjit("info", "--json", env=env).stdout)["cutlass"]
    assert facts["found"] is False and facts["hint"] == NOT_FOUND[len("not found: ") :]
    assert re.search(rf"^  CUTLASS: +{re.escape(NOT_FOUND)}$", run_kjit("info", env=env).stdout, re.M)


def test_pip_cuda12_cccl_root_is_registered(run_py, tmp_path):
    cccl = tmp_path / "nvidia" / "cuda_cccl"
    (cccl / "include" / "cub").mkdir(parents=True)
    r = run_py("import kjit; print('\\n'.join(kjit._cuda_roots()))", env={"PYTHONPATH": _pythonpath(tmp_path)})
    assert str(cccl) in r.stdout.split("\n"), r


def test_register_cutlass_dir_rejects_a_folder_without_cutlass(tmp_path):
    (tmp_path / "cutlass").mkdir()
    with pytest.raises(
        kjit.ValueError,
        match=re.escape(f"{tmp_path} does not hold CUTLASS (expected cutlass/version.h and cute/ in it)"),
    ):
        kjit._core.register_cutlass_dir(str(tmp_path), "test")


def test_register_cutlass_dir_after_discovery_is_refused(tmp_path):
    include = _fake_cutlass_package(tmp_path)
    kjit._core.toolkit()
    assert kjit._core.register_cutlass_dir(str(include), "test") is False
    assert kjit._core.toolkit()["cutlass"] is None or kjit._core.toolkit()["cutlass"]["include_dir"] != str(include)


def test_a_folder_beside_the_cuda_headers_is_not_theirs(tmp_path):
    """<cuda>/include-extra shares a prefix with <cuda>/include but is not inside it: its headers are the
    user's (recorded into a manifest with the template, read at every load), not the toolkit's, which a
    manifest leaves out. Whole path components are compared, not a string prefix."""
    if not kjit._core.toolkit()["headers_from"]:
        pytest.skip("no CUDA headers found here")
    real = pathlib.Path(kjit._core.toolkit()["headers_from"])
    home = tmp_path / "cuda"
    home.mkdir()
    for entry in real.iterdir():
        (home / entry.name).symlink_to(entry)
    extra = home / "include-extra"
    extra.mkdir()
    (extra / "extra_value.h").write_text("#define EXTRA_VALUE 7\n")
    src = tmp_path / "k.cu"
    src.write_text(
        f'#include "{extra / "extra_value.h"}"\n'
        "template <int N> __global__ void k(int* o) { *o = N + EXTRA_VALUE; }\n"
    )
    manifest = tmp_path / "manifest.json"
    run_python(
        ["-c", f"import kjit; kjit.Template.from_file({str(src)!r}).kernel('k').specialize(N=1, arch='sm_90')"],
        env={"KJIT_CUDA_HOME": home, "KJIT_RECORD": manifest, "KJIT_CACHE_DIR": tmp_path / "cache"},
    )
    sources = [
        json.loads(line)["sources"] for line in manifest.read_text().splitlines() if line.startswith('{"sources"')
    ]
    assert len(sources) == 1
    assert [name for name in sources[0]["headers"] if name.endswith("extra_value.h")], sources[0]["headers"].keys()
