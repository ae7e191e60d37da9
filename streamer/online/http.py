"""The Open Inference Protocol over HTTP/REST (KServe v2): the data plane's requests and answers as
Starlette routes, with a bare ASGI path for inference.

Routes: ``GET /v2/health/live``, ``GET /v2/health/ready``, ``GET /v2`` (server metadata),
``GET /v2/models/{name}`` (model metadata), ``GET /v2/models/{name}/ready``,
``POST /v2/models/{name}/infer`` and ``GET /metrics``, for every model the plane serves; a
``/versions/{version}`` segment after the name is taken and must name the served version. Health answers by status: 200 for yes, 503
for no. Every refusal is ``{"error": ...}`` (what ``tritonclient`` reads) with the plane's status
(online/plane.py), and 413 for a body past ``max_body_bytes``.

This module only translates: a body (JSON, or Triton's binary extension: online/tensors.py) and
the ``X-Request-Timeout-Ms`` header into the plane's request and deadline; its answer or refusal
into a response.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from streamer.errors import BadRequest, Refused
from streamer.online.plane import SERVER, DataPlane
from streamer.online.tensors import HEADER, decode_request, encode_response, error_body

TIMEOUT_HEADER = "x-request-timeout-ms"
JSON = {"content-type": "application/json"}
PREFIX, SUFFIX = "/v2/models/", "/infer"  # the hot path's, around the model's name
Answered = tuple[int, bytes, dict[str, str]]  # an infer request's status, body and headers


class HttpTransport:
    """The HTTP routes of one data plane (and ``more``: ``/v1/score``), with ``/metrics``."""

    def __init__(self, plane: DataPlane, *, max_body_bytes: int) -> None:
        self.plane, self.max_body_bytes = plane, max_body_bytes

    def app(self, more: Sequence[Route] = ()) -> Any:
        """The ASGI application: inference of the served model straight to :meth:`answer`, the
        rest through the router."""
        base = "/v2/models/{name}"
        router = Starlette(routes=[
            Route("/v2/health/live", self.live), Route("/v2/health/ready", self.ready),
            Route("/v2", self.server), Route("/v2/", self.server),
            Route(base, self.metadata), Route(base + "/versions/{version}", self.metadata),
            Route(base + "/ready", self.model_ready), Route(base + "/versions/{version}/ready", self.model_ready),
            Route(base + "/infer", self.infer, methods=["POST"]),
            Route(base + "/versions/{version}/infer", self.infer, methods=["POST"]), *more,
            Route("/metrics", self.metrics),
        ])
        return _FastInfer(self, router)

    async def answer(self, body: bytes | None, size: int, header_length: str | None, timeout: str | None,
                     model: str, version: str = "") -> Answered:
        """One infer request's status, body and headers, on every path (the bare one and the
        router's); ``body`` None: its ``size`` bytes were over the limit."""
        plane = self.plane
        started = plane.clock()
        try:
            if body is None:
                raise plane.refused(model, version, 413, f"the body is {size} bytes, over the "
                                                         f"{self.max_body_bytes}-byte limit")
            try:
                request = decode_request(body, header_length, model, version)
                deadline = plane.deadline(started, request.parameters, asked_s=asked_s(timeout))
            except BadRequest as exc:
                raise plane.refused(model, version, 400, str(exc)) from None
            response = await plane.infer(request, deadline)
            content, headers = encode_response(response, request, lambda: plane.encoded(response.done_at, model))
            status = 200
        except Refused as exc:
            status, content, headers = exc.status, error_body(str(exc)), {**JSON, **exc.headers}
        plane.ended("http", str(status), started, model)
        return status, content, headers

    async def infer(self, request: Request) -> Response:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            body, size = None, int(declared)  # refused unread
        else:
            body, size = await read_body(request.stream(), self.max_body_bytes)
        status, content, headers = await self.answer(body, size, request.headers.get(HEADER),
                                                     request.headers.get(TIMEOUT_HEADER), request.path_params["name"],
                                                     request.path_params.get("version", ""))
        return Response(content, status, headers)

    async def live(self, request: Request) -> Response:
        return Response(b"", 200)

    async def ready(self, request: Request) -> Response:
        return _yes_no(self.plane.ready(), "the model is not ready (loading, warming up, or the server is stopping)")

    async def server(self, request: Request) -> Response:
        return Response(orjson.dumps(SERVER), media_type="application/json")

    async def metadata(self, request: Request) -> Response:
        name, version = request.path_params["name"], request.path_params.get("version")
        try:
            return Response(orjson.dumps(await self.plane.metadata(name, version)), media_type="application/json")
        except Refused as exc:
            return json_error(exc.status, str(exc))

    async def model_ready(self, request: Request) -> Response:
        name, version = request.path_params["name"], request.path_params.get("version")
        try:
            return _yes_no(self.plane.model_ready(name, version), f"model {name!r} is not ready")
        except Refused as exc:
            return json_error(exc.status, str(exc))

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.plane.registry), headers={"content-type": CONTENT_TYPE_LATEST})


class _FastInfer:
    """The ASGI application: ``POST /v2/models/<name>/infer``, the hot path, straight to the
    answer (no router, no middleware: a third of a request's time at saturation); every other
    request to the router."""

    def __init__(self, http: HttpTransport, router: Starlette) -> None:
        self.router, self.answer, self.max_body_bytes = router, http.answer, http.max_body_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        model = path[len(PREFIX):-len(SUFFIX)] if path.startswith(PREFIX) and path.endswith(SUFFIX) else ""
        if scope["type"] != "http" or scope["method"] != "POST" or not model or "/" in model:
            await self.router(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        body, size = await read_body(_chunks(receive), self.max_body_bytes)
        status, content, out = await self.answer(body, size, headers.get(HEADER), headers.get(TIMEOUT_HEADER),
                                                 model)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.encode(), v.encode()) for k, v in out.items()]})
        await send({"type": "http.response.body", "body": content})


def _yes_no(ok: bool, why: str) -> Response:
    return Response(b"", 200) if ok else json_error(503, why, {"Retry-After": "1"})


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


def asked_s(header: str | None) -> float | None:
    """The seconds an ``X-Request-Timeout-Ms`` header asks for (None: no header); BadRequest for
    one that is not a positive number."""
    if header is None:
        return None
    try:
        ms = float(header)
    except ValueError:
        raise BadRequest(f"{TIMEOUT_HEADER} {header!r} is not a number of milliseconds") from None
    if not math.isfinite(ms) or ms <= 0:
        raise BadRequest(f"{TIMEOUT_HEADER} {header!r} is not a positive number of milliseconds")
    return ms / 1000
