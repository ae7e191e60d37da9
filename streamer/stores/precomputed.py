"""Reading a precomputed prediction: the current complete run's hash of an entity, with its run and age.

:class:`PredictionStore` resolves ``P:current`` (stores/keys.py) at most once per ``refresh_s``
and reads ``P:run:<run>:<entity>``: one round trip per lookup in the steady state. A run's
fields are decoded by the kinds its record holds (stores/values.py), read once per run. A lookup
that fails or passes ``kv.timeout_ms`` raises :class:`StoreError`; an entity the run did not
score, or a store with no complete run yet, is ``None``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from streamer.config import KvConfig
from streamer.errors import StoreError
from streamer.stores.client import connect_async, describe_error, warm
from streamer.stores.keys import KeySpace
from streamer.stores.values import Kind, decode_hash, text

KINDS = "kinds"  # the run record's field of its prediction fields' kinds (JSON: name -> 'str' | 'json')


@dataclass(frozen=True, slots=True)
class Precomputed:
    """One entity's precomputed prediction: its record's fields, the run that wrote it, when it was scored."""

    entity_id: str
    fields: dict[str, Any]
    run_id: str
    scored_at_ms: int

    def age_s(self, now_ms: int) -> float:
        return max(now_ms - self.scored_at_ms, 0) / 1000


class PredictionStore:
    """The precomputed predictions under ``kv.prefix``, read from the online server's event loop."""

    def __init__(self, kv: KvConfig, client: Any = None, refresh_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kv, self.keys = kv, KeySpace(kv.prefix)
        self._client = client if client is not None else connect_async(kv)
        self._refresh_s, self._clock = refresh_s, clock
        self._current: tuple[str | None, float] = (None, float("-inf"))  # (run id, when it was read)
        self._kinds: dict[str, dict[str, Kind]] = {}

    async def current_run(self) -> str | None:
        """The complete run readers use, read again once ``refresh_s`` has passed."""
        run, at = self._current
        now = self._clock()
        if now - at >= self._refresh_s:
            raw = await self._call(self._client.get(self.keys.current))
            run = None if raw is None else text(raw)
            self._current = (run, now)
        return run

    async def get(self, entity_id: str) -> Precomputed | None:
        run = await self.current_run()
        if run is None:
            return None
        raw = await self._call(self._client.hgetall(self.keys.entity(run, entity_id)))
        if not raw:
            return None
        kinds = await self._kinds_of(run)
        decoded = decode_hash(raw, kinds)
        # in the record's order (the kinds'), not the hash's: an answer reads as the topic's record does
        fields = {**{k: decoded[k] for k in kinds if k in decoded}, **decoded}
        return Precomputed(entity_id, fields, run, int(fields.get("scored_at") or 0))

    async def warm(self, connections: int) -> None:
        """Open the client's connections before the first lookups (stores/client.py's warm)."""
        await self._call(warm(self._client, connections))

    async def close(self) -> None:
        await self._client.aclose()

    async def _kinds_of(self, run: str) -> dict[str, Kind]:
        kinds = self._kinds.get(run)
        if kinds is None:
            raw = await self._call(self._client.hget(self.keys.run(run), KINDS))
            kinds = self._kinds[run] = {} if raw is None else orjson.loads(raw)
        return kinds

    async def _call(self, pending: Any) -> Any:
        try:
            return await pending
        except Exception as exc:  # redis' errors (timeouts, connection, auth) and the OS's
            raise StoreError(describe_error(self.kv, exc)) from None
