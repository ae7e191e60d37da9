"""The main loop: consume, decode, batch, infer, produce, collect acks, commit; until stopped.

At-least-once, by construction: an input offset becomes *done* only when the broker has
acknowledged its prediction (or its dead letter), and only the contiguous done prefix of each
partition is committed (see offsets.py). A crash at any instant re-reads what was not committed.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from streamer import clients
from streamer.batcher import Batch, FlushReason, MicroBatcher
from streamer.codecs import Codec
from streamer.config import Config, dead_letter_topic
from streamer.deadletter import DeadLetter, dead_letter
from streamer.errors import (BrokerError, CommitError, DeliveryError, DeserializeError,
                             InferenceError, RecordError)
from streamer.events import EventValidator
from streamer.metrics import Metrics
from streamer.offsets import OffsetTracker
from streamer.records import SourceRecord
from streamer.runner import ModelRunner

log = logging.getLogger(__name__)
MAX_LATENCY_SAMPLES = 1_000_000


@dataclass
class Stats:
    """Counts kept by the processor for summaries (the demo, benchmarks, tests)."""

    events: int = 0
    predictions: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    rows_batched: int = 0
    flushes: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    commits: int = 0
    first_event_at: float | None = None  # monotonic time of the first consumed event
    last_ack_at: float | None = None  # monotonic time of the latest acknowledged output

    @property
    def outputs(self) -> int:
        """Inputs fully handled: predicted or dead-lettered, acknowledged."""
        return self.predictions + sum(self.dead_letters.values())

    def events_per_s(self) -> float:
        """Outputs per second from the first consumed event to the last ack (group join excluded)."""
        if self.first_event_at is None or self.last_ack_at is None:
            return 0.0
        return self.outputs / max(self.last_ack_at - self.first_event_at, 1e-9)


class _InFlight:
    """Outputs of one unit (a batch, or one dead letter) awaiting their delivery reports.

    One object per unit with one bound callback keeps the per-message cost in Python to a
    decrement; the bookkeeping happens once, when the last report arrives.
    """

    __slots__ = ("offsets", "remaining", "error", "event_times_ms", "stage", "done")

    def __init__(self, offsets: dict[tuple[str, int], list[int]], count: int,
                 event_times_ms: np.ndarray | None, stage: str | None,
                 done: list[_InFlight]) -> None:
        self.offsets, self.remaining, self.error = offsets, count, None
        self.event_times_ms, self.stage, self.done = event_times_ms, stage, done
        if count == 0:
            done.append(self)

    def ack(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None and self.error is None:
            self.error = err
        self.remaining -= 1
        if self.remaining == 0:
            self.done.append(self)


class Processor:
    """One group member: reads feature events, writes predictions, commits after acks."""

    def __init__(self, cfg: Config, runner: ModelRunner, decoder: Codec, encoder: Codec,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.runner = runner
        self.decoder = decoder
        self.encoder = encoder
        self.metrics = metrics
        self.stats = Stats()
        self._clock = clock
        self._validator = EventValidator(cfg.input, runner.n_features)
        self._batcher: MicroBatcher[tuple[SourceRecord, Any]] = MicroBatcher(
            cfg.batching.max_size, cfg.batching.max_wait_ms, clock)
        self._tracker = OffsetTracker()
        self._assigned: set[tuple[str, int]] = set()
        self._acked: list[_InFlight] = []
        self._dlq_topic = dead_letter_topic(cfg)
        self._running = False
        self._failed = False  # set when the loop dies: then close without processing more
        self._last_commit = 0.0
        self.consumer: Any = None
        self.producer: Any = None

    # ---- the loop -------------------------------------------------------------------------

    def run(self, until: Callable[[Stats], bool] | None = None) -> None:
        """Process until :meth:`stop` is called (or ``until(stats)`` is true), then shut down."""
        self._open()
        try:
            while self._running:
                messages = self._consume()
                rows = self._decode(messages)
                for batch in self._batch(rows):
                    self._infer_and_produce(batch)
                self._collect_acks(timeout_s=0.0)
                self._commit_if_due()
                if until is not None and until(self.stats):
                    self._running = False
            self._drain("shutdown")
        except BaseException:
            self._failed = True
            raise
        finally:
            self._close()

    def stop(self) -> None:
        """Ask the loop to finish: it flushes, waits for acks, commits and closes. Signal-safe."""
        self._running = False

    # ---- steps ----------------------------------------------------------------------------

    def _open(self) -> None:
        self.runner.warm_up(self.cfg.batching.max_size)
        if self.metrics is not None:
            self.metrics.model_info.labels(self.cfg.model.name, self.cfg.model.version,
                                           self.runner.provider).set(1)
        self.producer = clients.make_producer(self.cfg)
        self.consumer = clients.make_consumer(self.cfg)
        self.consumer.subscribe(list(self.cfg.input.topics), on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_lost)
        self._last_commit = self._clock()
        self._running = True

    def _consume(self) -> list[Message]:
        wait = self.cfg.input.consume_timeout_ms / 1000.0
        remaining = self._batcher.remaining_s()
        if remaining is not None:
            wait = min(wait, remaining)
        messages = self.consumer.consume(self.cfg.input.consume_max_messages, wait)
        good = []
        for m in messages:
            err = m.error()
            if err is None:
                good.append(m)
            elif err.fatal():
                raise BrokerError(f"fatal consumer error: {err}")
            elif err.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error (librdkafka retries it): %s", err)
        return good

    def _decode(self, messages: Sequence[Message]) -> list[tuple[SourceRecord, Any]]:
        rows = []
        for m in messages:
            topic, partition, offset, value = m.topic(), m.partition(), m.offset(), m.value()
            if (topic, partition) not in self._assigned:
                # Fetched before a revoke in the same consume() call: the partition is someone
                # else's now, and tracking it could commit over the new owner's offsets.
                continue
            self._tracker.consumed((topic, partition), offset)
            try:
                if value is None:
                    raise DeserializeError("tombstone (null value): nothing to score")
                payload = self.decoder.decode(value)
                row = self._validator.to_record(payload, topic, partition, offset, m.key(),
                                                m.timestamp()[1])
            except RecordError as exc:
                self._send_dead_letter(exc.at(topic, partition, offset, value), m)
                continue
            rows.append((row, m))
        self.stats.events += len(messages)
        if messages and self.stats.first_event_at is None:
            self.stats.first_event_at = time.monotonic()
        if self.metrics is not None:
            for topic, count in Counter(m.topic() for m in messages).items():
                self.metrics.events_consumed.labels(topic).inc(count)
        return rows

    def _batch(self, rows: list[tuple[SourceRecord, Any]]) -> list[Batch[tuple[SourceRecord, Any]]]:
        batches = self._batcher.add(rows)
        if not rows:
            due = self._batcher.poll()
            if due is not None:
                batches.append(due)
        return batches

    def _infer_and_produce(self, batch: Batch[tuple[SourceRecord, Any]]) -> None:
        records = [r for r, _ in batch.rows]
        features = np.stack([r.features for r in records])
        started = time.perf_counter()
        scores = self.runner.run(features)
        if len(scores) != len(records):  # any ModelRunner, not only ours, must keep rows aligned
            raise InferenceError(f"model returned {len(scores)} output rows for {len(records)} input rows")
        self._record_batch(batch, time.perf_counter() - started)
        scored_at = int(time.time() * 1000)
        out_topic = self.cfg.output.topic
        offsets: dict[tuple[str, int], list[int]] = {}
        encoded: list[tuple[SourceRecord, bytes]] = []
        for record, score_row in zip(records, scores, strict=True):
            try:
                value = self.encoder.encode(self._prediction(record, score_row, scored_at))
            except RecordError as exc:
                self._send_dead_letter(exc.at(record.topic, record.partition, record.offset,
                                              None), None, record)
                continue
            offsets.setdefault((record.topic, record.partition), []).append(record.offset)
            encoded.append((record, value))
        unit = _InFlight(offsets, len(encoded),
                         np.fromiter((r.event_time_ms for r, _ in encoded), np.int64, len(encoded)),
                         None, self._acked)
        for record, value in encoded:
            self._produce(out_topic, value, record.key, None, unit.ack)

    def _collect_acks(self, timeout_s: float) -> None:
        """Serve delivery reports and mark the finished units' offsets done."""
        self.producer.poll(timeout_s)
        if not self._acked:
            return
        finished, self._acked[:] = list(self._acked), []
        now_ms = time.time() * 1000
        self.stats.last_ack_at = time.monotonic()
        for unit in finished:
            if unit.error is not None:
                # Not done, so never committed: the prefix stops before it and a restart redoes it.
                raise DeliveryError(f"delivery failed: {unit.error}")
            for tp, offs in unit.offsets.items():
                self._tracker.done(tp, offs)
            if unit.stage is not None:
                self.stats.dead_letters[unit.stage] += 1
                if self.metrics is not None:
                    self.metrics.dead_letters.labels(unit.stage).inc()
                continue
            n = len(unit.event_times_ms) if unit.event_times_ms is not None else 0
            self.stats.predictions += n
            if n:
                lat = now_ms - unit.event_times_ms
                if len(self.stats.latencies_ms) < MAX_LATENCY_SAMPLES:
                    self.stats.latencies_ms.extend(lat.tolist())
                if self.metrics is not None:
                    self.metrics.predictions_produced.labels(self.cfg.output.topic).inc(n)
                    for v in lat:
                        self.metrics.end_to_end.observe(v / 1000.0)
        if self.metrics is not None:
            self.metrics.in_flight_rows.set(self._tracker.in_flight())

    def _commit_if_due(self) -> None:
        if (self._clock() - self._last_commit) * 1000 >= self.cfg.processing.commit_interval_ms:
            self._commit()

    def _commit(self, tps: Iterable[tuple[str, int]] | None = None) -> None:
        """Synchronously commit the done prefix; a partition's failure is logged and retried later."""
        self._last_commit = self._clock()
        positions = self._tracker.committable(tps)
        if not positions:
            return
        offsets = [TopicPartition(t, p, off) for (t, p), off in positions.items()]
        try:
            result = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self._commit_failed(CommitError({"all": str(exc.args[0])}), len(offsets))
            return
        failures = {f"{tp.topic}[{tp.partition}]": str(tp.error) for tp in result if tp.error}
        accepted = {(tp.topic, tp.partition): tp.offset for tp in result if not tp.error}
        self._tracker.mark_committed(accepted)
        self.stats.commits += 1
        if failures:
            self._commit_failed(CommitError(failures), len(failures))

    # ---- rebalances -----------------------------------------------------------------------

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("assigned %s", _names(partitions))
        self._assigned.update((tp.topic, tp.partition) for tp in partitions)
        if self.metrics is not None:
            self.metrics.rebalances.labels("assign").inc()
            self.metrics.assigned_partitions.inc(len(partitions))

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Finish the revoked partitions' work and commit it before they go (cooperative)."""
        log.info("revoked %s", _names(partitions))
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        self._drain("revoke")
        self._commit(revoked)
        self._tracker.forget(revoked)
        self._assigned -= revoked
        if self.metrics is not None:
            self.metrics.rebalances.labels("revoke").inc()
            self.metrics.assigned_partitions.dec(len(partitions))

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Lost partitions may belong to someone else already: drop their work, commit nothing."""
        log.warning("lost %s: dropping their in-flight work", _names(partitions))
        lost = {(tp.topic, tp.partition) for tp in partitions}
        self._batcher.drop(lambda row: (row[0].topic, row[0].partition) not in lost)
        self._tracker.forget(lost)
        self._assigned -= lost
        if self.metrics is not None:
            self.metrics.rebalances.labels("lost").inc()
            self.metrics.assigned_partitions.dec(len(partitions))

    # ---- helpers --------------------------------------------------------------------------

    def _drain(self, reason: FlushReason) -> None:
        """Flush the open batch, wait for every ack (up to the ack timeout), commit.

        After a failure only what is already acknowledged is committed: the open batch stays
        unprocessed (and uncommitted) for whoever reads these partitions next.
        """
        batch = None if self._failed else self._batcher.flush(reason)
        if batch is not None:
            self._infer_and_produce(batch)
        left = self.producer.flush(self.cfg.output.ack_timeout_ms / 1000.0)
        try:
            self._collect_acks(timeout_s=0.0)
        except DeliveryError:
            if not self._failed:
                raise
        if left:
            log.error("%d outputs not acknowledged within %d ms: their inputs stay uncommitted",
                      left, self.cfg.output.ack_timeout_ms)
        self._commit()

    def _close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()  # runs the revoke callback: nothing is left to flush by then
            self.consumer = None
        if self.producer is not None:
            self.producer.flush(self.cfg.output.ack_timeout_ms / 1000.0)
            self.producer = None

    def _produce(self, topic: str, value: bytes | None, key: bytes | None,
                 headers: list[tuple[str, bytes]] | None, on_delivery: Callable[..., None]) -> None:
        while True:
            try:
                self.producer.produce(topic, value, key, headers=headers, on_delivery=on_delivery)
                return
            except BufferError:
                # The local queue is full: serve delivery reports until there is room.
                self._collect_acks(timeout_s=0.05)

    def _send_dead_letter(self, error: RecordError, message: Message | None,
                          record: SourceRecord | None = None) -> None:
        key = message.key() if message is not None else (record.key if record else None)
        headers = message.headers() if message is not None else None
        ts = message.timestamp()[1] if message is not None else (record.timestamp_ms if record else 0)
        letter: DeadLetter = dead_letter(
            error, dlq_topic=self._dlq_topic, key=key, original_headers=headers, timestamp_ms=ts,
            group_id=self.cfg.input.group_id, model_name=self.cfg.model.name,
            model_version=self.cfg.model.version)
        log.debug("dead letter %s at %s: %s", error.stage, error.coordinates(), error)
        unit = _InFlight({(letter.source_topic, letter.source_partition): [letter.source_offset]},
                         1, None, letter.stage, self._acked)
        self._produce(letter.topic, letter.value, letter.key, letter.headers, unit.ack)

    def _prediction(self, record: SourceRecord, scores: np.ndarray, scored_at: int) -> dict[str, Any]:
        return {
            "event_id": record.event_id, "entity_id": record.entity_id,
            "scores": scores.tolist(), "model_name": self.cfg.model.name,
            "model_version": self.cfg.model.version, "source_topic": record.topic,
            "source_partition": record.partition, "source_offset": record.offset,
            "event_time": record.event_time_ms, "scored_at": scored_at,
        }

    def _record_batch(self, batch: Batch[Any], seconds: float) -> None:
        self.stats.batches += 1
        self.stats.rows_batched += len(batch.rows)
        self.stats.flushes[batch.reason] += 1
        if self.metrics is not None:
            m = self.metrics
            m.batch_size.observe(len(batch.rows))
            m.flushes.labels(batch.reason).inc()
            m.batch_wait.observe(batch.wait_s)
            m.inference.labels(self.cfg.model.name, self.cfg.model.version,
                               self.runner.provider).observe(seconds)

    def _commit_failed(self, error: CommitError, count: int) -> None:
        log.warning("%s (will retry)", error)
        if self.metrics is not None:
            self.metrics.commit_failures.inc(count)


def _names(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing"
