"""The main loop: consume, decode, batch, infer, produce, collect acks, commit; until stopped.

At-least-once, by construction: an input offset becomes *done* only when the broker has
acknowledged its prediction (or its dead letter), and only the contiguous done prefix of each
partition is committed (see kafka/offsets.py). A crash at any instant re-reads what was not
committed. Exactly-once commits the same progress inside a transaction (kafka/checkpoint.py).

The loop routes; it decides nothing about guarantees (the checkpoint does), blocking (the holds),
counting (accounting) or the model that scores (serving). Unit tests run it against fake clients.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

from confluent_kafka import Message, TopicPartition

from streamer import heap
from streamer.config import dead_letter_topic
from streamer.errors import BrokerError, ProduceError
from streamer.holds import Holds
from streamer.house import Observers, Scope, Wiring
from streamer.kafka.checkpoint import Commit
from streamer.kafka.clients import consume_batch
from streamer.kafka.deadletter import letter_for
from streamer.kafka.messages import Predictions, consumed
from streamer.kafka.offsets import OffsetTracker, ReadRange
from streamer.kafka.side import KafkaSide
from streamer.kafka.topics import names
from streamer.observe.accounting import Accounting
from streamer.observe.health import Status, loop_status
from streamer.observe.progress import ProgressWatch
from streamer.observe.stats import Stats
from streamer.pipeline.batcher import FlushReason
from streamer.pipeline.broken import wholly_broken
from streamer.pipeline.inference import Inferred
from streamer.pipeline.lanes import Lane, Lanes
from streamer.pipeline.records import ModelId, Partition, Rows, Stamp
from streamer.pipeline.route import Router
from streamer.pipeline.stages import Reject

log = logging.getLogger(__name__)


class Processor:
    """One group member: reads feature events, writes predictions, commits after acks."""

    def __init__(self, wiring: Wiring, scope: Scope = Scope()) -> None:
        cfg, clock, metrics = wiring.cfg, wiring.clock, wiring.metrics
        self.cfg, self.serving, self.scope = cfg, wiring.serving, scope
        self.runner, self.encoder = wiring.runner, wiring.encoder  # the output codec reads predictions back
        runner = self.runner
        self.stats = Stats()
        self._observed = metrics is not None or cfg.metrics.log_interval_ms > 0  # librdkafka's lag wanted
        sides = wiring.models
        models = {s.cfg.model.name: (s.cfg.model, s.serving.runner.contract.numeric_width) for s in sides} or None
        self._account = Accounting(self.stats, metrics, cfg, runner.contract.numeric_width, clock, models)
        self._open_kafka, self._clock, self._topics = wiring.kafka, clock, wiring.topics
        self._observe = Observers((self._account, *wiring.observers))  # the accounting first
        self._lanes = Lanes([Lane.of(side.cfg, side.serving, wiring.decoder, side.encoder, clock) for side in sides]
                            or [Lane.of(cfg, self.serving, wiring.decoder, wiring.encoder, clock)])
        self._router = Router.of(cfg, [lane.name for lane in self._lanes], wiring.decoder)  # None: no route
        self._assigned: set[Partition] = set()
        self._tracker = OffsetTracker()  # consumed and done offsets, shared with the checkpoint
        self._dlq_topic = dead_letter_topic(cfg)
        self._holds = Holds(cfg.processing.retry_backoff_ms / 1e3, cfg.processing.retry_backoff_max_ms / 1e3, clock,
                          cfg.processing.broken_input_batches)
        self._range = ReadRange(scope.bounds) if scope.bounds is not None else None
        self._heartbeat = clock()  # the loop's last pass: /healthz reads it from another thread
        self._progress = ProgressWatch(cfg.metrics.stall_timeout_ms / 1000.0, clock, self._account.metrics)
        # ready: warmed up, in the group; failed: the loop died (close only); paused: input paused
        self._running = self._failed = self._ready = self._paused = self._stop_asked = False
        self._kafka: KafkaSide | None = None  # opened by run()
        self.http = None if wiring.health is None else wiring.health(self.status)  # /metrics, /healthz

    @property
    def kafka(self) -> KafkaSide:
        """The consumer, deliveries and checkpoint, open while the processor runs."""
        assert self._kafka is not None, "the Kafka side opens when the processor runs"
        return self._kafka

    servings = property(lambda self: self._lanes.servings)  # every model's serving by name, the default's first

    healthy = property(lambda self: not self._holds.blocked)
    unhealthy_reason = property(lambda self: self._holds.reason)  # None while healthy

    # ---- the loop -------------------------------------------------------------------------

    def run(self, until: Callable[[Stats], bool] | None = None) -> None:
        """Process until :meth:`stop` (or ``until(stats)``), then shut down. A bounded scope (a
        replay) reads exactly ``[start, end)`` of each of its partitions, then stops. Nothing is
        opened until the topics it needs exist (unhealthy while it waits; a stop ends the wait)."""
        if self._topics is not None and not self._topics.wait(lambda: self._stop_asked):
            self._lanes.close(0.0)
            return
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
                self._commit_if_due(read=bool(messages))
                self._watch_progress()
                if (until is not None and until(self.stats)) or self._bounds_done():
                    self._running = False
            self._drain("shutdown")
        except BaseException:
            self._failed = True
            raise
        finally:
            self._close()

    def reload(self) -> None:
        """Load every model again between two batches (SIGHUP). Signal-safe."""
        self._lanes.reload()

    def stop(self) -> None:
        """Ask the loop to finish (flush, acks, commit, close); signal-safe, kept if sent in start-up."""
        self._running, self._stop_asked = False, True

    # ---- steps ----------------------------------------------------------------------------

    def _open(self) -> None:
        self._lanes.start(self._account.started)  # pipelined: the inference threads
        self._kafka = self._open_kafka(self._tracker, self._clock, self.scope.commit_metadata,
                                       self._progress.on_stats if self._observed else None,
                                       on_full=lambda: self._collect_acks(timeout_s=0.05))
        if self._range is None:
            self.kafka.consumer.subscribe(list(self.cfg.input.topics), on_assign=self._on_assign,
                                          on_revoke=self._on_revoke, on_lost=self._on_lost)
        else:
            self.kafka.consumer.assign(self._range.assignment())
            self._on_assign(self.kafka.consumer, self._range.assignment())
        heap.freeze()  # what start-up built stays: out of the collector's way (heap.py)
        self._running = not self._stop_asked  # a SIGTERM during start-up is not forgotten

    def _consume(self) -> list[Message]:
        wait = min(self.cfg.input.consume_timeout_ms / 1000.0, self._lanes.poll_s,  # results due soon
                   self.kafka.deliveries.poll_s)  # acknowledgements to collect
        if not self._holds.blocked and self._lanes.behind(wait):  # waited for a model, read nothing
            return []
        if (remaining := self._lanes.remaining_s()) is not None and not self._holds.blocked:
            wait = min(wait, remaining)
        return consume_batch(self.kafka.consumer, self.cfg.input.consume_max_messages, wait)

    def _decode(self, messages: Sequence[Message]) -> dict[str, Rows]:
        chunk = consumed(messages)
        self._account.consumed(chunk.topics)
        # A partition revoked in the same consume() call is someone else's now (tracking it could
        # commit over the new owner's offsets); a replay scores nothing at or past its range's end.
        chunk = chunk.within(self._assigned, None if self._range is None else self._range.past_end)
        by_tp = chunk.by_partition()
        try:
            parts, rejects = self._lanes.decode(chunk, self._router)
        except BrokerError as exc:  # the registry is away: not the records' fault; read them again
            self._seek({tp: int(offsets[0]) for tp, offsets in by_tp.items()})
            self._holds.hold_input(str(exc))
            return {}
        if by_tp:  # something was read and decoded: whatever decoding needs answers again
            self._holds.input_decoded()
            good = sum(len(rows) for rows in parts.values())
            if self._holds.judge(wholly_broken(good, [r for bad in rejects.values() for r in bad])):
                self._seek({tp: int(offsets[0]) for tp, offsets in by_tp.items()})  # a config problem: later
                return {}
        for tp, offsets in by_tp.items():
            self._tracker.consumed(tp, offsets)
        for name, bad in rejects.items():  # None: the route's, named by the default model
            self._dead_letter(bad, None if name is None else self._lanes[name].serving.model)
        for rows in parts.values():
            self._observe.decoded(rows)
        return parts

    def _batch(self, parts: dict[str, Rows]) -> None:
        for lane in self._lanes:  # add() also flushes an open batch that is due
            lane.inference.add(lane.batcher.add(parts.get(lane.name, lane.stages.empty)))

    def _infer_and_produce(self) -> None:
        """Produce scored batches in order (pipelined: those the inference thread finished); stop
        at one the model cannot take (then retry later)."""
        for lane in self._lanes:
            self._account.reloaded(lane.serving.poll(), lane.name)  # a new version goes in between batches
        for lane in self._lanes:
            for done in lane.inference.ready(self._holds.model_may_run):
                outputs = self._predictions(lane, done)
                if outputs is None:
                    return
                self.kafka.send(outputs)

    def _collect_acks(self, timeout_s: float) -> None:
        """Serve delivery reports: acked outputs mark their offsets done; failures go by their verdict."""
        acked, failed = self.kafka.deliveries.collect(timeout_s)
        if acked:
            self._observe.acked(acked)
            self._account.final(self.kafka.checkpoint.acknowledged(acked))
        failed = self.kafka.checkpoint.failed(failed).within(self._assigned)  # the others are their new owner's
        self.kafka.send(list(failed.shrink))  # dead letters too large for their topic, cut short
        self._holds.redo(failed.retry)
        self._dead_letter([(ProduceError(f"the broker refused the prediction: {err}"), out.source)
                           for out, err in failed.refused])

    def _redo_failed_deliveries(self) -> None:
        self.kafka.send(self._holds.resend())  # nothing, unless a back-off is over
        self._holds.settle(self.kafka.deliveries.in_flight)

    def _pause_or_resume(self) -> None:
        paused = self._holds.paused
        if paused != self._paused and self._assigned:
            tps = [TopicPartition(t, p) for t, p in sorted(self._assigned)]
            (self.kafka.consumer.pause if paused else self.kafka.consumer.resume)(tps)
        self._paused = paused
        self._account.gauges(held=self._holds.reason, paused=paused, assigned=len(self._assigned),
                             in_flight_rows=self._tracker.in_flight(), input_broken=self._holds.broken is not None)

    def _commit_if_due(self, read: bool) -> None:  # read: this pass's consume returned events
        self._apply(self.kafka.checkpoint.settled())  # background commits answered since the last pass
        if self.kafka.checkpoint.commit_due(read):
            self._apply(self.kafka.checkpoint.commit(background=True))

    def _commit(self, tps: Iterable[Partition] | None = None) -> None:
        """Commit progress now (all partitions, or ``tps`` where the guarantee allows)."""
        self._apply(self.kafka.checkpoint.commit(tps, failing=self._failed))

    def _watch_progress(self) -> None:
        self._progress.check(self._tracker.in_flight)
        self._account.queues(self._lanes.scoring + self.kafka.deliveries.units_in_flight,
                             len(self.kafka.deliveries.producer), self._progress.lag)

    def _bounds_done(self) -> bool:
        """A replay is done when every partition's reads reached its end and nothing is in flight."""
        busy = self._tracker.in_flight() or self._lanes.scoring or self._lanes.batched
        return self._range is not None and not busy and self._range.read(self.kafka.consumer)

    def status(self) -> Status:
        """Alive (the loop turns), not blocked, no stalled partition; ready once in the group."""
        return loop_status(running=self._running, silent_s=self._clock() - self._heartbeat,
                           stall_s=self.cfg.metrics.stall_timeout_ms / 1000.0,
                           blocked=self._holds.reason or (self._topics and self._topics.reason) or None,
                           stalled=self._progress.stalled, ready=self._ready)

    # ---- rebalances -----------------------------------------------------------------------

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("assigned %s", names(partitions))
        self._assigned.update((tp.topic, tp.partition) for tp in partitions)
        self._progress.assigned((tp.topic, tp.partition) for tp in partitions)
        self._ready = True
        if self._paused and partitions:
            consumer.pause(partitions)  # blocked: new partitions wait like the others
        self._account.rebalanced("assign", len(self._assigned))

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Finish the revoked partitions' work and commit it before they go (cooperative)."""
        log.info("revoked %s", names(partitions))
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        self._drain("revoke")
        self._commit(revoked)
        self._forget(revoked)
        self._account.rebalanced("revoke", len(self._assigned))

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Lost partitions may belong to someone else already: drop their work, commit nothing."""
        log.warning("lost %s: dropping their in-flight work", names(partitions))
        lost = {(tp.topic, tp.partition) for tp in partitions}
        self._forget(lost)
        self._apply(self.kafka.checkpoint.lost(lost))
        self._account.rebalanced("lost", len(self._assigned))

    # ---- helpers --------------------------------------------------------------------------

    def _apply(self, commit: Commit) -> None:
        """Act on what a commit did: count, record, and after an abort read again."""
        self._progress.committed(commit.committed)
        self._account.commit(commit)
        if commit.rewind is not None:  # an aborted transaction: its outputs are gone, redo them
            self._lanes.clear()
            self._seek(commit.rewind)
            if commit.write_failure is not None:  # an output could not be written: wait first
                self._holds.writes_failed(commit.write_failure)

    def _seek(self, positions: dict[Partition, int]) -> None:  # those still assigned
        for tp in positions.keys() & self._assigned:
            self.kafka.consumer.seek(TopicPartition(tp[0], tp[1], positions[tp]))

    def _forget(self, tps: set[Partition]) -> None:
        """Drop every trace of these partitions' uncommitted work: its next owner redoes it."""
        self._lanes.keep(partial(Rows.without, tps=tps))
        self._holds.forget(tps)
        self._tracker.forget(tps)
        self._assigned -= tps
        self._progress.forget(tps)

    def _predictions(self, lane: Lane, done: Inferred) -> Predictions | None:
        """Predictions for a lane's scored batch (its rejects go to dead letters); None while its model is held."""
        if done.out is None:
            self._holds.hold_model(str(done.error), lane.name)
            return None
        batch, out = done.batch, done.out
        self._account.breaker(lane.serving.breaker.state.value, lane.name)
        self._holds.model_answered(lane.name)
        stamp = Stamp.of(out, int(time.time() * 1000), self.scope.run_id)
        rows, values, rejects = lane.stages.encode(batch.rows, out.scores, out.poison, stamp)
        self._observe.scored(batch, done.seconds, out, rows)
        self._dead_letter(rejects, out.model)  # named by the model that scored them
        return Predictions(lane.topic, values, rows)

    def _drain(self, reason: FlushReason) -> None:
        """Flush the open batch (unless blocked or failed), wait for the acks, commit what they acked."""
        if not (self._failed or self._holds.blocked):
            self._lanes.flush(reason)
            self._infer_and_produce()
            while self._lanes.scoring and not self._holds.blocked:  # pipelined: the threads' batches
                self._lanes.wait()
                self._infer_and_produce()
        left = self.kafka.deliveries.flush(self.cfg.output.ack_timeout_ms / 1000.0)
        self._collect_acks(timeout_s=0.0)
        if left:
            log.error("%d outputs not acknowledged within %d ms: their inputs stay uncommitted",
                      left, self.cfg.output.ack_timeout_ms)
        self._commit()

    def _close(self) -> None:
        self._running = False
        heap.thaw()  # first: whatever closing raises, the heap is the collector's again
        if self._kafka is not None:
            self._kafka.consumer.close()  # runs the revoke callback: nothing is left to flush by then
            self._kafka.checkpoint.close()
            self._kafka.deliveries.flush(self.cfg.output.ack_timeout_ms / 1000.0)
            self._kafka = None
        self._lanes.close(self.cfg.output.ack_timeout_ms / 1000.0)  # challengers publish what they have
        self._account.stopped(self._failed)

    def _dead_letter(self, rejects: Sequence[Reject],
                     scored_by: ModelId | None = None) -> None:
        """Dead letters as one unit, named by ``scored_by``, the model that scored them (default: serving)."""
        model = scored_by or self.serving.model
        self.kafka.send([letter_for(error, message, dlq_topic=self._dlq_topic, group_id=self.cfg.input.group_id,
                                    model=model) for error, message in rejects])
