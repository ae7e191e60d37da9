"""``POST /v1/score`` on a running online server: a JSON event answered with its prediction record,
equal to ONNX Runtime offline; a bad event refused with 422 naming the field."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from email.message import Message

import numpy as np
import onnxruntime as ort
import pytest

from streamer.config import OnlineConfig
from streamer.wiring.lake import lake_house
from tests.conftest import ROOT
from tests.online.doubler import TIMEOUT_S, free_port, running
from tests.online.test_served import example


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    port = free_port()
    cfg = replace(example(), online=OnlineConfig(http_port=port, grpc_port=0, max_wait_ms=1))
    base = f"http://127.0.0.1:{port}"
    with running(cfg, lake_house(cfg).model.serving):
        with urllib.request.urlopen(f"{base}/v2/health/ready", timeout=TIMEOUT_S) as r:
            assert r.status == 200
        yield base


def post(url: str, body: bytes, **headers: str) -> tuple[int, dict]:
    status, answer, _ = exchange(url, body, **headers)
    return status, answer


def exchange(url: str, body: bytes, **headers: str) -> tuple[int, dict, Message]:
    """The status, the JSON answer and the answer's headers of one ``POST /v1/score``."""
    request = urllib.request.Request(f"{url}/v1/score", body, {"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as r:
            return r.status, json.loads(r.read()), r.headers
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers


def test_an_event_is_answered_with_its_prediction_record(url: str) -> None:
    x = np.random.default_rng(2).normal(size=32).astype(np.float32)
    status, record = post(url, json.dumps({"event_id": "e-1", "entity_id": "acct-1", "event_time": 1_700_000_000_000,
                                           "features": x.tolist()}).encode())
    assert status == 200, record
    offline = ort.InferenceSession(str(ROOT / "models" / "fraud_mlp.onnx")).run(None, {"features": x[None, :]})[0]
    assert record["event_id"] == "e-1" and record["entity_id"] == "acct-1" and record["model_version"] == "1"
    assert record["scores"] == pytest.approx(offline[0].tolist(), abs=1e-7)
    assert len(record["model_digest"]) == 12 and record["event_time"] == 1_700_000_000_000
    assert (record["degraded"], record["degraded_reason"]) == (False, None)  # as the topic's record says


def test_a_bad_event_is_422_naming_the_field_and_a_bad_body_400(url: str) -> None:
    status, error = post(url, json.dumps({"event_id": "e-2", "event_time": 1}).encode())
    assert status == 422 and "features" in error["error"]
    status, error = post(url, json.dumps({"event_id": "e-3", "event_time": 1, "features": [1.0] * 31}).encode())
    assert status == 422 and "32" in error["error"]
    status, error = post(url, b"{nope")
    assert status == 400 and "not JSON" in error["error"]
    event = json.dumps({"event_id": "e-5", "event_time": 1, "features": [0.0] * 32}).encode()
    status, error = post(url, event, **{"X-Request-Timeout-Ms": "soon"})
    assert status == 400 and "x-request-timeout-ms 'soon' is not a number" in error["error"]
    status, error, headers = exchange(url, event, **{"X-Request-Timeout-Ms": "0.001"})  # no answer within 1 us
    assert status == 503 and error["error"].startswith("shed: the deadline is 0 ms away")
    assert int(headers["Retry-After"]) >= 1  # a refused caller is told when to come back
    status, error = post(url, b" " * (OnlineConfig().max_body_bytes + 1))
    assert status == 413 and error["error"] == "the body is 8388609 bytes, over the 8388608-byte limit"


def test_the_online_metrics_carry_the_consumer_group_as_the_streams_do(url: str) -> None:
    """The dashboard's group variable selects the online server's series with the stream's, and its
    model variable the model's."""
    x = np.zeros(32, np.float32)
    assert post(url, json.dumps({"event_id": "e-4", "event_time": 1, "features": x.tolist()}).encode())[0] == 200
    with urllib.request.urlopen(f"{url}/metrics", timeout=TIMEOUT_S) as r:
        text = r.read().decode()
    group, model = example().input.group_id, example().model.name
    assert f'streamer_online_requests_total{{code="200",group="{group}",model="{model}",transport="score"}}' in text
    assert f'streamer_online_queued_rows{{group="{group}",model="{model}"}} 0.0' in text


def test_the_jobs_api_is_off_without_a_token(url: str) -> None:
    """No ``jobs.api_token``: ``/v1/jobs`` is not served at all (404), token or not."""
    assert example().jobs.api_token is None
    for path, body in (("/v1/jobs", None), ("/v1/jobs", b"{}"), ("/v1/jobs/j1", None)):
        request = urllib.request.Request(f"{url}{path}", body, {"authorization": "Bearer x",
                                                                "content-type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=TIMEOUT_S)
        assert refused.value.code == 404
