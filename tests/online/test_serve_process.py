"""`streamer serve` as a process: ready only after warm-up, answers as ONNX Runtime offline, and a
SIGTERM under load finishes what was admitted, refuses the rest, and exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from http.client import HTTPException
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tritonclient.http as httpclient
import yaml
from tritonclient.utils import InferenceServerException

from tests.conftest import ROOT
from tests.online.doubler import free_port

READY_S = 60.0


def config(tmp_path: Path, http: int, grpc: int) -> Path:
    doc = yaml.safe_load((ROOT / "deploy" / "config" / "example.yaml").read_text())
    doc["model"]["path"] = str(ROOT / "models" / "fraud_encoder.onnx")  # the heavy one: calls take a while
    doc["model"]["providers"] = ["cpu"]
    doc["input"]["schema"] = str(ROOT / "streamer" / "schemas" / "feature_event.avsc")
    doc["output"]["schema"] = str(ROOT / "streamer" / "schemas" / "prediction.avsc")
    doc["online"] = {"http_port": http, "grpc_port": grpc, "max_wait_ms": 2, "timeout_ms": 10_000}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_serve_answers_then_a_sigterm_under_load_finishes_in_flight_and_exits_0(tmp_path: Path) -> None:
    http, grpc = free_port(), free_port()
    env = {**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    proc = subprocess.Popen([sys.executable, "-m", "streamer", "serve", "--config", str(config(tmp_path, http, grpc))],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"127.0.0.1:{http}"
    try:
        client = httpclient.InferenceServerClient(url, connection_timeout=5, network_timeout=30)
        deadline = time.monotonic() + READY_S
        while True:  # readiness is the condition: poll it as a load balancer would, with a deadline
            try:
                if client.is_server_ready():
                    break
            except (ConnectionError, OSError):
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "not ready in time"
            time.sleep(0.05)
        x = np.random.default_rng(1).normal(size=(16, 32)).astype(np.float32)
        given = httpclient.InferInput("features", [16, 32], "FP32")
        given.set_data_from_numpy(x)
        offline = ort.InferenceSession(str(ROOT / "models" / "fraud_encoder.onnx")).run(None, {"features": x})[0]
        np.testing.assert_allclose(client.infer("fraud_mlp", [given]).as_numpy("scores"),
                                   offline, rtol=0, atol=1e-6)

        answered: list[tuple[int, ...]] = []
        refused: list[str] = []
        failed: list[str] = []
        started, busy = threading.Barrier(9), threading.Event()

        def load() -> None:
            c = httpclient.InferenceServerClient(url, connection_timeout=5, network_timeout=30)
            started.wait(10)
            for _ in range(200):
                try:
                    answered.append(c.infer("fraud_mlp", [given]).as_numpy("scores").shape)
                    if len(answered) >= 20:
                        busy.set()
                except InferenceServerException as exc:
                    (refused if exc.status() == "503" else failed).append(str(exc))
                    return
                except TimeoutError as exc:  # an admitted request the drain left unanswered
                    failed.append(f"no answer: {exc}")
                    return
                except (ConnectionError, OSError, HTTPException):  # a connection the server closed after its drain,
                    return  # before it read this request (the server logs any admitted request it left unanswered)

        threads = [threading.Thread(target=load) for _ in range(8)]
        for t in threads:
            t.start()
        started.wait(10)
        assert busy.wait(60), "no load"  # under load: answers are coming when the signal comes
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        for t in threads:
            t.join(30)
        assert not failed, failed[:3]
        assert proc.stdout is not None
        assert "not answered" not in proc.stdout.read()  # every admitted request was answered
        assert all(shape == (16, 1) for shape in answered)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
