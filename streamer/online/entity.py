"""Entity-only requests: the event fields a ``/v1/score`` body lacks, fetched by its entity id.

With ``online.features.kind`` set, a body may carry only its entity id (``input.entity_field``)
and the fields it overrides. When it lacks a field the contract reads (``model.inputs``, or the
feature array ``input.features_field``), the source's fields for the entity are fetched under
``online.features.timeout_ms`` (and the request's remaining deadline) and merged under the body's
own (the body wins, field by field at the top level); a field still missing takes its
``online.features.defaults`` value. A field the model needs (no ``fill``) that is still missing
is a 422 naming it, and so is an entity the source holds nothing for. A fetch that fails or
passes its timeout is a :class:`StoreError`: the caller degrades (online/events.py); after one,
fetches are skipped for ``online.features.skip_ms`` (online/guard.py), so a stalled store costs
the requests that come meanwhile nothing. The merged event then goes through the same validator
as any event.

Worked example: the source holds ``{"amount": 12.5, "country": "FR"}`` for ``u1``; the body
``{"entity_id": "u1", "amount": 99.0}`` is scored as ``{"entity_id": "u1", "amount": 99.0,
"country": "FR"}``; with nothing held for ``u2`` and no defaults, ``{"entity_id": "u2"}`` is 422.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from streamer.config import FeaturesConfig
from streamer.errors import Refused, StoreError
from streamer.model.contract import Contract, field_value
from streamer.online.guard import Guard
from streamer.stores.features import FeatureSource


class EntityFeatures:
    """Completes entity-only events from ``source`` for ``contract``'s fields."""

    def __init__(self, source: FeatureSource, cfg: FeaturesConfig, contract: Contract,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source, self.clock = source, clock
        fields = contract.fields()
        self.paths = tuple(dict.fromkeys(path for _, _, path in fields))
        self.required = {path for plan, _, path in fields if plan.fill is None}
        self.timeout_s = cfg.timeout_ms / 1000
        self.guard = Guard(f"the {source.name} feature store", cfg.skip_ms, cfg.max_in_flight, clock)
        self.defaults = dict(cfg.defaults or {})

    def missing(self, payload: dict[str, Any]) -> list[str]:
        """The contract's fields ``payload`` does not hold."""
        return [p for p in self.paths if field_value(payload, p) is None]

    async def complete(self, payload: dict[str, Any], entity_id: str, deadline: float) -> dict[str, Any]:
        """``payload`` with the fields it lacks fetched for ``entity_id`` and defaulted; Refused
        422 naming a field still missing; StoreError when the fetch fails or passes
        ``online.features.timeout_ms`` or ``deadline`` (the clock's time)."""
        budget = min(self.timeout_s, deadline - self.clock())
        name = self.source.name
        if budget <= 0:
            raise StoreError(f"no time is left before the request's deadline to fetch its features from {name}")
        fetched = await self.guard.within(lambda: self.source.fetch(entity_id), budget, self.timeout_s,
                                          "online.features.timeout_ms")
        merged = {**fetched, **payload}
        for path in self.missing(merged):
            if self.defaults.get(path) is not None:
                _put(merged, path, self.defaults[path])
        unmet = [p for p in self.missing(merged) if p in self.required]
        if unmet:
            if not fetched:
                raise Refused(422, f"entity {entity_id!r} has no features in the {name} feature store and "
                                   f"online.features.defaults has no value for {unmet[0]!r}")
            raise Refused(422, f"feature {unmet[0]!r} of entity {entity_id!r} is missing from the {name} feature "
                               "store and online.features.defaults has no value for it")
        return merged


def _put(payload: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path's value, making the records above it where they are missing."""
    *parents, last = path.split(".")
    node = payload
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value
