"""The online ports are exclusive: a second `streamer serve` on a port a first one (or any socket)
listens on exits 2 with one line naming the key, and the first one answers every call."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.online.doubler import free_port
from tests.online.test_serve_process import READY_S, config

ENV = {**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1"}  # serve needs no broker


def serve(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamer", "serve", "--config", str(path)], env=ENV,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def first(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """A `streamer serve` process, ready over gRPC: its (http, grpc) ports."""
    http, grpc = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamer", "serve", "--config",
                             str(config(tmp_path, http, grpc))], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        deadline = time.monotonic() + READY_S
        while True:  # its readiness over gRPC is the condition
            try:
                if client.is_server_ready(client_timeout=5):
                    break
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "not ready in time"
            time.sleep(0.05)
        yield http, grpc
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()


def one_line(done: subprocess.CompletedProcess[str], key: str) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr  # no log line, no "Exception ignored ... Event loop is closed" after it
    assert f"'{key}': cannot listen on 127.0.0.1:" in lines[0]
    return lines[0]


def test_a_second_serve_on_a_taken_grpc_port_exits_2_and_the_first_answers_every_call(
        first: tuple[int, int], tmp_path: Path) -> None:
    _, grpc = first
    second = tmp_path / "second"
    second.mkdir()
    one_line(serve(config(second, free_port(), grpc)), "online.grpc_port")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
    x = np.ones((1, 32), dtype=np.float32)
    answered = 0
    for _ in range(20):  # each on a new connection, as new clients would come
        given = grpcclient.InferInput("features", [1, 32], "FP32")
        given.set_data_from_numpy(x)
        fresh = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        answered += fresh.infer("fraud_mlp", [given], client_timeout=30).as_numpy("scores").shape == (1, 1)
        fresh.close()
    assert answered == 20
    assert client.is_server_ready(client_timeout=5)


@pytest.mark.parametrize("key", ["online.grpc_port", "online.http_port"])
def test_a_port_held_by_a_plain_socket_exits_2_in_one_line(key: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        http, grpc = (free_port(), port) if key == "online.grpc_port" else (port, free_port())
        one_line(serve(config(tmp_path, http, grpc)), key)


@pytest.mark.parametrize("key", ["online.http_port", "online.grpc_port"])
def test_a_port_taken_after_the_check_ends_the_start_in_one_line(key: str, tmp_path: Path) -> None:
    """Taken between the check and the bind (by a socket that allows port reuse, as a first gRPC
    server would): the listener's own refusal, and the gRPC server stopped inside its event loop
    (nothing printed after the error once the loop has closed)."""
    http, grpc = free_port(), free_port()
    script = textwrap.dedent(f"""
        import socket, sys, threading
        from streamer.config_file import load_config
        from streamer.errors import ConfigError
        from streamer.online.server import OnlineServer
        from streamer.wiring.model import model_house
        cfg = load_config({str(config(tmp_path, http, grpc))!r})
        server = OnlineServer(cfg, model_house(cfg).serving)
        taken = socket.socket()
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", {http if key == "online.http_port" else grpc}))
        taken.listen()
        timer = threading.Timer(10, server.stop)  # a server that started beside it: stopped, exit 0
        timer.daemon = True
        timer.start()
        try:
            server.run(install_signals=False)
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            sys.exit(2)
    """)
    done = subprocess.run([sys.executable, "-c", script], env={**ENV, "STREAMER_LOG_LEVEL": "WARNING"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"config key '{key}': cannot listen on" in done.stderr
    after = done.stderr[done.stderr.index(key):]
    assert "Exception ignored" not in after and "Event loop is closed" not in after, after
    assert "never awaited" not in after, after
