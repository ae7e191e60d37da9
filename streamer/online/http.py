"""The Open Inference Protocol over HTTP/REST (KServe v2), as a Starlette application.

Routes: ``GET /v2/health/live``, ``GET /v2/health/ready``, ``GET /v2`` (server metadata),
``GET /v2/models/{name}`` (model metadata), ``GET /v2/models/{name}/ready`` and
``POST /v2/models/{name}/infer``; a ``/versions/{version}`` segment after the name is taken and
must name the served version. Health answers by status: 200 for yes, 503 for no. Every other
refusal is ``{"error": ...}`` (what ``tritonclient`` reads) with its status: 400 for a request the
protocol or the model's inputs refuse, 404 for an unknown model, 413 past ``max_body_bytes``,
503 with ``Retry-After`` for a request shed at admission or whose deadline passed while it
waited, 500 when the model fails.

A request's deadline: ``parameters.timeout`` (microseconds, as tritonclient's ``timeout=``
sends it), else the ``X-Request-Timeout-Ms`` header, else the default; never later than the
default's cap.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

import numpy as np
import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from streamer.errors import BadRequest, Refused
from streamer.model.signature import Columns
from streamer.online.dispatch import Answer, Dispatcher
from streamer.online.tensors import HEADER, decode_request, encode_response, error_body

TIMEOUT_HEADER = "x-request-timeout-ms"
SERVER = {"name": "streamer", "version": "1", "extensions": ["binary_tensor_data"]}


class OnlineModel(Protocol):
    """The served model as the protocol sees it: its tensors, and its inputs checked into the
    columns the dispatcher scores."""

    name: str

    @property
    def version(self) -> str: ...

    def ready(self) -> bool: ...

    def metadata(self) -> dict[str, Any]: ...

    def columns(self, inputs: dict[str, np.ndarray]) -> Columns:
        """The model's input columns of a request's tensors; BadRequest naming the tensor when
        one is missing, unknown, of another datatype or shape."""
        ...

    def outputs(self, answer: Answer, wanted: tuple[str, ...]) -> dict[str, np.ndarray]:
        """The answer's tensors by output name, those ``wanted`` (all when empty); BadRequest for an
        unknown one."""
        ...


def app(model: OnlineModel, dispatcher: Dispatcher, *, default_timeout_ms: int, max_body_bytes: int,
        clock: Callable[[], float] = time.monotonic, more: Sequence[Route] = ()) -> Any:
    """The HTTP application of one served model (and ``more`` routes: ``/v1/score``), with
    ``/metrics`` (the dispatcher's registry)."""
    meters = dispatcher.metrics

    def yes_no(ok: bool, why: str) -> Response:
        return Response(b"", 200) if ok else json_error(503, why, {"Retry-After": "1"})

    def known(request: Request) -> Response | None:
        why = unknown(model, request.path_params["name"], request.path_params.get("version"))
        return None if why is None else json_error(404, why)

    async def live(request: Request) -> Response:
        return Response(b"", 200)

    async def ready(request: Request) -> Response:
        return yes_no(model.ready(), "the model is not ready (loading, warming up, or the server is stopping)")

    async def server(request: Request) -> Response:
        return Response(orjson.dumps(SERVER), media_type="application/json")

    async def metadata(request: Request) -> Response:
        return known(request) or Response(orjson.dumps(model.metadata()), media_type="application/json")

    async def model_ready(request: Request) -> Response:
        return known(request) or yes_no(model.ready(), f"model {model.name!r} is not ready")

    async def answer(body: bytes | None, size: int, header_length: str | None,
                     timeout: str | None) -> tuple[int, bytes, dict[str, str]]:
        """One infer request's status, body and headers (every path: the fast one and the router's);
        ``body`` None: its ``size`` bytes were over the limit."""
        started = clock()
        status, content, headers = await _answer(body, size, header_length, timeout)
        meters.requests.labels("http", str(status)).inc()
        meters.latency.labels("http").observe(clock() - started)
        return status, content, headers

    def failure(status: int, message: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
        return status, error_body(message), {"content-type": "application/json", **(headers or {})}

    async def _answer(body: bytes | None, size: int, header_length: str | None,
                      timeout: str | None) -> tuple[int, bytes, dict[str, str]]:
        if body is None:
            return failure(413, f"the body is {size} bytes, over the {max_body_bytes}-byte limit")
        try:
            req = decode_request(body, header_length)
            features = model.columns(req.inputs)
            deadline = clock() + timeout_s(req.parameters, timeout, default_timeout_ms)
        except BadRequest as exc:
            return failure(400, str(exc))
        try:
            answer = await dispatcher.answer(features, deadline, req.id)
        except Refused as exc:
            return failure(exc.status, str(exc), exc.headers)
        try:
            outputs = model.outputs(answer, req.outputs)
        except BadRequest as exc:
            return failure(400, str(exc))
        content, headers = encode_response(model.name, answer.version, outputs, req, answer.parameters())
        return 200, content, headers

    async def infer(request: Request) -> Response:
        refused = known(request)
        if refused is not None:
            meters.requests.labels("http", str(refused.status_code)).inc()
            return refused
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
            body, size = None, int(declared)  # refused unread
        else:
            body, size = await read_body(request.stream(), max_body_bytes)
        status, content, headers = await answer(body, size, request.headers.get(HEADER),
                                                request.headers.get(TIMEOUT_HEADER))
        return Response(content, status, headers)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(meters.registry), headers={"content-type": CONTENT_TYPE_LATEST})

    base = "/v2/models/{name}"
    router = Starlette(routes=[
        Route("/v2/health/live", live), Route("/v2/health/ready", ready), Route("/v2", server), Route("/v2/", server),
        Route(base, metadata), Route(base + "/versions/{version}", metadata),
        Route(base + "/ready", model_ready), Route(base + "/versions/{version}/ready", model_ready),
        Route(base + "/infer", infer, methods=["POST"]),
        Route(base + "/versions/{version}/infer", infer, methods=["POST"]), *more,
        Route("/metrics", metrics),
    ])
    return _FastInfer(f"/v2/models/{model.name}/infer", answer, max_body_bytes, router)


class _FastInfer:
    """The ASGI application: ``POST /v2/models/<served>/infer``, the hot path, straight to the
    answer (no router, no middleware: a third of a request's time at saturation); every other
    request to the router."""

    def __init__(self, path: str, answer: Any, max_body_bytes: int, router: Starlette) -> None:
        self.path, self.answer, self.max_body_bytes, self.router = path, answer, max_body_bytes, router

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.router(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        body, size = await read_body(_chunks(receive), self.max_body_bytes)
        status, content, out = await self.answer(body, size, headers.get(HEADER), headers.get(TIMEOUT_HEADER))
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.encode(), v.encode()) for k, v in out.items()]})
        await send({"type": "http.response.body", "body": content})


