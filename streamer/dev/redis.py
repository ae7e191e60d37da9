"""A real Redis server for the demo, the docs and the tests: Debian's ``redis-server``, started here.

:class:`LocalRedis` runs one server on a loopback port with a password, its data and log in a
folder (no persistence unless asked: a test's store starts empty). Readiness is a PING that the
server answers with the password, never a fixed sleep; a server that does not come up raises
:class:`LocalBrokerError` with the tail of its log. :meth:`LocalRedis.pause` and
:meth:`LocalRedis.resume` (SIGSTOP, SIGCONT) stall it, as a stuck store stalls in production.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from streamer.errors import LocalBrokerError

START_TIMEOUT_S = 20.0


def redis_binary() -> str:
    """The path of ``redis-server``; raises with how to install it when it is missing."""
    found = shutil.which("redis-server") or (os.path.exists("/usr/bin/redis-server") and "/usr/bin/redis-server")
    if not found:
        raise LocalBrokerError("no redis-server on this machine: install Debian's package "
                               "(apt-get install redis-server; `make test` does)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalRedis:
    """One ``redis-server`` on ``127.0.0.1:port`` with ``password``, its files in ``folder``."""

    def __init__(self, folder: Path, port: int = 0, password: str | None = None, persist: bool = False) -> None:
        self.folder = folder
        self.port = port or _free_port()
        self.password = password if password is not None else secrets.token_hex(12)
        self.persist = persist
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        conf = self.folder / "redis.conf"
        lines = [f"port {self.port}", "bind 127.0.0.1", f"dir {self.folder}", "daemonize no",
                 f"logfile {self.folder / 'redis.log'}", f"requirepass {self.password}",
                 'save ""' if not self.persist else "save 60 1", f"appendonly {'yes' if self.persist else 'no'}",
                 "protected-mode yes"]
        conf.write_text("\n".join(lines) + "\n")
        conf.chmod(0o600)  # it holds the password
        self._proc = subprocess.Popen([redis_binary(), str(conf)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if self.ping():
                return
            time.sleep(0.05)
        self.stop()
        raise LocalBrokerError(f"redis-server did not answer on {self.address}; its log:\n{self._log_tail()}")

    def ping(self, timeout_s: float = 1.0) -> bool:
        """Whether the server answers PING (with its password) within ``timeout_s``."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s) as s:
                s.sendall(f"AUTH {self.password}\r\nPING\r\n".encode())
                got = b""
                while b"PONG" not in got:
                    chunk = s.recv(256)
                    if not chunk:
                        return False
                    got += chunk
                return True
        except OSError:
            return False

    def exit_code(self) -> int | None:
        """The server's exit code once it has exited; None while it runs (or before it starts)."""
        return None if self._proc is None else self._proc.poll()

    def pause(self) -> None:
        """Stall the server (SIGSTOP): it accepts connections and answers nothing."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self._proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
            self._proc.terminate()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)
        self._proc = None

    def _log_tail(self) -> str:
        log = self.folder / "redis.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else "(no log)"


@contextlib.contextmanager
def local_redis(folder: Path, port: int = 0, password: str | None = None) -> Iterator[LocalRedis]:
    """A started :class:`LocalRedis`, stopped on leaving."""
    server = LocalRedis(folder, port, password)
    server.start()
    try:
        yield server
    finally:
        server.stop()
