"""The Kafka side a processor opens when it runs: its consumer, its deliveries (the producer) and the checkpoint of its guarantee, wired to each other."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from confluent_kafka import KafkaError

from streamer.config import Config, dead_letter_topic
from streamer.kafka.checkpoint import CHECKPOINTS, Checkpoint
from streamer.kafka.clients import KafkaClients, queue_limit
from streamer.kafka.delivery import Deliveries
from streamer.kafka.messages import Output, Predictions
from streamer.kafka.offsets import OffsetTracker
from streamer.kafka.retrylog import retry_level
from streamer.pipeline.records import Partition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KafkaSide:
    """The clients a processor opens when it runs: its consumer, its deliveries (the producer) and
    the checkpoint of its guarantee, wired to each other."""

    consumer: Any
    deliveries: Deliveries
    checkpoint: Checkpoint

    def send(self, outputs: list[Output] | Predictions) -> None:
        """Send outputs as one unit, the checkpoint told first (exactly-once opens its
        transaction there); nothing for none."""
        if outputs:
            self.checkpoint.sending()
            self.deliveries.send(outputs)


class OpenKafka(Protocol):
    """Opens a processor's Kafka side (:func:`open_kafka` makes one of a config): ``tracker`` shared
    with the checkpoint, ``commit_metadata`` kept with each commit, ``on_stats`` given librdkafka's
    statistics (None: not asked for), ``on_full`` called while the producer's local queue is full
    (it serves delivery reports)."""

    def __call__(self, tracker: OffsetTracker, clock: Callable[[], float],
                 commit_metadata: Callable[[Partition], str] | None,
                 on_stats: Callable[[str], None] | None, on_full: Callable[[], None]) -> KafkaSide: ...


def open_kafka(cfg: Config, clients: KafkaClients) -> OpenKafka:
    """The Kafka side a processor opens when it runs (:class:`OpenKafka`): the dead-letter topic
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
