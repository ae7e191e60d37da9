"""Open Inference Protocol tensors: JSON and Triton's binary extension in, JSON or binary out."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest

from streamer.errors import BadRequest
from streamer.online.plane import InferRequest, InferResponse
from streamer.online.tensors import HEADER, decode_request, encode_response


def binary_body(doc: dict, *blobs: bytes) -> tuple[bytes, str]:
    head = orjson.dumps(doc)
    return head + b"".join(blobs), str(len(head))


def test_json_inputs_flat_or_nested_become_arrays_of_their_shape() -> None:
    body = orjson.dumps({"id": "r1", "inputs": [
        {"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [[0, 1, 2], [3, 4, 5]]},
        {"name": "s", "shape": [2, 1], "datatype": "BYTES", "data": ["ab", "cé"]}],
        "outputs": [{"name": "label"}, {"name": "probabilities", "parameters": {"binary_data": True}}]})
    req = decode_request(body, None, "m")
    assert req.inputs["x"].dtype == np.float32 and req.inputs["x"].shape == (2, 3)
    assert req.inputs["s"].tolist() == [["ab"], ["cé"]]
    assert req.outputs == ("label", "probabilities") and req.wants_binary("probabilities") and not req.wants_binary("label")
    assert req.id == "r1"


def test_binary_inputs_as_tritonclient_sends_them() -> None:
    # The bytes tritonclient.http 2.73.0 sends by default for x FP32 [2,3] = arange(6), s BYTES [2,1] = ["ab", "cé"].
    doc = {"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "parameters": {"binary_data_size": 24}},
                      {"name": "s", "shape": [2, 1], "datatype": "BYTES", "parameters": {"binary_data_size": 13}}],
           "parameters": {"binary_data_output": True}}
    strings = struct.pack("<I", 2) + b"ab" + struct.pack("<I", 3) + "cé".encode()
    body, length = binary_body(doc, np.arange(6, dtype="<f4").tobytes(), strings)
    req = decode_request(body, length, "m")
    np.testing.assert_array_equal(req.inputs["x"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert req.inputs["s"].tolist() == [[b"ab"], ["cé".encode()]] and req.binary_default


@pytest.mark.parametrize(("body", "length", "says"), [
    (b"{not json", None, "not JSON"),
    (orjson.dumps({"inputs": []}), None, "no 'inputs'"),
    (orjson.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "FP99", "data": [1, 2]}]}), None, "FP99"),
    (orjson.dumps({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2]}]}), None, "2 elements"),
    (orjson.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "INT64", "data": ["a", "b"]}]}), None, "not INT64"),
    (orjson.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]}), None, "no 'data'"),
    (b"{}", "99", "outside the body"),
    (orjson.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "UINT8", "data": [-1]}]}), None, "not UINT8"),
    (orjson.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1], "parameters": [1]}]}),
     None, "input 'x': 'parameters' is not an object"),
    (orjson.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
                   "outputs": [{"name": "y", "parameters": "binary"}]}), None, "output 'y': 'parameters' is not"),
])
def test_what_the_protocol_refuses_names_the_tensor_and_the_reason(body: bytes, length: str | None, says: str) -> None:
    with pytest.raises(BadRequest, match=says):
        decode_request(body, length, "m")


def test_binary_sizes_that_do_not_add_up_are_refused() -> None:
    doc = {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}}]}
    body, length = binary_body(doc, b"\0" * 8, b"extra")
    with pytest.raises(BadRequest, match="5 bytes after"):
        decode_request(body, length, "m")
    body, length = binary_body(doc, b"\0" * 4)
    with pytest.raises(BadRequest, match="past the body's end"):
        decode_request(body, length, "m")


def test_outputs_go_back_as_json_or_binary_as_asked() -> None:
    outputs = {"label": np.array([1, 0], np.int64), "probabilities": np.array([[0.2, 0.8], [0.9, 0.1]], np.float32)}
    body, headers = encode_response(InferResponse("m", "3", outputs, "r1", {"degraded": False}), InferRequest("m", "", {}))
    doc = orjson.loads(body)
    assert headers == {"content-type": "application/json"} and doc["id"] == "r1" and doc["model_version"] == "3"
    assert doc["outputs"][0] == {"name": "label", "datatype": "INT64", "shape": [2], "data": [1, 0]}
    body, headers = encode_response(InferResponse("m", "3", outputs, None, {}),
                                    InferRequest("m", "", {}, binary=frozenset({"probabilities"})))
    n = int(headers[HEADER])
    head = orjson.loads(body[:n])
    assert head["outputs"][1]["parameters"] == {"binary_data_size": 16}
    np.testing.assert_array_equal(np.frombuffer(body[n:], "<f4").reshape(2, 2), outputs["probabilities"])
