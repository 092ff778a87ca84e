"""Warm deployment (docs/deployment.md, docs/tuned-choices.md): KJIT_RECORD (from 4 processes at once),
`python -m kjit warm`, `export` / `verify --dir --lock`, strict mode (kjit.CacheMissError; read-only layer
hits), and the tuned choices a manifest carries (installed by `warm` into a fresh cache for every
architecture, counted by `kjit info`, removed by `kjit clear`, locked by `export`).

Compile-only without a GPU, but for the tests marked gpu: the whole loop on a GPU, each step in a fresh
process (record a workload with KJIT_RECORD into cache A, warm an EMPTY cache B for this GPU's target,
run the workload again strict on B: zero compiles, identical results), and a strict run on a GPU of
another multiprocessor count."""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from support import run_python


# A template of our own (from a string): warm must rebuild it from the manifest alone.
SCALE = """
template <typename T, int N>
__global__ void scale(T* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= N; }
"""

RECORD_WORKLOAD = """
import sys, kjit, torch
proc = int(sys.argv[1])
scale = kjit.Template({scale!r}, name="scale.cu").kernel("scale")
add = kjit.Template.builtin("add_constant").kernel("add_constant")
for i in range(3):
    scale.specialize(T=torch.float32, N=100 * proc + i, arch="sm_90")  # this process's own
    add.specialize(T=torch.float32, VEC=2 ** i, arch="sm_90")          # shared by every process
print(kjit.stats()["compiles"])
"""


