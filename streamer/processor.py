"""The main loop: consume, decode, batch, infer, produce, collect acks, commit; until stopped.

At-least-once, by construction: an input offset becomes *done* only when the broker has
acknowledged its prediction (or its dead letter), and only the contiguous done prefix of each
partition is committed (see offsets.py). A crash at any instant re-reads what was not committed.

The processor *blocks* (pauses its partitions, reports unhealthy, commits nothing past the
failure, retries with back-off) in two cases: the model looks broken (see isolate.py), or an
output could not be written (the dead-letter topic is missing or denied, the broker is away).
It unblocks by itself as soon as the retry goes through; nothing is dropped meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from streamer.kafka import clients
from streamer.pipeline.batcher import Batch, FlushReason, MicroBatcher
from streamer.pipeline.codecs import Codec
from streamer.config import Config, dead_letter_topic, transactional_id
from streamer.kafka.deadletter import dead_letter
from streamer.kafka.delivery import Deliveries, Output, is_permanent
from streamer.errors import (
    BrokerError,
    CommitError,
    DeserializeError,
    InferenceError,
    ModelBrokenError,
    PoisonRowError,
    ProduceError,
    RecordError,
    TransactionAbortedError,
)
from streamer.pipeline.validate import EventValidator
from streamer.observe.health import Status
from streamer.pipeline.isolate import IsolationPolicy, model_answers, score_isolating
from streamer.observe.metrics import Metrics
from streamer.kafka.offsets import OffsetTracker
from streamer.observe.progress import ProgressWatch
from streamer.pipeline.records import SourceRecord, prediction_fields
from streamer.pipeline.runner import ModelRunner
from streamer.observe.stats import Stats
from streamer.kafka.transactions import Transactions
from streamer.kafka.watchdog import deadline

log = logging.getLogger(__name__)
Row = tuple[SourceRecord, Message]


@dataclass
class _Block:
    """Why the processor is blocked, and when it tries again."""

    reason: str
    retry_at: float
    backoff_s: float
    resent: bool = False  # the failed outputs were produced again


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
        self._batcher: MicroBatcher[Row] = MicroBatcher(cfg.batching.max_size,
                                                        cfg.batching.max_wait_ms, clock)
        self._queue: deque[Batch[Row]] = deque()  # flushed batches awaiting the model, in order
        self._tracker = OffsetTracker()
        self._assigned: set[tuple[str, int]] = set()
        self._dlq_topic = dead_letter_topic(cfg)
        self._policy = IsolationPolicy(max_poison_fraction=cfg.processing.max_poison_fraction)
        self._failed_batches = 0  # whole batches failing in a row
        self._model_block: _Block | None = None
        self._redo: list[Output] = []  # outputs whose delivery failed, to produce again
        self._delivery_block: _Block | None = None
        self._paused = False
        self._txn: Transactions | None = None  # exactly-once only
        self._txn_failure: str | None = None  # an output of the open transaction failed
        self._uncounted: list[Output] = []  # exactly-once: acked, counted once committed
        self._fatal: KafkaError | None = None
        self._bounds: dict[tuple[str, int], tuple[int, int]] | None = None
        self.commit_metadata: Callable[[tuple[str, int]], str] | None = None  # kept with commits
        self.run_id: str | None = None  # replay runs stamp their predictions
        self._heartbeat = clock()  # the loop's last pass: /healthz reads it from another thread
        self._ready = False  # warmed up and in the group
        self._progress = ProgressWatch(cfg.metrics.stall_timeout_ms / 1000.0, clock, metrics)
        self._running = False
        self._failed = False  # set when the loop dies: then close without processing more
        self._last_commit = 0.0
        self.consumer: Any = None
        self.deliveries: Any = None
        self.http: Any = None  # the HealthServer, when metrics are served

    @property
    def healthy(self) -> bool:
        return self._model_block is None and self._delivery_block is None

    @property
    def unhealthy_reason(self) -> str | None:
        block = self._model_block or self._delivery_block
        return block.reason if block else None

    # ---- the loop -------------------------------------------------------------------------

    def run(self, until: Callable[[Stats], bool] | None = None,
            bounds: dict[tuple[str, int], tuple[int, int]] | None = None) -> None:
        """Process until :meth:`stop` is called (or ``until(stats)`` is true), then shut down.

        With ``bounds`` (a replay), read exactly ``[start, end)`` of each of those partitions,
        assigned directly rather than through the group protocol, and stop once all are done.
        """
        self._bounds = bounds
        self._open()
        try:
            while self._running:
                self._heartbeat = self._clock()
                messages = self._consume()
                rows = self._decode(messages)
                self._batch(rows)
                self._infer_and_produce()
                self._collect_acks(timeout_s=0.0)
                self._redo_failed_deliveries()
                self._pause_or_resume()
                self._commit_if_due()
                self._watch_progress()
                if (until is not None and until(self.stats)) or self._bounds_done():
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
            self.metrics.healthy.set(1)
        if self.cfg.processing.create_dead_letter_topic:
            clients.ensure_topic(self.cfg, self._dlq_topic, like=self.cfg.input.topics[0])
        producer = clients.make_producer(self.cfg, error_cb=self._on_client_error,
                                         **self._transactional_settings())
        stats = ({"statistics.interval.ms": self.cfg.metrics.stats_interval_ms,
                  "stats_cb": self._progress.on_stats} if self.metrics is not None else {})
        self.consumer = clients.make_consumer(self.cfg, **stats)
        if self.cfg.processing.guarantee == "exactly_once":
            self._txn = Transactions(producer, self.consumer.consumer_group_metadata,
                                     self.cfg.output.ack_timeout_ms / 1000.0)
        self.deliveries = Deliveries(producer, on_full=lambda: self._collect_acks(timeout_s=0.05),
                                     before_send=self._txn.begin if self._txn else lambda: None)
        if self._bounds is None:
            self.consumer.subscribe(list(self.cfg.input.topics), on_assign=self._on_assign,
                                    on_revoke=self._on_revoke, on_lost=self._on_lost)
        else:
            todo = [TopicPartition(t, p, start) for (t, p), (start, end) in self._bounds.items()
                    if start < end]
            self.consumer.assign(todo)
            self._on_assign(self.consumer, todo)
        self._last_commit = self._clock()
        self._running = True

    def _consume(self) -> list[Message]:
        if self._fatal is not None:
            raise BrokerError(f"fatal producer error: {self._fatal}")
        wait = self.cfg.input.consume_timeout_ms / 1000.0
        remaining = self._batcher.remaining_s()
        if remaining is not None and not self._blocked():
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

    def _decode(self, messages: Sequence[Message]) -> list[Row]:
        rows = []
        for m in messages:
            topic, partition, offset, value = m.topic(), m.partition(), m.offset(), m.value()
            if (topic, partition) not in self._assigned:
                # Fetched before a revoke in the same consume() call: the partition is someone
                # else's now, and tracking it could commit over the new owner's offsets.
                continue
            if self._bounds is not None and offset >= self._bounds[(topic, partition)][1]:
                continue  # past the replay's end: not ours to score
            self._tracker.consumed((topic, partition), offset)
            try:
                if value is None:
                    raise DeserializeError("tombstone (null value): nothing to score")
                payload = self.decoder.decode(value)
                row = self._validator.to_record(payload, topic, partition, offset, m.key(),
                                                m.timestamp()[1])
            except RecordError as exc:
                self._send_dead_letter(exc, m)
                continue
            rows.append((row, m))
        self.stats.events += len(messages)
        if messages and self.stats.first_event_at is None:
            self.stats.first_event_at = time.monotonic()
        if self.metrics is not None:
            for topic, count in Counter(m.topic() for m in messages).items():
                self.metrics.events_consumed.labels(topic).inc(count)
        return rows

    def _batch(self, rows: list[Row]) -> None:
        self._queue.extend(self._batcher.add(rows))
        if not rows:
            due = self._batcher.poll()
            if due is not None:
                self._queue.append(due)

    def _infer_and_produce(self) -> None:
        """Score queued batches in order; stop at one the model cannot take (then retry later)."""
        while self._queue:
            block = self._model_block
            if block is not None and self._clock() < block.retry_at:
                return
            batch = self._queue[0]
            outputs = self._score(batch)
            if outputs is None:
                return
            self._queue.popleft()
            self.deliveries.send(outputs)

    def _collect_acks(self, timeout_s: float) -> None:
        """Serve delivery reports: acked outputs mark their offsets done; failures are kept."""
        acked, failed = self.deliveries.collect(timeout_s)
        if acked:
            self._acknowledged(acked)
        if failed and self._txn is not None:
            # A transaction with a failed output cannot commit: abort it and redo from the commit.
            out, err = failed[0]
            self._txn_failure = f"cannot write to {out.topic}: {err.str()}"
            return
        retry = []
        for out, err in failed:
            if out.source_tp not in self._assigned:
                continue  # revoked or lost meanwhile: its new owner redoes it
            if out.stage is None and is_permanent(err):
                self._send_dead_letter(ProduceError(f"the broker refused the prediction: {err}"),
                                       out.source)
            else:
                retry.append((out, err))
        if retry:
            out, err = retry[-1]
            self._redo.extend(o for o, _ in retry)
            self._delivery_block = self._backoff(self._delivery_block,
                                                 f"cannot write to {out.topic}: {err.str()}")
            log.warning("%d outputs could not be written (%s: %s): input paused, retrying in %.1f s",
                        len(retry), out.topic, err, self._delivery_block.backoff_s)

    def _redo_failed_deliveries(self) -> None:
        block = self._delivery_block
        if block is None:
            return
        if self._redo:
            if self._clock() >= block.retry_at:
                redo, self._redo = self._redo, []
                self.deliveries.send(redo)
                block.resent = True
        elif self.deliveries.in_flight == 0 and (block.resent or self._clock() >= block.retry_at):
            # Everything re-sent was acknowledged (a failure would have refilled _redo), or, after
            # an aborted transaction, the back-off is over and the redo starts from the commit.
            self._delivery_block = None
            log.info("outputs are being written again: resuming input")

    def _bounds_done(self) -> bool:
        """A replay is done when every partition's reads reached its end and nothing is in flight."""
        if self._bounds is None:
            return False
        todo = [TopicPartition(t, p) for (t, p), (start, end) in self._bounds.items() if start < end]
        if self._tracker.in_flight() or self._queue or len(self._batcher):
            return False
        # The consumer's position, not the last offset seen: commit markers take offsets too.
        return all(tp.offset >= self._bounds[(tp.topic, tp.partition)][1]
                   for tp in self.consumer.position(todo))

    def status(self) -> Status:
        """Alive (the loop turns), not blocked, no stalled partition; ready once in the group."""
        stall_s = self.cfg.metrics.stall_timeout_ms / 1000.0
        silent = self._clock() - self._heartbeat
        if self._running and silent > stall_s:
            reason = f"main loop silent for {silent:.0f} s (a model call hanging?)"
        elif not self.healthy:
            reason = self.unhealthy_reason or "blocked"
        elif self._progress.stalled:
            stalled = sorted(self._progress.stalled)
            reason = "no progress on " + ", ".join(f"{t}[{p}]" for t, p in stalled)
        else:
            reason = ""
        return Status(healthy=not reason, ready=self._ready and self._running, reason=reason)

    def _watch_progress(self) -> None:
        self._progress.check(self._tracker.in_flight)
        if self.metrics is not None:
            self.metrics.in_flight_batches.set(len(self._queue) + self.deliveries.units_in_flight)
            self.metrics.producer_queue.set(len(self.deliveries.producer))

    def _pause_or_resume(self) -> None:
        blocked = self._blocked()
        if blocked != self._paused and self._assigned:
            tps = [TopicPartition(t, p) for t, p in sorted(self._assigned)]
            (self.consumer.pause if blocked else self.consumer.resume)(tps)
        self._paused = blocked
        if self.metrics is not None:
            self.metrics.healthy.set(0 if blocked else 1)
            self.metrics.paused_partitions.set(len(self._assigned) if blocked else 0)
            self.metrics.in_flight_rows.set(self._tracker.in_flight())

    def _commit_if_due(self) -> None:
        due = (self._clock() - self._last_commit) * 1000 >= self.cfg.processing.commit_interval_ms
        if due or self._txn_failure is not None:
            self._commit()

    def _commit(self, tps: Iterable[tuple[str, int]] | None = None) -> None:
        """Synchronously commit the done prefix; a partition's failure is logged and retried later.

        Exactly-once: commit the open transaction with the positions instead (all partitions).
        """
        self._last_commit = self._clock()
        if self._txn is not None:
            self._commit_transaction()
            return
        positions = self._tracker.committable(tps)
        if not positions:
            return
        offsets = [self._position(tp, off) for tp, off in positions.items()]
        try:
            with deadline(2 * self.cfg.output.ack_timeout_ms / 1000.0 + 10, "offset commit"):
                result = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self._commit_failed(CommitError({"all": str(exc.args[0])}), len(offsets))
            return
        failures = {f"{tp.topic}[{tp.partition}]": str(tp.error) for tp in result if tp.error}
        accepted = {(tp.topic, tp.partition): tp.offset for tp in result if not tp.error}
        self._committed(accepted)
        self.stats.commits += 1
        if failures:
            self._commit_failed(CommitError(failures), len(failures))

    # ---- rebalances -----------------------------------------------------------------------

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("assigned %s", _names(partitions))
        self._assigned.update((tp.topic, tp.partition) for tp in partitions)
        self._progress.assigned((tp.topic, tp.partition) for tp in partitions)
        self._ready = True
        if self._paused and partitions:
            consumer.pause(partitions)  # blocked: new partitions wait like the others
        if self.metrics is not None:
            self.metrics.rebalances.labels("assign").inc()
            self.metrics.assigned_partitions.set(len(self._assigned))

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Finish the revoked partitions' work and commit it before they go (cooperative)."""
        log.info("revoked %s", _names(partitions))
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        self._drain("revoke")
        self._commit(revoked)
        self._forget(revoked)
        if self.metrics is not None:
            self.metrics.rebalances.labels("revoke").inc()

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Lost partitions may belong to someone else already: drop their work, commit nothing."""
        log.warning("lost %s: dropping their in-flight work", _names(partitions))
        self._forget({(tp.topic, tp.partition) for tp in partitions})
        if self._txn is not None and self._txn.open:
            self._abort("partitions lost")  # its offsets can no longer be committed
        if self.metrics is not None:
            self.metrics.rebalances.labels("lost").inc()

    def _commit_transaction(self) -> None:
        assert self._txn is not None
        if not self._txn.open:
            return
        left = self.deliveries.flush(self.cfg.output.ack_timeout_ms / 1000.0)
        self._collect_acks(timeout_s=0.0)
        if self._failed or left or self._txn_failure:
            self._abort(self._txn_failure or ("outputs unacknowledged" if left else "processing failed"))
            return
        positions = self._tracker.committable()
        try:
            self._txn.commit([self._position(tp, off) for tp, off in positions.items()])
        except TransactionAbortedError as exc:
            self._abort(str(exc))
            return
        self._committed(positions)
        self.stats.commits += 1
        uncounted, self._uncounted = self._uncounted, []
        self._count(uncounted)

    def _position(self, tp: tuple[str, int], offset: int) -> TopicPartition:
        if self.commit_metadata is None:
            return TopicPartition(tp[0], tp[1], offset)
        return TopicPartition(tp[0], tp[1], offset, metadata=self.commit_metadata(tp))

    def _committed(self, positions: dict[tuple[str, int], int]) -> None:
        self._tracker.mark_committed(positions)
        self._progress.committed(positions)
        for (topic, partition), offset in positions.items():
            if self.metrics is not None:
                self.metrics.committed_offset.labels(topic, str(partition)).set(offset)

    def _abort(self, reason: str) -> None:
        """Abort the open transaction and read everything after the last commit again."""
        assert self._txn is not None
        log.warning("aborting the transaction (%s): rewinding to the last commit", reason)
        self._txn.abort()
        self.deliveries.discard()
        self._uncounted = []
        self._batcher.drop(lambda row: False)
        self._queue.clear()
        for (topic, partition), offset in self._tracker.rewind().items():
            if (topic, partition) in self._assigned:
                self.consumer.seek(TopicPartition(topic, partition, offset))
        if self._txn_failure is not None:  # an output could not be written: wait before redoing
            self._delivery_block = self._backoff(self._delivery_block, self._txn_failure)
            self._txn_failure = None

    def _forget(self, tps: set[tuple[str, int]]) -> None:
        """Drop every trace of these partitions' uncommitted work: its next owner redoes it."""
        def keep(row: Row) -> bool:
            return (row[0].topic, row[0].partition) not in tps

        self._batcher.drop(keep)
        self._queue = deque(b for b in (_filtered(b, keep) for b in self._queue) if b.rows)
        self._redo = [o for o in self._redo if o.source_tp not in tps]
        self._tracker.forget(tps)
        self._assigned -= tps
        self._progress.forget(tps)
        if self.metrics is not None:
            self.metrics.assigned_partitions.set(len(self._assigned))

    # ---- helpers --------------------------------------------------------------------------

    def _score(self, batch: Batch[Row]) -> list[Output] | None:
        """Predictions and dead letters for a batch; None when the model is held as broken."""
        records = [r for r, _ in batch.rows]
        features = np.stack([r.features for r in records])
        started = time.perf_counter()
        try:
            scored = score_isolating(self.runner, features, self._policy)
        except ModelBrokenError as exc:
            self._hold_model(str(exc))
            return None
        self._record_batch(batch, time.perf_counter() - started, scored.calls, scored.bisections)
        if len(scored.poison) == len(records):
            self._failed_batches += 1
            if (self._failed_batches >= self.cfg.processing.broken_after_failed_batches
                    and not model_answers(self.runner)):
                self._hold_model(f"{self._failed_batches} batches in a row failed entirely")
                return None
        else:
            self._failed_batches = 0
        if self._model_block is not None:
            log.info("the model answers again: resuming input")
            self._model_block = None
        scored_at = int(time.time() * 1000)
        outputs: list[Output] = []
        for i, ((record, message), score_row) in enumerate(zip(batch.rows, scored.scores, strict=True)):
            if i in scored.poison:
                self._send_dead_letter(scored.poison[i], message, cause=scored.poison[i])
                continue
            try:
                value = self.encoder.encode(prediction_fields(record, score_row, self.cfg.model.name,
                                                               self.cfg.model.version, scored_at,
                                                               self.run_id))
            except RecordError as exc:
                self._send_dead_letter(exc, message)
                continue
            outputs.append(Output(self.cfg.output.topic, record.key, value, None, message,
                                  event_time_ms=record.event_time_ms))
        return outputs

    def _hold_model(self, reason: str) -> None:
        self._model_block = self._backoff(self._model_block, f"model failing: {reason}")
        log.error("%s; input paused, retrying in %.1f s", reason, self._model_block.backoff_s)

    def _backoff(self, block: _Block | None, reason: str) -> _Block:
        p = self.cfg.processing
        backoff = (p.retry_backoff_ms / 1000.0 if block is None
                   else min(block.backoff_s * 2, p.retry_backoff_max_ms / 1000.0))
        return _Block(reason, self._clock() + backoff, backoff)

    def _blocked(self) -> bool:
        return self._model_block is not None or self._delivery_block is not None

    def _acknowledged(self, acked: list[Output]) -> None:
        by_tp: dict[tuple[str, int], list[int]] = {}
        for out in acked:
            by_tp.setdefault(out.source_tp, []).append(out.source.offset())
        for tp, offsets in by_tp.items():
            self._tracker.done(tp, offsets)
        if self._txn is None:
            self._count(acked)
        else:
            self._uncounted.extend(acked)  # not final until the transaction commits

    def _count(self, acked: list[Output]) -> None:
        if not acked:
            return
        now_ms = time.time() * 1000
        self.stats.last_ack_at = time.monotonic()
        latencies = []
        for out in acked:
            if out.stage is None:
                latencies.append(now_ms - out.event_time_ms)
            else:
                self.stats.dead_letters[out.stage] += 1
                if self.metrics is not None:
                    self.metrics.dead_letters.labels(out.stage).inc()
        self.stats.predictions += len(latencies)
        self.stats.record_latencies(latencies)
        if self.metrics is not None and latencies:
            self.metrics.predictions_produced.labels(self.cfg.output.topic).inc(len(latencies))
            for v in latencies:
                self.metrics.end_to_end.observe(v / 1000.0)

    def _drain(self, reason: FlushReason) -> None:
        """Flush the open batch, wait for every ack (up to the ack timeout), commit.

        Blocked, or after a failure, only what is already acknowledged is committed: the rest
        stays uncommitted for whoever reads these partitions next.
        """
        if not (self._failed or self._blocked()):
            batch = self._batcher.flush(reason)
            if batch is not None:
                self._queue.append(batch)
            self._infer_and_produce()
        left = self.deliveries.flush(self.cfg.output.ack_timeout_ms / 1000.0)
        self._collect_acks(timeout_s=0.0)
        if left:
            log.error("%d outputs not acknowledged within %d ms: their inputs stay uncommitted",
                      left, self.cfg.output.ack_timeout_ms)
        self._commit()

    def _close(self) -> None:
        self._running = False
        if self.consumer is not None:
            self.consumer.close()  # runs the revoke callback: nothing is left to flush by then
            self.consumer = None
        if self._txn is not None and self._txn.open and self._fatal is None:
            self._txn.abort()
        if self.deliveries is not None:
            self.deliveries.flush(self.cfg.output.ack_timeout_ms / 1000.0)
            self.deliveries = None

    def _send_dead_letter(self, error: RecordError | InferenceError, message: Message,
                          cause: BaseException | None = None) -> None:
        if not isinstance(error, RecordError):
            poison = PoisonRowError(f"the model fails on this row: {error}")
            poison.__cause__ = cause
            error = poison
        error.at(message.topic(), message.partition(), message.offset(), message.value())
        letter = dead_letter(
            error, dlq_topic=self._dlq_topic, key=message.key(), original_headers=message.headers(),
            timestamp_ms=message.timestamp()[1], group_id=self.cfg.input.group_id,
            model_name=self.cfg.model.name, model_version=self.cfg.model.version)
        log.debug("dead letter %s at %s: %s", error.stage, error.coordinates(), error)
        self.deliveries.send([Output(letter.topic, letter.key, letter.value, letter.headers,
                                     message, stage=letter.stage)])

    def _record_batch(self, batch: Batch[Any], seconds: float, calls: int, bisections: int) -> None:
        self.stats.batches += 1
        self.stats.rows_batched += len(batch.rows)
        self.stats.flushes[batch.reason] += 1
        self.stats.model_calls += calls
        self.stats.bisections += bisections
        if self.metrics is not None:
            m = self.metrics
            m.batch_size.observe(len(batch.rows))
            m.flushes.labels(batch.reason).inc()
            m.batch_wait.observe(batch.wait_s)
            m.inference.labels(self.cfg.model.name, self.cfg.model.version,
                               self.runner.provider).observe(seconds)
            if bisections:
                m.bisections.inc(bisections)

    def _transactional_settings(self) -> dict[str, Any]:
        if self.cfg.processing.guarantee != "exactly_once":
            return {}
        return {"transactional.id": transactional_id(self.cfg),
                "transaction.timeout.ms": self.cfg.processing.transaction_timeout_ms}

    def _on_client_error(self, err: KafkaError) -> None:
        """librdkafka's error callback: a fatal producer error (idempotence broken) ends the loop."""
        if err.fatal():
            self._fatal = err
        else:
            log.warning("producer: %s", err)

    def _commit_failed(self, error: CommitError, count: int) -> None:
        log.warning("%s (will retry)", error)
        if self.metrics is not None:
            self.metrics.commit_failures.inc(count)


def _filtered(batch: Batch[Row], keep: Callable[[Row], bool]) -> Batch[Row]:
    return Batch(tuple(r for r in batch.rows if keep(r)), batch.reason, batch.wait_s)


def _names(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing"
