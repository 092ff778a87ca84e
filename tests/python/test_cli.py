"""`python -m kjit`: the C++ command line through the Python package (same cache, same keys)."""

import kjit
from support import compile_add_constant


def test_info(run_kjit, cache_dir):
    r = run_kjit("info")
    assert r.returncode == 0
    assert str(cache_dir) in r.stdout, r


def test_compile_then_python_finds_it_on_disk(run_kjit, run_py, cache_dir):
    r = run_kjit(*compile_add_constant())
    assert r.returncode == 0, r
    assert len(list(cache_dir.rglob("*.kjit"))) == 1, r
    out = run_py("""
        import kjit, torch
        k = kjit.Template.builtin('add_constant').kernel('add_constant').specialize(T=torch.float32, VEC=4, arch='sm_90')
        print(k.origin)
    """).stdout.split()
    assert out == ["disk"]
    ls = run_kjit("ls")
    assert ls.returncode == 0 and "add_constant<float, 4>" in ls.stdout, ls


def test_usage_error_exit_status(run_kjit):
    r = run_kjit("no-such-command", check=False)
    assert r.returncode == 2, r
    assert r.stderr, r


def test_compile_error_exit_status(run_kjit):
    r = run_kjit(*compile_add_constant(vec=3), check=False)
    assert r.returncode == 1, r
    assert "VEC must be a power of two" in r.stderr, r


def test_python_main_entry(run_py):
    r = run_py("""
        import sys
        from kjit.__main__ import main
        print('status', main(['info']))
    """)
    assert "status 0" in r.stdout, r


def test_cli_run_writes_to_python_streams(capsys):
    assert kjit._core.cli_run(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "kjit 0.1.0"
    assert kjit._core.cli_run(["no-such-command"]) == 2
    assert "no-such-command" in capsys.readouterr().err


def test_demo_is_routed_to_the_python_demo(run_kjit):
    r = run_kjit("demo", "--help")
    assert r.returncode == 0, r
    assert "python -m kjit demo" in r.stdout, r


def test_ls_says_what_differs_between_the_library_ops_entry_and_a_cli_compile(run_kjit, run_py):
    # Issue 40: the demo compiles rgb_to_gray with the library's options (as kjit.ops.rgb_to_gray does), a
    # later `kjit compile` of the same kernel without them: another entry ("compiled", not "disk"), and
    # `kjit ls` lists both, saying which options tell them apart.
    run_py("""
        import kjit
        opts = kjit._core.library_compile_options()
        kjit.Template.builtin('rgb_to_gray').kernel('rgb_to_gray', **opts).specialize(H=1080, W=1920, arch='sm_90')
    """)
    args = ["compile", "rgb_to_gray", "--kernel", "rgb_to_gray", "--param", "H=1080", "--param", "W=1920"]
    r = run_kjit(*args, "--arch", "sm_90")
    assert "  sm_90        compiled  " in r.stdout, r
    ls = run_kjit("ls")
    rows = [line for line in ls.stdout.splitlines() if "rgb_to_gray<1080, 1920>" in line]
    assert len(rows) == 2, ls.stdout
    header = ls.stdout.splitlines()[1]
    assert header.endswith("  layer     differs"), header
    column = header.index("differs")
    differs = sorted(row[column:] for row in rows)
    assert differs[0].startswith("options: ") and differs[1].startswith("options: without "), differs
    # The one lists what the other lacks: the library's options.
    assert differs[0].removeprefix("options: ") == differs[1].removeprefix("options: without "), differs
