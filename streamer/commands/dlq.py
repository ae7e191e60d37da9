"""`streamer dlq inspect` and `streamer dlq redrive`: reading dead letters and sending them back.

Redrive re-publishes a dead letter's original key, value and headers to its original topic, with
``streamer.redrive.count`` raised by one, and refuses rows already redriven ``max_redrives``
times. Its progress is committed in a consumer group per stage filter (``<group>.redrive.validate``,
``...redrive.all``), and every run reads them all: a row counts as redriven once its own stage's
group or the ``all`` group is past it. Worked example: ``--stage validate`` commits 40 on
``.redrive.validate``; a later run without ``--stage`` reads from 0 but sends the validate rows
below 40 nowhere (``already``), and commits the ``all`` group; ``--stage validate`` after that starts
where ``all`` stopped. So running it twice, with any mix of filters, publishes nothing twice. It is
at-least-once: a crash between publishing and committing can publish a row again.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import cast

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition

from streamer.config import Config, dead_letter_topic
from streamer.errors import STAGES, BrokerError
from streamer.kafka import clients
from streamer.kafka.deadletter import (
    REDRIVE_HEADER,
    header,
    headers_of,
    is_cut_short,
    original_headers,
    redrive_count,
)
from streamer.kafka.topics import partitions


@dataclass(frozen=True, slots=True)
class RedriveResult:
    redriven: int
    refused: int  # redriven too often already
    skipped: int  # another stage than asked for
    already: int = 0  # redriven by an earlier run (of another stage filter)


def inspect(cfg: Config, limit: int | None = None) -> list[str]:
    """One line per dead letter, oldest first: time, stage, original coordinates, error."""
    consumer = Consumer(clients.consumer_config(cfg, **{"group.id": f"{cfg.input.group_id}.dlq-inspect"}))
    lines = []
    try:
        for m in clients.read_to_end(consumer, dead_letter_topic(cfg), from_committed=False):
            h = headers_of(m)
            when = dt.datetime.fromtimestamp(m.timestamp()[1] / 1000, dt.UTC)
            lines.append(f"{when:%Y-%m-%dT%H:%M:%S}Z  {header(h, 'stage') or '?':<11}  "
                         f"{header(h, 'original.topic')}[{header(h, 'original.partition')}]"
                         f"@{header(h, 'original.offset')}  attempt {header(h, 'attempt')}  "
                         f"{header(h, 'exception.message')}")
            if limit is not None and len(lines) >= limit:
                break
    finally:
        consumer.close()
    return lines


def redrive(cfg: Config, stage: str | None = None, limit: int | None = None) -> RedriveResult:
    """Re-publish dead letters (of ``stage``, or all) to their original topics; commit progress."""
    topic = dead_letter_topic(cfg)
    consumer = Consumer(clients.consumer_config(cfg, **{"group.id": _group(cfg, stage)}))
    producer = Producer(clients.producer_config(cfg))
    redriven = refused = skipped = already = 0
    positions: dict[tuple[str, int], int] = {}
    try:
        done = _redriven_below(cfg, topic, partitions(consumer, topic, 30.0))
        starts = {p: min(by_stage.values()) if stage is None else by_stage[stage] for p, by_stage in done.items()}
        for m in clients.read_to_end(consumer, topic, from_committed=False, starts=starts):
            if limit is not None and redriven >= limit:
                break
            partition, offset = cast(int, m.partition()), cast(int, m.offset())
            positions[(cast(str, m.topic()), partition)] = offset + 1
            h = headers_of(m)
            row_stage = header(h, "stage")
            if stage is not None and row_stage != stage:
                skipped += 1
                continue
            if offset < done[partition].get(row_stage, done[partition][None]):
                already += 1
                continue
            originals = original_headers(h)
            count = redrive_count(originals)
            if count >= cfg.processing.max_redrives:
                refused += 1
                continue
            original_topic = header(h, "original.topic")
            if original_topic is None or is_cut_short(h):
                skipped += 1  # not one of ours, or only the start of the original (too large)
                continue
            headers = [(k, v) for k, v in originals if k != REDRIVE_HEADER]
            headers.append((REDRIVE_HEADER, str(count + 1).encode()))
            producer.produce(original_topic, m.value(), m.key(), headers=list(headers))
            producer.poll(0)
            redriven += 1
        if producer.flush(cfg.output.ack_timeout_ms / 1000.0):
            raise BrokerError("redrive: not every row was acknowledged; progress not committed")
        if positions:
            result = consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()],
                                     asynchronous=False)
            failed = [tp for tp in result if tp.error]
            if failed:
                raise BrokerError(f"redrive: committing progress failed: {failed}")
    finally:
        consumer.close()
    return RedriveResult(redriven, refused, skipped, already)


def _group(cfg: Config, stage: str | None) -> str:
    return f"{cfg.input.group_id}.redrive.{stage or 'all'}"


def _redriven_below(cfg: Config, topic: str, parts: list[int],
                    timeout_s: float = 30.0) -> dict[int, dict[str | None, int]]:
    """Per partition, per stage (None: a letter without one), the offset below which its letters
    were redriven: the larger of its stage group's commit and the ``all`` group's."""
    tps = [TopicPartition(topic, p) for p in parts]
    admin = clients.make_admin(cfg)
    asked = {stage: admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(_group(cfg, stage), tps)],
                                                      request_timeout=timeout_s)
             for stage in (None, *STAGES)}
    committed: dict[str | None, dict[int, int]] = {}
    for stage, futures in asked.items():
        try:
            (answer,) = [f.result(timeout_s) for f in futures.values()]
        except Exception as exc:
            raise BrokerError(f"redrive: reading the progress of {_group(cfg, stage)} failed: {exc}") from exc
        committed[stage] = {tp.partition: max(tp.offset, 0) for tp in answer.topic_partitions}
    return {p: {stage: max(committed[stage].get(p, 0), committed[None].get(p, 0)) for stage in committed}
            for p in parts}