def records(path):
    """The records of a manifest (version 2: JSON lines), each template with its sources inline."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert lines[0] == {"kjit_manifest": 2}
    sources = {line["sources"]["id"]: line["sources"] for line in lines if "sources" in line}
    out = []
    for line in lines[1:]:
        if "record" in line:
            t = line["record"]["template"]
            if "sources" in t:  # stored once per manifest, referenced by id
                t.update(source=sources[t["sources"]]["source"], headers=sources[t["sources"]]["headers"])
            out.append(line["record"])
    return out


def record_workload(tmp_path, manifest, procs=1):
    """Runs RECORD_WORKLOAD in `procs` processes at once, recording into `manifest`."""
    script = tmp_path / "workload.py"
    script.write_text(textwrap.dedent(RECORD_WORKLOAD.format(scale=SCALE)))
    env = dict(os.environ, KJIT_RECORD=str(manifest), KJIT_CACHE_DIR=str(tmp_path / "record-cache"))
    running = [
        subprocess.Popen(
            [sys.executable, str(script), str(p)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for p in range(procs)
    ]
    for p in running:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "KJIT_RECORD" not in err, err  # no recording warning


def test_four_concurrent_processes_record_every_specialization_once(tmp_path):
    manifest = tmp_path / "manifest.json"
    record_workload(tmp_path, manifest, procs=4)
    recs = records(manifest)
    ids = [r["id"] for r in recs]
    assert len(ids) == len(set(ids)) == 4 * 3 + 3
    own = sorted(r["args"][1]["value"] for r in recs if r["kernel"] == "scale")
    assert own == sorted(100 * p + i for p in range(4) for i in range(3))
    shared = sorted(r["args"][1]["value"] for r in recs if r["kernel"] == "add_constant")
    assert shared == [1, 2, 4]
    user = next(r for r in recs if r["kernel"] == "scale")["template"]
    assert user["name"] == "scale.cu" and not user["builtin"] and "__global__ void scale" in user["source"]


def test_warm_two_archs_then_already_cached(tmp_path, run_kjit, cache_dir):
    manifest = tmp_path / "manifest.json"
    record_workload(tmp_path, manifest)
    assert len(records(manifest)) == 6
    r = run_kjit("warm", str(manifest), "--arch", "sm_80,sm_90", "-j", "2")
    assert "12 jobs (6 specializations x 2 targets): 12 compiled, 0 already cached, 0 failed" in r.stdout, r
    assert "[12/12] " in r.stderr, r
    assert len(list(cache_dir.rglob("*.kjit"))) == 12
    r = run_kjit("warm", str(manifest), "--arch", "sm_80,sm_90", "-j", "2")
    assert "0 compiled, 12 already cached, 0 failed" in r.stdout, r


def test_warm_bad_manifest_is_a_clear_error(tmp_path, run_kjit):
    bad = tmp_path / "m.json"
    bad.write_text('{"kjit_manifest": 1, "records": [{"template": {}}]}')
    r = run_kjit("warm", str(bad), "--arch", "sm_90", check=False)
    assert r.returncode == 1, r
    assert f'manifest {bad} is not valid: records[0].template: missing field "name"' in r.stderr, r


def test_export_verify_and_a_tampered_export(tmp_path, run_kjit):
    manifest = tmp_path / "manifest.json"
    record_workload(tmp_path, manifest)
    out = tmp_path / "export"
    r = run_kjit("export", str(manifest), "--out", str(out), "--arch", "sm_90", "-j", "2")
    assert f"exported 6 entries to {out}" in r.stdout, r
    lock = out / "kjit.lock"
    r = run_kjit("verify", "--dir", str(out), "--lock", str(lock))
    assert "6 entries" in r.stdout and "all valid" in r.stdout, r
    entry = out / json.loads(lock.read_text())["entries"][0]["path"]
    data = bytearray(entry.read_bytes())
    data[-1] ^= 0xFF
    entry.write_bytes(bytes(data))
    r = run_kjit("verify", "--dir", str(out), "--lock", str(lock), check=False)
    assert r.returncode == 1, r
    assert "modified: " in r.stdout, r
    # `verify` without options still checks the configured cache.
    assert "verified, all valid" in run_kjit("verify").stdout


@pytest.mark.parametrize("dtype, vec", [("float32", 4), ("float16", 2)])
def test_strict_mode_raises_cache_miss_error_naming_specialization_key_and_command(run_py, dtype, vec):
    r = run_py(
        f"""
        import kjit, torch
        fam = kjit.Template.builtin("add_constant").kernel("add_constant")
        try:
            fam.specialize(T=torch.{dtype}, VEC={vec}, arch="sm_90")
        except kjit.CacheMissError as e:
            print("KEY", e.key)
            print("SPEC", e.specialization)
            print("MSG", str(e))
            print("STATS", kjit.stats()["compiles"], kjit.stats()["strict_misses"])
    """,
        env={"KJIT_CACHE_MODE": "strict"},
    )
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert re.fullmatch(r"[0-9a-f]{64}", lines["KEY"]), r
    assert lines["SPEC"] == f"add_constant(T={dtype}, VEC={vec}) from template add_constant"
    msg = lines["MSG"]
    assert "strict cache mode" in msg and "KJIT_CACHE_MODE=strict" in msg, msg
    assert lines["KEY"] in msg and lines["SPEC"] in msg
    assert "kjit warm MANIFEST --arch sm_90" in msg
    assert f"kjit compile add_constant --kernel add_constant --param T={dtype} --param VEC={vec} --arch sm_90" in msg
    assert lines["STATS"] == "0 1"


def test_strict_mode_finds_an_exported_layer_on_disk(tmp_path, run_kjit, run_py):
    manifest = tmp_path / "manifest.json"
    record_workload(tmp_path, manifest)
    out = tmp_path / "export"
    run_kjit("export", str(manifest), "--out", str(out), "--arch", "sm_90")
    r = run_py(
        f"""
        import kjit, torch
        scale = kjit.Template({SCALE!r}, name="scale.cu").kernel("scale")
        add = kjit.Template.builtin("add_constant").kernel("add_constant")
        print(scale.specialize(T=torch.float32, N=2, arch="sm_90").origin)
        print(add.specialize(T=torch.float32, VEC=4, arch="sm_90").origin)
        try:
            add.specialize(T=torch.float32, VEC=4, arch="sm_80")
        except kjit.CacheMissError:
            print("miss")
        print(kjit.stats()["compiles"])
    """,
        env={"KJIT_CACHE_MODE": "strict", "KJIT_CACHE_PATH": out, "KJIT_CACHE_DIR": tmp_path / "empty-writable"},
    )
    assert r.stdout.split() == ["disk", "disk", "miss", "0"], r


def gemm_sm90_manifest(path, arch=90):
    """A manifest (as KJIT_RECORD writes it) of the sm_90 GEMM op's kernel: gemm_sm90's gemm_wgmma with
    the library's compile options, recorded for sm_90a (the kernel's wgmma exists only there). arch=None:
    as a kjit before "arch" wrote it."""
    import kjit

    options = kjit._core.library_compile_options()
    record_options = {
        k: options[k] for k in ("std", "fast_math", "line_info", "device_debug", "max_registers", "defines")
    }
    # Fields added after manifests existed are written only when set (record ids stay what they were).
    if options["minimal"]:
        record_options["minimal"] = True
    if options["default_device"]:
        record_options["default_device"] = True
    if options["fast_compile"] != "off":
        record_options["fast_compile"] = options["fast_compile"]
    args = [
        ("T", "type", "bfloat16"),
        ("N", "integer", 256),
        ("K", "integer", 256),
        ("BM", "integer", 128),
        ("BN", "integer", 128),
        ("STAGES", "integer", 4),
        ("PINGPONG", "bool", False),
        ("TMA_STORE", "bool", True),
        ("ACT", "integer", 0),
        ("HAS_BIAS", "bool", False),
        ("HAS_RESIDUAL", "bool", False),
        ("AUX", "bool", False),
        ("SWIGLU", "bool", False),
    ]
    record = {
        "template": {"name": "gemm_sm90", "builtin": True, "digest": kjit.Template.builtin("gemm_sm90").digest},
        "kernel": "gemm_wgmma",
        "args": [{"name": n, "kind": k, "value": v} for n, k, v in args],
        "options": record_options,
        "arch_specific": True,
    }
    if arch is not None:
        record["arch"] = arch
    path.write_text(json.dumps({"kjit_manifest": 2}) + "\n" + json.dumps({"record": record}) + "\n")


def test_an_arch_specific_record_is_warmed_for_sm_90a(tmp_path, run_kjit, cache_dir):
    """record -> warm -> strict for an arch-specific kernel: `--arch sm_90` fills the sm_90a entry (ptxas
    knows wgmma only there), and compute_90 is skipped, not failed."""
    manifest = tmp_path / "manifest.json"
    gemm_sm90_manifest(manifest)
    r = run_kjit("warm", str(manifest), "--arch", "sm_90")
    assert "1 job (1 specialization x 1 target): 1 compiled, 0 already cached, 0 failed" in r.stdout, r
    assert "for sm_90a" in r.stderr, r
    assert [d.name for d in (cache_dir / "v1").iterdir() if d.is_dir()] == ["sm_90a"], r
    r = run_kjit("warm", str(manifest), "--arch", "sm_90a,compute_90")
    assert "0 compiled, 1 already cached, 0 failed, 1 skipped" in r.stdout, r
    assert "skipped: gemm_wgmma(" in r.stdout and "for compute_90: an arch-specific kernel" in r.stdout, r


def test_an_arch_specific_record_is_skipped_with_its_reason_on_other_architectures(tmp_path, run_kjit, cache_dir):
    """The README's `kjit warm --arch sm_80,sm_90` of a workload that ran the sm_90 GEMM: sm_90a compiled,
    sm_80 (no sm_80a; another kernel runs there) and sm_100 (no wgmma on sm_100a) skipped with a reason, exit
    0. A record of a kjit from before "arch" is the sm_90 GEMM's too."""
    for arch in (90, None):
        manifest = tmp_path / f"manifest-{arch}.json"
        gemm_sm90_manifest(manifest, arch=arch)
        r = run_kjit("warm", str(manifest), "--arch", "sm_80,sm_90", check=False)
        assert r.returncode == 0, r
        assert "2 jobs (1 specialization x 2 targets): " in r.stdout and "0 failed, 1 skipped" in r.stdout, r
        assert "for sm_80: an arch-specific kernel recorded for sm_90a, which only an sm_90 GPU runs" in r.stdout, r
        assert "record the workload on that GPU (KJIT_RECORD)" in r.stdout, r
        r = run_kjit("warm", str(manifest), "--arch", "sm_90,sm_100", check=False)
        assert r.returncode == 0, r
        assert "1 already cached, 0 failed, 1 skipped" in r.stdout and "for sm_100: " in r.stdout, r
        assert [d.name for d in (cache_dir / "v1").iterdir() if d.is_dir()] == ["sm_90a"], r


