"""Building librdkafka clients from the typed config, with streamer's safety settings forced.

This is the only place raw librdkafka dicts are made. A user's ``kafka:`` mapping is passed
through verbatim, except for the settings that our delivery guarantee depends on: setting one of
those to another value is a config error, not a silent override.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from streamer.config import (
    Config,
    HasKafka,
    Secret,
    Sections,
    dead_letter_topic,
    librdkafka_config,
    prediction_topic,
    route_models,
)
from streamer.errors import BrokerError, ConfigError, StopRequested
from streamer.kafka.delivery import QUEUE_LIMIT
from streamer.kafka.retrylog import LibrdkafkaLog, retry_level
from streamer.kafka.topics import TopicWait, create, ensure_like, partitions

log = logging.getLogger(__name__)

_LIBRDKAFKA_LOG = LibrdkafkaLog(logging.getLogger("librdkafka"))
STARTUP_WAIT_S = 120.0  # how long start-up waits for a cluster that does not answer, then exits 3
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's default message.max.bytes
# A dead letter is the rejected input, whole, plus headers (the trace alone up to 2,000 chars).
DEAD_LETTER_HEADROOM = 64 * 1024

# Offsets are stored and committed by the processor after acks (see offsets.py), never by
# librdkafka when it hands a message over: auto store would lose in-flight messages on a crash.
CONSUMER_FORCED = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
}
CONSUMER_DEFAULTS = {
    "partition.assignment.strategy": "cooperative-sticky",
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": "50",
}
PRODUCER_FORCED = {
    "enable.idempotence": "true",
    "acks": "all",
}
# linger.ms: a batch's predictions are produced together, so librdkafka batches them without
# lingering; the linger only delays the tail of each batch, inside the latency bound's 5 ms.
PRODUCER_DEFAULTS = {
    "linger.ms": "2",
    "compression.type": "lz4",
}


# The one `kafka:` mapping serves both clients; librdkafka warns about (and ignores) the other
# client's properties, so the common ones of each kind are left out where they do not apply.
CONSUMER_ONLY = ("group.", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
                 "auto.offset.reset", "enable.auto.", "auto.commit.", "fetch.", "isolation.level",
                 "partition.assignment.strategy", "queued.", "max.partition.fetch.bytes",
                 "check.crcs", "enable.partition.eof")
PRODUCER_ONLY = ("linger.ms", "queue.buffering.", "batch.", "acks", "request.required.acks",
                 "compression.", "enable.idempotence", "transactional.id", "transaction.timeout.ms",
                 "message.timeout.ms", "delivery.timeout.ms", "retries", "retry.backoff.ms",
                 "max.in.flight", "partitioner", "sticky.partitioning.linger.ms")


def consumer_config(cfg: Sections, **extra: Any) -> dict[str, Any]:
    return _merge(cfg, CONSUMER_DEFAULTS, CONSUMER_FORCED,
                  {"group.id": cfg.input.group_id, **extra}, leave_out=PRODUCER_ONLY)


def producer_config(cfg: Sections, **extra: Any) -> dict[str, Any]:
    return _merge(cfg, PRODUCER_DEFAULTS, PRODUCER_FORCED, extra, leave_out=CONSUMER_ONLY)


def check_properties(cfg: Sections) -> None:
    """Have librdkafka itself check every ``kafka:`` property, for both clients, without
    connecting: an unknown key or a bad value is a ConfigError naming ``kafka.<key>``.

    Secret values never reach the message: librdkafka quotes some values it refuses.
    """
    user = librdkafka_config(cfg)
    secrets = [str(v.value) for v in cfg.kafka.values() if isinstance(v, Secret) and v.value]

    def refused(*confs: tuple[type, dict[str, Any]]) -> str | None:
        for make, conf in confs:
            try:  # without bootstrap.servers: nothing connects
                client = make({k: v for k, v in conf.items() if k != "bootstrap.servers"})
            except KafkaException as exc:
                return str(exc.args[0].str())
            if make is Consumer:
                client.close()
        return None

    why = refused((Consumer, consumer_config(cfg)), (Producer, producer_config(cfg)))
    if why is None:
        return
    for key in sorted(user):  # which key: try each alone (librdkafka may name an alias of it)
        alone = {"group.id": "check", "logger": _LIBRDKAFKA_LOG, key: user[key]}
        if key != "bootstrap.servers" and refused((Consumer, alone), (Producer, alone)) is not None:
            shown = "its value is not valid" if any(x in why for x in secrets) else why
            raise ConfigError(f"kafka.{key}", f"librdkafka refuses it: {shown}")
    for secret in secrets:
        why = why.replace(secret, "***")
    raise ConfigError("kafka", f"librdkafka refuses these settings together: {why}")


def make_consumer(cfg: Config, **extra: Any) -> Consumer:
    return Consumer(consumer_config(cfg, **extra))


def make_producer(cfg: Config, largest_message: int | None = None, **extra: Any) -> Producer:
    """A producer; with ``largest_message``, its ``message.max.bytes`` is raised to take a message
    that large (a dead letter of a whole rejected input), unless the config allows more already."""
    if largest_message is not None:
        given = int(str(librdkafka_config(cfg).get("message.max.bytes", LIBRDKAFKA_MESSAGE_MAX_BYTES)))
        extra["message.max.bytes"] = max(given, largest_message)
    return Producer(producer_config(cfg, **extra))


def queue_limit(cfg: Config) -> int:
    """The producer's local queue, in messages (``queue.buffering.max.messages``)."""
    return int(str(librdkafka_config(cfg).get("queue.buffering.max.messages", QUEUE_LIMIT)))


