"""A real redis-server for the remote cache tests and bench (issue 16): started on 127.0.0.1 on a free port,
in its own directory, without persistence, and stopped afterwards. No mock: the Debian package's
/usr/bin/redis-server (or REDIS_SERVER=path, or the first redis-server on PATH).

    with RedisServer(tmp_path / "redis") as server:
        server.url              # redis://127.0.0.1:PORT/0
        server.client()         # a redis.Redis (redis-py) connected to it
        server.stop(); server.start()   # same port, empty again (no persistence)
        server.pause(); server.resume() # SIGSTOP / SIGCONT: connects succeed, replies never come

This module needs only the standard library (the readiness check speaks RESP itself); client() needs
redis-py.
"""

from __future__ import annotations

import atexit
import importlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

DEFAULT_SERVER = "/usr/bin/redis-server"


def server_path() -> str | None:
    """The redis-server to run: $REDIS_SERVER, else /usr/bin/redis-server, else one on PATH; None if none."""
    explicit = os.environ.get("REDIS_SERVER")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    if os.access(DEFAULT_SERVER, os.X_OK):
        return DEFAULT_SERVER
    return shutil.which("redis-server")


def unavailable_reason() -> str | None:
    """None when a redis-server and redis-py are there, else what is missing (for a skip)."""
    if server_path() is None:
        where = os.environ.get("REDIS_SERVER") or f"{DEFAULT_SERVER} (or redis-server on PATH)"
        return f"no redis-server: {where} is missing (Debian: apt-get install redis-server)"
    try:
        importlib.import_module("redis")
    except ImportError as e:
        return f"redis-py is not installed ({e}; pip install redis)"
    return None


def server_version() -> str:
    """`redis-server --version`'s version ("7.0.15"), or "unknown: <why>"."""
    exe = server_path()
    if exe is None:
        return "unknown: no redis-server"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown: {e}"
    for word in out.split():
        if word.startswith("v="):
            return word[2:]
    return out.strip() or "unknown"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int, timeout: float = 0.5) -> bool:
    """Whether a Redis server answers a PING on 127.0.0.1:port (a -NOAUTH error counts: it is up)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            reply = s.recv(64)
    except OSError:
        return False
    return reply[:1] in (b"+", b"-")


class RedisServer:
    """One redis-server process. `port` None: a free one (retried if taken in between)."""

    def __init__(self, workdir, port: int | None = None, password: str | None = None, extra_args: tuple[str, ...] = ()):
        self.exe = server_path()
        if self.exe is None:
            raise RuntimeError(unavailable_reason() or "no redis-server")
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port
        self.password = password
        self.extra_args = tuple(extra_args)
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.starts = 0
        atexit.register(self.stop)  # never left running by a run that ends early (an interrupted pytest)

    # --- addresses ---------------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def url(self) -> str:
        """redis://127.0.0.1:PORT/0 (with ":password@" when the server has one)."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    def client(self, **kwargs):
        """A redis-py client (bytes replies, short timeouts)."""
        import redis

        kwargs.setdefault("socket_timeout", 5)
        kwargs.setdefault("socket_connect_timeout", 5)
        return redis.Redis(host=self.host, port=self.port, db=0, password=self.password, **kwargs)

    @property
    def log_path(self) -> pathlib.Path:
        return self.workdir / "redis.log"

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # --- life cycle ---------------------------------------------------------------------------------
    def _command(self, port: int) -> list[str]:
        cmd = [
            self.exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.workdir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--logfile",
            str(self.log_path),
            "--dbfilename",
            "never-written.rdb",
            "--databases",
            "4",
        ]
        if self.password:
            cmd += ["--requirepass", self.password]
        return cmd + list(self.extra_args)

    def start(self, timeout: float = 15.0) -> RedisServer:
        """Starts the server (on self.port when set, e.g. again after stop()) and waits until it answers."""
        if self.running:
            return self
        fixed = self.port is not None and self.starts > 0
        for attempt in range(5):
            port = self.port if (fixed or (self.port is not None and attempt == 0)) else free_port()
            self.proc = subprocess.Popen(
                self._command(port),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=self.workdir,
                start_new_session=True,
            )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break  # e.g. the port was taken in between: another one
                if _answers(port):
                    self.port = port
                    self.starts += 1
                    self.paused = False
                    return self
                time.sleep(0.02)
            if self.proc.poll() is None:  # neither answering nor dead: give up on it
                self._kill_proc()
                raise RuntimeError(f"redis-server on port {port} did not answer within {timeout} s:\n{self.log_tail()}")
            if fixed:
                raise RuntimeError(
                    f"redis-server could not start again on port {port} "
                    f"(exit {self.proc.returncode}):\n{self.log_tail()}"
                )
        raise RuntimeError(f"redis-server did not start (exit {self.proc.returncode}):\n{self.log_tail()}")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pause(self) -> None:
        """SIGSTOP: the kernel still accepts connections, the server answers nothing (a timeout)."""
        if self.running and not self.paused:
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.running and self.paused:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.paused = False

    def _kill_proc(self) -> None:
        if self.proc is None:
            return
        try:
            os.kill(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, timeout: float = 10.0) -> None:
        """Stops the server (SIGTERM, then SIGKILL) and waits until the port is free; data is gone."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.resume()
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=timeout)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                self._kill_proc()
        self.paused = False
        # The listening socket closes with the process; wait until nothing answers there any more.
        deadline = time.monotonic() + timeout
        while self.port is not None and _answers(self.port, 0.2) and time.monotonic() < deadline:
            time.sleep(0.02)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