def test_the_recorder_writes_the_architecture_of_an_arch_specific_record(tmp_path, run_py):
    manifest = tmp_path / "manifest.json"
    run_py(
        """
        import kjit, torch
        k = kjit.Template.builtin("add_constant").kernel("add_constant")
        k.specialize(T=torch.float32, VEC=4, arch="sm_90a")
        k.specialize(T=torch.float32, VEC=4, arch="sm_90")
        """,
        env={"KJIT_RECORD": manifest},
    )
    recs = records(manifest)
    assert [(r.get("arch_specific"), r.get("arch")) for r in recs] == [(True, 90), (None, None)], recs


# A template that includes thrust, whose headers compute an include from a macro: compiles learn it. A
# strict run that ships only the exported folder (a KJIT_CACHE_PATH layer over an empty cache) must key
# the template as the recording run did, so the folder carries what was learned (its header index).
# A template that includes a library header whose own include kjit's scanner cannot see (its name comes from a
# macro: CUTLASS's `#include CUDA_STD_HEADER(cstdint)`): the compile learns it. Which headers compute their
# includes without a hint changes between library versions: CUDA 13.0's thrust/iterator/detail/device_system_tag.h
# does, 13.2's has a hint; CUTLASS 4.x's cutlass/uint256.h does.
LEARNS_AN_INCLUDE = """
#include <cutlass/uint256.h>
template <int N> __global__ void k(int* out) { out[0] = N; }
"""


