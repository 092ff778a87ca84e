"""`import kjit` works without a GPU, is cheap, and loads neither the CUDA driver nor NVRTC by itself."""

import builtins
import textwrap

import pytest

import kjit


def test_public_names():
    for name in [
        "Template",
        "KernelFamily",
        "Kernel",
        "Error",
        "CompileError",
        "CacheMissError",
        "DriverError",
        "LaunchError",
        "ValueError",
        "TypeError",
        "KjitWarning",
        "stats",
        "reset_stats",
        "cache_info",
        "launcher",
        "arg",
        "cdiv",
        "ops",
    ]:
        assert hasattr(kjit, name), name
    assert kjit.__version__ == "0.1.0"
    assert kjit.Template.__module__ == "kjit"


def test_exception_hierarchy():
    for cls in [
        kjit.CompileError,
        kjit.CacheMissError,
        kjit.DriverError,
        kjit.LaunchError,
        kjit.ValueError,
        kjit.TypeError,
    ]:
        assert issubclass(cls, kjit.Error)
    assert issubclass(kjit.Error, Exception)
    assert issubclass(kjit.ValueError, builtins.ValueError)
    assert issubclass(kjit.TypeError, builtins.TypeError)
    assert kjit.ValueError is not builtins.ValueError
    assert issubclass(kjit.KjitWarning, UserWarning)
    # Attributes exist with defaults, also on instances raised from Python.
    e = kjit.CompileError("x")
    assert (e.log, e.name_expression, e.options, e.source_excerpt) == ("", "", [], "")
    assert kjit.CacheMissError("x").key == ""
    assert kjit.DriverError("x").code == 0


def test_import_loads_no_driver_and_is_fast(run_py):
    r = run_py(
        """
        import time, re
        import torch
        def mapped():  # libcuda / libnvrtc mapped into this process
            maps = open('/proc/self/maps').read()
            return sorted(set(re.findall(r'lib(?:cuda|nvrtc)\\.so', maps)))
        before = mapped()  # torch may load the driver itself on a GPU machine
        t0 = time.perf_counter()
        import kjit
        dt = time.perf_counter() - t0
        added = [lib for lib in mapped() if lib not in before]
        print('loaded:' + ','.join(added) if added else 'no-libcuda')
        print(f'{dt:.3f}')
    """,
        env={"KJIT_NVRTC_LIBRARY": "/nonexistent/libnvrtc.so"},
    )
    lines = r.stdout.split()
    assert lines[0] == "no-libcuda"
    assert float(lines[1]) < 2.0, r


def test_bad_setting_is_reported_on_use_not_on_import(run_py):
    r = run_py(
        """
        import kjit
        try:
            kjit.cache_info()
        except kjit.ValueError as e:
            print('ValueError:', e)
    """,
        env={"KJIT_CACHE_MODE": "sometimes"},
    )
    assert "ValueError:" in r.stdout
    assert "KJIT_CACHE_MODE" in r.stdout and "sometimes" in r.stdout


def test_a_bad_setting_is_not_reported_at_exit_by_a_process_that_never_used_kjit(run_py):
    # kjit's exit hooks (the background compiles' stop) must not make the engine, and so read the settings.
    r = run_py("import kjit; print('imported')", env={"KJIT_CACHE_MODE": "sometimes"})
    assert r.stdout.strip() == "imported"
    assert "Exception ignored" not in r.stderr and "KJIT_CACHE_MODE" not in r.stderr, r.stderr


def test_cache_info_and_stats():
    info = kjit.cache_info()
    assert set(info) >= {"dir", "mode", "writable", "layers"}
    assert info["mode"] == "readwrite"
    assert info["writable"] is True
    assert info["problem"] is None  # the directory is used: nothing to report
    assert info["layers"] == []
    s = kjit.stats()
    assert set(s) == {
        "memory_hits",
        "disk_hits",
        "remote_hits",
        "compiles",
        "compile_ms",
        "disk_load_ms",
        "phase_ms",
        "headers",
        "strict_misses",
        "specializations",
        "max_specializations",
        "op_calls",
        "kernels",
    }
    assert set(s["headers"]) == {"read", "from_index"}
    kjit.reset_stats()
    assert kjit.stats()["compiles"] == 0
    assert kjit.stats()["headers"] == {"read": 0, "from_index": 0}


@pytest.mark.parametrize("name", ["add_constant", "rgb_to_gray"])
def test_builtin_templates_resolve(name):
    assert name in kjit.Template.builtin_names()
    t = kjit.Template.builtin(name)
    assert t.is_builtin and t.name == name and name in t.kernels


