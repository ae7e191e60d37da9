"""The Open Inference Protocol over gRPC: ``inference.GRPCInferenceService``, the data plane's
requests and answers as a grpc.aio service.

The service's messages come from the vendored protocol's descriptor (online/oip_descriptor.py)
in a private descriptor pool, so a process that also imports tritonclient.grpc (which registers
the same names in the default pool) still starts. Served: ServerLive, ServerReady, ModelReady,
ServerMetadata, ModelMetadata and ModelInfer, for every model the plane serves; other methods
answer UNIMPLEMENTED. The repository extension is HTTP's only (online/repository_http.py): the
protocol's gRPC service has no repository methods (Triton adds them in a service of its own).

Tensors travel as ``raw_input_contents`` / ``raw_output_contents`` (what tritonclient.grpc sends
and reads); typed ``contents`` are read too. The deadline is the earlier of the call's gRPC
deadline and ``parameters.timeout`` (microseconds), within the default. Refusals map as the
HTTP ones do: INVALID_ARGUMENT (400), NOT_FOUND (404), UNAVAILABLE with a ``retry-after``
trailer (503: shed or expired), INTERNAL (500: the model failed); a message past
``max_body_bytes`` is refused by gRPC itself with RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from streamer.errors import BadRequest, Refused
from streamer.online.oip_descriptor import DESCRIPTOR_SET
from streamer.online.plane import SERVER, DataPlane, InferRequest, InferResponse
from streamer.online.tensors import NUMPY, check_shape, from_raw, to_raw

SERVICE = "inference.GRPCInferenceService"
STATUS = {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND,  # a refusal's status -> its code
          413: grpc.StatusCode.INVALID_ARGUMENT, 503: grpc.StatusCode.UNAVAILABLE, 500: grpc.StatusCode.INTERNAL}
_CONTENTS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
             "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
             "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
             "FP64": "fp64_contents", "BYTES": "bytes_contents"}


def _messages() -> Callable[[str], Any]:
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_SET).file:
        pool.Add(file)
    return lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{name}"))


MESSAGE = _messages()


class GrpcTransport:
    """The service's methods over one data plane."""

    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    def handler(self) -> grpc.GenericRpcHandler:
        """The service's method handlers, for ``grpc.aio.Server.add_generic_rpc_handlers``."""

        def unary(fn: Any, request: str, response: str) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=MESSAGE(request).FromString,
                                                       response_serializer=MESSAGE(response).SerializeToString)

        return grpc.method_handlers_generic_handler(SERVICE, {
            "ServerLive": unary(self.server_live, "ServerLiveRequest", "ServerLiveResponse"),
            "ServerReady": unary(self.server_ready, "ServerReadyRequest", "ServerReadyResponse"),
            "ModelReady": unary(self.model_ready, "ModelReadyRequest", "ModelReadyResponse"),
            "ServerMetadata": unary(self.server_metadata, "ServerMetadataRequest", "ServerMetadataResponse"),
            "ModelMetadata": unary(self.model_metadata, "ModelMetadataRequest", "ModelMetadataResponse"),
            "ModelInfer": unary(self.model_infer, "ModelInferRequest", "ModelInferResponse"),
        })

    async def server_live(self, request: Any, context: Any) -> Any:
        return MESSAGE("ServerLiveResponse")(live=True)

    async def server_ready(self, request: Any, context: Any) -> Any:
        return MESSAGE("ServerReadyResponse")(ready=self.plane.ready())

    async def model_ready(self, request: Any, context: Any) -> Any:
        try:
            return MESSAGE("ModelReadyResponse")(ready=self.plane.model_ready(request.name, request.version))
        except Refused as exc:
            await _abort(context, exc)

    async def server_metadata(self, request: Any, context: Any) -> Any:
        return MESSAGE("ServerMetadataResponse")(**SERVER)

    async def model_metadata(self, request: Any, context: Any) -> Any:
        try:
            return metadata_response(await self.plane.metadata(request.name, request.version))
        except Refused as exc:
            await _abort(context, exc)

    async def model_infer(self, message: Any, context: Any) -> Any:
        plane = self.plane
        started, code = plane.clock(), "UNKNOWN"  # UNKNOWN: it ended otherwise (cancelled)
        try:
            try:
                request = infer_request(message)
                deadline = plane.deadline(started, request.parameters, bound_s=context.time_remaining())
            except BadRequest as exc:
                raise plane.refused(message.model_name, message.model_version, 400, str(exc)) from None
            answered = await plane.infer(request, deadline)
            response = infer_response(answered, lambda: plane.encoded(answered.done_at, message.model_name))
            code = "OK"
            return response
        except Refused as exc:
            code = _status(exc).name
            await _abort(context, exc)
        finally:
            plane.ended("grpc", code, started, message.model_name)


