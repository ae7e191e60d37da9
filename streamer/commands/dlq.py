"""`streamer dlq inspect` and `streamer dlq redrive`: reading dead letters and sending them back.

Redrive re-publishes a dead letter's original key, value and headers to its original topic, with
``streamer.redrive.count`` raised by one, and refuses rows already redriven ``max_redrives``
times. Its progress is committed in its own consumer group (one per stage filter), so running it
twice does not publish anything twice. It is at-least-once: a crash between publishing and
committing can publish a row again.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from confluent_kafka import Consumer, Producer, TopicPartition

from streamer.kafka import clients
from streamer.config import Config, dead_letter_topic
from streamer.kafka.deadletter import REDRIVE_HEADER, header, is_cut_short, original_headers, redrive_count
from streamer.errors import BrokerError


@dataclass(frozen=True, slots=True)
class RedriveResult:
    redriven: int
    refused: int  # redriven too often already
    skipped: int  # another stage than asked for


def inspect(cfg: Config, limit: int | None = None) -> list[str]:
    """One line per dead letter, oldest first: time, stage, original coordinates, error."""
    consumer = Consumer(clients.consumer_config(cfg, **{"group.id": f"{cfg.input.group_id}.dlq-inspect"}))
    lines = []
    try:
        for m in clients.read_to_end(consumer, dead_letter_topic(cfg), from_committed=False):
            h = m.headers()
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
    group = f"{cfg.input.group_id}.redrive.{stage or 'all'}"
    consumer = Consumer(clients.consumer_config(cfg, **{"group.id": group}))
    producer = Producer(clients.producer_config(cfg))
    redriven = refused = skipped = 0
    positions: dict[tuple[str, int], int] = {}
    try:
        for m in clients.read_to_end(consumer, dead_letter_topic(cfg), from_committed=True):
            if limit is not None and redriven >= limit:
                break
            positions[(m.topic(), m.partition())] = m.offset() + 1
            h = m.headers()
            if stage is not None and header(h, "stage") != stage:
                skipped += 1
                continue
            originals = original_headers(h)
            count = redrive_count(originals)
            if count >= cfg.processing.max_redrives:
                refused += 1
                continue
            topic = header(h, "original.topic")
            if topic is None or is_cut_short(h):
                skipped += 1  # not one of ours, or only the start of the original (too large)
                continue
            headers = [(k, v) for k, v in originals if k != REDRIVE_HEADER]
            headers.append((REDRIVE_HEADER, str(count + 1).encode()))
            producer.produce(topic, m.value(), m.key(), headers=headers)
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
    return RedriveResult(redriven, refused, skipped)
