"""The tests' Redis store: Debian's redis-server (installed by `make test`) with a password, one per session.

Tests keep apart by key prefix (:func:`kv_config`), as Kafka tests keep apart by topic.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from streamer.config import KvConfig, Secret
from streamer.dev.redis import LocalRedis


def kv_config(server: LocalRedis, **overrides: Any) -> KvConfig:
    """A ``kv:`` section for ``server`` under a fresh prefix (``overrides``: other keys)."""
    base = KvConfig(address=server.address, password=Secret(server.password), prefix=f"t{uuid.uuid4().hex[:8]}")
    return replace(base, **overrides)


def client(server: LocalRedis) -> Any:
    """A plain synchronous client of ``server`` (decode off: values are bytes), with a timeout."""
    import redis

    return redis.Redis(host="127.0.0.1", port=server.port, password=server.password, socket_timeout=5,
                       socket_connect_timeout=5)
