"""Fetching an entity's features for an online request: the :class:`FeatureSource` protocol, its
kind ``redis`` (a hash per entity that ``streamer features load`` writes), and :func:`feature_source`,
which builds the configured kind (``feast``: stores/feast.py) after checking that it can work.

A source answers the event fields it holds for an entity (a missing feature is absent, never
guessed); what it does not hold is the caller's to default or refuse. A fetch that fails raises
:class:`StoreError`; its timeout (``online.features.timeout_ms``) is the caller's, around the
whole fetch, so that one budget covers connecting, asking and reading.
"""

from __future__ import annotations

import time
from typing import Any, Protocol, cast

from streamer.config import Config, FeaturesConfig, KvConfig
from streamer.errors import ConfigError, StoreError
from streamer.extras import need
from streamer.stores.client import connect_async, describe_error, warm
from streamer.stores.feast import FeastFeatures
from streamer.stores.keys import feature_key
from streamer.stores.values import Kind, decode_hash, text

KINDS_S = 1.0  # the kinds of a features prefix are read again at most this often


class FeatureSource(Protocol):
    """Where an online request's features come from, by its entity id."""

    name: str  # how messages and metrics name it: 'feast', 'redis'

    async def fetch(self, entity_id: str) -> dict[str, Any]:
        """The event fields held for ``entity_id`` (none: an empty mapping)."""
        ...

    async def warm(self, connections: int) -> None:
        """Open its connections before the first fetches (a failure goes up: the caller logs it)."""
        ...

    async def close(self) -> None: ...


def check_features(cfg: Config) -> None:
    """Refuse, naming the key, an ``online.features`` that cannot work: the kv extra not installed
    (MissingExtra), the redis kind without a ``kv:`` store to read. Start-up calls it before serving."""
    features = cfg.online.features
    if features.kind == "none":
        return
    need("kv", f"online.features.kind {features.kind}")
    if features.kind == "redis" and cfg.kv.address is None:
        raise ConfigError("kv.address", "is required by online.features.kind redis: the Redis store whose "
                                        f"hashes {features.prefix}:<entity id> hold the features")


def feature_source(cfg: Config) -> FeatureSource | None:
    """The configured source of features (checked by :func:`check_features`); None for kind none."""
    check_features(cfg)
    features = cfg.online.features
    if features.kind == "redis":
        return RedisFeatures(features, cfg.kv)
    if features.kind == "feast":
        return FeastFeatures(features)
    return None


class RedisFeatures:
    """Features in the kv: store: ``<prefix>:<entity id>`` a hash of event fields, their kinds
    in the hash ``<prefix>`` itself, field -> ``str`` or ``json`` (written by ``streamer features load``);
    the kinds are read once, and again (at most once a :data:`KINDS_S`) when an entity holds a
    field they do not name: a load of new columns while the server runs."""

    name = "redis"

    def __init__(self, features: FeaturesConfig, kv: KvConfig, client: Any = None) -> None:
        self.prefix, self.kv = features.prefix, kv
        self._client = client if client is not None else connect_async(kv)
        self._kinds: dict[str, Kind] | None = None
        self._kinds_at = float("-inf")

    async def fetch(self, entity_id: str) -> dict[str, Any]:
        try:
            if self._kinds is None:
                await self._read_kinds()
            fields = await self._client.hgetall(feature_key(self.prefix, entity_id))
            known = self._kinds or {}
            if any(text(k) not in known for k in fields) and time.monotonic() - self._kinds_at >= KINDS_S:
                await self._read_kinds()  # a load since: its new fields' kinds
        except Exception as exc:  # redis' errors (timeouts, connection, auth) and the OS's
            raise StoreError(describe_error(self.kv, exc)) from None
        assert self._kinds is not None
        return decode_hash(fields, self._kinds)

    async def _read_kinds(self) -> None:
        raw = await self._client.hgetall(self.prefix)
        self._kinds, self._kinds_at = {text(k): cast(Kind, text(v)) for k, v in raw.items()}, time.monotonic()

    async def warm(self, connections: int) -> None:
        try:
            await warm(self._client, connections)
        except Exception as exc:  # redis' errors (timeouts, connection, auth) and the OS's
            raise StoreError(describe_error(self.kv, exc)) from None

    async def close(self) -> None:
        await self._client.aclose()

