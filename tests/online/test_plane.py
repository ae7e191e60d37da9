"""The data plane without a listener: one request, decoded from either transport's wire, is one
InferRequest with one answer; its refusals and their statuses; the one deadline rule; metering."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from streamer.errors import BadRequest, Refused
from streamer.online.dispatch import Dispatcher
from streamer.online.grpc_service import MESSAGE, infer_request, infer_response
from streamer.online.plane import DataPlane, InferRequest, InferResponse
from streamer.online.tensors import decode_request, encode_response
from streamer.testing import FakeClock
from tests.online.doubler import TIMEOUT_S, Doubler, doubling, plane

X = np.arange(6, dtype=np.float32).reshape(3, 2)


@pytest.fixture(scope="module")
def dispatcher() -> Iterator[Dispatcher]:
    d = doubling()
    yield d
    d.stop(TIMEOUT_S)


def http_request(**params: Any) -> InferRequest:
    body = orjson.dumps({"id": "r-1", "parameters": params, "outputs": [{"name": "y"}],
                         "inputs": [{"name": "x", "shape": [3, 2], "datatype": "FP32", "data": X.tolist()}]})
    return decode_request(body, None, "doubler")


def grpc_request(**params: int) -> InferRequest:
    message = MESSAGE("ModelInferRequest")(model_name="doubler", id="r-1")
    message.inputs.add(name="x", datatype="FP32", shape=[3, 2])
    message.raw_input_contents.append(X.astype("<f4").tobytes())
    message.outputs.add(name="y")
    for key, value in params.items():
        message.parameters[key].int64_param = value
    return infer_request(MESSAGE("ModelInferRequest").FromString(message.SerializeToString()))


def infer(p: DataPlane, request: InferRequest, deadline_s: float = TIMEOUT_S) -> InferResponse:
    async def ask() -> InferResponse:
        return await p.infer(request, p.clock() + deadline_s)

    return asyncio.run(ask())


def test_one_request_through_either_transport_is_one_request_with_one_answer(dispatcher: Dispatcher) -> None:
    p = plane(Doubler(), dispatcher)
    over_http, over_grpc = http_request(timeout=500_000), grpc_request(timeout=500_000)
    for field in ("model", "version", "outputs", "id", "parameters"):
        assert getattr(over_http, field) == getattr(over_grpc, field), field
    assert over_http.inputs.keys() == over_grpc.inputs.keys() == {"x"}
    np.testing.assert_array_equal(over_http.inputs["x"], over_grpc.inputs["x"])
    answers = [infer(p, r) for r in (over_http, over_grpc)]
    for answer in answers:
        assert (answer.model, answer.version, answer.id) == ("doubler", "7", "r-1")
        params = dict(answer.parameters)
        hops = {k: params.pop(k) for k in ("queue_ms", "model_ms")}  # the hops: a float each, in ms
        assert params == {"model_digest": "abc123", "degraded": False}
        assert all(isinstance(v, float) and v >= 0 for v in hops.values()), hops
        np.testing.assert_array_equal(answer.outputs["y"], X * 2)
    body, _ = encode_response(answers[0], over_http, lambda: 1.5)
    message = MESSAGE("ModelInferResponse").FromString(infer_response(answers[1], lambda: 2.5).SerializeToString())
    doc = orjson.loads(body)
    assert (doc["parameters"]["encode_ms"], message.parameters["encode_ms"].double_param) == (1.5, 2.5)
    assert doc["parameters"]["queue_ms"] == answers[0].parameters["queue_ms"]
    assert message.parameters["model_ms"].double_param == answers[1].parameters["model_ms"]
    assert (doc["model_name"], doc["model_version"], doc["id"]) == (message.model_name, message.model_version,
                                                                   message.id)
    assert doc["outputs"][0]["data"] == np.frombuffer(message.raw_output_contents[0], "<f4").tolist()
    assert doc["parameters"]["model_digest"] == message.parameters["model_digest"].string_param


def test_every_way_a_request_is_not_answered_is_one_refusal_with_its_status(dispatcher: Dispatcher) -> None:
    model = Doubler()
    p = plane(model, dispatcher)
    x = {"x": X}
    cases = [
        (InferRequest("nope", "", x), 404, "unknown model 'nope'"),
        (InferRequest("doubler", "3", x), 404, "has no version '3': it serves '7'"),
        (InferRequest("doubler", "", {"x": X.astype(np.int64)}), 400, "takes FP32"),
        (InferRequest("doubler", "", {"x": X[:0]}), 400, "holds no rows"),
        (InferRequest("doubler", "", {"x": np.zeros((10_001, 2), np.float32)}), 413, "max_queue_rows is 10000"),
        (InferRequest("doubler", "", x, ("z",)), 400, "no output 'z': the model answers y"),
    ]
    for request, status, says in cases:
        with pytest.raises(Refused, match=says) as refused:
            infer(p, request)
        assert refused.value.status == status
    model.is_ready = False
    with pytest.raises(Refused, match="not ready") as not_ready:
        infer(p, InferRequest("doubler", "7", x))
    assert (not_ready.value.status, not_ready.value.headers) == (503, {"retry-after": "1"})
    dispatcher.admission.call_s = 1.0  # as if a model call took a second: 1 ms cannot be met
    model.is_ready = True
    try:
        with pytest.raises(Refused, match="shed: the deadline is 1 ms away") as shed:
            infer(p, InferRequest("doubler", "", x), deadline_s=0.001)
    finally:
        dispatcher.admission.call_s = 0.0
    assert shed.value.status == 503 and int(shed.value.headers["retry-after"]) >= 1
    # a refusal of the wire (its body, tensors, timeout) names another model's 404 first
    assert p.refused("nope", "", 400, "bad tensors").status == 404
    assert p.refused("doubler", "", 413, "too large").status == 413
    assert p.model_ready("doubler", "7") and p.model_metadata("doubler", "")["name"] == "doubler"
    with pytest.raises(Refused, match="unknown model") as unknown:
        p.model_metadata("nope", None)
    assert unknown.value.status == 404


def test_the_deadline_rule_is_one_for_every_transport(dispatcher: Dispatcher) -> None:
    p = DataPlane(Doubler(), dispatcher, timeout_ms=1000)
    # the module's worked example: gRPC's own deadline bounds parameters.timeout; the default caps it
    assert p.deadline(10.0, {"timeout": 500_000}, bound_s=0.3) == pytest.approx(10.3)
    assert p.deadline(10.0, {"timeout": 2_000_000}) == pytest.approx(11.0)
    assert p.deadline(10.0, {"timeout": 200_000}, asked_s=0.05) == pytest.approx(10.2)  # the parameter first
    assert p.deadline(10.0, asked_s=0.25) == pytest.approx(10.25)  # HTTP's header
    assert p.deadline(10.0, asked_s=5.0) == pytest.approx(11.0)
    assert p.deadline(10.0) == pytest.approx(11.0) and p.deadline(10.0, bound_s=0.1) == pytest.approx(10.1)
    for bad in (0, -5, "soon", 1.5, True):  # a bool is no number of microseconds, though Python counts it an int
        with pytest.raises(BadRequest, match="not a positive number of microseconds"):
            p.deadline(10.0, {"timeout": bad})


def test_a_request_is_metered_once_by_transport_and_code_where_it_ends(dispatcher: Dispatcher) -> None:
    clock = FakeClock(50.0)
    p = plane(Doubler(), dispatcher, clock=clock)
    clock.advance(0.003)
    p.ended("grpc", "OK", 50.0)
    p.ended("grpc", "OK", clock())
    registry = p.metrics.registry
    assert registry.get_sample_value("streamer_online_requests_total", {"transport": "grpc", "code": "OK"}) == 2
    assert registry.get_sample_value("streamer_online_request_seconds_sum", {"transport": "grpc"}) == \
        pytest.approx(0.003)


def test_the_transports_share_only_the_plane_and_the_wire_encodings() -> None:
    online = Path(__file__).parents[2] / "streamer" / "online"
    for transport, other in (("http", "grpc_service"), ("grpc_service", "http")):
        tree = ast.parse((online / f"{transport}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert f"streamer.online.{other}" not in imported and "streamer.online.dispatch" not in imported, transport
