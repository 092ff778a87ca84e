"""logging.getLogger("kjit"): compiles, disk loads, cache events, warnings and degradations are log
records carrying their data; KJIT_VERBOSE configures the logger (never over the user's configuration);
events from threads without the GIL (Python threads compiling, kjit's warm threads) are delivered
without deadlock, and never into an interpreter that is exiting. Compile-only: no GPU needed."""

import logging
import pathlib

import pytest
import torch

import kjit
from support import unique_family


def kjit_records(caplog, event=None):
    return [r for r in caplog.records if r.name == "kjit" and (event is None or r.event == event)]


def test_compile_is_an_info_record_with_its_data(caplog):
    fam = unique_family()
    with caplog.at_level(logging.DEBUG, logger="kjit"):
        k = fam.specialize(T=torch.float32, arch="sm_80")
    assert k.origin == "compiled"
    (r,) = kjit_records(caplog, "compile")
    assert r.levelno == logging.INFO
    assert r.key == k.key
    assert r.template == fam.template.name
    assert r.kernel == k.name_expression == "scale<float>"
    assert r.target == "sm_80"
    assert r.origin == "compiled"
    assert r.ms > 0
    assert r.warned is False
    assert r.getMessage().startswith("compiled ") and " for sm_80 in " in r.getMessage()
    (store,) = kjit_records(caplog, "cache_store")
    assert store.levelno == logging.DEBUG and store.key == k.key

    # The hot path (a kernel already in memory) logs nothing.
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="kjit"):
        assert fam.specialize(T=torch.float32, arch="sm_80").origin == "memory"
    assert kjit_records(caplog) == []


def test_disk_load_is_a_debug_record(caplog):
    fam = unique_family()
    key = fam.specialize(T=torch.float64, arch="sm_90").key
    kjit.clear_memory()
    with caplog.at_level(logging.DEBUG, logger="kjit"):
        k = fam.specialize(T=torch.float64, arch="sm_90")
    assert k.origin == "disk"
    (r,) = kjit_records(caplog, "disk_load")
    assert r.levelno == logging.DEBUG
    assert (r.key, r.kernel, r.target, r.origin) == (key, "scale<double>", "sm_90", "disk")
    assert r.ms >= 0
    assert kjit_records(caplog, "compile") == []


def test_a_damaged_entry_is_a_warning_and_a_record(caplog):
    fam = unique_family()
    k = fam.specialize(T=torch.int32, arch="sm_80")
    entry = pathlib.Path(kjit.cache_info()["dir"]) / "v1" / "sm_80" / k.key[:2] / f"{k.key}.kjit"
    entry.write_bytes(b"damaged")
    kjit.clear_memory()
    with caplog.at_level(logging.WARNING, logger="kjit"), pytest.warns(kjit.KjitWarning, match="damaged entry"):
        assert fam.specialize(T=torch.int32, arch="sm_80").origin == "compiled"
    (r,) = kjit_records(caplog, "cache_damaged")
    assert r.levelno == logging.WARNING
    assert (r.key, r.target, r.warned) == (k.key, "sm_80", True)
    assert "ignoring damaged entry" in r.getMessage()


def test_strict_miss_is_a_warning_record(run_py):
    r = run_py(
        """
        import logging, torch, kjit
        records = []
        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record)
        logging.getLogger("kjit").addHandler(Keep())
        fam = kjit.Template("template <typename T> __global__ void k(T* x) {}", name="strict.cu").kernel("k")
        try:
            fam.specialize(T=torch.float32, arch="sm_80")
        except kjit.CacheMissError:
            pass
        (r,) = [r for r in records if r.event == "strict_miss"]
        print(r.levelname, r.kernel, r.target, len(r.key))
    """,
        env={"KJIT_CACHE_MODE": "strict"},
    )
    assert r.stdout.split() == ["WARNING", "k<float>", "sm_80", "64"]


def test_kjit_verbose_configures_the_logger(run_py):
    code = """
        import logging, uuid, torch, kjit
        print(logging.getLevelName(logging.getLogger("kjit").level))
        src = f"// {uuid.uuid4()}\\ntemplate <typename T> __global__ void k(T* x) {{}}"
        fam = kjit.Template(src, name="v.cu").kernel("k")
        fam.specialize(T=torch.float32, arch="sm_80")
        kjit.clear_memory()
        fam.specialize(T=torch.float32, arch="sm_80")
    """
    one = run_py(code, env={"KJIT_VERBOSE": "1"})
    assert one.stdout.split() == ["INFO"]
    lines = one.stderr.splitlines()
    assert [
        line for line in lines if line.startswith("kjit: compiled k(T=float32) from template v.cu for sm_80 in ")
    ], one
    assert not [line for line in lines if line.startswith("kjit: loaded ")], one  # DEBUG: KJIT_VERBOSE=2

    two = run_py(code, env={"KJIT_VERBOSE": "2"})
    assert two.stdout.split() == ["DEBUG"]
    assert [
        line
        for line in two.stderr.splitlines()
        if line.startswith("kjit: loaded k(T=float32) from template v.cu for sm_80 from the disk cache in ")
    ]

    quiet = run_py(code, env={"KJIT_VERBOSE": None})
    assert quiet.stdout.split() == ["NOTSET"]
    assert "kjit:" not in quiet.stderr