def make_admin(cfg: Sections) -> AdminClient:
    settings: dict[str, Any] = {"logger": _LIBRDKAFKA_LOG, **librdkafka_config(cfg)}
    return AdminClient(settings)


def ensure_topic(cfg: Config, topic: str, like: str, timeout_s: float = 30.0,
                 headroom_bytes: int = 0, wait_s: float = STARTUP_WAIT_S) -> int | None:
    """Create ``topic`` with as many partitions as ``like`` (broker's replication) unless it
    exists, with room for ``headroom_bytes`` more than ``like``; returns the largest message it
    takes. A broker that does not answer yet is waited for, up to ``wait_s`` in all."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return ensure_like(make_admin(cfg), topic, like, timeout_s, headroom_bytes)
        except BrokerError as exc:
            cause = exc.__cause__
            if not isinstance(cause, KafkaException) or not is_transient(cause.args[0]) \
                    or time.monotonic() + timeout_s > deadline:
                raise
            log.log(retry_level(cause.args[0]), "the cluster does not answer yet (%s): trying again, "
                    "for up to %.0f s in all", exc, wait_s)
            time.sleep(1.0)


def check_topics(cfg: Config, timeout_s: float = 10.0, wait_s: float = STARTUP_WAIT_S,
                 stopping: Callable[[], bool] = lambda: False) -> None:
    """The cluster answers, and what start-up creates or needs at once is there: with
    ``input.create_topics`` a missing input topic is created (the broker's default partitions and
    replication; without it, the processor waits for it: :func:`topic_wait`). A missing
    dead-letter topic that streamer may not create is a ConfigError
    (``processing.create_dead_letter_topic: false``): named by ``processing.dead_letter_topic``
    rather than found at the first bad row, which would block the partitions. A
    cluster that does not answer yet is waited for, up to ``wait_s``, each wait logged with the
    address and the time waited; then a BrokerError names the address and the key. ``stopping``
    (a SIGTERM came) ends the wait with :class:`StopRequested`."""
    bootstrap = str(librdkafka_config(cfg)["bootstrap.servers"])
    admin = make_admin(cfg)  # one client: it keeps trying to connect between the asks
    started = time.monotonic()
    while True:
        try:
            topics = admin.list_topics(timeout=timeout_s).topics
            break
        except KafkaException as exc:
            waited = time.monotonic() - started
            if not is_transient(exc.args[0]) or waited + timeout_s > wait_s:
                raise BrokerError(f"the cluster at {bootstrap} (kafka.bootstrap.servers) gave no metadata in "
                                  f"{waited:.0f} s: {exc.args[0].str()}; check the address and the "
                                  f"security settings (kafka.security.protocol, kafka.sasl.*)") from exc
            log.log(retry_level(exc.args[0]), "waiting for the cluster at %s (kafka.bootstrap.servers): no "
                    "answer for %.0f s (giving up after %.0f s): %s", bootstrap, waited, wait_s, exc.args[0].str())
            for _ in range(10):  # a second, in steps a signal can cut short
                if stopping():
                    raise StopRequested(f"stopped while waiting for the cluster at {bootstrap}")
                time.sleep(0.1)
    missing = {n: t for n, t in enumerate(cfg.input.topics) if t not in topics or topics[t].error is not None}
    if missing and cfg.input.create_topics:
        create(admin, {t: -1 for t in missing.values()}, timeout_s=timeout_s)
        log.info("created the input topics %s (input.create_topics)", sorted(missing.values()))
    dlq = dead_letter_topic(cfg)
    if not cfg.processing.create_dead_letter_topic and (dlq not in topics or topics[dlq].error is not None):
        raise ConfigError("processing.dead_letter_topic",
                          f"topic {dlq!r} does not exist on {bootstrap} and processing.create_dead_letter_topic "
                          f"is false: create it, or let streamer create it")


# Clients for tools and tests that know a bootstrap address or a bare librdkafka mapping rather
# than a Config: the lag exporter, the demo's feeder, the tests' audit.

def admin_consumer(bootstrap_or_conf: str | Mapping[str, Any], group: str, *,
                   read_committed: bool | None = None, **extra: Any) -> Consumer:
    """A consumer that names ``group`` but never joins it and never commits: it reads the group's
    committed offsets, watermarks, or partitions it assigns itself, whatever the members do.

    ``bootstrap_or_conf`` is a bootstrap address or a librdkafka mapping (its ``group.*`` and
    auto-commit settings are left out). ``read_committed`` sets ``isolation.level`` (None: the
    mapping's, else librdkafka's default, read_committed).
    """
    isolation = {} if read_committed is None else {
        "isolation.level": "read_committed" if read_committed else "read_uncommitted"}
    return Consumer({**_tool_settings(bootstrap_or_conf), "group.id": group,
                     "enable.auto.commit": False, **isolation, **extra})


def plain_admin(bootstrap_or_conf: str | Mapping[str, Any]) -> AdminClient:
    """An admin client on a bootstrap address or a librdkafka mapping (as for admin_consumer)."""
    return AdminClient(_tool_settings(bootstrap_or_conf))


def plain_producer(bootstrap: str, *, linger_ms: int = 5, **extra: Any) -> Producer:
    """An idempotent, lz4-compressing producer on a bootstrap address, its log through Python
    logging; ``extra`` are more librdkafka settings, passed as they are."""
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                     "compression.type": "lz4", "linger.ms": linger_ms, "logger": _LIBRDKAFKA_LOG,
                     **extra})


def config_consumer(cfg: HasKafka, group: str, **extra: Any) -> Consumer:
    """A consumer of the config's cluster in ``group`` (not the input's: the jobs' workers, a
    status board), with the processor's forced settings; ``extra`` last."""
    user = {k: v for k, v in librdkafka_config(cfg).items() if not k.startswith(PRODUCER_ONLY + ("group.id",))}
    return Consumer({**CONSUMER_DEFAULTS, "logger": _LIBRDKAFKA_LOG, **user, **CONSUMER_FORCED, "group.id": group,
                     **extra})