def infer_request(message: Any) -> InferRequest:
    """A ``ModelInferRequest`` as the plane's request; BadRequest naming what it refuses."""
    params = {key: _value(p) for key, p in message.parameters.items()}
    return InferRequest(message.model_name, message.model_version, _inputs(message),
                        tuple(o.name for o in message.outputs), id=message.id or None, parameters=params)


def infer_response(response: InferResponse, encode_ms: Callable[[], float] | None = None) -> Any:
    """The plane's answer as a ``ModelInferResponse``: raw output contents, typed parameters (a
    number as ``double_param``); ``encode_ms``: the encode hop, asked once the outputs are in."""
    out = MESSAGE("ModelInferResponse")(model_name=response.model, model_version=response.version,
                                        id=response.id or "")
    for name, array in response.outputs.items():
        kind, raw = to_raw(array)
        out.outputs.add(name=name, datatype=kind, shape=list(array.shape))
        out.raw_output_contents.append(raw)
    params = dict(response.parameters)
    if encode_ms is not None:
        params["encode_ms"] = encode_ms()
    for key, value in params.items():
        if isinstance(value, bool):
            out.parameters[key].bool_param = value
        elif isinstance(value, float):
            out.parameters[key].double_param = value
        else:
            out.parameters[key].string_param = value
    return out


def metadata_response(meta: dict[str, Any]) -> Any:
    """The plane's model metadata as a ``ModelMetadataResponse``."""
    out = MESSAGE("ModelMetadataResponse")(name=meta["name"], versions=meta["versions"], platform=meta["platform"])
    for field, tensors in (("inputs", meta["inputs"]), ("outputs", meta["outputs"])):
        for t in tensors:
            getattr(out, field).add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
    return out


def _value(parameter: Any) -> Any:
    """An ``InferParameter``'s value, of whichever kind it holds; one holding none reads as the
    int64 default, 0 (a ``timeout`` of 0 is refused, as the protocol's default would be)."""
    kind = parameter.WhichOneof("parameter_choice")
    return parameter.int64_param if kind is None else getattr(parameter, kind)


def _status(refused: Refused) -> grpc.StatusCode:
    return STATUS.get(refused.status, grpc.StatusCode.INTERNAL)


async def _abort(context: Any, refused: Refused) -> None:
    """End the call with the refusal's code, reason and Retry-After (grpc raises here)."""
    await context.abort(_status(refused), str(refused), tuple(refused.headers.items()))


def _inputs(request: Any) -> dict[str, np.ndarray]:
    """The request's tensors: raw contents, one per input in order, or typed contents."""
    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise BadRequest(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs")
    out: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(request.inputs):
        shape = [int(d) for d in tensor.shape]
        if raw:
            out[tensor.name] = from_raw(tensor.name, tensor.datatype, shape, raw[i])
            continue
        count = check_shape(tensor.name, tensor.datatype, shape)
        field = _CONTENTS.get(tensor.datatype)
        if field is None:
            raise BadRequest(f"input {tensor.name!r}: {tensor.datatype} travels as raw_input_contents only")
        values = list(getattr(tensor.contents, field))
        if len(values) != count:
            raise BadRequest(f"input {tensor.name!r}: {len(values)} elements for shape {shape} ({count} expected)")
        out[tensor.name] = np.array(values, dtype=NUMPY[tensor.datatype]).reshape(shape)
    return out

