"""Precomputed predictions online: the store's lookup under the request's deadline, the answer of a
precomputed prediction, and ``GET /v1/predictions/{entity_id}``.

A lookup (stores/precomputed.py) is bounded by ``kv.timeout_ms`` and by :data:`SHARE` of the
request's remaining deadline less :data:`MARGIN_S`, the rest left for the answer itself (a burst
of lookups that fail together is a burst of answers to write at once): a stalled store is a
:class:`StoreError` in time, never a late answer. A precomputed answer is the prediction record's fields as the run
wrote them, with ``source: "precomputed"``, its ``run_id`` and ``age_s`` (seconds since it was
scored); a degraded one has ``degraded: true`` and ``degraded_reason``.

``GET /v1/predictions/{entity_id}``: 200 with the answer; 404 when the current complete run has
no prediction for the entity (or no run is complete yet); 503 with Retry-After when the store
fails or does not answer in time; 409 when no store is configured (``kv.address`` is not set):
the request cannot be answered by this server at all, which a client must not read as "this
entity has none".

Worked example: ``GET /v1/predictions/acct-7`` answers ``{"entity_id": "acct-7", "scores":
[0.42], ..., "run_id": "r-20261205", "source": "precomputed", "age_s": 3600.5}``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from streamer.config import CacheConfig, KvConfig
from streamer.errors import BadRequest, Refused, StoreError
from streamer.online.guard import Guard
from streamer.online.http import TIMEOUT_HEADER, asked_s, json_error
from streamer.online.meters import OnlineMetrics
from streamer.online.plane import DataPlane
from streamer.stores.precomputed import Precomputed, PredictionStore

SHARE, MARGIN_S = 0.9, 0.005  # a lookup takes at most 90% of the time left, less 5 ms: the rest is the answer's
NO_STORE = "no precomputed predictions are served: kv.address is not set (the store they are read from)"


class Cache:
    """The precomputed predictions a server answers from, and their lookups' bounds."""

    def __init__(self, store: PredictionStore, kv: KvConfig, cache: CacheConfig, metrics: OnlineMetrics,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.metrics, self.clock = store, metrics, clock
        self._timeout_s = kv.timeout_ms / 1000
        self.guard = Guard(f"the Redis store at {kv.address}", cache.skip_ms, cache.max_in_flight, clock)

    async def lookup(self, entity_id: str, deadline: float) -> Precomputed | None:
        """The entity's precomputed prediction (None: the current run has none); :class:`StoreError`
        when the store fails, or does not answer within ``kv.timeout_ms`` or before ``deadline``
        (the clock's time: :data:`SHARE` of the time left, less :data:`MARGIN_S`)."""
        budget = min(self._timeout_s, SHARE * (deadline - self.clock()) - MARGIN_S)
        if budget <= 0:
            raise StoreError("no time is left before the request's deadline to ask the store")
        return await self.guard.within(lambda: self.store.get(entity_id), budget, self._timeout_s, "kv.timeout_ms")

    def answer(self, found: Precomputed, degraded: str | None = None,
               parameters: dict[str, float] | None = None) -> dict[str, Any]:
        """A precomputed prediction as an answer's JSON fields; ``degraded``: the reason it stands
        in for a fresh score (breaker, deadline, features)."""
        fields = dict(found.fields)
        fields.setdefault("degraded", False)
        fields.setdefault("degraded_reason", None)
        if degraded is not None:
            fields["degraded"], fields["degraded_reason"] = True, degraded
            self.metrics.reasons[degraded].inc()
        fields.update(source="precomputed", run_id=found.run_id, age_s=found.age_s(int(time.time() * 1000)))
        if parameters is not None:
            fields["parameters"] = parameters
        self.metrics.sources["precomputed"].inc()
        return fields

    async def close(self) -> None:
        await self.store.close()


def no_prediction(entity_id: str) -> Refused:
    return Refused(404, f"no precomputed prediction for entity {entity_id!r} in the current complete run")


def predictions_route(cache: Cache | None, plane: DataPlane) -> Route:
    """The route of ``GET /v1/predictions/{entity_id}`` (409 on every request without a store)."""

    async def predictions(request: Request) -> Response:
        started = plane.clock()
        try:
            if cache is None:
                raise Refused(409, NO_STORE)
            try:
                deadline = plane.deadline(started, asked_s=asked_s(request.headers.get(TIMEOUT_HEADER)))
            except BadRequest as exc:
                raise Refused(400, str(exc)) from None
            entity_id = request.path_params["entity_id"]
            try:
                found = await cache.lookup(entity_id, deadline)
            except StoreError as exc:
                raise Refused(503, str(exc), 1.0) from None
            if found is None:
                raise no_prediction(entity_id)
            response = Response(orjson.dumps(cache.answer(found)), media_type="application/json")
        except Refused as exc:
            response = json_error(exc.status, str(exc), exc.headers)
        plane.ended("predictions", str(response.status_code), started)
        return response

    return Route("/v1/predictions/{entity_id:path}", predictions, methods=["GET"])  # an id may hold a '/'