def config_producer(cfg: HasKafka, **extra: Any) -> Producer:
    """A producer of the config's cluster (idempotent, acks=all), for records that are not
    predictions (a job, a job's status); ``extra`` last."""
    user = {k: v for k, v in librdkafka_config(cfg).items() if not k.startswith(CONSUMER_ONLY)}
    return Producer({**PRODUCER_DEFAULTS, "logger": _LIBRDKAFKA_LOG, **user, **PRODUCER_FORCED, **extra})


def config_admin(cfg: HasKafka) -> AdminClient:
    """An admin client of the config's cluster."""
    settings: dict[str, Any] = {"logger": _LIBRDKAFKA_LOG, **librdkafka_config(cfg)}
    return AdminClient(settings)


def _tool_settings(bootstrap_or_conf: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(bootstrap_or_conf, str):
        return {"bootstrap.servers": bootstrap_or_conf}
    # A processor's mapping may name its group and commit settings: a tool must not use them.
    return {k: v for k, v in bootstrap_or_conf.items() if not k.startswith(("group.", "enable.auto"))}


def _merge(cfg: Sections, defaults: dict[str, str], forced: dict[str, str],
           extra: dict[str, Any], leave_out: tuple[str, ...]) -> dict[str, Any]:
    user = {k: v for k, v in librdkafka_config(cfg).items() if not k.startswith(leave_out)}
    for key, value in forced.items():
        given = user.get(key)
        if given is not None and str(given).lower() != value:
            raise ConfigError(f"kafka.{key}", f"must be {value} (streamer commits offsets only "
                                              f"after acknowledged output), got {given!r}")
    # librdkafka's own log lines go through Python logging, not straight to stderr.
    return {**defaults, "logger": _LIBRDKAFKA_LOG, **user, **forced, **extra}


# Answers that mean "ask again shortly": a group coordinator moving or still loading, a
# rebalance under way, a request that timed out or lost its connection (a broker restarting).
TRANSIENT_ERRORS = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                              KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT,
                              KafkaError._TRANSPORT, KafkaError.REBALANCE_IN_PROGRESS})