def test_an_export_ships_learned_includes_so_a_strict_run_finds_the_kernel(tmp_path, run_kjit, run_py):
    import kjit

    if not kjit._core.toolkit().get("cutlass"):
        pytest.skip("CUTLASS's headers are not installed: pip install nvidia-cutlass (.ci/python_env.sh installs it)")
    src = tmp_path / "learns_an_include.cu"
    src.write_text(LEARNS_AN_INCLUDE)
    manifest = tmp_path / "manifest.json"
    run_py(
        f"""
        import kjit
        kjit.Template.from_file({str(src)!r}).kernel("k").specialize(N=3, arch="sm_90")
        """,
        env={"KJIT_RECORD": manifest, "KJIT_CACHE_DIR": tmp_path / "record-cache"},
    )
    out = tmp_path / "export"
    r = run_kjit("export", str(manifest), "--out", str(out), "--arch", "sm_90")
    index = json.loads((out / "v1" / "header-index.json").read_text())
    assert any(index["learned"].values()), index["learned"]
    lock = json.loads((out / "kjit.lock").read_text())
    assert "v1/header-index.json" in [e["path"] for e in lock["entries"]], lock
    assert "all valid" in run_kjit("verify", "--dir", str(out), "--lock", str(out / "kjit.lock")).stdout
    r = run_py(
        f"""
        import kjit
        print(kjit.Template.from_file({str(src)!r}).kernel("k").specialize(N=3, arch="sm_90").origin)
        print(kjit.stats()["compiles"])
        """,
        env={"KJIT_CACHE_MODE": "strict", "KJIT_CACHE_PATH": out, "KJIT_CACHE_DIR": tmp_path / "empty-writable"},
    )
    assert r.stdout.split() == ["disk", "0"], r


# ---- tuned choices ------------------------------------------------------------------------------------------

KEY_90 = "gemm|sm_90a|bf16|N=4096|K=4096|epi=gelu|m<=2048"
KEY_100 = "gemm|sm_100a|bf16|N=4096|K=4096|epi=none|m<=16"


def choice_line(key, value):
    return json.dumps({"choice": {"key": key, "value": value}}, separators=(",", ":")) + "\n"


def choice_files(cache_dir):
    """{key: (value, tag)} of the choice files under a cache root."""
    out = {}
    for f in (cache_dir / "v1" / "choices").glob("*.choice"):
        j = json.loads(f.read_text())
        assert j["kjit_choice"] == 1
        out[j["key"]] = (j["value"], j["tag"])
    return out


