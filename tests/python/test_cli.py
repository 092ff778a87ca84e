"""`python -m kjit`: the C++ command line through the Python package (same cache, same keys)."""

import kjit


def test_info(run_kjit, cache_dir):
    r = run_kjit("info")
    assert r.returncode == 0
    assert str(cache_dir) in r.stdout, r


def test_compile_then_python_finds_it_on_disk(run_kjit, run_py, cache_dir):
    r = run_kjit(
        "compile",
        "add_constant",
        "--kernel",
        "add_constant",
        "--param",
        "T=float32",
        "--param",
        "VEC=4",
        "--arch",
        "sm_90",
    )
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
    r = run_kjit(
        "compile",
        "add_constant",
        "--kernel",
        "add_constant",
        "--param",
        "T=float32",
        "--param",
        "VEC=3",
        "--arch",
        "sm_90",
        check=False,
    )
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
