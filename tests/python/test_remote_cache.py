"""The remote cache tier on Redis (issue 16), against a real redis-server (redis_server.py; no mock).

CPU only, compile-only for sm_90. Every test gets its own redis-server (127.0.0.1, a free port, no
persistence) and its own local cache directories: each "machine" is a process with its own
KJIT_CACHE_DIR. The manifest (20 specializations of a template of our own, N = 1..20) is recorded once
per module; sub-manifests keep some of its records.

The kjit processes hide torch (sys.modules['torch'] = None, as test_torch_free.py does) so that 32 of
them start quickly on a 2-core machine; with a kjit that cannot run without torch they fall back to
`python -m kjit` (slower). KJIT_TEST_CLI=path runs the command-line steps with that kjit command instead
(e.g. the C++ CLI of a build tree); the Python snippets still use the installed kjit.

Redis layout checked here (the interface of issue 16):
  entry  kjit:v1:<target>:<64 hex key>  = b"KJITRS1\\0" + HMAC-SHA256(secret, redis_key + b"\\0" + entry)
                                           + entry, entry being the bytes of the local entry file
  lease  kjit:v1:lease:<target>:<key>   (SET NX PX) deleted when its compile ends
Without redis-server or redis-py the tests are skipped, or fail when KJIT_REQUIRE_REDIS=1.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import re
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from redis_server import RedisServer, free_port, unavailable_reason

TARGET = "sm_90"
SECRET = "remote-cache-test-secret-0123456789"  # >= 16 bytes
OTHER_SECRET = "another-deployment-secret-abcdefgh"
MAGIC = b"KJITRS1\0"
TAG_BYTES = 32
ENTRY_KEY = re.compile(rf"^kjit:v1:{TARGET}:[0-9a-f]{{64}}$")
LEASE_PREFIX = "kjit:v1:lease:"
KEYS = 20

SRC = (
    "template <typename T, int N>\n"
    "__global__ void rc_scale(T* x, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) x[i] = x[i] * T(N) + T(N % 7);\n"
    "}\n"
)
TEMPLATE_NAME = "rc_scale.cu"

HIDE_TORCH = "import sys; sys.modules['torch'] = None"
CLI = HIDE_TORCH + "; from kjit.__main__ import main; sys.exit(main(sys.argv[1:]))"

SUMMARY = re.compile(r"(\d+) jobs? \([^)]*\): (\d+) compiled, (\d+) already cached, (\d+) failed")


# --- processes ----------------------------------------------------------------------------------------


@functools.cache
def torch_free() -> bool:
    """Whether the installed kjit imports with torch hidden (kjit._core without kjit._C)."""
    r = subprocess.run([sys.executable, "-c", HIDE_TORCH + "; import kjit"], capture_output=True, timeout=120)
    return r.returncode == 0


def kjit_argv(*args) -> list[str]:
    """The command line of `python -m kjit ARGS`, torch hidden when kjit allows it; KJIT_TEST_CLI=path: that
    kjit command instead (e.g. build/kjit, the C++ CLI; the Python snippets still use the installed kjit)."""
    if os.environ.get("KJIT_TEST_CLI"):
        return [os.environ["KJIT_TEST_CLI"], *map(str, args)]
    if torch_free():
        return [sys.executable, "-c", CLI, *map(str, args)]
    return [sys.executable, "-m", "kjit", *map(str, args)]


def snippet_argv(code: str) -> list[str]:
    code = textwrap.dedent(code)
    return [sys.executable, "-c", (HIDE_TORCH + "\n" if torch_free() else "") + code]


def kjit_env(cache=None, redis=None, secret=SECRET, **extra) -> dict:
    """os.environ without any KJIT_* setting, then the cache dir, the remote tier and `extra` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KJIT_")}
    if cache is not None:
        env["KJIT_CACHE_DIR"] = str(cache)
    if redis is not None:
        env["KJIT_REMOTE_CACHE"] = redis.url if isinstance(redis, RedisServer) else str(redis)
        if secret is not None:
            env["KJIT_REMOTE_CACHE_SECRET"] = secret
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


class Run:
    """A finished process: exit status, output, wall time, and what its warm printed."""

    def __init__(self, argv, returncode, stdout, stderr, seconds, label=""):
        self.argv, self.returncode, self.stdout, self.stderr = argv, returncode, stdout, stderr
        self.seconds, self.label = seconds, label

    def __repr__(self):
        cmd = " ".join(a if len(a) < 80 else a[:77] + "..." for a in self.argv[1:])
        return (
            f"<{self.label or 'process'}: exit {self.returncode} after {self.seconds:.2f} s: {cmd}>\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}---"
        )

    @property
    def summary(self) -> dict:
        """warm's summary line: jobs, compiled, cached, failed."""
        m = SUMMARY.search(self.stdout)
        assert m, f"no warm summary line in the output:\n{self!r}"
        return dict(zip(("jobs", "compiled", "cached", "failed"), map(int, m.groups())))

    @property
    def remote_line(self) -> str:
        m = re.search(r"^remote cache:.*$", self.stdout, re.M) or re.search(r"^remote cache:.*$", self.stderr, re.M)
        assert m, f"no line starting 'remote cache:' in the output:\n{self!r}"
        return m.group(0)

    def remote_count(self, word: str) -> int:
        line = self.remote_line
        m = re.search(rf"(\d+) {word}", line)
        assert m, f"no '<n> {word}' in {line!r}:\n{self!r}"
        return int(m.group(1))

    @property
    def fetched(self) -> int:
        return self.remote_count("fetched")

    @property
    def pushed(self) -> int:
        return self.remote_count("pushed")

    def warnings(self, text: str) -> list[str]:
        """The warning lines of stderr ("kjit: warning: ..." of the CLI, "KjitWarning: ..." of Python) that
        contain `text` (any case); not warm's progress lines (e.g. "[3/20] fetched ... from the remote cache")."""
        return [
            line
            for line in self.stderr.splitlines()
            if "warning" in line.lower() and text.lower() in line.lower() and not line.startswith("[")
        ]


def run(argv, env, timeout=120, label="", check=True) -> Run:
    t = time.monotonic()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"{label or argv} did not finish within {timeout} s (hang):\n--- stdout\n{e.stdout}\n--- stderr\n{e.stderr}"
        ) from None
    r = Run(argv, p.returncode, p.stdout, p.stderr, time.monotonic() - t, label)
    if check:
        assert r.returncode == 0, f"expected exit 0:\n{r!r}"
    return r


