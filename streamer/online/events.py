"""``POST /v1/score``: one event shaped like the topic's, scored through the stream's contract.

The body is one JSON event. It is checked as a consumed event is (``model.inputs``, the fills,
the conversion table: pipeline/validate.py); an event that cannot be scored is 422 with the
reason naming the field. Its row goes through the data plane (online/plane.py: its deadline,
readiness, admission, the same batches and refusals as the protocol's requests), and the answer
is the prediction record the output topic would carry for it, as JSON: the ids, the mapped
outputs, ``output.include``, the model's name, version and digest, ``degraded`` and
``degraded_reason`` (true and the reason when the fallback scored it).

Worked example: ``{"event_id": "e1", "entity_id": "a", "event_time": 1, "features": [...32...]}``
answers ``{"event_id": "e1", ..., "scores": [0.73], "model_version": "1", "model_digest": "…",
"degraded": false, "degraded_reason": null}``.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from streamer.config import Config
from streamer.errors import BadRequest, Refused, ValidationError
from streamer.online.http import TIMEOUT_HEADER, asked_s, json_error, read_body
from streamer.online.plane import DataPlane
from streamer.pipeline.records import Stamp, prediction_fields
from streamer.pipeline.serving import Serving
from streamer.pipeline.validate import EventValidator


def score_route(cfg: Config, serving: Serving, plane: DataPlane) -> Route:
    """The route of ``POST /v1/score`` for ``serving``'s model under ``cfg``'s contract."""
    contract = serving.runner.contract
    validator = EventValidator(cfg.input, contract, cfg.output.include)
    seq = itertools.count()
    o = cfg.online

    async def score(request: Request) -> Response:
        started = plane.clock()
        try:
            response = await _score(request)
        except Refused as exc:
            response = json_error(exc.status, str(exc), exc.headers)
        plane.ended("score", str(response.status_code), started)
        return response

    async def _score(request: Request) -> Response:
        body, size = await read_body(request.stream(), o.max_body_bytes)
        if body is None:
            raise Refused(413, f"the body is {size} bytes, over the {o.max_body_bytes}-byte limit")
        try:
            deadline = plane.deadline(plane.clock(), asked_s=asked_s(request.headers.get(TIMEOUT_HEADER)))
            payload = orjson.loads(body)
        except BadRequest as exc:
            raise Refused(400, str(exc)) from None
        except orjson.JSONDecodeError as exc:
            raise Refused(400, f"the body is not JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise Refused(400, "the body is not one JSON object (an event)")
        now_ms = int(time.time() * 1000)
        try:
            record = validator.to_record(payload, "online", 0, next(seq), None, now_ms)
        except ValidationError as exc:
            raise Refused(422, str(exc)) from None
        answer = await plane.score(contract.stack([record.features]), deadline, record.event_id)
        outputs = {k: _value(v[0]) for k, v in answer.outputs.items()}
        fields = prediction_fields(record, outputs, Stamp.of(answer.scored, now_ms), cfg.output.include)
        # The topic's record carries both (its schema's defaults when the model scored): so does the answer.
        fields.setdefault("degraded", False)
        fields.setdefault("degraded_reason", None)
        return Response(orjson.dumps(fields), media_type="application/json")

    return Route("/v1/score", score, methods=["POST"])


def _value(cell: Any) -> Any:
    """A prediction field's value as JSON holds it: a number, a string, a list for a row."""
    if isinstance(cell, np.ndarray):
        return cell.tolist()
    return cell.item() if isinstance(cell, np.generic) else cell
