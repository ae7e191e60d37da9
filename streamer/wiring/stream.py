"""The stream's house: the model side (model.py) and the Kafka side a processor opens, wired before it runs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry

from streamer.config import Config, dead_letter_topic, librdkafka_config
from streamer.errors import ConfigError
from streamer.house import KafkaSide, Observer, OpenKafka, Scope, Wiring
from streamer.kafka.checkpoint import CHECKPOINTS, Checkpoint
from streamer.kafka.clients import KafkaClients, check_topics, make_admin, queue_limit
from streamer.kafka.delivery import Deliveries
from streamer.kafka.offsets import OffsetTracker
from streamer.kafka.retrylog import retry_level
from streamer.kafka.topics import TopicWait
from streamer.model.runner import ModelRunner
from streamer.observe.health import HealthServer, Status
from streamer.observe.metrics import GroupRegistry, Metrics
from streamer.pipeline.records import Partition
from streamer.processor import Processor
from streamer.wiring.codecs import input_codec
from streamer.wiring.model import model_house

log = logging.getLogger(__name__)


def open_kafka(cfg: Config, clients: KafkaClients) -> OpenKafka:
    """The Kafka side a processor opens when it runs (house.OpenKafka): the dead-letter topic
    ensured when configured (its size bounds the producer's messages), the producer of the
    guarantee's checkpoint (the one place the guarantee is read) with a fatal one replaced, the
    consumer, whose background commits are answered inside consume(), and the checkpoint."""

    def open_(tracker: OffsetTracker, clock: Callable[[], float],
              commit_metadata: Callable[[Partition], str] | None,
              on_stats: Callable[[str], None] | None, on_full: Callable[[], None]) -> KafkaSide:
        room = (clients.ensure_topic(dead_letter_topic(cfg), cfg.input.topics[0])
                if cfg.processing.create_dead_letter_topic else None)  # the largest dead letter
        kind = CHECKPOINTS[cfg.processing.guarantee]
        opened: list[Checkpoint] = []  # librdkafka may call back before the checkpoint exists

        def client_error(err: KafkaError) -> None:
            """A fatal producer error goes to the checkpoint (which replaces the producer); an
            expected start-up retry (a broker still starting) is INFO, any other error a warning."""
            if not err.fatal():
                log.log(retry_level(err), "producer: %s", err)
            elif opened:  # (before it exists, init_transactions raises it)
                opened[0].producer_failed(err)

        make_producer = partial(clients.producer, error_cb=client_error, largest_message=room,
                                **kind.producer_settings(cfg))
        stats = ({"statistics.interval.ms": cfg.metrics.stats_interval_ms, "stats_cb": on_stats}
                 if on_stats is not None else {})
        consumer = clients.consumer(on_commit=lambda e, tps: opened[0].commit_reported(e, tps), **stats)
        deliveries = Deliveries(make_producer(), on_full=on_full, make_producer=make_producer,
                                key_by=cfg.output.key, queue_limit=queue_limit(cfg))
        opened.append(kind(cfg, tracker, consumer, deliveries, clock, commit_metadata))
        return KafkaSide(consumer, deliveries, opened[0])

    return open_


def build_wiring(cfg: Config, runner: ModelRunner | None = None, registry: CollectorRegistry | None = None,
                 clients: KafkaClients | None = None, stopping: Callable[[], bool] = lambda: False,
                 model_version: str | None = None, observers: tuple[Observer, ...] = ()) -> Wiring:
    """The house for one processor, built and checked before anything is read: the model side
    (model.model_house: the model checked at start-up as a reload is, unless ``runner`` is given;
    codecs; serving with reloads, fallback, challengers), metrics when ``metrics.enabled`` or a
    ``registry`` is given, and /metrics, /healthz and /readyz when ``metrics.enabled``.
    ``clients``: other Kafka clients than the config's (the in-memory ones of benchmarks/gpu.py);
    the config's cluster is checked first, and the processor waits for the topics of
    :func:`topic_wait` before it reads. ``stopping``: a stop signal came (it ends start-up's wait
    for the cluster: StopRequested). ``model_version``: the label every prediction carries,
    verbatim, whatever the file declares. ``observers``: watch the loop beside its accounting."""
    metrics = None
    if cfg.metrics.enabled or registry is not None:
        registry = registry or GroupRegistry(cfg.input.group_id)
        metrics = Metrics(registry)
    house = model_house(cfg, runner, metrics=metrics, label=model_version)
    topics = None
    if clients is None:
        check_topics(cfg, stopping=stopping)
        topics = topic_wait(cfg)
    health = None
    if cfg.metrics.enabled:
        exported = registry
        assert exported is not None
        health = partial(serve_http, cfg, exported)
    return Wiring(cfg, house.serving, input_codec(cfg.input, house.schema_in), house.encoder,
                  open_kafka(cfg, clients or KafkaClients.from_config(cfg)),
                  metrics, health=health, observers=observers, topics=topics)


def topic_wait(cfg: Config) -> TopicWait:
    """What a processor waits for before it reads: the output topic, and the input topics unless
    ``input.create_topics`` (start-up created them then); each named by its config key."""
    needed = [] if cfg.input.create_topics else [(f"input.topics[{n}]", t) for n, t in enumerate(cfg.input.topics)]
    needed.append(("output.topic", cfg.output.topic))
    return TopicWait(make_admin(cfg), needed, str(librdkafka_config(cfg)["bootstrap.servers"]))


def build_processor(cfg: Config, runner: ModelRunner | None = None, registry: CollectorRegistry | None = None,
                    clients: KafkaClients | None = None, stopping: Callable[[], bool] = lambda: False,
                    scope: Scope = Scope(), model_version: str | None = None,
                    observers: tuple[Observer, ...] = ()) -> Processor:
    """A ready Processor on :func:`build_wiring`'s house, for ``scope`` (default: the live stream)."""
    return Processor(build_wiring(cfg, runner, registry, clients, stopping, model_version, observers), scope)


def serve_http(cfg: Config, registry: CollectorRegistry, status: Callable[[], Status]) -> HealthServer:
    try:
        return HealthServer(registry, cfg.metrics.host, cfg.metrics.port, status)
    except OSError as exc:
        raise ConfigError("metrics.port", f"cannot listen on {cfg.metrics.host}:"
                                          f"{cfg.metrics.port}: {exc.strerror}") from exc
