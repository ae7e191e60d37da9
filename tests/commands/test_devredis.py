"""`streamer dev redis` (commands/devredis.py): Debian's redis-server in the foreground with a
password (printed once, or $REDIS_PASSWORD), its data kept across a restart, a clean stop on
SIGTERM and SIGINT, a port in use named with exit 2 and no redis-server named with exit 3."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from streamer.commands import devredis
from streamer.commands.devredis import run_dev_redis
from streamer.errors import LocalBrokerError
from tests.conftest import ROOT, free_port


def start(data: Path, port: int, password: str | None = None) -> tuple[subprocess.Popen[str], list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_PASSWORD"}
    env.update({"PYTHONPATH": str(ROOT), **({"REDIS_PASSWORD": password} if password else {})})
    proc = subprocess.Popen([sys.executable, "-m", "streamer.cli", "dev", "redis", "--data", str(data),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # ends when the process does: a server that never comes up fails here
        lines.append(line)
        if line.startswith("Ctrl+C stops it"):
            break
    assert any(f"ready at 127.0.0.1:{port}" in x for x in lines), "".join(lines)
    assert any(f"data in {data}" in x for x in lines), "".join(lines)
    return proc, lines


def stop(proc: subprocess.Popen[str], signum: int) -> str:
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def connect(port: int, password: str | None) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=5, socket_connect_timeout=5)


def test_a_printed_password_guards_it_the_data_survives_a_restart_and_signals_stop_it(tmp_path: Path) -> None:
    data, port = tmp_path / "dev-redis", free_port()
    proc, lines = start(data, port)
    try:
        (password,) = re.findall(r"password ([0-9a-f]{32})", "".join(lines))
        with pytest.raises(redis.AuthenticationError):
            connect(port, None).set("k", "v")  # without the password: refused
        assert connect(port, password).set("kept", "still here")
    finally:
        assert "redis stopped" in stop(proc, signal.SIGTERM)

    proc, lines = start(data, port, password="from-the-environment")  # the same folder: its data reused
    try:
        assert "from-the-environment" not in "".join(lines)  # a given password is never printed
        assert "the password from $REDIS_PASSWORD" in "".join(lines)
        assert connect(port, "from-the-environment").get("kept") == b"still here"
    finally:
        assert "redis stopped" in stop(proc, signal.SIGINT)


def test_a_port_in_use_is_named_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert run_dev_redis(tmp_path, port, sys.stdout, sys.stderr, env={}) == 2
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err


def test_no_redis_server_is_exit_3_with_the_install_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> str:
        raise LocalBrokerError("no redis-server on this machine: install Debian's package "
                               "(apt-get install redis-server; `make test` does)")

    monkeypatch.setattr(devredis, "redis_binary", missing)
    assert run_dev_redis(tmp_path, free_port(), sys.stdout, sys.stderr, env={}) == 3
    assert "apt-get install redis-server" in capsys.readouterr().err
    assert not (tmp_path / "redis.conf").exists()  # nothing started