def run_all(jobs, timeout=180, out_dir=None) -> list[Run]:
    """Starts every (argv, env, label) at once and waits for all; output goes to files (no pipe stalls).
    A process still running after `timeout` seconds fails the test, after every process was killed."""
    import tempfile

    tmp = tempfile.mkdtemp(prefix="kjit-rc-", dir=out_dir)
    procs = []
    for i, (argv, env, label) in enumerate(jobs):
        out = open(os.path.join(tmp, f"{i}.out"), "w+")
        err = open(os.path.join(tmp, f"{i}.err"), "w+")
        procs.append(
            (
                argv,
                label,
                out,
                err,
                time.monotonic(),
                subprocess.Popen(argv, env=env, stdout=out, stderr=err, text=True),
            )
        )
    deadline = time.monotonic() + timeout
    ends = {}
    try:
        while len(ends) < len(procs):
            for i, (_, _, _, _, _, p) in enumerate(procs):
                if i not in ends and p.poll() is not None:
                    ends[i] = time.monotonic()
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
    finally:
        for *_, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for i, (argv, label, out, err, start, p) in enumerate(procs):
        out.seek(0)
        err.seek(0)
        results.append(Run(argv, p.returncode, out.read(), err.read(), ends.get(i, time.monotonic()) - start, label))
        out.close()
        err.close()
    hung = [r for i, r in enumerate(results) if i not in ends]
    assert not hung, f"{len(hung)} process(es) still running after {timeout} s (killed):\n" + "\n".join(
        repr(r) for r in hung[:3]
    )
    return results


def warm_argv(manifest, *extra, jobs=2):
    return kjit_argv("warm", manifest, "--arch", TARGET, "-j", jobs, *extra)


# --- Redis values -------------------------------------------------------------------------------------


def seal(secret: str, redis_key: str, entry: bytes) -> bytes:
    tag = hmac.new(secret.encode(), redis_key.encode() + b"\0" + entry, hashlib.sha256).digest()
    return MAGIC + tag + entry


def unseal(secret: str, redis_key: str, value: bytes) -> bytes | None:
    """The entry bytes of a value sealed with `secret` for `redis_key`, None when it is not one."""
    if len(value) < len(MAGIC) + TAG_BYTES or not value.startswith(MAGIC):
        return None
    entry = value[len(MAGIC) + TAG_BYTES :]
    return entry if hmac.compare_digest(seal(secret, redis_key, entry), value) else None


def entry_problem(data: bytes, key: str | None = None) -> str | None:
    """Why `data` is not a valid entry file (cache/include/kjit/cache/entry.hpp), None when it is."""
    if len(data) < 152:
        return f"{len(data)} bytes: shorter than the 152-byte header"
    magic, _version, m, p = struct.unpack_from("<8sIIQ", data, 0)
    if magic != b"KJITENT\0":
        return f"bad magic {magic!r}"
    if len(data) != 152 + m + p:
        return f"size {len(data)} != 152 + {m} + {p}"
    stored_key = data[24:88].decode("ascii", "replace")
    if key is not None and stored_key != key:
        return f"key {stored_key} != {key}"
    meta, payload = data[152 : 152 + m], data[152 + m :]
    if hashlib.sha256(meta).digest() != data[88:120]:
        return "metadata checksum mismatch"
    if hashlib.sha256(payload).digest() != data[120:152]:
        return "payload checksum mismatch"
    return None


def entry_keys(client) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(match=f"kjit:v1:{TARGET}:*", count=1000))


def lease_keys(client) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(match=LEASE_PREFIX + "*", count=1000))


def all_keys(client) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(match="*", count=1000))


def check_redis_entries(client, count: int, secret: str = SECRET) -> dict:
    """Asserts that Redis holds `count` entries, each sealed with `secret` around a valid entry of its
    own key, and no lease; returns {redis key: entry bytes}."""
    keys = entry_keys(client)
    others = [k for k in all_keys(client) if k not in keys]
    assert not lease_keys(client), f"lease keys left in Redis: {lease_keys(client)}"
    assert not others, f"unexpected keys in Redis: {others}"
    assert len(keys) == count, f"{len(keys)} entry keys in Redis, expected {count}: {keys}"
    entries = {}
    for k in keys:
        assert ENTRY_KEY.match(k), f"badly formed entry key {k!r}"
        value = client.get(k)
        entry = unseal(secret, k, value)
        assert entry is not None, (
            f"Redis value of {k} is not sealed as b'KJITRS1\\0' + HMAC-SHA256(secret, "
            f"key + b'\\0' + entry) + entry: first 48 bytes {value[:48]!r}"
        )
        problem = entry_problem(entry, k.rsplit(":", 1)[1])
        assert problem is None, f"Redis value of {k} holds a bad entry: {problem}"
        entries[k] = entry
    return entries


def local_entries(cache) -> dict:
    """{redis key: entry bytes} of the entry files of a local cache directory."""
    files = sorted((cache / "v1" / TARGET).rglob("*.kjit")) if (cache / "v1" / TARGET).is_dir() else []
    return {f"kjit:v1:{TARGET}:{f.stem}": f.read_bytes() for f in files}


def write_commands(client) -> dict:
    """{command: calls} of the commands in INFO commandstats that may write (ACL category @write, scripts)."""
    writers = {c.decode() if isinstance(c, bytes) else c for c in client.acl_cat("write")}
    writers |= {"eval", "evalsha", "fcall", "function"}
    stats = client.info("commandstats")
    return {
        name[len("cmdstat_") :]: v["calls"]
        for name, v in stats.items()
        if name[len("cmdstat_") :].split("|")[0].lower() in writers
    }


