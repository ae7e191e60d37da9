"""A hot reload covers online answers: the served file replaced, later answers carry the new
model's digest and its scores, with no restart and no refused request."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort

from streamer.config import OnlineConfig
from streamer.model.onnx_file import file_digest
from streamer.wiring.model import model_house
from tests.conftest import ROOT
from tests.online.doubler import TIMEOUT_S, free_port, running
from tests.online.test_served import example


def test_a_replaced_model_file_answers_from_the_next_batch_on(tmp_path: Path) -> None:
    served = tmp_path / "model.onnx"
    shutil.copy(ROOT / "models" / "fraud_mlp.onnx", served)
    port = free_port()
    cfg = example()
    cfg = replace(cfg, model=replace(cfg.model, path=served, reload_check_ms=100),
                  online=OnlineConfig(http_port=port, grpc_port=0, max_wait_ms=1))
    with running(cfg, model_house(cfg).serving):
        check_reload(port, served, tmp_path)


def check_reload(port: int, served: Path, tmp_path: Path) -> None:
    x = np.random.default_rng(4).normal(size=32).astype(np.float32)
    event = json.dumps({"event_id": "e", "event_time": 1, "features": x.tolist()}).encode()

    def score() -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/score", event)
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as r:
            return dict(json.loads(r.read()))

    assert score()["model_digest"] == file_digest(ROOT / "models" / "fraud_mlp.onnx")
    heavy = ROOT / "models" / "fraud_encoder.onnx"
    staged = tmp_path / "model.onnx.next"
    shutil.copy(heavy, staged)
    os.replace(staged, served)  # atomic, as the docs tell
    deadline = time.monotonic() + 30
    while (answer := score())["model_digest"] != file_digest(heavy):  # each answer is a request: no sleep
        assert time.monotonic() < deadline, answer
    offline = ort.InferenceSession(str(heavy)).run(None, {"features": x[None, :]})[0][0]
    assert abs(answer["scores"][0] - offline[0]) < 1e-6
