"""`streamer dlq inspect` and `streamer dlq redrive`: reading dead letters and sending them back.

Redrive re-publishes a dead letter's original key, value and headers to its original topic, with
``streamer.redrive.count`` raised by one, and refuses rows already redriven ``max_redrives``
times. Its progress is committed in its own consumer group (one per stage filter), so running it
twice does not publish anything twice. It is at-least-once: a crash between publishing and
committing can publish a row again.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from streamer import clients
from streamer.config import Config, dead_letter_topic
from streamer.deadletter import REDRIVE_HEADER, header, original_headers, redrive_count
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
        for m in _read_to_end(consumer, dead_letter_topic(cfg), committed=False):
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
        for m in _read_to_end(consumer, dead_letter_topic(cfg), committed=True):
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
            if topic is None:
                skipped += 1  # not one of ours
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


def _read_to_end(consumer: Consumer, topic: str, committed: bool,
                 timeout_s: float = 30.0) -> Iterator[Message]:
    """Messages of ``topic`` from the group's committed offsets (or the start) to the end offsets
    captured now, so that a topic still being written to still ends."""
    meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is None or meta.error is not None:
        raise BrokerError(f"dead-letter topic {topic!r} does not exist")
    tps = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
    starts: dict[int, int] = {tp.partition: 0 for tp in tps}
    if committed:
        for tp in consumer.committed(tps, timeout=timeout_s):
            if tp.offset >= 0:
                starts[tp.partition] = tp.offset
    ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=timeout_s)[1] for tp in tps}
    todo = {p for p in ends if ends[p] > starts[p]}
    if not todo:
        return
    consumer.assign([TopicPartition(topic, p, starts[p]) for p in sorted(todo)])
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
