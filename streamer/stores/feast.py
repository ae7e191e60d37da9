"""Features from Feast's feature server (kind ``feast``): ``POST <url>/get-online-features`` for one entity.

Feast's feature server runs as its own process (``feast serve``), as it does in production; this
source asks it over HTTP (aiohttp, one session with its connection pool) for the configured
feature references, or a feature service, of the entity whose join key
(``online.features.entity_key``) is the request's entity id. Its answer is a column per feature:

    {"metadata": {"feature_names": ["entity_id", "amount", "country"]},
     "results": [{"values": ["u1"], "statuses": ["PRESENT"]},
                 {"values": [12.5], "statuses": ["PRESENT"]},
                 {"values": ["FR"], "statuses": ["OUTSIDE_MAX_AGE"]}]}

which is read as ``{"amount": 12.5}``: the join key is the request's own, a feature of any status
but ``PRESENT`` (``NOT_FOUND``, ``NULL_VALUE``, ``OUTSIDE_MAX_AGE``) is absent, and so is a null
value (Feast's Redis store answers an entity it never materialized as ``PRESENT`` nulls). What is
absent is the caller's to default or refuse, never guessed here. Each feature is the event field
named like it (the part of ``view:feature`` after the colon).

The caller's ``online.features.timeout_ms`` bounds a fetch; the session's own timeout (ten times
that, at least a second) is a backstop, so that a caller without one still never hangs.
"""

from __future__ import annotations

from typing import Any

import orjson

from streamer.config import FeaturesConfig
from streamer.errors import StoreError
from streamer.formats.confluent import redact

PATH = "/get-online-features"
JSON = {"Content-Type": "application/json"}


class FeastFeatures:
    """An entity's features from a Feast feature server at ``features.url``."""

    name = "feast"

    def __init__(self, features: FeaturesConfig) -> None:
        assert features.url is not None  # FeaturesConfig requires it for kind feast
        self.url = features.url.rstrip("/") + PATH
        self.shown = redact(self.url)  # how messages name it: without a user:password@ of the URL
        self.entity_key = features.entity_key
        self._what: dict[str, Any] = ({"feature_service": features.feature_service} if features.feature_service
                                      else {"features": list(features.features)})
        self._backstop_s = max(features.timeout_ms * 10 / 1000, 1.0)
        self._session: Any = None  # made in the event loop that fetches (aiohttp binds its session to one)

    def _client(self) -> Any:
        if self._session is None:
            import aiohttp  # the kv extra's

            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._backstop_s),
                                                  raise_for_status=False)
        return self._session

    async def fetch(self, entity_id: str) -> dict[str, Any]:
        body = orjson.dumps({**self._what, "entities": {self.entity_key: [entity_id]}})
        try:
            async with self._client().post(self.url, data=body, headers=JSON) as answer:
                body_bytes = await answer.read()
                if answer.status != 200:
                    raise StoreError(f"the Feast feature server at {self.shown}: HTTP {answer.status}: "
                                     f"{_short(body_bytes.decode(errors='replace'))}")
            decoded = orjson.loads(body_bytes)
        except StoreError:
            raise
        except TimeoutError:  # aiohttp's own timeout (the backstop), not the caller's
            raise StoreError(f"the Feast feature server at {self.shown}: no answer within "
                             f"{self._backstop_s:g} s") from None
        except Exception as exc:  # aiohttp's connection errors, a body that is not JSON (orjson's)
            raise StoreError(redact(f"the Feast feature server at {self.shown}: {type(exc).__name__}: {exc}")) from None
        return read_answer(decoded, self.entity_key, self.shown)

    async def warm(self, connections: int) -> None:
        """Nothing ahead: the feature server's connections are kept alive by the session once made."""

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def read_answer(answer: Any, entity_key: str, url: str = "the Feast feature server") -> dict[str, Any]:
    """A ``get-online-features`` answer for one entity as event fields: each feature whose status is
    ``PRESENT`` and whose value is not null (the join key left out)."""
    try:
        names = answer["metadata"]["feature_names"]
        results = answer["results"]
        if len(names) != len(results):
            raise ValueError(f"{len(names)} feature names for {len(results)} results")
        out: dict[str, Any] = {}
        for name, result in zip(names, results, strict=True):
            if name == entity_key:
                continue
            value, status = result["values"][0], result["statuses"][0]
            if status == "PRESENT" and value is not None:
                out[name] = value
        return out
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise StoreError(f"the Feast feature server at {url}: an answer not of get-online-features' shape "
                         f"({type(exc).__name__}: {exc}): {_short(str(answer))}") from None


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
