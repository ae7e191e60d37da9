"""`streamer dev kafka` (commands/devkafka.py): a real broker in the foreground whose data survives
a restart, a clean stop on SIGINT, and a port in use named with exit 2."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streamer.commands.devkafka import run_dev_kafka
from streamer.kafka.topics import create_topics
from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.kafka


def start(data: Path, port: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "streamer.cli", "dev", "kafka", "--data", str(data),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # ends when the process does: a broker that never comes up fails here
        lines.append(line)
        if line.startswith("Ctrl+C stops it"):
            break
    assert any(f"ready at 127.0.0.1:{port}" in x for x in lines), "".join(lines)
    assert any(f"data in {data}" in x for x in lines), "".join(lines)
    return proc


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def test_the_data_survives_a_restart_and_sigint_stops_it_cleanly(tmp_path: Path) -> None:
    data, port = tmp_path / "dev-kafka", free_port()
    bootstrap = f"127.0.0.1:{port}"
    proc = start(data, port)
    try:
        create_topics(bootstrap, {"kept": 1})
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("kept", b"still here", b"k")
        assert producer.flush(30) == 0
    finally:
        assert "broker stopped" in stop(proc)
    assert (data / "data" / "meta.properties").exists()

    proc = start(data, port)  # the same folder: formatted storage reused
    try:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dev-test", "enable.auto.commit": False})
        consumer.assign([TopicPartition("kept", 0, 0)])
        deadline, got = time.monotonic() + 60, None
        while got is None and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                got = m.value()
        consumer.close()
        assert got == b"still here"
    finally:
        stop(proc)


def test_a_port_in_use_is_named_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert run_dev_kafka(tmp_path, port, sys.stdout, sys.stderr) == 2
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err
