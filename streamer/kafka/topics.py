"""Topics: partitions, creation.

Every listing of a topic's partitions and every topic creation in streamer goes through here. The
functions take a client that the caller built (kafka/clients.py builds them from a config), so
this module depends on no config and builds no client settings, with one exception: the
:func:`create_topics` shortcut for the demo, the benchmarks and the tests, which only know a
bootstrap address.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from streamer.errors import BrokerError


class MetadataClient(Protocol):
    """What a Consumer, a Producer and an AdminClient have in common: a metadata request."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...


class TopicAdmin(MetadataClient, Protocol):
    """What :func:`create` needs of an AdminClient."""

    def create_topics(self, new_topics: list[NewTopic], **kwargs: Any) -> dict[str, Future[Any]]: ...


def partitions(client: MetadataClient, topic: str, timeout_s: float = 30.0) -> list[int]:
    """The partition ids of ``topic``, sorted.

    Example: a topic created with 3 partitions gives ``[0, 1, 2]``.

    Raises:
        BrokerError: the topic does not exist (or the broker lists no partitions for it, with the
            broker's reason).
        KafkaException: the metadata request itself failed (timed out, say); callers that retry
            on transient errors see it as such.
    """
    meta = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is None or (meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
        raise BrokerError(f"topic {topic!r} does not exist")
    if meta.error is not None and not meta.partitions:
        raise BrokerError(f"topic {topic!r} has no partitions listed: {meta.error}")
    return sorted(meta.partitions)


def create(admin: TopicAdmin, topics: Mapping[str, int], *, replication_factor: int = -1,
           timeout_s: float = 30.0, config: Mapping[str, str] | None = None) -> None:
    """Create each ``name -> partitions`` topic that does not exist yet, and wait for its leaders.

    ``replication_factor=-1`` takes the broker's default, and so do partitions of -1. A topic that another client creates
    at the same time is fine (the broker answers TOPIC_ALREADY_EXISTS, checked by error code);
    any other refusal raises :class:`BrokerError` naming the topic.
    """
    try:
        existing = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        raise BrokerError(f"cannot list topics to create {sorted(topics)}: {exc.args[0]}") from exc
    wanted = {name: count for name, count in topics.items() if name not in existing}
    if not wanted:
        return
    futures = admin.create_topics([NewTopic(name, count, replication_factor=replication_factor,
                                            config=dict(config or {}))
                                   for name, count in wanted.items()],
                                  operation_timeout=timeout_s, request_timeout=timeout_s)
    created: dict[str, int] = {}
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue  # a concurrent creator won: its partition count stands
            raise BrokerError(f"cannot create topic {name!r}: {err}") from exc
        except TimeoutError as exc:
            raise BrokerError(f"cannot create topic {name!r}: no answer in {timeout_s:.0f}s") from exc
        created[name] = wanted[name]
    _await_leaders(admin, created, timeout_s)


def ensure_like(admin: TopicAdmin, topic: str, like: str, timeout_s: float = 30.0,
                headroom_bytes: int = 0) -> int | None:
    """Create ``topic`` unless it exists, with as many partitions as ``like`` has (one when
    ``like`` does not exist either), the broker's default replication, and room for messages
    ``headroom_bytes`` larger than the largest ``like`` takes. Returns the largest message
    ``topic`` takes (its ``max.message.bytes``), None when the broker does not say.

    Example: a dead-letter topic for an input with the broker's default limit (1,048,588 bytes)
    and a 64 KiB headroom takes messages of 1,114,124 bytes: a rejected input, whole, plus the
    dead letter's headers.
    """
    try:
        count = len(partitions(admin, like, timeout_s))
    except BrokerError:
        count = 1
    except KafkaException as exc:
        raise BrokerError(f"cannot create topic {topic!r}: {exc.args[0]}") from exc
    like_limit = max_message_bytes(admin, like, timeout_s)
    config = {"max.message.bytes": str(like_limit + headroom_bytes)} if like_limit and headroom_bytes else {}
    create(admin, {topic: count}, timeout_s=timeout_s, config=config)
    return max_message_bytes(admin, topic, timeout_s)


def max_message_bytes(admin: Any, topic: str, timeout_s: float = 30.0) -> int | None:
    """``topic``'s max.message.bytes (its own, or the broker's default); None when unknown."""
    resource = ConfigResource("topic", topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout=timeout_s)
        return int(entries["max.message.bytes"].value)
    except Exception:  # noqa: BLE001 - missing topic, no DESCRIBE_CONFIGS permission, old broker
        return None


def create_topics(bootstrap: str, topics: Mapping[str, int], timeout_s: float = 30.0,
                  replication_factor: int = 1) -> None:
    """Create each ``name -> partitions`` topic (replication 1, or ``replication_factor``; -1:
    the broker's default) unless it exists, on the cluster at ``bootstrap``: the demo's, the
    benchmarks' and the tests' shortcut to :func:`create`."""
    create(AdminClient({"bootstrap.servers": bootstrap}), topics, replication_factor=replication_factor,
           timeout_s=timeout_s)


def _await_leaders(admin: MetadataClient, topics: Mapping[str, int], timeout_s: float) -> None:
    # Creation is acknowledged before every partition has a leader; a producer or an assignment
    # in that gap fails or waits, so the creator waits here instead.
    deadline = time.monotonic() + timeout_s
    while topics:
        meta = admin.list_topics(timeout=timeout_s).topics
        if all(name in meta and (len(meta[name].partitions) == count if count > 0 else meta[name].partitions)
               and all(p.leader >= 0 for p in meta[name].partitions.values())
               for name, count in topics.items()):
            return
        if time.monotonic() > deadline:
            raise BrokerError(f"topics {sorted(topics)} have no leader after {timeout_s:.0f}s")
        time.sleep(0.05)


def names(partitions: Iterable[TopicPartition]) -> str:
    """``topic[partition], ...`` for logs; ``nothing`` for none."""
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing"