def test_warm_installs_the_manifest_choices_into_a_fresh_cache(tmp_path, run_kjit, cache_dir):
    manifest = tmp_path / "manifest.json"
    record_workload(tmp_path, manifest)
    with manifest.open("a") as f:  # as Choices::store / find append them while the workload runs
        f.write(choice_line(KEY_90, "wgmma:128x128x64:s4"))
        f.write(choice_line(KEY_100, "cublas"))
        f.write(choice_line(KEY_90, "wgmma:128x256x64:s4"))  # a later value of the key wins
    assert len(records(manifest)) == 6  # choice lines leave the records as they were
    assert not cache_dir.exists()

    r = run_kjit("warm", str(manifest), "--arch", "sm_90", "-j", "2")
    assert "6 jobs (6 specializations x 1 target): 6 compiled, 0 already cached, 0 failed" in r.stdout, r
    assert "2 tuned choices installed" in r.stdout, r
    version = json.loads(run_kjit("info", "--json").stdout)["kjit_version"]
    tag = f"kjit {version} choices 1"
    assert choice_files(cache_dir) == {KEY_90: ("wgmma:128x256x64:s4", tag), KEY_100: ("cublas", tag)}
    for f in (cache_dir / "v1" / "choices").iterdir():
        assert f.stat().st_mode & 0o777 == 0o600, f

    # Warming again compiles nothing and installs the same choices (idempotent).
    r = run_kjit("warm", str(manifest), "--arch", "sm_90", "-j", "2")
    assert "0 compiled, 6 already cached, 0 failed" in r.stdout and "2 tuned choices installed" in r.stdout, r
    assert len(choice_files(cache_dir)) == 2

    info = json.loads(run_kjit("info", "--json").stdout)
    assert info["cache"]["tuned_choices"] == 2
    assert "KJIT_TUNE" in info["settings"] and info["settings"]["KJIT_TUNE"]["allowed"] == "0 | 1"
    assert "tuned choices:     2" in run_kjit("info").stdout

    r = run_kjit("clear", check=False)
    assert r.returncode == 1 and "and 2 tuned choices from" in r.stderr, r
    r = run_kjit("clear", "--yes")
    assert "and 2 tuned choices from" in r.stdout, r
    assert choice_files(cache_dir) == {}
    assert json.loads(run_kjit("info", "--json").stdout)["cache"]["tuned_choices"] == 0


def test_a_manifest_of_choices_only_warms_them(tmp_path, run_kjit, cache_dir):
    manifest = tmp_path / "m.json"
    manifest.write_text('{"kjit_manifest":2}\n' + choice_line(KEY_100, "wgmma:64x128x64:s3"))
    r = run_kjit("warm", str(manifest), "--arch", "sm_80")  # another architecture than the key's: installed too
    assert "0 failed" in r.stdout and "1 tuned choice installed" in r.stdout, r
    assert list(choice_files(cache_dir)) == [KEY_100]


def test_a_bad_choice_line_is_a_clear_error(tmp_path, run_kjit, cache_dir):
    manifest = tmp_path / "m.json"
    manifest.write_text('{"kjit_manifest":2}\n' + choice_line("gemm\tsm_90", "cublas"))
    r = run_kjit("warm", str(manifest), "--arch", "sm_90", check=False)
    assert r.returncode == 1, r
    assert (
        f"manifest {manifest} is not valid: line 2.choice.key: character 4 is 0x09, not printable ASCII (0x20-0x7e)"
    ) in r.stderr, r
    assert not (cache_dir / "v1" / "choices").exists()


def test_export_locks_the_choices_and_strict_mode_finds_them(tmp_path, run_kjit, cache_dir):
    manifest = tmp_path / "m.json"
    manifest.write_text('{"kjit_manifest":2}\n' + choice_line(KEY_90, "cublas"))
    out = tmp_path / "export"
    r = run_kjit("export", str(manifest), "--out", str(out), "--arch", "sm_90")
    assert "1 tuned choice installed" in r.stdout and f"exported 1 entry to {out}" in r.stdout, r
    lock = json.loads((out / "kjit.lock").read_text())
    assert [e["path"].split("/")[:2] for e in lock["entries"]] == [["v1", "choices"]]
    r = run_kjit("verify", "--dir", str(out))
    assert "all valid" in r.stdout, r
    assert list(choice_files(out)) == [KEY_90]
    assert not cache_dir.exists()  # the export wrote only into its folder


# ---- on a GPU ---------------------------------------------------------------------------------------------

