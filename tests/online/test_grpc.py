"""The gRPC protocol layer against tritonclient.grpc, imported in the same process (its messages
share the service's names), and the vendored descriptor against its .proto."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from streamer.online.dispatch import Dispatcher
from streamer.online.grpc_service import GrpcTransport
from streamer.online.oip_descriptor import DESCRIPTOR_SET
from tests.online.doubler import GRPC_LOOP, TIMEOUT_S, Doubler, doubling, free_port, plane

PROTO = Path(__file__).parents[2] / "streamer" / "online" / "proto"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Doubler, Dispatcher]]:
    model, dispatcher, port = Doubler(), doubling(), free_port()

    async def serve() -> grpc.aio.Server:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 4096)])
        server.add_generic_rpc_handlers((GrpcTransport(plane(model, dispatcher)).handler(),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        return server

    server = asyncio.run_coroutine_threadsafe(serve(), GRPC_LOOP).result(TIMEOUT_S)
    yield f"127.0.0.1:{port}", model, dispatcher
    asyncio.run_coroutine_threadsafe(server.stop(None), GRPC_LOOP).result(TIMEOUT_S)
    dispatcher.stop(TIMEOUT_S)


def test_the_vendored_descriptor_is_protocs_output_for_the_vendored_proto(tmp_path: Path) -> None:
    from grpc_tools import protoc

    out = tmp_path / "oip.desc"
    assert protoc.main(["protoc", f"-I{PROTO}", f"--descriptor_set_out={out}", "open_inference_grpc.proto"]) == 0
    assert out.read_bytes() == DESCRIPTOR_SET


def test_health_metadata_and_inference_over_grpc(served: tuple[str, Doubler, Dispatcher]) -> None:
    url, model, _ = served
    c = grpcclient.InferenceServerClient(url)
    assert c.is_server_live(client_timeout=TIMEOUT_S) and c.is_server_ready(client_timeout=TIMEOUT_S)
    assert c.is_model_ready("doubler", client_timeout=TIMEOUT_S)
    meta = c.get_model_metadata("doubler", as_json=True, client_timeout=TIMEOUT_S)
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "2"]}]
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    given = grpcclient.InferInput("x", [3, 2], "FP32")
    given.set_data_from_numpy(x)
    result = c.infer("doubler", [given], request_id="g-1", client_timeout=TIMEOUT_S)
    np.testing.assert_array_equal(result.as_numpy("y"), x * 2)
    response = result.get_response()
    assert response.id == "g-1" and response.model_version == "7"
    assert response.parameters["model_digest"].string_param == "abc123"
    hops = {k: response.parameters[k].WhichOneof("parameter_choice") for k in ("queue_ms", "model_ms", "encode_ms")}
    assert hops == dict.fromkeys(hops, "double_param")  # each hop's milliseconds, a number
    assert response.parameters["queue_ms"].double_param >= 0
    model.is_ready = False
    assert not c.is_server_ready(client_timeout=TIMEOUT_S)
    model.is_ready = True


def test_refusals_carry_the_protocols_codes(served: tuple[str, Doubler, Dispatcher]) -> None:
    url, _, dispatcher = served
    c = grpcclient.InferenceServerClient(url)

    def infer(model: str, array: np.ndarray, datatype: str = "FP32", **kw: object) -> None:
        given = grpcclient.InferInput("x", list(array.shape), datatype)
        given.set_data_from_numpy(array)
        c.infer(model, [given], client_timeout=TIMEOUT_S, **kw)  # type: ignore[arg-type]

    cases = [(lambda: infer("nope", np.zeros((1, 2), np.float32)), "StatusCode.NOT_FOUND", "unknown model"),
             (lambda: infer("doubler", np.zeros((1, 3), np.float32)), "StatusCode.INVALID_ARGUMENT", "takes FP32"),
             (lambda: infer("doubler", np.zeros((600, 2), np.float32)), "StatusCode.RESOURCE_EXHAUSTED", "larger")]
    for call, status, says in cases:
        with pytest.raises(InferenceServerException, match=says) as refused:
            call()
        assert refused.value.status() == status
    dispatcher.admission.call_s = 1.0  # as if one model call took a second: a 1 ms timeout cannot be met
    try:
        with pytest.raises(InferenceServerException, match="shed: the deadline is") as shed:
            infer("doubler", np.zeros((1, 2), np.float32), timeout=1000)
    finally:
        dispatcher.admission.call_s = 0.0
    assert shed.value.status() == "StatusCode.UNAVAILABLE"


def test_a_refusal_tells_the_caller_when_to_come_back(served: tuple[str, Doubler, Dispatcher]) -> None:
    """UNAVAILABLE carries a ``retry-after`` trailer, as HTTP's 503 carries Retry-After (the
    tritonclient exception hides trailers: the protocol's own stub reads them)."""
    url, _, dispatcher = served
    request = service_pb2.ModelInferRequest(model_name="doubler")
    given = request.inputs.add(name="x", datatype="FP32", shape=[1, 2])
    given.contents.fp32_contents.extend([0.0, 0.0])
    request.parameters["timeout"].int64_param = 1000  # microseconds: no model call can meet it
    dispatcher.admission.call_s = 1.0
    try:
        with grpc.insecure_channel(url) as channel:
            with pytest.raises(grpc.RpcError) as shed:
                service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=TIMEOUT_S)
    finally:
        dispatcher.admission.call_s = 0.0
    assert shed.value.code() == grpc.StatusCode.UNAVAILABLE
    trailers = dict(shed.value.trailing_metadata() or ())
    assert int(trailers["retry-after"]) >= 1


def test_a_malformed_message_is_refused_and_the_server_serves_on(served: tuple[str, Doubler, Dispatcher]) -> None:
    url = served[0]
    with grpc.insecure_channel(url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as refused:
            call(b"\xff\xff\xff not a message", timeout=TIMEOUT_S)
        assert refused.value.code() != grpc.StatusCode.OK
    assert grpcclient.InferenceServerClient(url).is_server_live(client_timeout=TIMEOUT_S)
