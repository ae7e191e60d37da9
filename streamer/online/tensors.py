"""Open Inference Protocol tensors over HTTP: a request's inputs to numpy, outputs to a response.

The JSON form (``{"name", "shape", "datatype", "data"}``, data flat or nested, row-major) and
Triton's binary tensor extension, which NVIDIA's ``tritonclient.http`` uses by default: the JSON
part is the first ``Inference-Header-Content-Length`` bytes of the body, and each input whose
``parameters.binary_data_size`` is set has that many bytes after it, in input order; numbers
little-endian, BYTES as a 4-byte little-endian length and the bytes, per element. Outputs go
back as JSON ``data``, or as binary where the request asks (``binary_data`` on an output, or
``binary_data_output`` on the request).

Every refusal is a :class:`BadRequest` naming the tensor and the reason: the server answers 400
with ``{"error": ...}``.

Worked example: ``{"inputs": [{"name": "features", "shape": [2, 32], "datatype": "FP32",
"data": [...64 numbers...]}]}`` gives ``{"features": float32 array (2, 32)}``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from streamer.errors import BadRequest
from streamer.online.plane import InferRequest, InferResponse

# OIP datatype -> numpy dtype, and the model's element names (model/signature.py) -> OIP datatype.
NUMPY: dict[str, Any] = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64, "BYTES": np.object_,
}
DATATYPE: dict[str, str] = {"float32": "FP32", "float64": "FP64", "int64": "INT64", "int32": "INT32",
                            "bool": "BOOL", "string": "BYTES"}
HEADER = "inference-header-content-length"


def decode_request(body: bytes, header_length: str | None, model: str, version: str = "") -> InferRequest:
    """An HTTP infer request's body (and its ``Inference-Header-Content-Length``, when sent), to
    ``model`` (and ``version``: "" for any), as its path names them."""
    if header_length is None:
        json_size = len(body)
    else:
        try:
            json_size = int(header_length)
        except ValueError:
            raise BadRequest(f"Inference-Header-Content-Length {header_length!r} is not a number") from None
        if not 0 <= json_size <= len(body):
            raise BadRequest(f"Inference-Header-Content-Length {json_size} is outside the body's {len(body)} bytes")
    try:
        doc = orjson.loads(body[:json_size])
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list) or not doc["inputs"]:
        raise BadRequest("the request has no 'inputs' list")
    at = json_size
    inputs: dict[str, np.ndarray] = {}
    for n, spec in enumerate(doc["inputs"]):
        array, at = _input(spec, n, body, at)
        inputs[spec["name"]] = array
    if at != len(body):
        raise BadRequest(f"{len(body) - at} bytes after the last binary input")
    params = doc.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest("'parameters' is not an object")
    names, binary = [], set()
    for out in doc.get("outputs") or []:
        if not isinstance(out, dict) or not isinstance(out.get("name"), str):
            raise BadRequest("each of 'outputs' needs a 'name'")
        names.append(out["name"])
        if _parameters(out, f"output {out['name']!r}").get("binary_data"):
            binary.add(out["name"])
    rid = doc.get("id")
    return InferRequest(model, version, inputs, tuple(names), frozenset(binary), bool(params.get("binary_data_output")),
                        None if rid is None else str(rid), params)


def _input(spec: Any, n: int, body: bytes, at: int) -> tuple[np.ndarray, int]:
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise BadRequest(f"inputs[{n}] has no 'name'")
    name, kind, shape = spec["name"], str(spec.get("datatype")), spec.get("shape")
    count = check_shape(name, kind, shape)
    assert isinstance(shape, list)  # check_shape refused anything else
    size = _parameters(spec, f"input {name!r}").get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or size < 0 or at + size > len(body):
            raise BadRequest(f"input {name!r}: binary_data_size {size!r} is past the body's end")
        return from_raw(name, kind, shape, body[at:at + size]), at + size
    if "data" not in spec:
        raise BadRequest(f"input {name!r} has no 'data' and no binary_data_size")
    try:
        flat = np.asarray(spec["data"], dtype=NUMPY[kind]).reshape(-1)
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadRequest(f"input {name!r}: data is not {kind}: {exc}") from None
    if kind == "BYTES" and not all(isinstance(v, str | bytes) for v in flat.tolist()):
        raise BadRequest(f"input {name!r}: BYTES data holds a value that is not a string")
    if flat.size != count:
        raise BadRequest(f"input {name!r}: {flat.size} elements for shape {shape} ({count} expected)")
    return flat.reshape(shape), at


def _parameters(spec: dict[str, Any], what: str) -> dict[str, Any]:
    params = spec.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest(f"{what}: 'parameters' is not an object")
    return params


def check_shape(name: str, kind: Any, shape: Any) -> int:
    """A tensor's declared datatype and shape, checked; returns its element count."""
    if kind not in NUMPY:
        raise BadRequest(f"input {name!r}: datatype {kind!r} is not one of {', '.join(NUMPY)}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise BadRequest(f"input {name!r}: shape {shape!r} is not a list of sizes")
    return int(np.prod(shape)) if shape else 1


def from_raw(name: str, kind: str, shape: list[int], raw: bytes) -> np.ndarray:
    """A tensor from its raw bytes (the binary extension's, or gRPC's ``raw_input_contents``):
    numbers little-endian, BYTES as a 4-byte little-endian length and the bytes, per element."""
    count = check_shape(name, kind, shape)
    if kind == "BYTES":
        flat = np.array(_split_bytes(raw, name), dtype=object)
        if flat.size != count:
            raise BadRequest(f"input {name!r}: {flat.size} elements for shape {shape} ({count} expected)")
        return flat.reshape(shape)
    width = np.dtype(NUMPY[kind]).itemsize
    if len(raw) != count * width:
        raise BadRequest(f"input {name!r}: {len(raw)} bytes for shape {shape} of {kind} ({count * width} expected)")
    return np.frombuffer(raw, dtype=np.dtype(NUMPY[kind]).newbyteorder("<")).astype(NUMPY[kind]).reshape(shape)


def to_raw(array: np.ndarray) -> tuple[str, bytes]:
    """An output's datatype and raw bytes, as :func:`from_raw` reads them."""
    kind = datatype_of(array)
    return kind, _bytes_of(array, kind)


def _split_bytes(raw: bytes, name: str) -> list[bytes]:
    out, at = [], 0
    while at < len(raw):
        if at + 4 > len(raw):
            raise BadRequest(f"input {name!r}: a BYTES element's length is cut off")
        (size,) = struct.unpack_from("<I", raw, at)
        at += 4
        if at + size > len(raw):
            raise BadRequest(f"input {name!r}: a BYTES element of {size} bytes is cut off")
        out.append(raw[at:at + size])
        at += size
    return out


def encode_response(response: InferResponse, request: InferRequest,
                    encode_ms: Callable[[], float] | None = None) -> tuple[bytes, dict[str, str]]:
    """The response body and its headers: JSON, with the binary outputs' bytes after it where
    ``request`` asks; ``encode_ms``: the encode hop's milliseconds, asked once the outputs are
    encoded, into ``parameters.encode_ms``."""
    blobs: list[bytes] = []
    tensors = []
    for name, array in response.outputs.items():
        kind = datatype_of(array)
        entry: dict[str, Any] = {"name": name, "datatype": kind, "shape": list(array.shape)}
        if request.wants_binary(name):
            blob = _bytes_of(array, kind)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = _json_data(array, kind)
        tensors.append(entry)
    doc: dict[str, Any] = {"model_name": response.model, "model_version": response.version, "outputs": tensors}
    if response.id is not None:
        doc["id"] = response.id
    if response.parameters or encode_ms is not None:
        doc["parameters"] = dict(response.parameters)
        if encode_ms is not None:
            doc["parameters"]["encode_ms"] = encode_ms()
    head = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return head, {"content-type": "application/json"}
    return head + b"".join(blobs), {"content-type": "application/octet-stream", HEADER: str(len(head))}


def datatype_of(array: np.ndarray) -> str:
    """The protocol's datatype of an array (ValueError for a dtype it has none for)."""
    if array.dtype == object or array.dtype.kind in "SU":
        return "BYTES"
    for kind, dtype in NUMPY.items():
        if kind != "BYTES" and np.dtype(dtype) == array.dtype:
            return kind
    raise ValueError(f"no protocol datatype for {array.dtype}")


def _bytes_of(array: np.ndarray, kind: str) -> bytes:
    if kind == "BYTES":
        parts = []
        for v in array.reshape(-1).tolist():
            b = v if isinstance(v, bytes) else str(v).encode()
            parts.append(struct.pack("<I", len(b)) + b)
        return b"".join(parts)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def _json_data(array: np.ndarray, kind: str) -> list[Any]:
    flat = array.reshape(-1)
    if kind == "BYTES":
        return [v.decode() if isinstance(v, bytes) else str(v) for v in flat.tolist()]
    return list(flat.tolist())


def error_body(message: str) -> bytes:
    """The protocol's error body, ``{"error": message}``: what tritonclient reads on any status but 200."""
    return orjson.dumps({"error": message})