def test_a_relative_cache_dir_is_resolved_at_import(tmp_path):
    """KJIT_CACHE_DIR=rel is the folder of start-up, not of a later os.chdir() (issue 14 item 8)."""
    from support import run_python

    (tmp_path / "start").mkdir()
    (tmp_path / "later").mkdir()
    code = f"""
import os, kjit
os.chdir({str(tmp_path / "later")!r})
print(kjit.cache_info()["dir"])
"""
    r = run_python(["-c", code], env={"KJIT_CACHE_DIR": "rel-cache"}, cwd=str(tmp_path / "start"))
    assert r.stdout.strip() == str(tmp_path / "start" / "rel-cache"), r


# ---- the compiler preload (engine/include/kjit/compiler_preload.hpp) ---------------------------------------------
# The package starts it when torch starts CUDA; without a GPU these tests start it by hand, as that hook does.
# (`import torch` maps libnvrtc itself, so what the preload did is read from its report, not from the maps.)
_PRELOAD = textwrap.dedent("""
    import os, sys
    import torch, kjit
    from kjit import _core
    x = torch.ones(8) * 2  # torch on the CPU: CUDA never starts, so nothing is preloaded
    print('before', _core._compiler_preload())
    started = _core._preload_compiler(90)
    _core._wait_for_compiler_preload()
    report = _core._compiler_preload() or {}
    print('after', started, report.get('compiled'), report.get('ms', 0) > 0)
""")


def _preload(run_py, env=None, prefix=""):
    r = run_py(prefix + _PRELOAD, env=env)
    before, after = r.stdout.split("\n")[:2]
    return before.split(), after.split(), r


def test_import_and_cpu_torch_start_no_preload(run_py):
    before, _, r = _preload(run_py)
    assert before == ["before", "None"], r


def test_the_preload_loads_nvrtc_and_compiles_once_in_the_background(run_py):
    _, after, r = _preload(run_py)
    assert after == ["after", "True", "True", "True"], r
    # Then the first compile of the process finds NVRTC loaded (and works as any other).
    r = run_py(
        _PRELOAD + "k = kjit.Template.builtin('add_constant').kernel('add_constant')"
        ".specialize(T=torch.float32, VEC=4, arch='sm_90')\nprint(k.origin)\n"
    )
    assert r.stdout.split("\n")[2] == "compiled", r


@pytest.mark.parametrize(
    "env,after",
    [
        ({"KJIT_PRELOAD_COMPILER": "0"}, ["after", "False", "None", "False"]),  # turned off
        ({"KJIT_CACHE_MODE": "strict"}, ["after", "True", "False", "True"]),  # never compiles: no NVRTC, the rest
        ({"KJIT_PRELOAD_COMPILER": "maybe"}, ["after", "False", "None", "False"]),  # bad: the first use reports it
    ],
    ids=["off", "strict", "bad-setting"],
)
def test_the_preload_obeys_the_settings(run_py, env, after):
    _, got, r = _preload(run_py, env=env)
    assert got == after, r
    assert "KJIT_PRELOAD_COMPILER" not in r.stderr, r


def test_a_bad_preload_setting_is_reported_on_use(run_py):
    r = run_py(
        """
        import kjit
        try:
            kjit.cache_info()
        except kjit.ValueError as e:
            print(e)
    """,
        env={"KJIT_PRELOAD_COMPILER": "maybe"},
    )
    assert "KJIT_PRELOAD_COMPILER" in r.stdout and "'maybe'" in r.stdout and "1 | 0" in r.stdout, r


def test_no_preload_on_a_single_cpu(run_py):
    # With one usable CPU the thread would only slow the one that waits for its own compile.
    _, after, r = _preload(run_py, prefix="import os\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n")
    assert after == ["after", "False", "None", "False"], r


def test_a_fork_during_the_preload_leaves_a_child_that_can_compile(run_py):
    # os.fork() right after the start (a DataLoader starting its workers): the fork waits while the preload
    # works, so the child finds NVRTC and the loader in a clean state and compiles; the parent's preload goes on.
    r = run_py(
        """
        import os, torch, kjit
        from kjit import _core
        assert _core._preload_compiler(90)
        pid = os.fork()
        if pid == 0:
            try:
                k = kjit.Template('__global__ void k(float* y) { y[0] = 1.0f; }', name='child.cu').kernel('k')
                os._exit(0 if k.specialize(arch='sm_90').origin == 'compiled' else 3)
            except BaseException:
                os._exit(4)
        _, status = os.waitpid(pid, 0)
        print('child exit:', os.waitstatus_to_exitcode(status))
        _core._wait_for_compiler_preload()
        print('parent compiled:', _core._compiler_preload()['compiled'])
    """,
        timeout=120,
    )
    assert "child exit: 0" in r.stdout, r
    assert "parent compiled: True" in r.stdout, r