def unknown(model: OnlineModel, name: str, version: str | None) -> str | None:
    """Why ``name`` (and ``version``, when one is given) is not the served model; None when it is."""
    if name != model.name:
        return f"unknown model {name!r}: this server serves {model.name!r}"
    if version and version != model.version:
        return f"model {name!r} has no version {version!r}: it serves {model.version!r}"
    return None


def json_error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """A refusal as the protocol answers it: ``{"error": message}`` with its status."""
    return Response(error_body(message), status, headers, media_type="application/json")


async def _chunks(receive: Any) -> AsyncIterator[bytes]:
    """An ASGI request's body, chunk by chunk."""
    more = True
    while more:
        message = await receive()
        yield message.get("body", b"")
        more = message.get("more_body", False)


async def read_body(chunks: AsyncIterator[bytes], limit: int) -> tuple[bytes | None, int]:
    """A request's body read to its end, and its size; None for a body past ``limit`` bytes
    (the rest is read and dropped, so the connection can take the next request)."""
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size <= limit:
            parts.append(chunk)
    return (b"".join(parts) if size <= limit else None), size


def timeout_s(parameters: Any, header: str | None, default_ms: int) -> float:
    """The request's time to answer, in seconds, capped by the default: ``parameters.timeout``
    (microseconds), else the ``X-Request-Timeout-Ms`` header, else the default."""
    timeout = parameters.get("timeout") if isinstance(parameters, dict) else None
    if timeout is not None:
        if not isinstance(timeout, int) or timeout <= 0:
            raise BadRequest(f"parameters.timeout {timeout!r} is not a positive number of microseconds")
        return min(timeout / 1e6, default_ms / 1000)
    if header is not None:
        try:
            ms = float(header)
        except ValueError:
            raise BadRequest(f"{TIMEOUT_HEADER} {header!r} is not a number of milliseconds") from None
        if not math.isfinite(ms) or ms <= 0:
            raise BadRequest(f"{TIMEOUT_HEADER} {header!r} is not a positive number of milliseconds")
        return min(ms, default_ms) / 1000
    return default_ms / 1000

