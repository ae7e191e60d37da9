"""`streamer run` with ``online.enabled``: the stream and the online server share one model; the
stream's predictions all arrive while online requests are answered, and a SIGTERM stops both, exit 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import yaml

from streamer.commands.demo import encoded_events, produce_events, synthetic_events
from streamer.config_file import load_config
from streamer.wiring import input_codec
from tests.conftest import Topics, read_all
from tests.online.doubler import free_port
from tests.support.faults import write_config

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]
N = 3000


def test_run_serves_online_beside_the_stream_and_stops_cleanly(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.yaml", bootstrap=bootstrap, input_topic=topics.input,
                        output_topic=topics.output, group=topics.group, guarantee="at_least_once")
    doc = yaml.safe_load(path.read_text())
    port = free_port()
    doc["online"] = {"enabled": True, "http_port": port, "grpc_port": 0, "max_wait_ms": 2, "timeout_ms": 5000}
    path.write_text(yaml.safe_dump(doc))
    cfg = load_config(path)
    produce_events(bootstrap, topics.input, encoded_events(input_codec(cfg), synthetic_events(N, 32, seed=3)))
    proc = subprocess.Popen([sys.executable, "-m", "streamer", "run", "--config", str(path)], env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", connection_timeout=5, network_timeout=30)
        deadline = time.monotonic() + 90
        while True:  # the server's readiness is the condition, polled as a probe would
            try:
                if client.is_server_ready():
                    break
            except (ConnectionError, OSError):
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "not ready"
            time.sleep(0.05)
        x = np.random.default_rng(8).normal(size=(4, 32)).astype(np.float32)
        given = httpclient.InferInput("features", [4, 32], "FP32")
        given.set_data_from_numpy(x)
        answers = [client.infer(cfg.model.name, [given]).as_numpy("scores").shape for _ in range(50)]
        assert answers == [(4, 1)] * 50
        while len(read_all(bootstrap, topics.output)) < N:  # read_all reads to the end: each pass is a wait
            assert time.monotonic() < deadline + 60, "the stream's predictions did not all arrive"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
