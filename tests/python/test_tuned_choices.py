"""Tuned choices without a GPU: a KJIT_RECORD manifest's "choice" lines are installed by `python -m kjit warm`
into a fresh cache (for every architecture, whatever --arch says), counted by `kjit info`, and removed by
`kjit clear`; a bad choice line is a clear error."""

import json

from test_warm import record_workload, records

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
