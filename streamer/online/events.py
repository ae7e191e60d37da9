"""``POST /v1/score``: one event shaped like the topic's, answered from the store or scored fresh.

The body is one JSON event. It is checked as a consumed event is (``model.inputs``, the fills,
the conversion table: pipeline/validate.py); an event that cannot be scored is 422 with the
reason naming the field. Its row goes through the data plane (online/plane.py: its deadline,
readiness, admission, the same batches and refusals as the protocol's requests), and the answer
is the prediction record the output topic would carry for it, as JSON: the ids, the mapped
outputs, ``output.include``, the model's name, version and digest, ``degraded`` and
``degraded_reason``, ``source`` and ``parameters`` (the hops' milliseconds: ``features_ms``,
``queue_ms``, ``model_ms``, ``encode_ms``; ``store_ms`` where the store was asked).

``?mode=`` (default ``online.cache.mode``): ``fresh`` scores the event (``source: "scored"``);
``cached`` answers the entity's precomputed prediction (online/cache.py; 404 when it has none,
503 when the store fails); ``auto`` answers it when younger than ``online.cache.max_age_s``, and
scores fresh otherwise (or when the store fails). A body may carry only its entity id when
``online.features.kind`` is set: the rest are fetched (online/entity.py).

The degrade path. A fresh score that cannot be had in time is answered by the entity's
precomputed prediction, flagged ``degraded: true`` with ``degraded_reason``: ``breaker`` (the
model's breaker is open: decided before scoring), ``features`` (the fetch failed or passed its
timeout), ``deadline`` (admission sheds the request for its deadline, or it expired waiting).
Without a precomputed prediction: ``breaker`` is scored, the fallback answering as the breaker
has it; ``deadline`` is the fallback's answer when there is one; ``features`` the fallback's when
it is a constant row (a fallback model needs the features that did not come); otherwise the
error (503). The
store's lookup for a degrade is bounded by the request's remaining deadline and ``kv.timeout_ms``.

Worked example: ``{"event_id": "e1", "entity_id": "a", "event_time": 1, "features": [...32...]}``
answers ``{"event_id": "e1", ..., "scores": [0.73], "model_version": "1", "model_digest": "…",
"degraded": false, "degraded_reason": null, "source": "scored", "parameters": {"features_ms": 0.0,
"queue_ms": 1.1, "model_ms": 0.2, "encode_ms": 0.1}}``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import replace
from typing import Any

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from streamer.config import Config
from streamer.errors import BadRequest, Refused, StoreError, ValidationError
from streamer.model.contract import field_value
from streamer.model.signature import Columns
from streamer.online.cache import NO_STORE, Cache, no_prediction
from streamer.online.entity import EntityFeatures
from streamer.online.http import TIMEOUT_HEADER, asked_s, json_error, read_body
from streamer.online.plane import DataPlane, ms
from streamer.pipeline.records import Scored, SourceRecord, Stamp, prediction_fields
from streamer.pipeline.serving import Serving
from streamer.pipeline.validate import EventValidator
from streamer.stores.precomputed import Precomputed

MODES = ("fresh", "cached", "auto")


class _NotAsked:
    """The store not asked yet in a request (its answer may be None: no prediction)."""


NOT_ASKED = _NotAsked()


class _Hops:
    """One answer's hop seconds, as they are taken, and what the store answered once asked."""

    __slots__ = ("features", "queue", "model", "store", "done_at", "found")

    def __init__(self) -> None:
        self.features = self.queue = self.model = 0.0
        self.store: float | None = None
        self.done_at: float | None = None
        self.found: Precomputed | None | _NotAsked = NOT_ASKED  # auto's lookup, reused by a degrade


