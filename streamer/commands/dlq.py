"""`streamer dlq inspect` and `streamer dlq redrive`: reading dead letters and sending them back.

Redrive re-publishes a dead letter's original key, value and headers to its original topic,
unchanged (the ``streamer.dlq.*`` headers left off), plus ``streamer.redrive.count`` raised by
one, and refuses rows already redriven ``max_redrives`` times, and rows cut short (only the start
of a value too large for the dead-letter topic).

Without a selection, its progress is committed in a consumer group per stage filter
(``<group>.redrive.validate``, ``...redrive.all``), and every run reads them all: a row counts as
redriven once its own stage's group or the ``all`` group is past it. Worked example: ``--stage
validate`` commits 40 on ``.redrive.validate``; a later run without ``--stage`` reads from 0 but
sends the validate rows below 40 nowhere (``already``), and commits the ``all`` group;
``--stage validate`` after that starts where ``all`` stopped.

With a selection (``--offset PARTITION:OFFSET``, the letter's place in the dead-letter topic as
``inspect`` shows it, and ``--event-id ID``, both repeatable) only the selected letters are sent,
and the groups are not moved: a committed offset says "everything below was handled", which
cannot say "these three of them". Each selected letter, once acknowledged, is recorded instead in
the compacted topic ``<dead-letter topic>.redriven`` (:data:`REDRIVEN_SUFFIX`), keyed
``partition:offset`` and created on first use; every run and ``inspect`` read it, so a later run
(selected or not) reports that letter ``already`` and sends the others. So running it twice, with
any mix of filters, publishes nothing twice. It is at-least-once: a crash between publishing and
committing (or recording) can publish a row again. A stop (SIGTERM, Ctrl+C) ends it between two
letters: those sent are flushed and committed (or recorded) as at the end, and a later run sends
the rest.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition

from streamer.config import Sections, dead_letter_topic
from streamer.errors import STAGES, BrokerError
from streamer.formats.configured import input_codec
from streamer.kafka import clients
from streamer.kafka.deadletter import (
    REDRIVE_HEADER,
    header,
    headers_of,
    is_cut_short,
    original_headers,
    redrive_count,
)
from streamer.kafka.topics import create, partitions
from streamer.pipeline.records import Partition

REDRIVEN_SUFFIX = ".redriven"  # the compacted topic of selectively redriven letters, beside the dead letters
Place = tuple[int, int]  # a letter's (partition, offset) in the dead-letter topic


@dataclass(frozen=True, slots=True)
class RedriveResult:
    redriven: int
    refused: int  # redriven too often already
    skipped: int  # another stage than asked for, not ours, or cut short
    already: int = 0  # redriven by an earlier run (of another stage filter, or selected)
    not_found: tuple[str, ...] = ()  # selected offsets and event ids no letter matched
    stopped: bool = False  # a stop ended it before the end of the dead-letter topic


@dataclass(frozen=True, slots=True)
class Letter:
    """One dead letter as ``inspect`` shows it."""

    partition: int
    offset: int
    timestamp_ms: int
    stage: str | None
    original: str  # topic[partition]@offset of the input record
    key: bytes | None
    event_id: str | None
    redriven: bool  # by any earlier redrive run
    attempt: str | None
    reason: str | None

    def line(self) -> str:
        """``2026-05-01T10:00:00Z  0:17  validate     events[2]@40  key a1  event e-40  redriven no
        attempt 1  3 features, expected 32``."""
        when = dt.datetime.fromtimestamp(self.timestamp_ms / 1000, dt.UTC)
        key = "-" if self.key is None else self.key.decode("utf-8", "backslashreplace")
        return (f"{when:%Y-%m-%dT%H:%M:%S}Z  {self.partition}:{self.offset}  {self.stage or '?':<11}  "
                f"{self.original}  key {key}  event {self.event_id or '-'}  "
                f"redriven {'yes' if self.redriven else 'no'}  attempt {self.attempt or '?'}  {self.reason or ''}")


def parse_place(text: str) -> Place:
    """``PARTITION:OFFSET`` (``--offset``) as a pair of ints; ValueError for anything else."""
    partition, sep, offset = text.partition(":")
    if not sep or not partition.isdigit() or not offset.isdigit():
        raise ValueError(f"{text!r} is not PARTITION:OFFSET (two numbers, as `dlq inspect` shows them)")
    return int(partition), int(offset)


def inspect(cfg: Sections, limit: int | None = None, topic: str | None = None) -> list[str]:
    """One line per dead letter of ``topic`` (default ``processing.dead_letter_topic``; a replay's
    is ``<its output topic>.dlq``), oldest first (see :meth:`Letter.line`)."""
    topic = topic or dead_letter_topic(cfg)
    consumer = Consumer(clients.consumer_config(cfg, **{"group.id": f"{cfg.input.group_id}.dlq-inspect"}))
    lines = []
    try:
        done = _redriven_below(cfg, topic, partitions(consumer, topic, 30.0))
        marked = _marked(cfg, topic)
        event_id = _event_ids(cfg)
        for m in clients.read_to_end(consumer, topic, from_committed=False):
            h = headers_of(m)
            p, o, stage = cast(int, m.partition()), cast(int, m.offset()), header(h, "stage")
            lines.append(Letter(
                p, o, m.timestamp()[1], stage,
                f"{header(h, 'original.topic')}[{header(h, 'original.partition')}]@{header(h, 'original.offset')}",
                m.key(), event_id(h, m.value()), (p, o) in marked or o < done[p].get(stage, done[p][None]),
                header(h, "attempt"), header(h, "exception.message")).line())
            if limit is not None and len(lines) >= limit:
                break
    finally:
        consumer.close()
    return lines


def redrive(cfg: Sections, stage: str | None = None, limit: int | None = None,
            offsets: Collection[Place] = (), event_ids: Collection[str] = (),
            topic: str | None = None, stop: threading.Event | None = None) -> RedriveResult:
    """Re-publish dead letters of ``topic`` (default ``processing.dead_letter_topic``; of
    ``stage``, or all; only those at ``offsets`` or of ``event_ids`` when either is given) to
    their original topics; record progress. ``stop`` set ends it before the next letter
    (``stopped``)."""
    topic = topic or dead_letter_topic(cfg)
    offsets, event_ids = set(offsets), set(event_ids)
    selecting = bool(offsets or event_ids)
    consumer = Consumer(clients.consumer_config(cfg, **{"group.id": _group(cfg, stage)}))
    producer = Producer(clients.producer_config(cfg))
    redriven = refused = skipped = already = 0
    stopped = False
    positions: dict[Partition, int] = {}
    sent: list[Place] = []
    found_places: set[Place] = set()
    found_ids: set[str] = set()
    try:
        done = _redriven_below(cfg, topic, partitions(consumer, topic, 30.0))
        marked = _marked(cfg, topic)
        event_id = _event_ids(cfg) if event_ids else None
        # A selection may pick letters below any group's progress: it reads from the start.
        starts = {p: 0 if selecting else min(by_stage.values()) if stage is None else by_stage[stage]
                  for p, by_stage in done.items()}
        for m in clients.read_to_end(consumer, topic, from_committed=False, starts=starts):
            if limit is not None and redriven >= limit:
                break
            if stop is not None and stop.is_set():
                stopped = True  # this letter is neither sent nor passed: the next run starts at it
                break
            partition, offset = cast(int, m.partition()), cast(int, m.offset())
            h = headers_of(m)
            if selecting:
                eid = event_id(h, m.value()) if event_id is not None else None
                if (partition, offset) not in offsets and eid not in event_ids:
                    continue  # not selected: neither counted nor passed in any group
                found_places.add((partition, offset))
                if eid is not None:
                    found_ids.add(eid)
            else:
                positions[(cast(str, m.topic()), partition)] = offset + 1
            row_stage = header(h, "stage")
            if stage is not None and row_stage != stage:
                skipped += 1
                continue
            if (partition, offset) in marked or offset < done[partition].get(row_stage, done[partition][None]):
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
            sent.append((partition, offset))
            redriven += 1
        if producer.flush(cfg.output.ack_timeout_ms / 1000.0):
            raise BrokerError("redrive: not every row was acknowledged; progress not committed")
        if selecting:
            _mark(cfg, producer, topic, sent)  # only once every sent letter is acknowledged
        elif positions:
            result = consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()],
                                     asynchronous=False)
            failed = [tp for tp in result if tp.error]
            if failed:
                raise BrokerError(f"redrive: committing progress failed: {failed}")
    finally:
        consumer.close()
    missing = [f"{p}:{o}" for p, o in sorted(offsets - found_places)] + sorted(event_ids - found_ids)
    return RedriveResult(redriven, refused, skipped, already, tuple(missing), stopped)


def _group(cfg: Sections, stage: str | None) -> str:
    return f"{cfg.input.group_id}.redrive.{stage or 'all'}"


def _event_ids(cfg: Sections) -> Callable[[list[tuple[str, bytes]], bytes | None], str | None]:
    """A letter's event id: its ``streamer.dlq.event.id`` header, else the ``input.id_field`` of
    its original value decoded with the input codec (None: a value that does not decode, the
    usual ``deserialize`` letter, or one without the field)."""
    codec: list[Any] = []

    def event_id(headers: list[tuple[str, bytes]], value: bytes | None) -> str | None:
        if (given := header(headers, "event.id")) is not None:
            return given
        if value is None or is_cut_short(headers):
            return None
        try:
            codec[:] = codec or [input_codec(cfg.input)]  # its registry client: only when asked
            found = codec[0].decode(value).get(cfg.input.id_field)
        except Exception:  # noqa: BLE001 - the letter is there because something failed on it
            return None
        return None if found is None else str(found)

    return event_id


def _marked(cfg: Sections, topic: str, timeout_s: float = 30.0) -> set[Place]:
    """The letters recorded in ``<topic>.redriven`` by selective redrives (none: no such topic)."""
    consumer = Consumer(clients.consumer_config(cfg, **{"group.id": f"{cfg.input.group_id}.dlq-redriven"}))
    try:
        try:
            partitions(consumer, topic + REDRIVEN_SUFFIX, timeout_s)
        except BrokerError:
            return set()  # no letter was ever redriven by a selection
        marked: set[Place] = set()
        for m in clients.read_to_end(consumer, topic + REDRIVEN_SUFFIX, from_committed=False, timeout_s=timeout_s):
            key = (m.key() or b"").decode("ascii", "replace")
            try:
                place = parse_place(key)
            except ValueError:
                continue  # not ours
            if m.value() is None:
                marked.discard(place)  # a tombstone takes the record back
            else:
                marked.add(place)
        return marked
    finally:
        consumer.close()


def _mark(cfg: Sections, producer: Producer, topic: str, places: list[Place]) -> None:
    """Record selectively redriven letters in ``<topic>.redriven`` (created compacted on first
    use: one record per letter is all it keeps), and wait for the acks."""
    if not places:
        return
    log_topic = topic + REDRIVEN_SUFFIX
    create(clients.make_admin(cfg), {log_topic: 1}, config={"cleanup.policy": "compact"})
    at = int(time.time() * 1000)
    for p, o in places:
        producer.produce(log_topic, json.dumps({"redriven_at_ms": at}).encode(), f"{p}:{o}".encode())
    if producer.flush(cfg.output.ack_timeout_ms / 1000.0):
        raise BrokerError(f"redrive: the letters were sent, but recording them in {log_topic} was not "
                          "acknowledged: a later redrive may send them again")


def _redriven_below(cfg: Sections, topic: str, parts: list[int],
                    timeout_s: float = 30.0) -> dict[int, dict[str | None, int]]:
    """Per partition, per stage (None: a letter without one), the offset below which its letters
    were redriven: the larger of its stage group's commit and the ``all`` group's."""
    tps = [TopicPartition(topic, p) for p in parts]
    admin = clients.make_admin(cfg)

    def progress(group: str) -> Any:
        """One group's offsets, each request answered before the next (none left in flight)."""
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)],
                                                    request_timeout=timeout_s)
        (answer,) = [f.result(timeout_s) for f in futures.values()]
        return answer

    committed: dict[str | None, dict[int, int]] = {}
    for stage in (None, *STAGES):
        group = _group(cfg, stage)
        try:  # a cluster just started answers COORDINATOR_LOAD_IN_PROGRESS for a while: asked again
            answer = clients.retrying(partial(progress, group), f"redrive: reading the progress of {group}",
                                      timeout_s)
        except TimeoutError as exc:  # no answer in timeout_s (a KafkaError that stays is a BrokerError)
            raise BrokerError(f"redrive: reading the progress of {group} failed: {exc}") from exc
        committed[stage] = {tp.partition: max(tp.offset, 0) for tp in answer.topic_partitions}
    return {p: {stage: max(committed[stage].get(p, 0), committed[None].get(p, 0)) for stage in committed}
            for p in parts}
