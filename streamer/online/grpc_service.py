"""The Open Inference Protocol over gRPC: ``inference.GRPCInferenceService`` on a grpc.aio server.

The service's messages come from the vendored protocol's descriptor (online/oip_descriptor.py)
in a private descriptor pool, so a process that also imports tritonclient.grpc (which registers
the same names in the default pool) still starts. Served: ServerLive, ServerReady, ModelReady,
ServerMetadata, ModelMetadata and ModelInfer; other methods answer UNIMPLEMENTED.

Tensors travel as ``raw_input_contents`` / ``raw_output_contents`` (what tritonclient.grpc sends
and reads); typed ``contents`` are read too. The deadline is the earlier of the call's gRPC
deadline and ``parameters.timeout`` (microseconds), within the default. Refusals map as the
HTTP ones do: INVALID_ARGUMENT (400), NOT_FOUND (404), UNAVAILABLE with a ``retry-after``
trailer (503: shed or expired), INTERNAL (500: the model failed); a message past
``max_body_bytes`` is refused by gRPC itself with RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from streamer.errors import BadRequest, Refused
from streamer.online.dispatch import Dispatcher
from streamer.online.http import SERVER, OnlineModel, unknown
from streamer.online.oip_descriptor import DESCRIPTOR_SET
from streamer.online.tensors import NUMPY, check_shape, from_raw, to_raw

SERVICE = "inference.GRPCInferenceService"
STATUS = {400: grpc.StatusCode.INVALID_ARGUMENT, 413: grpc.StatusCode.INVALID_ARGUMENT,  # an HTTP refusal's code
          503: grpc.StatusCode.UNAVAILABLE, 500: grpc.StatusCode.INTERNAL}
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


def handlers(model: OnlineModel, dispatcher: Dispatcher, *, default_timeout_ms: int,
             clock: Callable[[], float] = time.monotonic) -> grpc.GenericRpcHandler:
    """The service's method handlers, for ``grpc.aio.Server.add_generic_rpc_handlers``."""

    async def server_live(request: Any, context: Any) -> Any:
        return MESSAGE("ServerLiveResponse")(live=True)

    async def server_ready(request: Any, context: Any) -> Any:
        return MESSAGE("ServerReadyResponse")(ready=model.ready())

    async def model_ready(request: Any, context: Any) -> Any:
        await _known(context, request.name, request.version)
        return MESSAGE("ModelReadyResponse")(ready=model.ready())

    async def server_metadata(request: Any, context: Any) -> Any:
        return MESSAGE("ServerMetadataResponse")(**SERVER)

    async def model_metadata(request: Any, context: Any) -> Any:
        await _known(context, request.name, request.version)
        meta = model.metadata()
        out = MESSAGE("ModelMetadataResponse")(name=meta["name"], versions=meta["versions"], platform=meta["platform"])
        for field, tensors in (("inputs", meta["inputs"]), ("outputs", meta["outputs"])):
            for t in tensors:
                getattr(out, field).add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        return out

    async def _known(context: Any, name: str, version: str) -> None:
        why = unknown(model, name, version)
        if why is not None:
            await context.abort(grpc.StatusCode.NOT_FOUND, why)

    async def model_infer(request: Any, context: Any) -> Any:
        started, code = clock(), "OK"
        try:
            return await _model_infer(request, context)
        except BaseException:
            code = str(context.code() or "UNKNOWN").rsplit(".", 1)[-1]
            raise
        finally:
            dispatcher.metrics.requests.labels("grpc", code).inc()
            dispatcher.metrics.latency.labels("grpc").observe(clock() - started)

    async def _model_infer(request: Any, context: Any) -> Any:
        await _known(context, request.model_name, request.model_version)
        try:
            inputs = _inputs(request)
            features = model.columns(inputs)
            deadline = clock() + _timeout_s(request, context, default_timeout_ms)
        except BadRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        try:
            answer = await dispatcher.answer(features, deadline, request.id or None)
        except Refused as exc:
            await context.abort(STATUS.get(exc.status, grpc.StatusCode.INTERNAL), str(exc), tuple(exc.headers.items()))
        try:
            outputs = model.outputs(answer, tuple(o.name for o in request.outputs))
        except BadRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        response = MESSAGE("ModelInferResponse")(model_name=model.name, model_version=answer.version, id=request.id)
        for key, value in answer.parameters().items():
            if isinstance(value, bool):
                response.parameters[key].bool_param = value
            else:
                response.parameters[key].string_param = value
        for name, array in outputs.items():
            kind, raw = to_raw(array)
            response.outputs.add(name=name, datatype=kind, shape=list(array.shape))
            response.raw_output_contents.append(raw)
        return response

    def unary(fn: Any, request: str, response: str) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=MESSAGE(request).FromString,
                                                   response_serializer=MESSAGE(response).SerializeToString)

    return grpc.method_handlers_generic_handler(SERVICE, {
        "ServerLive": unary(server_live, "ServerLiveRequest", "ServerLiveResponse"),
        "ServerReady": unary(server_ready, "ServerReadyRequest", "ServerReadyResponse"),
        "ModelReady": unary(model_ready, "ModelReadyRequest", "ModelReadyResponse"),
        "ServerMetadata": unary(server_metadata, "ServerMetadataRequest", "ServerMetadataResponse"),
        "ModelMetadata": unary(model_metadata, "ModelMetadataRequest", "ModelMetadataResponse"),
        "ModelInfer": unary(model_infer, "ModelInferRequest", "ModelInferResponse"),
    })


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


def _timeout_s(request: Any, context: Any, default_ms: int) -> float:
    limit = default_ms / 1000
    remaining = context.time_remaining()
    if remaining is not None:
        limit = min(limit, remaining)
    if "timeout" in request.parameters:
        micros = request.parameters["timeout"].int64_param
        if micros <= 0:
            raise BadRequest(f"parameters.timeout {micros} is not a positive number of microseconds")
        limit = min(limit, micros / 1e6)
    return limit