T = TypeVar("T")


def is_transient(err: KafkaError) -> bool:
    """Would the same request likely succeed when asked again shortly?"""
    return bool(err.retriable()) or err.code() in TRANSIENT_ERRORS



def retrying(call: Callable[[], T], what: str, timeout_s: float = 60.0) -> T:
    """Call until it stops failing transiently (coordinator not ready yet), up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            err = exc.args[0]
            if not is_transient(err) or time.monotonic() > deadline:
                raise BrokerError(f"{what}: {err}") from exc
            time.sleep(0.2)


def read_to_end(consumer: Consumer, topic: str, from_committed: bool,
                timeout_s: float = 30.0, starts: Mapping[int, int] | None = None) -> Iterator[Message]:
    """Messages of ``topic`` from the consumer group's committed offsets (or ``starts``, partition
    to offset, or the start) to the end offsets captured now, so that a topic still being written
    to still ends.

    Raises BrokerError when no message comes for ``timeout_s`` before the end (an open
    transaction holding a read_committed reader back, say).
    """
    tps = [TopicPartition(topic, p) for p in partitions(consumer, topic, timeout_s)]
    first: dict[int, int] = {tp.partition: (starts or {}).get(tp.partition, 0) for tp in tps}
    if from_committed:
        for tp in consumer.committed(tps, timeout=timeout_s):
            if tp.offset >= 0:
                first[tp.partition] = tp.offset
    ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=timeout_s)[1] for tp in tps}
    todo = {p for p in ends if ends[p] > first[p]}
    if not todo:
        return
    consumer.assign([TopicPartition(topic, p, first[p]) for p in sorted(todo)])
    deadline = time.monotonic() + timeout_s
    while todo:
        # consume(n, t) waits for n messages or t seconds: short waits, and a deadline overall
        batch: list[Any] = consumer.consume(500, 0.2)
        if batch:
            deadline = time.monotonic() + timeout_s
        elif time.monotonic() > deadline:
            raise BrokerError(f"reading {topic}: no message for {timeout_s:.0f}s before its end offsets")
        for m in batch:
            if not m.error() and m.partition() in todo and m.offset() < ends[m.partition()]:
                yield m
        # The position, not the last message: a topic written in transactions ends in commit
        # markers, which take an offset and are never delivered.
        for tp in consumer.position([TopicPartition(topic, p) for p in todo]):
            if tp.offset >= ends[tp.partition]:
                todo.discard(tp.partition)


@dataclass(frozen=True)
class KafkaClients:
    """Where a processor gets its Kafka clients: built from the config, or fakes in unit tests.

    ``consumer(**extra)`` and ``producer(**extra)`` take extra librdkafka settings (callbacks,
    transactional settings; ``largest_message`` for the producer); ``ensure_topic(topic, like)``
    creates a dead-letter topic shaped like its input, with room for a whole rejected input
    plus the dead letter's headers, and returns the largest message it takes (None: unknown).
    """

    consumer: Callable[..., Any]
    producer: Callable[..., Any]
    ensure_topic: Callable[[str, str], int | None]

    @classmethod
    def from_config(cls, cfg: Config) -> KafkaClients:
        # Module-level names are looked up at call time, so tests/support/crash_at.py can wrap them.
        return cls(consumer=lambda **extra: make_consumer(cfg, **extra),
                   producer=lambda **extra: make_producer(cfg, **extra),
                   ensure_topic=lambda topic, like: ensure_topic(cfg, topic, like=like,
                                                                 headroom_bytes=DEAD_LETTER_HEADROOM))


def consume_batch(consumer: Any, max_messages: int, timeout_s: float) -> list[Message]:
    """Up to ``max_messages``, returned as soon as ONE is there (or after ``timeout_s``), without
    the error events: partition EOFs are dropped, errors librdkafka retries are logged, a fatal
    one raises :class:`BrokerError`.

    ``consume(n, timeout)`` waits the whole timeout unless n messages arrive (10 ready messages
    came back after 100 ms from ``consume(1000, 0.1)``), which made a trickle wait a full consume
    timeout on top of the batch's ``max_wait_ms``. So: ``poll`` for the first message, then drain
    what is already fetched without waiting.
    """
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    messages = [first, *(consumer.consume(max_messages - 1, 0) if max_messages > 1 else ())]
    good = []
    for m in messages:
        err = m.error()
        if err is None:
            good.append(m)
        elif err.fatal() or err.code() == KafkaError._FATAL:
            # The consumer is unusable (a static member fenced, say): librdkafka flags it with
            # the _FATAL code, not always with fatal(). Exit 3 and be restarted, never stall.
            raise BrokerError(f"fatal consumer error: {err}")
        elif err.code() != KafkaError._PARTITION_EOF:
            log.log(retry_level(err), "consumer error (librdkafka retries it): %s", err)
    return good


def topic_wait(cfg: Config) -> TopicWait:
    """What a processor waits for before it reads: the output topic (with
    ``output.topic_per_model``, the topic of each model it scores with), and the input topics
    unless ``input.create_topics`` (start-up created them then); each named by its config key."""
    needed = [] if cfg.input.create_topics else [(f"input.topics[{n}]", t) for n, t in enumerate(cfg.input.topics)]
    if cfg.output.topic_per_model:
        needed.extend(("output.topic_per_model", prediction_topic(cfg, name)) for name in route_models(cfg))
    else:
        needed.append(("output.topic", cfg.output.topic))
    return TopicWait(lambda: make_admin(cfg), needed, str(librdkafka_config(cfg)["bootstrap.servers"]))