def wait_for_command(client, command: str, proc=None, timeout: float = 60) -> None:
    """Waits until the server has received `command` (INFO commandstats, counted since the last CONFIG
    RESETSTAT): a handshake with a process instead of a sleep, e.g. its SET NX of a lease, after which it
    holds its local lock and waits for the lease. Fails at once if `proc` (a Popen) ends meanwhile."""
    deadline = time.monotonic() + timeout
    while client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0) == 0:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended before it sent {command.upper()}: {proc.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {command.upper()} reached the server within {timeout} s")
        time.sleep(0.005)


def changes(client) -> int:
    """The server's count of changes to the data set since start (its 'dirty' counter)."""
    return int(client.info("persistence")["rdb_changes_since_last_save"])


def redis_snapshot(client) -> tuple[dict, int]:
    """Every key's value and the data set's change count, with the command counts reset: what
    check_redis_unchanged() compares with."""
    values = {k: client.get(k) for k in all_keys(client)}
    client.config_resetstat()
    return values, changes(client)


def check_redis_unchanged(client, snapshot, who: str) -> None:
    """Asserts that since `snapshot` (redis_snapshot) no value changed, the data set did not change and no
    command that may write reached the server."""
    before, dirty = snapshot
    after = {k: client.get(k) for k in all_keys(client)}
    assert after == before, f"{who} changed Redis: keys before {sorted(before)}, after {sorted(after)}"
    assert changes(client) == dirty, f"{who} changed the data set (Redis's change counter moved)"
    assert write_commands(client) == {}, (
        f"{who} sent write commands (no entry, no lease may be written): {write_commands(client)}"
    )


# --- fixtures -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_available():
    reason = unavailable_reason()
    if reason:
        if os.environ.get("KJIT_REQUIRE_REDIS") == "1":
            pytest.fail(f"KJIT_REQUIRE_REDIS=1 but {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture
def redis_server(redis_available, tmp_path):
    """A fresh redis-server for this test, stopped afterwards (also when the test fails)."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_client(redis_server):
    return redis_server.client()


@pytest.fixture(scope="module")
def manifest(redis_available, tmp_path_factory):
    """A manifest of 20 specializations rc_scale(T=float32, N=1..20), recorded with KJIT_RECORD."""
    d = tmp_path_factory.mktemp("manifest")
    path = d / "manifest.json"
    r = run(
        snippet_argv(f"""
        import kjit
        k = kjit.Template({SRC!r}, name={TEMPLATE_NAME!r}).kernel("rc_scale")
        for n in range(1, {KEYS} + 1):
            k.specialize(T="float32", N=n, arch={TARGET!r})
        print("compiles", kjit.stats()["compiles"])
    """),
        kjit_env(cache=d / "record-cache", KJIT_RECORD=path),
        label="record",
    )
    assert "KJIT_RECORD" not in r.stderr, r
    assert len(records_of(path)) == KEYS, r
    return path


def records_of(path) -> dict:
    """{N: record line} of a manifest."""
    out = {}
    for line in path.read_text().splitlines():
        if '"record"' in line:
            rec = json.loads(line)["record"]
            n = next(a["value"] for a in rec["args"] if a["name"] == "N")
            out[n] = line
    return out


@pytest.fixture
def sub_manifest(manifest, tmp_path):
    """sub_manifest(ns): a manifest with the records of N in `ns` only."""

    def make(ns) -> str:
        lines = manifest.read_text().splitlines()
        head = [line for line in lines if line.strip() and '"record"' not in line]
        recs = records_of(manifest)
        path = tmp_path / f"manifest-{'-'.join(map(str, ns))}.json"
        path.write_text("\n".join(head + [recs[n] for n in ns]) + "\n")
        return path

    return make


# --- 1. 32 machines, one Redis: each key compiled once in total ---------------------------------------


def test_32_processes_compile_each_key_exactly_once(manifest, redis_server, redis_client, tmp_path):
    procs = 32
    caches = [tmp_path / f"machine-{i:02d}" for i in range(procs)]
    results = run_all(
        [
            (warm_argv(manifest, jobs=2), kjit_env(cache=c, redis=redis_server), f"machine {i}")
            for i, c in enumerate(caches)
        ],
        timeout=240,
        out_dir=tmp_path,
    )
    for r in results:
        assert r.returncode == 0, r
        s = r.summary
        assert s["jobs"] == KEYS and s["failed"] == 0, r
        assert s["compiled"] + s["cached"] == KEYS, r
        assert r.fetched == s["cached"], f"an empty local cache: every 'already cached' entry was fetched:\n{r!r}"
    compiled = [r.summary["compiled"] for r in results]
    assert sum(compiled) == KEYS, (
        f"sum of 'compiled' over {procs} processes is {sum(compiled)}, expected {KEYS} (each key once): "
        f"{compiled}\n" + "\n".join(repr(r) for r in results if r.summary["compiled"] > 0)[:6000]
    )
    assert sum(r.pushed for r in results) == KEYS, [r.remote_line for r in results]

    # Redis: 20 sealed entries, no lease; each machine's disk: the same 20 entries, byte for byte.
    remote = check_redis_entries(redis_client, KEYS)
    verifies = run_all(
        [(kjit_argv("verify"), kjit_env(cache=c), f"verify {c.name}") for c in caches], timeout=120, out_dir=tmp_path
    )
    for c, v in zip(caches, verifies):
        assert v.returncode == 0 and f"{KEYS} entries verified" in v.stdout and "all valid" in v.stdout, v
        assert local_entries(c) == remote, f"{c}: the local entries differ from Redis's"


# --- 2. Redis stopped (or frozen) mid-run, then back ---------------------------------------------------


@pytest.mark.parametrize("outage", ["stopped", "frozen"])
def test_redis_outage_mid_run(outage, manifest, redis_server, tmp_path):
    """stopped: redis-server ends (connections refused) and starts again 0.5 s later on the same port, empty.
    frozen: SIGSTOP for 2 s, then SIGCONT: connections hang, every reply times out (KJIT_REMOTE_CACHE_TIMEOUT).
    The processes back off for 50 ms after a failure (KJIT_REMOTE_CACHE_BACKOFF), doubling per failed retry."""
    procs, timeout_s, lease_s, backoff_s = 8, 1.0, 5.0, 0.05
    cpus = os.cpu_count() or 1
    # Baseline: one process warming the 20 keys with no remote tier (start-up + 20 compiles, -j 1).
    base = run(warm_argv(manifest, jobs=1), kjit_env(cache=tmp_path / "baseline"), label="baseline")
    assert base.summary["compiled"] == KEYS, base
    # The worst case without a hang: every process compiles all 20 keys itself, `procs` of them sharing
    # `cpus` cores (x1.5 for noise), plus a few operations running into the timeout (one failed operation
    # per outage, then a back-off), one wait for a lease orphaned by the outage (its holder could not
    # delete it: it expires after KJIT_REMOTE_CACHE_LEASE), the outage itself, and 5 s of slack. An operation
    # without a time limit, or retries of every operation, would exceed it.
    bound = 1.5 * base.seconds * max(1.0, procs / cpus) + 5 * timeout_s + lease_s + 2.0 + 5.0

    caches = [tmp_path / f"machine-{i}" for i in range(procs)]
    env = dict(
        KJIT_REMOTE_CACHE_TIMEOUT=timeout_s, KJIT_REMOTE_CACHE_LEASE=lease_s, KJIT_REMOTE_CACHE_BACKOFF=backoff_s
    )
    client = redis_server.client(socket_timeout=2, socket_connect_timeout=2)
    state = {}

    def outage_thread():
        # The outage begins as soon as 2 entries are in Redis (the processes are mid-run).
        deadline = time.monotonic() + 30
        n = 0
        while time.monotonic() < deadline:
            try:
                n = len(entry_keys(client))
            except Exception:  # noqa: BLE001
                n = 0
            if n >= 2:
                break
            time.sleep(0.005)
        state["entries_at_outage"] = n
        state["began"] = time.monotonic()
        if outage == "stopped":
            redis_server.stop()
            time.sleep(0.5)  # the outage itself
            redis_server.start()
        else:
            redis_server.pause()
            time.sleep(2 * timeout_s)  # the outage itself: long enough for requests to time out
            redis_server.resume()
        state["ended"] = time.monotonic()

    t0 = time.monotonic()
    thread = threading.Thread(target=outage_thread, daemon=True)
    thread.start()
    results = run_all(
        [
            (warm_argv(manifest, jobs=1), kjit_env(cache=c, redis=redis_server, **env), f"machine {i}")
            for i, c in enumerate(caches)
        ],
        timeout=max(120, 3 * bound),
        out_dir=tmp_path,
    )
    thread.join(timeout=90)
    assert "ended" in state, f"the outage thread did not finish: {state}"
    ends = [t0 + r.seconds for r in results]
    print(
        f"{outage}: {state['began'] - t0:.2f} s after the start with {state['entries_at_outage']} entries, "
        f"back at {state['ended'] - t0:.2f} s; processes took {[round(r.seconds, 2) for r in results]} s "
        f"(bound {bound:.1f} s); {[r.summary['compiled'] for r in results]} compiled, "
        f"{[r.fetched for r in results]} fetched, {[r.pushed for r in results]} pushed"
    )
    assert state["entries_at_outage"] < KEYS and any(e > state["began"] for e in ends), (
        f"the outage did not happen mid-run (entries at its start {state['entries_at_outage']}, processes ended "
        f"{[round(e - state['began'], 2) for e in ends]} s after it began)"
    )

    for r in results:
        assert r.returncode == 0, r
        s = r.summary
        assert s["jobs"] == KEYS and s["failed"] == 0 and s["compiled"] + s["cached"] == KEYS, r
        assert r.seconds < bound, (
            f"took {r.seconds:.1f} s, over the bound of {bound:.1f} s (baseline {base.seconds:.1f} s):\n{r!r}"
        )
    assert any(r.warnings("remote cache") for r in results), (
        "no process warned about the remote cache during the outage:\n" + "\n".join(map(repr, results[:2]))
    )
    verifies = run_all(
        [(kjit_argv("verify"), kjit_env(cache=c), f"verify {c.name}") for c in caches], timeout=120, out_dir=tmp_path
    )
    for v in verifies:
        assert v.returncode == 0 and f"{KEYS} entries verified" in v.stdout and "all valid" in v.stdout, v

    # Redis works again. A frozen server may keep leases whose holders could not delete them: each must
    # expire (PX KJIT_REMOTE_CACHE_LEASE). A restarted one starts empty, so no lease survives it.
    client = redis_server.client()
    leases = {k: client.pttl(k) for k in lease_keys(client)}
    if outage == "stopped":
        assert not leases, f"leases left after the processes ended: {leases}"
    assert all(0 < ms <= lease_s * 1000 for ms in leases.values()), f"a lease without its expiry: {leases}"
    deadline = time.monotonic() + lease_s + 2
    while lease_keys(client) and time.monotonic() < deadline:
        time.sleep(0.1)
    before = len(entry_keys(client))
    check_redis_entries(client, before)  # sealed and valid, no lease left
    # A fresh process fetches what is there and compiles and pushes the rest.
    fresh = run(warm_argv(manifest), kjit_env(cache=tmp_path / "fresh", redis=redis_server), label="fresh")
    s = fresh.summary
    assert s["failed"] == 0 and fresh.fetched == before and s["compiled"] == KEYS - before, fresh
    assert fresh.pushed == KEYS - before and fresh.fetched + fresh.pushed > 0, fresh
    assert not fresh.warnings("remote cache"), fresh
    check_redis_entries(client, KEYS)


# --- 3. tampered values: refused, recompiled, repaired --------------------------------------------------


def _tamper(kind: str, key: str, value: bytes) -> bytes:
    entry = value[len(MAGIC) + TAG_BYTES :]
    if kind == "payload byte":
        v = bytearray(value)
        v[-1] ^= 0x01  # the last byte of the entry's payload: the tag no longer matches
        return bytes(v)
    if kind == "tag byte":
        v = bytearray(value)
        v[len(MAGIC) + 5] ^= 0x80
        return bytes(v)
    if kind == "no tag":
        return entry
    if kind == "no tag, magic kept":
        return MAGIC + entry
    if kind == "truncated":
        return value[: len(value) - 100]
    if kind == "other secret":
        return seal(OTHER_SECRET, key, entry)
    if kind == "another key's value":  # a valid seal, for another key: must not be taken for this one
        return b""  # filled in by the test
    raise ValueError(kind)


@pytest.mark.parametrize(
    "kind",
    ["payload byte", "tag byte", "no tag", "no tag, magic kept", "truncated", "other secret", "another key's value"],
)
def test_tampered_value_is_refused_recompiled_and_repaired(kind, sub_manifest, redis_server, redis_client, tmp_path):
    one = sub_manifest([3])
    seed = run(warm_argv(one), kjit_env(cache=tmp_path / "seed", redis=redis_server), label="seed")
    assert seed.summary["compiled"] == 1 and seed.pushed == 1, seed
    (key,) = check_redis_entries(redis_client, 1)
    good = redis_client.get(key)
    if kind == "another key's value":
        two = sub_manifest([4])
        run(warm_argv(two), kjit_env(cache=tmp_path / "seed4", redis=redis_server), label="seed 4")
        other = next(k for k in entry_keys(redis_client) if k != key)
        bad = redis_client.get(other)
        redis_client.delete(other)
    else:
        bad = _tamper(kind, key, good)
    assert bad != good
    redis_client.set(key, bad)

    r = run(warm_argv(one), kjit_env(cache=tmp_path / "victim", redis=redis_server), label="after tampering")
    assert r.summary["compiled"] == 1 and r.summary["failed"] == 0, f"a {kind} value must not be used:\n{r!r}"
    assert r.fetched == 0, r
    assert r.warnings("refused"), f"no warning saying 'refused' for a {kind} value:\n{r!r}"
    assert r.pushed == 1, f"the bad value must be overwritten (1 pushed):\n{r!r}"
    check_redis_entries(redis_client, 1)
    assert redis_client.get(key) == good or unseal(SECRET, key, redis_client.get(key)) is not None
    victim = local_entries(tmp_path / "victim")
    assert len(victim) == 1 and entry_problem(victim[key], key.rsplit(":", 1)[1]) is None, (
        "the local entry after the recompile is not valid"
    )

    again = run(warm_argv(one), kjit_env(cache=tmp_path / "next", redis=redis_server), label="after repair")
    assert again.summary["compiled"] == 0 and again.fetched == 1, again
    assert not again.warnings("refused"), again


def test_redis_value_layout(sub_manifest, redis_server, redis_client, tmp_path):
    """The value is exactly MAGIC + HMAC-SHA256(secret, key + NUL + entry) + the local entry file."""
    cache = tmp_path / "c"
    run(warm_argv(sub_manifest([1, 2])), kjit_env(cache=cache, redis=redis_server))
    remote = check_redis_entries(redis_client, 2)
    assert remote == local_entries(cache)


# --- leases: one left by a crashed compiler expires, or is deleted, and is taken over -------------------


@pytest.mark.parametrize("how", ["expires", "deleted"])
def test_stale_lease_is_taken_over(how, sub_manifest, redis_server, redis_client, tmp_path):
    one = sub_manifest([5])
    scratch = run(warm_argv(one), kjit_env(cache=tmp_path / "scratch"), label="local only")
    assert scratch.summary["compiled"] == 1, scratch
    (key,) = local_entries(tmp_path / "scratch")
    lease = LEASE_PREFIX + key[len("kjit:v1:") :]  # kjit:v1:lease:<target>:<key>
    lease_s = 1.0 if how == "expires" else 60.0
    redis_client.set(lease, b"token-of-a-crashed-process", px=int(lease_s * 1000))
    env = kjit_env(cache=tmp_path / "waiter", redis=redis_server)
    if how == "expires":
        r = run(warm_argv(one), env, label="waiter")
        waited = lease_s
    else:  # deleted once the waiter found it taken (its lease holder gave up without an entry)
        redis_client.config_resetstat()
        proc = subprocess.Popen(warm_argv(one), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        t = time.monotonic()
        wait_for_command(redis_client, "set", proc)  # its SET NX of the lease, refused: it waits now
        assert proc.poll() is None, f"the waiter finished while the lease was live: {proc.communicate()}"
        waited = time.monotonic() - t
        redis_client.delete(lease)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        r = Run(proc.args, proc.returncode, out, err, time.monotonic() - t, "waiter")
        assert r.returncode == 0, r
    assert r.summary["compiled"] == 1 and r.summary["failed"] == 0 and r.pushed == 1, r
    assert r.seconds >= 0.9 * waited, (
        f"the waiter compiled while another process's lease was live ({r.seconds:.2f} s < {waited} s):\n{r!r}"
    )
    # Taken over soon after: the waiter polls (allow 5 s for its polling interval and start-up).
    assert r.seconds < waited + scratch.seconds + 5, f"{r.seconds:.2f} s:\n{r!r}"
    check_redis_entries(redis_client, 1)


def test_a_local_waiter_allows_for_its_peers_remote_wait(sub_manifest, redis_server, redis_client, tmp_path):
    # Hostile review 3, item 6: the process holding a key's local lock waited for another machine's lease up to
    # KJIT_COMPILE_TIMEOUT + KJIT_REMOTE_CACHE_LEASE, while its peers on the machine gave up on that lock after
    # KJIT_LOCK_TIMEOUT and failed; a lease planted in a shared Redis triggered it. The proportions of the
    # defaults (300 / 300 / 60 s), scaled down: the peer now waits for the lock as long as the holder may wait.
    one = sub_manifest([7])
    scratch = run(warm_argv(one), kjit_env(cache=tmp_path / "scratch"), label="local only")
    (key,) = local_entries(tmp_path / "scratch")
    lease = LEASE_PREFIX + key[len("kjit:v1:") :]
    redis_client.set(lease, b"planted", px=600_000)  # outlives both processes
    env = kjit_env(
        cache=tmp_path / "machine",
        redis=redis_server,
        KJIT_LOCK_TIMEOUT=2,
        KJIT_COMPILE_TIMEOUT=2,
        KJIT_REMOTE_CACHE_LEASE=1,
    )
    redis_client.config_resetstat()
    holder = subprocess.Popen(
        warm_argv(one, jobs=1), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_command(redis_client, "set", holder)  # the holder has the local lock and waits for the planted lease
    peer = run(warm_argv(one, jobs=1), env, timeout=60, label="peer", check=False)
    out, err = holder.communicate(timeout=60)
    first = Run(holder.args, holder.returncode, out, err, 0, "holder")
    assert first.returncode == 0 and first.summary["compiled"] == 1, first
    assert first.warnings("compiling it here"), f"the holder waited for the lease, then compiled:\n{first!r}"
    assert peer.returncode == 0, f"the peer gave up on the lock while the holder waited remotely:\n{peer!r}"
    assert peer.summary["failed"] == 0 and peer.summary["compiled"] == 0, peer
    assert peer.seconds < 2 + 3 + scratch.seconds + 10, peer


# --- 4. read mode writes nothing ------------------------------------------------------------------------


def test_read_mode_fetches_but_never_writes(sub_manifest, redis_server, redis_client, tmp_path):
    run(warm_argv(sub_manifest([1, 2])), kjit_env(cache=tmp_path / "writer", redis=redis_server), label="writer")
    snapshot = redis_snapshot(redis_client)
    assert len(snapshot[0]) == 2

    reader_env = kjit_env(cache=tmp_path / "reader", redis=redis_server, KJIT_REMOTE_CACHE_MODE="read")
    r = run(warm_argv(sub_manifest([1, 2, 3, 4])), reader_env, label="reader")
    s = r.summary
    assert (s["compiled"], s["cached"], s["failed"]) == (2, 2, 0), r
    assert r.fetched == 2 and r.pushed == 0, r
    check_redis_unchanged(redis_client, snapshot, "read mode")

    # Its own local cache holds what it fetched and compiled.
    v = run(kjit_argv("verify"), kjit_env(cache=tmp_path / "reader"), label="verify")
    assert "4 entries verified" in v.stdout, v
    # `warm --remote` needs a writable remote tier.
    bad = run(warm_argv(sub_manifest([1, 2]), "--remote"), reader_env, check=False, label="--remote in read")
    assert bad.returncode != 0, bad


READONLY = f"""
    import kjit
    k = kjit.Template({SRC!r}, name={TEMPLATE_NAME!r}).kernel("rc_scale")
    for n in (1, 2, 3, 4):
        k.specialize(T="float32", N=n, arch={TARGET!r})
    s = kjit.stats()
    print("STATS", s["compiles"], s["remote_hits"])
"""


def test_readonly_cache_mode_writes_nothing_to_redis_either(sub_manifest, redis_server, redis_client, tmp_path):
    # KJIT_CACHE_MODE=readonly means "never write": the remote tier is read-only for it too.
    run(warm_argv(sub_manifest([1, 2])), kjit_env(cache=tmp_path / "writer", redis=redis_server), label="writer")
    snapshot = redis_snapshot(redis_client)
    assert len(snapshot[0]) == 2
    r = run(
        snippet_argv(READONLY),
        kjit_env(cache=tmp_path / "ro", redis=redis_server, KJIT_CACHE_MODE="readonly"),
        label="readonly",
    )
    assert "STATS 2 2" in r.stdout, f"2 fetched and 2 compiled expected:\n{r!r}"
    check_redis_unchanged(redis_client, snapshot, "readonly mode")


# --- 5. strict mode -------------------------------------------------------------------------------------

STRICT = f"""
    import kjit
    k = kjit.Template({SRC!r}, name={TEMPLATE_NAME!r}).kernel("rc_scale")
    h = k.specialize(T="float32", N=1, arch={TARGET!r})
    print("HIT", h.key)
    try:
        k.specialize(T="float32", N=999, arch={TARGET!r})
        print("NO MISS ERROR")
    except kjit.CacheMissError as e:
        print("MISS", e.key)
    s = kjit.stats()
    print("STATS", s["compiles"], s["remote_hits"])
"""


def test_strict_mode_fetches_from_redis_and_never_compiles(sub_manifest, redis_server, redis_client, tmp_path):
    run(warm_argv(sub_manifest([1])), kjit_env(cache=tmp_path / "writer", redis=redis_server), label="writer")
    (key,) = check_redis_entries(redis_client, 1)
    strict = dict(KJIT_CACHE_MODE="strict")
    r = run(snippet_argv(STRICT), kjit_env(cache=tmp_path / "empty", redis=redis_server, **strict), label="strict")
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert lines.get("HIT") == key.rsplit(":", 1)[1], r
    assert "MISS" in lines and "NO MISS ERROR" not in r.stdout, r
    assert lines["STATS"] == "0 1", f"strict mode: 0 compiles and 1 remote hit expected:\n{r!r}"

    # The CLI in strict mode: the key in Redis is fetched (exit 0, not compiled), a key not there is an error.
    src = tmp_path / TEMPLATE_NAME
    src.write_text(SRC)

    def compile_n(n, cache):
        return run(
            kjit_argv(
                "compile", src, "--kernel", "rc_scale", "--param", "T=float32", "--param", f"N={n}", "--arch", TARGET
            ),
            kjit_env(cache=tmp_path / cache, redis=redis_server, **strict),
            check=False,
            label=f"strict compile N={n}",
        )

    hit = compile_n(1, "empty-cli")
    assert hit.returncode == 0, hit
    row = next((ln for ln in hit.stdout.splitlines() if ln.startswith(key.rsplit(":", 1)[1])), "")
    assert row and " compiled " not in row + " ", f"strict mode compiled instead of fetching:\n{hit!r}"
    miss = compile_n(2, "empty-cli")
    assert miss.returncode != 0 and "strict" in miss.stderr, miss
    check_redis_entries(redis_client, 1)  # nothing pushed, no lease left


def test_python_api_remote_hit_is_copied_to_disk(sub_manifest, redis_server, redis_client, tmp_path):
    run(warm_argv(sub_manifest([1])), kjit_env(cache=tmp_path / "writer", redis=redis_server), label="writer")
    cache = tmp_path / "empty"
    r = run(
        snippet_argv(f"""
        import kjit
        k = kjit.Template({SRC!r}, name={TEMPLATE_NAME!r}).kernel("rc_scale")
        print("ORIGINS", k.specialize(T="float32", N=1, arch={TARGET!r}).origin,
              k.specialize(T="float32", N=2, arch={TARGET!r}).origin)
        s = kjit.stats()
        print("STATS", s["compiles"], s["remote_hits"], s["disk_hits"])
    """),
        kjit_env(cache=cache, redis=redis_server),
        label="python",
    )
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert lines.get("ORIGINS") == "remote compiled" and lines.get("STATS") == "1 1 0", r
    remote = check_redis_entries(redis_client, 2)  # the compiled one was pushed
    assert local_entries(cache) == remote, "the remote hit was not copied onto the local disk"


# --- 6. bad configuration -------------------------------------------------------------------------------


def _info(env, label) -> Run:
    return run(kjit_argv("info"), env, check=False, timeout=60, label=label)


def test_secret_missing_short_or_from_a_file(sub_manifest, redis_server, tmp_path):
    url = redis_server.url
    r = _info(kjit_env(cache=tmp_path / "c", redis=url, secret=None), "no secret")
    assert r.returncode != 0 and "KJIT_REMOTE_CACHE_SECRET" in r.stdout + r.stderr, r
    r = _info(kjit_env(cache=tmp_path / "c", redis=url, secret="only-15-bytes!!"), "short secret")
    assert len("only-15-bytes!!") == 15
    assert r.returncode != 0 and "KJIT_REMOTE_CACHE_SECRET" in r.stdout + r.stderr, r
    r = _info(
        kjit_env(cache=tmp_path / "c", redis=url, secret=None, KJIT_REMOTE_CACHE_SECRET_FILE=tmp_path / "missing"),
        "missing secret file",
    )
    assert r.returncode != 0 and "KJIT_REMOTE_CACHE_SECRET" in r.stdout + r.stderr, r
    both = dict(KJIT_REMOTE_CACHE_SECRET_FILE=tmp_path / "secret")
    r = _info(kjit_env(cache=tmp_path / "c", redis=url, **both), "secret and secret file")
    assert r.returncode != 0 and "KJIT_REMOTE_CACHE_SECRET" in r.stdout + r.stderr, r

    # The secret from a file (one trailing newline ignored): the same seal as the secret itself.
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    env = kjit_env(cache=tmp_path / "c", redis=url, secret=None, KJIT_REMOTE_CACHE_SECRET_FILE=secret_file)
    r = _info(env, "secret file")
    assert r.returncode == 0 and "answers" in r.stdout, r
    assert SECRET not in r.stdout + r.stderr, "the secret was printed"
    w = run(warm_argv(sub_manifest([1])), env, label="warm, secret from a file")
    assert w.pushed == 1, w
    check_redis_entries(redis_server.client(), 1, secret=SECRET)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:6379", "redis://127.0.0.1:notaport", "redis://127.0.0.1:70000", "redis://", "127.0.0.1:6379"],
)
def test_bad_url_is_an_error(url, redis_available, tmp_path):
    r = _info(kjit_env(cache=tmp_path / "c", redis=url), f"url {url}")
    assert r.returncode != 0 and "KJIT_REMOTE_CACHE" in r.stdout + r.stderr, r


@pytest.mark.parametrize(
    "setting, value",
    [
        ("KJIT_REMOTE_CACHE_MODE", "write"),
        ("KJIT_REMOTE_CACHE_TIMEOUT", "soon"),
        ("KJIT_REMOTE_CACHE_LEASE", "-1"),
        ("KJIT_REMOTE_CACHE_BACKOFF", "0"),
        ("KJIT_REMOTE_CACHE_BACKOFF", "1s"),
    ],
)
def test_bad_remote_setting_is_an_error(setting, value, redis_server, tmp_path):
    r = _info(kjit_env(cache=tmp_path / "c", redis=redis_server, **{setting: value}), f"{setting}={value}")
    assert r.returncode != 0 and setting in r.stdout + r.stderr, r


def test_nothing_listening_compiles_locally_with_one_warning(sub_manifest, redis_available, tmp_path):
    port = free_port()
    m = sub_manifest([1, 2, 3])
    base = run(warm_argv(m), kjit_env(cache=tmp_path / "base"), label="no remote tier")
    r = run(warm_argv(m), kjit_env(cache=tmp_path / "c", redis=f"redis://127.0.0.1:{port}/0"), label="refused")
    s = r.summary
    assert (s["compiled"], s["failed"]) == (3, 0), r
    warnings = r.warnings("remote cache")
    assert len(warnings) == 1, f"expected one warning about the remote cache, got {len(warnings)}:\n{r!r}"
    assert r.seconds < base.seconds + 3, f"{r.seconds:.1f} s against {base.seconds:.1f} s without remote:\n{r!r}"
    # The same from Python: compiles, one KjitWarning, no error.
    p = run(
        snippet_argv(f"""
        import kjit
        k = kjit.Template({SRC!r}, name={TEMPLATE_NAME!r}).kernel("rc_scale")
        print("ORIGINS", *[k.specialize(T="float32", N=n, arch={TARGET!r}).origin for n in (1, 2, 3)])
        print("STATS", kjit.stats()["compiles"], kjit.stats()["remote_hits"])
    """),
        kjit_env(cache=tmp_path / "py", redis=f"redis://127.0.0.1:{port}/0"),
        label="python, refused",
    )
    assert "ORIGINS compiled compiled compiled" in p.stdout and "STATS 3 0" in p.stdout, p
    assert len(p.warnings("remote cache")) == 1, p


def test_server_that_never_answers_times_out(sub_manifest, redis_available, tmp_path):
    """A listening socket nobody accepts from: connects succeed, no reply comes (KJIT_REMOTE_CACHE_TIMEOUT)."""
    m = sub_manifest([1, 2, 3])
    base = run(warm_argv(m), kjit_env(cache=tmp_path / "base"), label="no remote tier")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sink:
        sink.bind(("127.0.0.1", 0))
        sink.listen(64)
        port = sink.getsockname()[1]
        timeout_s = 0.5
        r = run(
            warm_argv(m),
            kjit_env(cache=tmp_path / "c", redis=f"redis://127.0.0.1:{port}/0", KJIT_REMOTE_CACHE_TIMEOUT=timeout_s),
            timeout=60,
            label="silent server",
        )
    s = r.summary
    assert (s["compiled"], s["failed"]) == (3, 0), r
    assert r.warnings("remote cache"), r
    # One operation times out, then the back-off: a few timeouts at most, not one per key and operation.
    assert r.seconds < base.seconds + 4 * timeout_s + 2, (
        f"{r.seconds:.1f} s against {base.seconds:.1f} s without remote (timeout {timeout_s} s):\n{r!r}"
    )


# --- 7. info and prefetch -------------------------------------------------------------------------------


def test_info_shows_the_remote_tier(redis_available, tmp_path):
    password = "pw-Secret-4711"
    with RedisServer(tmp_path / "redis-auth", password=password) as server:
        for url in (
            f"redis://:{password}@127.0.0.1:{server.port}/0",
            f"redis://default:{password}@127.0.0.1:{server.port}/1",
        ):
            r = _info(kjit_env(cache=tmp_path / "c", redis=url), "info")
            assert r.returncode == 0, r
            line = next((ln for ln in r.stdout.splitlines() if ln.strip().startswith("remote cache")), None)
            assert line, f"no 'remote cache' line in kjit info:\n{r!r}"
            assert f"127.0.0.1:{server.port}" in line and "readwrite" in line, line
            assert "answers" in line and "does not answer" not in line, f"{url}: {line}"
            assert password not in r.stdout + r.stderr, f"the password is shown:\n{r!r}"
            assert SECRET not in r.stdout + r.stderr, f"the secret is shown:\n{r!r}"
        r = _info(
            kjit_env(
                cache=tmp_path / "c",
                redis=f"redis://:wrong-password@127.0.0.1:{server.port}/0",
                KJIT_REMOTE_CACHE_MODE="read",
            ),
            "wrong password",
        )
        assert r.returncode == 0, r
        line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("remote cache"))
        assert "does not answer" in line or re.search(r"auth|password|denied", line, re.I), (
            f"a wrong password must not show as a server that answers:\n{r!r}"
        )
        assert "wrong-password" not in r.stdout + r.stderr, r
        assert re.search(r"\bread\b", line) and "readwrite" not in line, line
        port = server.port
    r = _info(kjit_env(cache=tmp_path / "c", redis=f"redis://127.0.0.1:{port}/0"), "stopped")
    assert r.returncode == 0, r
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("remote cache"))
    assert "does not answer" in line, line


def test_prefetch_then_warm_compiles_nothing(manifest, redis_server, redis_client, tmp_path):
    seed = run(warm_argv(manifest), kjit_env(cache=tmp_path / "seed", redis=redis_server), label="seed")
    assert seed.pushed == KEYS, seed
    entries = check_redis_entries(redis_client, KEYS)
    redis_client.config_resetstat()

    cache = tmp_path / "empty"
    env = kjit_env(cache=cache, redis=redis_server)
    p = run(kjit_argv("prefetch", manifest, "--arch", TARGET), env, label="prefetch")
    assert f"prefetched {KEYS} of {KEYS} entries from" in p.stdout + p.stderr, p
    assert local_entries(cache) == entries
    assert write_commands(redis_client) == {}, f"prefetch wrote to Redis: {write_commands(redis_client)}"
    w = run(warm_argv(manifest), env, label="warm after prefetch")
    assert (
        f"{KEYS} jobs ({KEYS} specializations x 1 target): 0 compiled, {KEYS} already cached, 0 failed" in w.stdout
    ), w
    assert w.fetched == 0 and w.pushed == 0, w

    # Again: nothing left to fetch.
    p = run(kjit_argv("prefetch", manifest, "--arch", TARGET), env, label="prefetch again")
    assert f"prefetched 0 of {KEYS} entries from" in p.stdout + p.stderr, p

    # One entry missing, one damaged: 18 fetched; the warm that follows compiles and repairs both.
    keys = sorted(entries)
    redis_client.delete(keys[0])
    redis_client.set(keys[1], _tamper("payload byte", keys[1], redis_client.get(keys[1])))
    cache2 = tmp_path / "empty2"
    env2 = kjit_env(cache=cache2, redis=redis_server)
    p = run(kjit_argv("prefetch", manifest, "--arch", TARGET), env2, label="prefetch, 2 bad")
    assert f"prefetched {KEYS - 2} of {KEYS} entries from" in p.stdout + p.stderr, p
    assert re.search(r"\b1 not in the remote cache\b", p.stdout) and re.search(r"\b1 refused\b", p.stdout), p
    assert "refused the value of " + keys[1] in p.stderr, f"no warning naming the refused value:\n{p!r}"
    w = run(warm_argv(manifest), env2, label="warm after partial prefetch")
    s = w.summary
    assert (s["compiled"], s["cached"], s["failed"]) == (2, KEYS - 2, 0) and w.pushed == 2, w
    check_redis_entries(redis_client, KEYS)


# --- 8. warm --remote -------------------------------------------------------------------------------------


def test_warm_remote_pushes_entries_already_on_disk(manifest, redis_server, redis_client, tmp_path):
    cache = tmp_path / "c"
    local = run(warm_argv(manifest), kjit_env(cache=cache), label="local warm")
    assert local.summary["compiled"] == KEYS, local
    assert all_keys(redis_client) == []

    no_remote = run(warm_argv(manifest, "--remote"), kjit_env(cache=cache), check=False, label="--remote, no tier")
    assert no_remote.returncode != 0 and "KJIT_REMOTE_CACHE" in no_remote.stdout + no_remote.stderr, no_remote

    env = kjit_env(cache=cache, redis=redis_server)
    plain = run(warm_argv(manifest), env, label="warm with remote, no --remote")
    assert plain.summary["cached"] == KEYS and plain.fetched == 0, plain
    r = run(warm_argv(manifest, "--remote"), env, label="warm --remote")
    assert r.summary["compiled"] == 0 and r.summary["cached"] == KEYS, r
    assert r.pushed == KEYS - plain.pushed, r
    remote = check_redis_entries(redis_client, KEYS)
    assert remote == local_entries(cache), "Redis's entries differ from the local files they were pushed from"
    again = run(warm_argv(manifest, "--remote"), env, label="warm --remote again")
    assert again.pushed == 0, again
    # A value there that is refused (tampered, or sealed with an old secret) is replaced by --remote:
    # CI, the only writer, repairs what production would refuse forever.
    victim = sorted(remote)[0]
    redis_client.set(victim, _tamper("payload byte", victim, redis_client.get(victim)))
    repaired = run(warm_argv(manifest, "--remote"), env, label="warm --remote over a tampered value")
    assert repaired.pushed == 1 and "refused" in repaired.stderr, repaired
    assert check_redis_entries(redis_client, KEYS) == local_entries(cache)


def test_prefetch_into_a_disk_that_cannot_keep_it_is_an_error(sub_manifest, redis_server, tmp_path):
    m = sub_manifest([1, 2])
    run(warm_argv(m), kjit_env(cache=tmp_path / "writer", redis=redis_server), label="writer")
    r = run(
        kjit_argv("prefetch", m, "--arch", TARGET),
        kjit_env(cache=tmp_path / "strict", redis=redis_server, KJIT_CACHE_MODE="strict"),
        check=False,
        label="prefetch, strict",
    )
    assert r.returncode != 0 and "not writable" in r.stderr, r
