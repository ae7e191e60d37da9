"""The HTTP protocol layer against NVIDIA's own client, tritonclient.http, with its default
arguments (binary tensors both ways): a served model that doubles its input, on a real uvicorn."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient
import uvicorn
from tritonclient.utils import InferenceServerException

from streamer.model.signature import Columns
from streamer.online.dispatch import Dispatcher
from streamer.online.http import HttpTransport
from streamer.pipeline.records import Scored
from streamer.testing import FakeClock
from tests.online.doubler import TIMEOUT_S, Doubler, doubled, doubling, free_port, plane


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Doubler, Dispatcher]]:
    model = Doubler()
    dispatcher = doubling()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(HttpTransport(plane(model, dispatcher), max_body_bytes=4096).app(),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT_S
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)  # polling a flag another thread sets: there is nothing to await
    yield f"127.0.0.1:{port}", model, dispatcher
    server.should_exit = True
    thread.join(TIMEOUT_S)
    dispatcher.stop(TIMEOUT_S)


def client(url: str) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(url, connection_timeout=TIMEOUT_S, network_timeout=TIMEOUT_S)


def test_health_metadata_and_an_inference_with_the_clients_defaults(served: tuple[str, Doubler, Dispatcher]) -> None:
    url, model, _ = served
    c = client(url)
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("doubler")
    assert not c.is_model_ready("other")
    assert c.get_model_metadata("doubler")["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}]
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    given = httpclient.InferInput("x", [3, 2], "FP32")
    given.set_data_from_numpy(x)  # binary, the client's default
    result = c.infer("doubler", [given], request_id="r-1")
    np.testing.assert_array_equal(result.as_numpy("y"), x * 2)
    response = result.get_response()
    assert response["id"] == "r-1" and response["model_version"] == "7"
    params = response["parameters"]
    hops = {k: params.pop(k) for k in ("queue_ms", "model_ms", "encode_ms")}  # each hop's milliseconds
    assert params == {"model_digest": "abc123", "degraded": False}
    assert all(isinstance(v, float) and v >= 0 for v in hops.values()), hops
    json_input = httpclient.InferInput("x", [1, 2], "FP32")
    json_input.set_data_from_numpy(x[:1], binary_data=False)
    asked = [httpclient.InferRequestedOutput("y", binary_data=False)]
    np.testing.assert_array_equal(c.infer("doubler", [json_input], outputs=asked).as_numpy("y"), x[:1] * 2)
    model.is_ready = False
    assert not c.is_server_ready() and c.is_server_live()
    model.is_ready = True


@pytest.mark.parametrize(("name", "array", "datatype", "status", "says"), [
    ("x", np.zeros((2, 2), np.int64), "INT64", "400", "takes FP32"),
    ("x", np.zeros((2, 3), np.float32), "FP32", "400", "takes FP32 \\[-1, 2\\]"),
    ("z", np.zeros((2, 2), np.float32), "FP32", "400", "takes x"),
    ("x", np.zeros((600, 2), np.float32), "FP32", "413", "over the 4096-byte limit"),
    ("x", np.zeros((0, 2), np.float32), "FP32", "400", "holds no rows"),
])
def test_bad_requests_are_refused_with_their_status_and_reason(served: tuple[str, Doubler, Dispatcher], name: str,
                                                               array: np.ndarray, datatype: str, status: str,
                                                               says: str) -> None:
    given = httpclient.InferInput(name, list(array.shape), datatype)
    given.set_data_from_numpy(array)
    with pytest.raises(InferenceServerException, match=says) as refused:
        client(served[0]).infer("doubler", [given])
    assert refused.value.status() == status


def test_an_unknown_model_and_a_deadline_that_cannot_be_met(served: tuple[str, Doubler, Dispatcher]) -> None:
    url, _, dispatcher = served
    given = httpclient.InferInput("x", [1, 2], "FP32")
    given.set_data_from_numpy(np.zeros((1, 2), np.float32))
    with pytest.raises(InferenceServerException, match="unknown model 'nope'") as unknown:
        client(url).infer("nope", [given])
    assert unknown.value.status() == "404"
    dispatcher.admission.call_s = 1.0  # as if one model call took a second: a 1 ms deadline cannot be met
    try:
        with pytest.raises(InferenceServerException, match="shed: the deadline is") as shed:
            client(url).infer("doubler", [given], timeout=1000)  # microseconds, in parameters.timeout
    finally:
        dispatcher.admission.call_s = 0.0
    assert shed.value.status() == "503"
    import urllib.request

    with urllib.request.urlopen(f"http://{url}/metrics", timeout=TIMEOUT_S) as r:
        text = r.read().decode()
        assert r.geturl() == f"http://{url}/metrics"  # served where Prometheus scrapes, not redirected
    assert 'streamer_online_shed_total{reason="deadline"} 1.0' in text
    assert 'streamer_online_requests_total{code="404",transport="http"}' in text
    assert "streamer_online_request_seconds_bucket" in text and "streamer_online_queued_rows 0.0" in text


def test_a_malformed_body_is_400_with_a_json_error(served: tuple[str, Doubler, Dispatcher]) -> None:
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://{served[0]}/v2/models/doubler/infer", b'{"inputs": [', method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=TIMEOUT_S)
    assert refused.value.code == 400 and "not JSON" in json.loads(refused.value.read())["error"]
    body = b'{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}'
    for timeout in ("nan", "inf", "-5"):  # a deadline that could never pass is no deadline
        request = urllib.request.Request(f"http://{served[0]}/v2/models/doubler/infer", body, method="POST",
                                         headers={"X-Request-Timeout-Ms": timeout})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=TIMEOUT_S)
        assert refused.value.code == 400 and "positive number of milliseconds" in json.loads(refused.value.read())["error"]


def test_a_request_whose_deadline_passes_while_it_waits_is_503_expired_and_not_scored() -> None:
    clock, entered, held, scored = FakeClock(100.0), threading.Event(), threading.Event(), []

    def model(cols: Columns, ids: list[str]) -> Scored:
        entered.set()
        held.wait(TIMEOUT_S)  # the first call holds the model: the second request waits behind it
        scored.extend(ids)
        return doubled(cols, ids)

    dispatcher = Dispatcher(model, max_size=1, max_wait_ms=0, max_queue_rows=100, clock=clock)
    dispatcher.start()
    port = free_port()
    served = HttpTransport(plane(Doubler(), dispatcher, clock=clock), max_body_bytes=4096).app()
    server = uvicorn.Server(uvicorn.Config(served, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)  # polling a flag another thread sets: there is nothing to await
        url = f"127.0.0.1:{port}"
        given = httpclient.InferInput("x", [1, 2], "FP32")
        given.set_data_from_numpy(np.ones((1, 2), np.float32))
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(client(url).infer, "doubler", [given], request_id="first")
            assert entered.wait(TIMEOUT_S), "the first request never reached the model"
            late = pool.submit(client(url).infer, "doubler", [given], request_id="late", timeout=200_000)  # 200 ms
            deadline = time.monotonic() + TIMEOUT_S
            while dispatcher.admission.queued_rows < 2:  # both admitted: the first in the held call, the late one queued
                assert time.monotonic() < deadline, "the requests were not admitted"
                time.sleep(0.01)
            clock.advance(0.5)  # its 200 ms pass while the model is held
            held.set()
            assert first.result(TIMEOUT_S).as_numpy("y").tolist() == [[2.0, 2.0]]
            with pytest.raises(InferenceServerException, match="expired: the deadline passed 300 ms") as expired:
                late.result(TIMEOUT_S)
        assert expired.value.status() == "503" and scored == ["first"]
    finally:
        held.set()
        server.should_exit = True
        thread.join(TIMEOUT_S)
        dispatcher.stop(TIMEOUT_S)


def test_a_503_tells_the_caller_when_to_come_back(served: tuple[str, Doubler, Dispatcher]) -> None:
    """A shed infer request is 503 with Retry-After (tritonclient's exception hides the headers).
    Last in the module: the shed counter read above counts one shed request."""
    import json
    import urllib.error
    import urllib.request

    url, _, dispatcher = served
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [0.0, 0.0]}],
                       "parameters": {"timeout": 1000}}).encode()  # microseconds: no model call meets it
    request = urllib.request.Request(f"http://{url}/v2/models/doubler/infer", body,
                                     {"content-type": "application/json"})
    dispatcher.admission.call_s = 1.0
    try:
        with pytest.raises(urllib.error.HTTPError) as shed:
            urllib.request.urlopen(request, timeout=TIMEOUT_S)
    finally:
        dispatcher.admission.call_s = 0.0
    assert shed.value.code == 503 and "shed" in json.loads(shed.value.read())["error"]
    assert int(shed.value.headers["Retry-After"]) >= 1
