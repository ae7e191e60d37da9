"""A Redis client from the ``kv:`` section: one server, a Redis Cluster, or the master Sentinel names.

Every client has ``kv.timeout_ms`` as its connect and socket timeout, so a stalled server is an
error within it, never a hang. Errors name the store by ``kv.address`` and never carry the
password. The synchronous client writes a run's predictions (stores/sink.py) and loads features;
the asyncio one answers online requests (the online server's event loop); on one server, a
request past its :data:`POOL_CONNECTIONS` connections waits for one (within ``kv.timeout_ms``)
rather than failing at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from streamer.config import KvConfig
from streamer.errors import ConfigError

WARM_AT_ONCE = 8  # connections opened together at start-up
POOL_CONNECTIONS = 100  # an asyncio client's connections to one server (online lookups in flight)


def _nodes(kv: KvConfig) -> list[tuple[str, int]]:
    """``kv.address``'s servers; ConfigError naming it when it is not set."""
    if kv.address is None:
        raise ConfigError("kv.address", "is required: the Redis store's HOST:PORT")
    out = []
    for part in kv.address.split(","):
        host, _, port = part.strip().rpartition(":")
        out.append((host, int(port)))
    return out


def _options(kv: KvConfig, retry: Any) -> dict[str, Any]:
    """The client's options: its timeouts, and no retries of its own (redis-py retries a timeout
    three times with back-off by default, which would stretch ``kv.timeout_ms`` to seconds)."""
    timeout = kv.timeout_ms / 1000
    return {"username": kv.username, "password": None if kv.password is None else kv.password.value,
            "socket_timeout": timeout, "socket_connect_timeout": timeout, "ssl": kv.tls, "retry": retry}


def _spread(kv: KvConfig, lib: Any, nodes: list[tuple[str, int]], options: dict[str, Any]) -> Any:
    """A Redis Cluster's client, or the master a Sentinel names, from ``lib`` (``redis`` or
    ``redis.asyncio``: the same API); None for one server."""
    if kv.kind == "cluster":
        return lib.cluster.RedisCluster(startup_nodes=[lib.cluster.ClusterNode(h, p) for h, p in nodes], **options)
    if kv.kind == "sentinel":
        sentinel = lib.sentinel.Sentinel(nodes, sentinel_kwargs={"socket_timeout": options["socket_timeout"]},
                                         db=kv.db, **options)
        return sentinel.master_for(kv.master)
    return None


def connect(kv: KvConfig) -> Any:
    """A synchronous client (redis.Redis or redis.cluster.RedisCluster) of ``kv``; it connects on its first command."""
    nodes = _nodes(kv)
    import redis  # the kv extra's
    import redis.backoff
    import redis.cluster
    import redis.retry
    import redis.sentinel

    options = _options(kv, redis.retry.Retry(redis.backoff.NoBackoff(), 0))
    spread = _spread(kv, redis, nodes, options)
    if spread is not None:
        return spread
    (host, port), = nodes
    return redis.Redis(host=host, port=port, db=kv.db, **options)


def connect_async(kv: KvConfig) -> Any:
    """An asyncio client of ``kv`` (redis.asyncio), for the online server's event loop."""
    nodes = _nodes(kv)
    import redis.asyncio  # the kv extra's
    import redis.asyncio.cluster
    import redis.asyncio.retry
    import redis.asyncio.sentinel
    import redis.backoff

    options = _options(kv, redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0))
    spread = _spread(kv, redis.asyncio, nodes, options)
    if spread is not None:
        return spread
    (host, port), = nodes
    # A burst of requests waits for a free connection (within kv.timeout_ms) instead of failing
    # at once past the pool's size (redis-py's default pool raises "Too many connections").
    ssl = options.pop("ssl")
    pool = redis.asyncio.BlockingConnectionPool(
        max_connections=POOL_CONNECTIONS, timeout=kv.timeout_ms / 1000, host=host, port=port, db=kv.db,
        connection_class=redis.asyncio.SSLConnection if ssl else redis.asyncio.Connection, **options)
    return redis.asyncio.Redis.from_pool(pool)


async def warm(client: Any, connections: int) -> None:
    """Open ``connections`` of an asyncio client's pool ahead of the first requests (each a PING at
    once): a connection opened under load waits on a busy event loop, and can pass its timeout
    while the server is well. Raises what the client raises (the caller logs it)."""
    for start in range(0, connections, WARM_AT_ONCE):  # a few at a time: each connect within its timeout
        await asyncio.gather(*(client.ping() for _ in range(min(WARM_AT_ONCE, connections - start))))


def describe_error(kv: KvConfig, exc: BaseException) -> str:
    """How a message names a store's failure: its address and the error, the password hidden."""
    text = f"{type(exc).__name__}: {exc}"
    if kv.password is not None:
        text = kv.password.hide_in(text)
    return f"the Redis store at {kv.address}: {text}"
