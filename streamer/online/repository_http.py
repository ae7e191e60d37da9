"""The protocol's model repository extension over HTTP (as Triton serves it, and tritonclient
calls it): the models listed with their states, one loaded or unloaded without a restart.

Served when ``jobs.api_token`` is set (without it the routes do not exist: 404), each route
taking ``Authorization: Bearer <token>``, compared in constant time: 401 without it, 403 with
another token, and nothing is loaded or unloaded. Routes:

- ``POST /v2/repository/index``: ``[{"name", "version", "state", "reason"}]`` for every model,
  by name; ``state`` READY, LOADING or UNAVAILABLE (``reason``: not loaded, unloaded, the least
  recently used, its load's failure). A body ``{"ready": true}`` lists the READY ones only.
- ``POST /v2/repository/models/{name}/load``: the model loaded and warmed up (the least
  recently used unloaded first, within ``models.max_loaded``); 200 once it answers, 400 with
  its failure, 404 for no such model.
- ``POST /v2/repository/models/{name}/unload``: the model unloaded once the requests it
  admitted are answered; its requests answer 503 until it is loaded again; 409 for the default
  model (and, beside the stream, the stream's), which stay loaded.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from streamer.errors import Refused
from streamer.online.http import json_error
from streamer.online.lanes import Lanes

Handler = Callable[[Request], Awaitable[Response]]


class RepositoryApi:
    """The repository routes over ``lanes``, guarded by ``token``."""

    def __init__(self, lanes: Lanes, token: str) -> None:
        self.lanes, self._token = lanes, token.encode()

    def routes(self) -> list[Route]:
        g = self._guarded
        return [Route("/v2/repository/index", g(self.index), methods=["POST"]),
                Route("/v2/repository/models/{name}/load", g(self.load), methods=["POST"]),
                Route("/v2/repository/models/{name}/unload", g(self.unload), methods=["POST"])]

    def _guarded(self, handler: Handler) -> Handler:
        async def guarded(request: Request) -> Response:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not given.strip():
                return json_error(401, "the repository API takes Authorization: Bearer <jobs.api_token>",
                                  {"www-authenticate": 'Bearer realm="streamer repository"'})
            if not hmac.compare_digest(given.strip().encode(), self._token):
                return json_error(403, "the repository API's token is not this one")
            try:
                return await handler(request)
            except Refused as exc:
                return json_error(exc.status, str(exc), exc.headers)
        return guarded

    async def index(self, request: Request) -> Response:
        body = await request.body()
        try:
            asked = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError as exc:
            return json_error(400, f"the body is not JSON: {exc}")
        ready = isinstance(asked, dict) and asked.get("ready") is True
        return Response(orjson.dumps(self.lanes.index(ready_only=ready)), media_type="application/json")

    async def load(self, request: Request) -> Response:
        name = request.path_params["name"]
        try:
            await asyncio.wrap_future(self.lanes.load(name))
        except Refused:
            raise
        except Exception as exc:  # noqa: BLE001 - the load's failure is the answer
            return json_error(400, f"model {name!r} did not load: {exc}")
        return Response(b"", 200)

    async def unload(self, request: Request) -> Response:
        await asyncio.wrap_future(self.lanes.unload(request.path_params["name"]))
        return Response(b"", 200)