class ScoreRoute:
    """``POST /v1/score`` for ``serving``'s model under ``cfg``'s contract; ``cache``: the
    precomputed predictions (None: no store); ``entity``: the features fetched by entity id
    (None: requests carry them)."""

    def __init__(self, cfg: Config, serving: Serving, plane: DataPlane, cache: Cache | None = None,
                 entity: EntityFeatures | None = None) -> None:
        self.cfg, self.serving, self.plane, self.cache, self.entity = cfg, serving, plane, cache, entity
        self.contract = serving.runner.contract
        self.validator = EventValidator(cfg.input, self.contract, cfg.output.include)
        self.metrics = plane.metrics
        self._seq = itertools.count()

    def route(self) -> Route:
        return Route("/v1/score", self.score, methods=["POST"])

    async def score(self, request: Request) -> Response:
        started = self.plane.clock()
        try:
            response = await self._score(request, started)
        except Refused as exc:
            response = json_error(exc.status, str(exc), exc.headers)
        self.plane.ended("score", str(response.status_code), started)
        return response

    async def _score(self, request: Request, started: float) -> Response:
        o, plane = self.cfg.online, self.plane
        body, size = await read_body(request.stream(), o.max_body_bytes)
        if body is None:
            raise Refused(413, f"the body is {size} bytes, over the {o.max_body_bytes}-byte limit")
        mode = request.query_params.get("mode") or o.cache.mode
        if mode not in MODES:
            raise Refused(400, f"unknown mode {mode!r}: it is fresh, cached or auto")
        try:
            deadline = plane.deadline(started, asked_s=asked_s(request.headers.get(TIMEOUT_HEADER)))
            payload = orjson.loads(body)
        except BadRequest as exc:
            raise Refused(400, str(exc)) from None
        except orjson.JSONDecodeError as exc:
            raise Refused(400, f"the body is not JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise Refused(400, "the body is not one JSON object (an event)")
        entity = payload.get(self.cfg.input.entity_field)
        entity_id = None if entity is None else str(entity)
        hops = _Hops()
        if mode != "fresh":
            cached = await self._cached(mode, entity_id, deadline, hops)
            if cached is not None:
                return cached
        return await self._fresh(payload, entity_id, deadline, hops)

    async def _cached(self, mode: str, entity_id: str | None, deadline: float, hops: _Hops) -> Response | None:
        """The precomputed answer of ``cached`` and ``auto``; None: ``auto`` scores fresh."""
        if self.cache is None:
            raise Refused(409, f"mode {mode!r}: {NO_STORE}")
        if entity_id is None:
            raise Refused(422, f"missing field '{self.cfg.input.entity_field}': mode {mode!r} looks the entity's "
                               "precomputed prediction up")
        try:
            found = await self._lookup(entity_id, deadline, hops)
        except StoreError as exc:
            if mode == "cached":
                raise Refused(503, str(exc), 1.0) from None
            return None  # auto: the store is a shortcut, the model still answers
        if found is None:
            if mode == "cached":
                raise no_prediction(entity_id)
            return None
        if mode == "auto" and found.age_s(int(time.time() * 1000)) > self.cfg.online.cache.max_age_s:
            return None
        return self._answer(self.cache.answer(found, parameters=self._parameters(hops)))

    async def _fresh(self, payload: dict[str, Any], entity_id: str | None, deadline: float,
                     hops: _Hops) -> Response:
        if self.serving.breaker.is_open():
            degraded = await self._degrade("breaker", entity_id, deadline, hops)
            if degraded is not None:
                return degraded
        entity = self.entity
        if entity is not None and entity_id is not None and entity.missing(payload):
            at = self.plane.clock()
            try:
                payload = await entity.complete(payload, entity_id, deadline)
            except StoreError as exc:
                hops.features = self.plane.clock() - at
                self.metrics.hops["features"].observe(hops.features)
                degraded = await self._degrade("features", entity_id, deadline, hops)
                if degraded is not None:
                    return degraded
                constant = self._constant(payload, entity_id, hops)
                if constant is not None:
                    return constant
                raise Refused(503, f"{exc}; and no precomputed prediction stands in", 1.0) from None
            hops.features = self.plane.clock() - at
            self.metrics.hops["features"].observe(hops.features)
        now_ms = int(time.time() * 1000)
        try:
            record = self.validator.to_record(payload, "online", 0, next(self._seq), None, now_ms)
        except ValidationError as exc:
            raise Refused(422, str(exc)) from None
        features = self.contract.stack([record.features])
        try:
            answer = await self.plane.score(features, deadline, record.event_id)
        except Refused as exc:
            if exc.why not in ("deadline", "expired"):
                raise
            degraded = await self._degrade("deadline", entity_id, deadline, hops)
            if degraded is not None:
                return degraded
            fallback = await self._fallback(features)
            if fallback is None:
                raise
            return self._scored(record, fallback, hops, now_ms)
        self.plane.hops(answer)
        hops.queue, hops.model, hops.done_at = answer.queued_s, answer.model_s, answer.done_at
        if answer.scored.degraded is not None:  # the fallback answered: the breaker opened on this batch
            self.metrics.reasons["breaker"].inc()
        return self._scored(record, answer.scored, hops, now_ms)

    async def _lookup(self, entity_id: str, deadline: float, hops: _Hops) -> Precomputed | None:
        """The entity's precomputed prediction, asked of the store once per request (an ``auto``
        request that scores fresh and then degrades answers with what its first lookup found)."""
        assert self.cache is not None
        if not isinstance(hops.found, _NotAsked):
            return hops.found
        at = self.plane.clock()
        try:
            hops.found = await self.cache.lookup(entity_id, deadline)
            return hops.found
        finally:
            hops.store = (hops.store or 0.0) + self.plane.clock() - at

    async def _degrade(self, reason: str, entity_id: str | None, deadline: float, hops: _Hops) -> Response | None:
        """The entity's precomputed prediction flagged degraded for ``reason``; None without one
        (no store, no entity id, none stored, or the store failing or late)."""
        if self.cache is None or entity_id is None:
            return None
        try:
            found = await self._lookup(entity_id, deadline, hops)
        except StoreError:
            return None
        if found is None:
            return None
        return self._answer(self.cache.answer(found, reason, self._parameters(hops)))

    async def _fallback(self, features: Any) -> Scored | None:
        """The fallback's scores of a request its deadline keeps from the model (None: no fallback)."""
        fallback = self.serving.fallback
        if fallback is None:
            return None
        if fallback.runner is None:  # a constant row: no model call
            scored = fallback.score(features)
        else:
            scored = await asyncio.to_thread(fallback.score, features)
        self.metrics.reasons["deadline"].inc()
        return replace(scored, degraded="deadline")

    def _constant(self, payload: dict[str, Any], entity_id: str, hops: _Hops) -> Response | None:
        """A constant fallback's answer to a request whose features did not come (None without
        one: a fallback model needs the features too). Its record holds what the body gave: its
        ids, its time, its ``output.include`` fields."""
        fallback = self.serving.fallback
        if fallback is None or fallback.runner is not None:
            return None
        cfg, now_ms = self.cfg.input, int(time.time() * 1000)
        offset = next(self._seq)
        at = payload.get(cfg.time_field)
        record = SourceRecord("online", 0, offset, None, str(payload.get(cfg.id_field, f"online-0-{offset}")),
                              entity_id, at if isinstance(at, int) and not isinstance(at, bool) else now_ms, now_ms,
                              None, tuple(field_value(payload, p) for p in self.cfg.output.include))
        scored = fallback.score(Columns({"row": np.zeros((1, 1), np.float32)}))  # one row: its constant
        self.metrics.reasons["features"].inc()
        return self._scored(record, replace(scored, degraded="features"), hops, now_ms)

    def _scored(self, record: SourceRecord, scored: Scored, hops: _Hops, now_ms: int) -> Response:
        outputs = {k: _value(v[0]) for k, v in scored.scores.arrays.items()}
        fields = prediction_fields(record, outputs, Stamp.of(scored, now_ms), self.cfg.output.include)
        # The topic's record carries both (its schema's defaults when the model scored): so does the answer.
        fields.setdefault("degraded", False)
        fields.setdefault("degraded_reason", None)
        fields["source"] = "scored"
        fields["parameters"] = self._parameters(hops)
        self.metrics.sources["scored"].inc()
        return self._answer(fields)

    def _parameters(self, hops: _Hops) -> dict[str, float]:
        """The hops' milliseconds; the encode hop taken here (from the model call's end)."""
        params = {"features_ms": ms(hops.features), "queue_ms": ms(hops.queue), "model_ms": ms(hops.model),
                  "encode_ms": self.plane.encoded(hops.done_at)}
        if hops.store is not None:
            params["store_ms"] = ms(hops.store)
        return params

    @staticmethod
    def _answer(fields: dict[str, Any]) -> Response:
        return Response(orjson.dumps(fields), media_type="application/json")


def _value(cell: Any) -> Any:
    """A prediction field's value as JSON holds it: a number, a string, a list for a row."""
    if isinstance(cell, np.ndarray):
        return cell.tolist()
    return cell.item() if isinstance(cell, np.generic) else cell