# The forked children of the tests below: forked(body, alarm) runs body() in a child forked now and returns
# its exit code: 0 when body() returned true, 3 when false, 4 when it raised, -14 when its alarm killed it.
FORKED = textwrap.dedent(
    """
    import os, signal

    def forked(body, alarm):
        pid = os.fork()
        if pid == 0:
            signal.alarm(alarm)
            try:
                os._exit(0 if body() else 3)
            except BaseException:
                os._exit(4)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)
    """
)


def test_children_forked_while_another_thread_compiles_can_compile(run_py):
    # Hostile review 3, item 3: os.fork() (a DataLoader, multiprocessing's fork start method) while another
    # thread was inside NVRTC gave a child whose first compile waited forever. Forks now wait for the compiles
    # in flight: each child compiles (a child that hangs is killed by its alarm, and says so in the list).
    r = run_py(
        FORKED
        + textwrap.dedent(
            """
        import threading, kjit
        src = 'template <int K> __global__ void k(float* y) { y[threadIdx.x] = K; }'
        family = kjit.Template(src, name='busy.cu').kernel('k')
        compiled, done = [0], threading.Event()

        def busy():
            k = 1
            while not done.is_set():
                family.specialize(arch='sm_90', K=k)
                compiled[0] += 1
                k += 1

        t = threading.Thread(target=busy)
        t.start()
        ends = []
        for i in range(8):
            seen = compiled[0]
            while compiled[0] == seen:  # right after a compile ended, so that the next one is under way
                pass
            src_i = '__global__ void c(float* y) { y[0] = %d; }' % i
            child = lambda: kjit.Template(src_i, name='child.cu').kernel('c').specialize(arch='sm_90').origin == 'compiled'
            ends.append(forked(child, 30))
        done.set()
        t.join()
        print('children:', ends)
    """
        ),
        env={"KJIT_CACHE_MODE": "off"},
        timeout=300,
    )
    assert "children: [0, 0, 0, 0, 0, 0, 0, 0]" in r.stdout, r


def test_children_forked_while_another_thread_loads_kernels_load_and_compile(run_py):
    # A child forked while another thread was inside one of kjit's locks got it held by a thread the child
    # does not have, and waited for it forever: the driver's (a GPU-less machine looks the driver up on every
    # resolution, and threw its failure with the lock held: the test above hung so once in CI), the
    # engine's table and flights (a key another thread was loading: the child waited for that thread's
    # flight). Here another thread loads kernels from the disk cache back to back, the GIL let go, while
    # the main thread forks 300 children that load some of them and of another template, and compile one
    # in 25. Before the fix about 1 fork in 40 hung; each child has 20 s.
    r = run_py(
        FORKED
        + textwrap.dedent(
            """
        import threading, kjit
        busy = kjit.Template('template <int K> __global__ void k(float* y) { y[threadIdx.x] = K; }', name='busy.cu').kernel('k')
        other = kjit.Template('template <int K> __global__ void c(float* y) { y[0] = K; }', name='other.cu').kernel('c')
        for k in range(8):
            busy.specialize(arch='sm_90', K=k)  # onto the disk cache
            other.specialize(arch='sm_90', K=k)
        done = threading.Event()

        def load():
            while not done.is_set():
                kjit.clear_memory()
                for k in range(8):
                    busy.specialize(arch='sm_90', K=k)

        t = threading.Thread(target=load)
        t.start()
        ends = []

        def child(i):
            busy.specialize(arch='sm_90', K=i % 8)
            other.specialize(arch='sm_90', K=i % 8)
            if i % 25:
                return True
            k = kjit.Template('__global__ void n(float* y) { y[0] = %d; }' % i, name='new.cu').kernel('n')
            return k.specialize(arch='sm_90').origin == 'compiled'

        for i in range(300):
            ends.append(forked(lambda: child(i), 20))
        done.set()
        t.join()
        print('children that failed:', [(i, e) for i, e in enumerate(ends) if e])
    """
        ),
        timeout=900,
    )
    assert "children that failed: []" in r.stdout, r