def test_kjit_verbose_leaves_a_users_configuration_alone(run_py):
    r = run_py(
        """
        import logging, io
        mine = io.StringIO()
        log = logging.getLogger("kjit")
        log.setLevel(logging.WARNING)
        log.addHandler(logging.StreamHandler(mine))
        import uuid, torch, kjit
        fam = kjit.Template(f"// {uuid.uuid4()}\\n__global__ void k(float* x) {{}}", name="u.cu").kernel("k")
        fam.specialize(arch="sm_80")
        print(logging.getLevelName(log.level), len(log.handlers), repr(mine.getvalue()))
    """,
        env={"KJIT_VERBOSE": "2"},
    )
    assert r.stdout.split() == ["WARNING", "2", "''"]  # the user's handler, kjit's NullHandler; no record
    assert "kjit: compiled" not in r.stderr


def test_records_from_many_threads_without_deadlock(run_py):
    # Eight Python threads compile at once (the GIL released during each compile); the handler takes
    # the GIL, calls back into kjit and is slow; the main thread holds the GIL as much as it can,
    # asking kjit for its counters (an engine lock) in a loop. A deadlock would hang until the timeout.
    r = run_py(
        """
        import logging, threading, time, uuid, torch, kjit
        seen = []
        class Slow(logging.Handler):
            def emit(self, record):
                kjit.stats()
                time.sleep(0.001)
                seen.append((record.event, record.kernel, threading.get_ident()))
        log = logging.getLogger("kjit")
        log.setLevel(logging.DEBUG)
        log.addHandler(Slow())
        def work(i):
            src = f"// {uuid.uuid4()}\\ntemplate <int N> __global__ void k{i}(float* x) {{ x[0] = N; }}"
            fam = kjit.Template(src, name=f"t{i}.cu").kernel(f"k{i}")
            for n in range(3):
                fam.specialize(N=n, arch="sm_80")
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            kjit.stats()
        for t in threads:
            t.join()
        compiles = sorted(k for e, k, _ in seen if e == "compile")
        assert compiles == sorted(f"k{i}<{n}>" for i in range(8) for n in range(3)), compiles
        assert len({tid for _, _, tid in seen}) > 1
        print("ok", len(compiles))
    """,
        timeout=240,
    )
    assert r.stdout.split() == ["ok", "24"]


def test_records_from_kjit_warm_threads(run_py, tmp_path):
    # `kjit warm -j 4` compiles on C++ worker threads that never held the GIL: their records arrive.
    manifest = tmp_path / "m.json"
    run_py(
        """
        import torch, kjit
        kjit.Template.builtin("add_constant").kernel("add_constant").specialize(T=torch.float32, VEC=2, arch="sm_80")
    """,
        env={"KJIT_RECORD": manifest},
    )
    # Through a handler of the process's own: each record must reach Python's logging with its data (the
    # C++ stderr fallback, for where no interpreter can take a record, would print no "record" line).
    r = run_py(f"""
        import logging, sys
        import kjit.__main__
        class Say(logging.Handler):
            def emit(self, record):
                if record.getMessage().startswith("compiled"):
                    print("record", record.kernel, record.target, flush=True)
        logging.getLogger("kjit").addHandler(Say())
        logging.getLogger("kjit").setLevel(logging.INFO)
        sys.exit(kjit.__main__.main(["warm", {str(manifest)!r}, "--arch", "sm_90,sm_100,sm_86", "-j", "4"]))
    """)
    records = sorted(line for line in r.stdout.splitlines() if line.startswith("record"))
    assert records == [f"record add_constant<float, 2> sm_{a}" for a in (100, 86, 90)], r


def test_no_record_into_an_exiting_interpreter(run_py):
    # An atexit hook registered before kjit's runs after it (last in, first out): a compile there happens
    # while the interpreter exits. Its event is the KJIT_VERBOSE line on stderr, not a call into Python.
    r = run_py(
        """
        import atexit, logging, uuid
        def compile_at_exit():
            import torch, kjit
            src = f"// {uuid.uuid4()}\\n__global__ void late(float* x) {{}}"
            kjit.Template(src, name="late.cu").kernel("late").specialize(arch="sm_80")
            print("compiled at exit")
        atexit.register(compile_at_exit)
        import kjit
        class Say(logging.Handler):
            def emit(self, record):
                print("record", record.kernel)
        logging.getLogger("kjit").addHandler(Say())
        logging.getLogger("kjit").setLevel(logging.INFO)
        src = f"// {uuid.uuid4()}\\n__global__ void early(float* x) {{}}"
        kjit.Template(src, name="early.cu").kernel("early").specialize(arch="sm_80")
    """,
        env={"KJIT_VERBOSE": "1"},
    )
    assert r.stdout.splitlines() == ["record early", "compiled at exit"], r
    assert "kjit: compiled late() from template late.cu for sm_80" in r.stderr, r


def test_stats_keep_per_kernel_compile_and_load_time():
    kjit.reset_stats()
    fam = unique_family("per_kernel")
    fam.specialize(T=torch.float32, arch="sm_80")
    fam.specialize(T=torch.float32, arch="sm_90")
    kjit.clear_memory()
    fam.specialize(T=torch.float32, arch="sm_80")
    k = kjit.stats()["kernels"]["per_kernel<float>"]
    assert k["compiles"] == 2 and k["disk_loads"] == 1
    assert k["compile_ms"] > 0 and k["load_ms"] >= 0
    assert set(k) == {"compiles", "compile_ms", "disk_loads", "load_ms"}
    kjit.reset_stats()
    assert kjit.stats()["kernels"] == {}
