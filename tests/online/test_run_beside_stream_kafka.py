"""`streamer run` with ``online.enabled``: the stream and the online server share one model; the
stream's predictions all arrive while online requests are answered, and a SIGTERM stops both, exit 0.
The safeguards cover the online rows: a challenger scores them in shadow under their request ids,
and their features have drift gauges of their own. `streamer serve` with a challenger publishes
its shadow predictions before it exits."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import yaml

from streamer.commands.demo import encoded_events, produce_events, synthetic_events
from streamer.config_file import load_config
from streamer.formats.configured import input_codec
from tests.conftest import Topics, read_all
from tests.integration.test_model_ops_kafka import predictions
from tests.integration.test_observability_kafka import drift_profile
from tests.online.doubler import free_port
from tests.support.faults import write_config

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]
N = 3000


def test_run_serves_online_beside_the_stream_and_stops_cleanly(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.yaml", bootstrap=bootstrap, input_topic=topics.input,
                        output_topic=topics.output, group=topics.group, guarantee="at_least_once")
    port, doc = free_port(), safeguarded(path, tmp_path)
    doc["online"] = {"enabled": True, "http_port": port, "grpc_port": 0, "max_wait_ms": 2, "timeout_ms": 5000}
    path.write_text(yaml.safe_dump(doc))
    cfg = load_config(path)
    produce_events(bootstrap, topics.input, encoded_events(input_codec(cfg.input), synthetic_events(N, 32, seed=3)))
    with started("run", path, port) as (proc, client):
        x = np.random.default_rng(8).normal(size=(4, 32)).astype(np.float32)
        given = httpclient.InferInput("features", [4, 32], "FP32")
        given.set_data_from_numpy(x)
        answers = [client.infer(cfg.model.name, [given], request_id=f"call-{i}").as_numpy("scores").shape
                   for i in range(50)]
        assert answers == [(4, 1)] * 50
        deadline = time.monotonic() + 120
        while len(read_all(bootstrap, topics.output)) < N:  # read_all reads to the end: each pass is a wait
            assert time.monotonic() < deadline, "the stream's predictions did not all arrive"
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'streamer_online_feature_psi{feature="0",group="' in metrics  # the online rows' own drift
        while len(online_rows(bootstrap, f"{topics.output}.shadow")) < 200:
            assert time.monotonic() < deadline, "the challenger's online predictions did not all arrive"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, tail(path.with_name("run.log"))
    shadow = online_rows(bootstrap, f"{topics.output}.shadow")
    assert sorted(p["event_id"] for p in shadow) == sorted(f"call-{i}/{r}" for i in range(50) for r in range(4))
    assert {(p["model_name"], p["model_version"]) for p in shadow} == {("challenger", "2")}


def test_serve_scores_online_rows_in_shadow_and_publishes_them_before_it_exits(
        bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.yaml", bootstrap=bootstrap, input_topic=topics.input,
                        output_topic=topics.output, group=topics.group, guarantee="at_least_once")
    port, doc = free_port(), safeguarded(path, tmp_path)
    doc["online"] = {"http_port": port, "grpc_port": 0, "max_wait_ms": 2}
    path.write_text(yaml.safe_dump(doc))
    with started("serve", path, port) as (proc, client):
        given = httpclient.InferInput("features", [1, 32], "FP32")
        given.set_data_from_numpy(np.ones((1, 32), np.float32))
        for i in range(20):
            client.infer(doc["model"]["name"], [given], request_id=f"card-{i}")
        proc.send_signal(signal.SIGTERM)  # the stop publishes what the challenger scored
        assert proc.wait(60) == 0, tail(path.with_name("serve.log"))
    assert sorted(p["event_id"] for p in online_rows(bootstrap, f"{topics.output}.shadow")) == sorted(
        f"card-{i}" for i in range(20))


def safeguarded(path: Path, tmp_path: Path) -> dict[str, Any]:
    """The config at ``path`` with a challenger (the champion's own file) and a drift profile."""
    doc = yaml.safe_load(path.read_text())
    doc["model"]["drift_profile"] = str(drift_profile(tmp_path / "profile.json"))
    doc["shadow"] = {"challengers": [{"name": "challenger", "version": "2", "path": doc["model"]["path"]}]}
    return doc


def online_rows(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    return [p for p in predictions(bootstrap, topic) if p["source_topic"] == "online"]


@contextlib.contextmanager
def started(command: str, path: Path, port: int) -> Iterator[tuple[subprocess.Popen[str], Any]]:
    """`streamer COMMAND --config PATH` in a child, once its online server is ready; killed if left
    running. Its output goes to a file beside the config (a pipe nobody reads fills and stalls the
    child), and every failed wait shows the output's end: a child that exits early says why."""
    out = path.with_name(f"{command}.log")
    with out.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "streamer", command, "--config", str(path)],
                                env=dict(os.environ), stdout=sink, stderr=subprocess.STDOUT, text=True)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", connection_timeout=5, network_timeout=30)
        deadline = time.monotonic() + 90
        while True:  # the server's readiness is the condition, polled as a probe would
            try:
                if client.is_server_ready():
                    break
            except (ConnectionError, OSError):
                pass
            assert proc.poll() is None, f"`streamer {command}` exited {proc.returncode}:\n{tail(out)}"
            assert time.monotonic() < deadline, f"`streamer {command}` not ready in 90 s:\n{tail(out)}"
            time.sleep(0.05)
        yield proc, client
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:]


@pytest.mark.parametrize("key", ["online.http_port", "online.grpc_port"])
def test_run_whose_online_port_is_taken_stops_the_stream_and_exits_2_naming_the_key(
        key: str, bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.yaml", bootstrap=bootstrap, input_topic=topics.input,
                        output_topic=topics.output, group=topics.group, guarantee="at_least_once")
    doc = yaml.safe_load(path.read_text())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        doc["online"] = ({"enabled": True, "http_port": port, "grpc_port": 0} if key == "online.http_port"
                         else {"enabled": True, "http_port": free_port(), "grpc_port": port})
        path.write_text(yaml.safe_dump(doc))
        done = subprocess.run([sys.executable, "-m", "streamer", "run", "--config", str(path)], env=dict(os.environ),
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"config key '{key}': cannot listen on 127.0.0.1:" in done.stderr
    assert done.stderr.rstrip().endswith("Address already in use"), done.stderr[-2000:]  # nothing after it
