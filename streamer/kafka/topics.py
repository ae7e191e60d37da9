"""Topics: partitions, creation, and start-up's wait for topics that must exist.

Every listing of a topic's partitions and every topic creation in streamer goes through here. The
functions take a client that the caller built (kafka/clients.py builds them from a config), so
this module depends on no config and builds no client settings, with one exception: the
:func:`create_topics` shortcut for the demo, the benchmarks and the tests, which only know a
bootstrap address.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from streamer.errors import BrokerError, NoSuchTopic

log = logging.getLogger(__name__)


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
        raise NoSuchTopic(f"topic {topic!r} does not exist")
    if meta.error is not None and not meta.partitions:
        raise BrokerError(f"topic {topic!r} has no partitions listed: {meta.error}")
    return sorted(meta.partitions)


def create(admin: TopicAdmin, topics: Mapping[str, int], *, replication_factor: int = -1,
           timeout_s: float = 30.0, config: Mapping[str, str] | None = None) -> None:
    """Create each ``name -> partitions`` topic that does not exist yet, and wait for its leaders.

    ``replication_factor=-1`` takes the broker's default, and so do partitions of -1. A topic that another client creates
    at the same time is fine (the broker answers TOPIC_ALREADY_EXISTS, checked by error code);
    any other refusal raises :class:`BrokerError` naming the topic (:func:`create_each`, stopping
    at the first topic refused).
    """
    for outcome in create_each(admin, topics, replication_factor=replication_factor, config=config,
                               timeout_s=timeout_s):
        if outcome.state == "failed":
            raise BrokerError(f"cannot create topic {outcome.topic!r}: {outcome.reason}")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What :func:`create_each` did with one topic: ``created`` or found it ``exists`` (with its
    partition count), or ``failed`` (with the broker's reason)."""

    topic: str
    state: Literal["created", "exists", "failed"]
    partitions: int = 0
    reason: str = ""


def create_each(admin: TopicAdmin, topics: Mapping[str, int], *, replication_factor: int = -1,
                config: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> list[Outcome]:
    """Create each ``name -> partitions`` topic that does not exist, and say what became of each,
    in order: an existing one (or one a concurrent creator made) is ``exists``, a refusal is
    ``failed`` with the broker's reason and does not stop the others. The created ones have
    leaders when this returns. A cluster that gives no topic listing raises BrokerError."""
    try:
        existing = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        raise BrokerError(f"cannot list topics: {exc.args[0]}") from exc
    wanted = {name: count for name, count in topics.items() if name not in existing}
    futures = admin.create_topics([NewTopic(name, count, replication_factor=replication_factor,
                                            config=dict(config or {})) for name, count in wanted.items()],
                                  operation_timeout=timeout_s, request_timeout=timeout_s) if wanted else {}
    failed: dict[str, str] = {}
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                existing = {**existing, name: None}  # a concurrent creator won: it exists
            else:
                failed[name] = err.str() if isinstance(err, KafkaError) else str(err)
        except TimeoutError:
            failed[name] = f"no answer in {timeout_s:.0f} s"
    _await_leaders(admin, {n: c for n, c in wanted.items() if n not in failed and n not in existing}, timeout_s)
    listed = admin.list_topics(timeout=timeout_s).topics
    return [Outcome(name, "failed", reason=failed[name]) if name in failed else
            Outcome(name, "exists" if name in existing else "created",
                    len(listed[name].partitions) if name in listed else 0)  # 0: a racer's, not listed yet
            for name in topics]


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


class TopicWait:
    """Start-up's wait for topics that must exist before anything is read and that streamer may
    not create: ``needed`` is ``(config key, topic)`` pairs (``output.topic``, and each of
    ``input.topics`` without ``input.create_topics``).

    While one is missing, :attr:`reason` names it, its key and the cluster (/healthz reports it),
    one warning is logged per change of what is missing, and the topics are listed again after
    a back-off that doubles from ``first_s`` to ``max_s``. Example (0.5 s to 5 s): checks at 0,
    0.5, 1.5, 3.5, 7.5, 12.5, 17.5 s and every 5 s after, until the topic exists. ``connect`` makes
    the client the wait lists topics with; it lives as long as one wait (a processor built and
    never run, or done, holds no client).
    """

    def __init__(self, connect: Callable[[], MetadataClient], needed: Iterable[tuple[str, str]], cluster: str, *,
                 timeout_s: float = 10.0, first_s: float = 0.5, max_s: float = 5.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._connect, self._needed, self._cluster = connect, list(needed), cluster
        self._timeout_s, self._first_s, self._max_s, self._sleep = timeout_s, first_s, max_s, sleep
        self.reason = ""  # empty: nothing missing (or not checked yet)
        self._last = self._needed

    def wait(self, stopping: Callable[[], bool]) -> bool:
        """Return True once every needed topic exists; False when ``stopping()`` turns true first."""
        client = self._connect()
        delay, warned = self._first_s, None
        while not stopping():
            missing = self.missing(client)
            if not missing:
                if warned:
                    log.info("%s exist%s: starting", ", ".join(repr(t) for _, t in warned),
                             "s" if len(warned) == 1 else "")
                self.reason = ""
                return True
            self.reason = "; ".join(f"topic {t!r} ({key}) does not exist on {self._cluster}"
                                    for key, t in missing) + ": waiting for it to be created"
            if missing != warned:
                log.warning("%s (`streamer topics create` creates it)", self.reason)
                warned = missing
            for _ in range(max(1, round(delay / 0.1))):  # in steps a stop signal can cut short
                if stopping():
                    return False
                self._sleep(0.1)
            delay = min(delay * 2, self._max_s)
        return False

    def missing(self, client: MetadataClient) -> list[tuple[str, str]]:
        """The needed ``(key, topic)`` pairs the cluster does not list (while it does not answer:
        those of its last answer, all at first; a cluster that went away is waited for too)."""
        try:
            topics = client.list_topics(timeout=self._timeout_s).topics
        except KafkaException as exc:
            log.info("listing topics on %s: %s (trying again)", self._cluster, exc.args[0])
            return self._last
        self._last = [(key, t) for key, t in self._needed if t not in topics or topics[t].error is not None]
        return self._last