# The example's own workload (walk.sh runs it too): a few built-in ops; prints "compiles: N".
WORKLOAD = pathlib.Path(__file__).resolve().parents[2] / "examples" / "deploy" / "workload.py"


@pytest.mark.gpu
def test_record_warm_strict_loop(tmp_path):
    import torch

    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    script = WORKLOAD
    manifest = tmp_path / "manifest.json"
    cache_a, cache_b = tmp_path / "cache-a", tmp_path / "cache-b"

    first = run_python(
        [str(script), str(tmp_path / "first.pt")],
        env={"KJIT_RECORD": manifest, "KJIT_CACHE_DIR": cache_a, "KJIT_CACHE_MODE": None},
    )
    assert int(first.stdout.split()[-1]) >= 4, first
    records = [line for line in manifest.read_text().splitlines() if line.startswith('{"record"')]  # JSON lines
    assert len(records) >= 4
    assert not cache_b.exists()

    warm = run_python(
        ["-m", "kjit", "warm", str(manifest), "--arch", arch, "-j", "2"],
        env={"KJIT_CACHE_DIR": cache_b, "KJIT_CACHE_MODE": None},
    )
    assert f"{len(records)} compiled, 0 already cached, 0 failed" in warm.stdout, warm

    second = run_python(
        [str(script), str(tmp_path / "second.pt")],
        env={"KJIT_CACHE_DIR": cache_b, "KJIT_CACHE_MODE": "strict", "KJIT_RECORD": None},
    )
    assert second.stdout.split()[-1] == "0", second

    a = torch.load(tmp_path / "first.pt")
    b = torch.load(tmp_path / "second.pt")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


# The GEMM's tile heuristic and the column reduction's split read the multiprocessor count. A workload
# recorded on this GPU and run strict on another model of the same architecture (114 multiprocessors: an
# H100 PCIe after a 132-SM H100 SXM or H200; 16: a MIG slice) must find every kernel it runs: the GEMM
# replays the recorded pick (a "choice" line), the reduction splits by the shape alone. On a 132-SM GPU
# the heuristic picks 128x256 tiles for M=2048, N=K=4096 and 128x128 ones at 114, and the reduction of
# [15, 1024, 4096] over dim 1 (480 column blocks) split at 132 and did not at 114.
SM_COUNT_WORKLOAD = """
import sys, torch, kjit
if len(sys.argv) > 1:
    kjit._C._override_sm_count(0, int(sys.argv[1]))
torch.manual_seed(0)
x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
y = kjit.ops.linear(x, w)
r = torch.randn(15, 1024, 4096, device="cuda")
s = kjit.ops.sum(r, 1)
torch.cuda.synchronize()
torch.testing.assert_close(y.float(), (x.float() @ w.float().t()), rtol=2e-2, atol=2e-1)
torch.testing.assert_close(s, r.sum(1), rtol=1e-4, atol=1e-3)
print("compiles:", kjit.stats()["compiles"])
"""


@pytest.mark.gpu
def test_a_strict_run_on_a_gpu_with_another_multiprocessor_count_finds_every_kernel(tmp_path):
    import torch

    major, minor = torch.cuda.get_device_capability()
    script = tmp_path / "workload.py"
    script.write_text(SM_COUNT_WORKLOAD)
    manifest, cache_a, cache_b = tmp_path / "manifest.json", tmp_path / "cache-a", tmp_path / "cache-b"
    run_python(
        [str(script)],
        env={"KJIT_RECORD": manifest, "KJIT_CACHE_DIR": cache_a, "KJIT_CACHE_MODE": None, "KJIT_TUNE": "0"},
    )
    if major == 9:
        assert '{"choice":' in manifest.read_text(), "the GEMM's heuristic pick was not recorded"
    arch = f"sm_{major}{minor}"
    run_python(["-m", "kjit", "warm", str(manifest), "--arch", arch], env={"KJIT_CACHE_DIR": cache_b})
    for count in (114, 16):
        r = run_python(
            [str(script), str(count)],
            env={"KJIT_CACHE_DIR": cache_b, "KJIT_CACHE_MODE": "strict", "KJIT_RECORD": None, "KJIT_TUNE": "0"},
            check=False,
        )
        assert r.returncode == 0 and "compiles: 0" in r.stdout, (count, r)
