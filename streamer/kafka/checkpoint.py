"""Checkpoints: when consumed input counts as done, and how its progress is committed.

One committer per guarantee, chosen once when the processor is wired (:data:`CHECKPOINTS`); the
loop calls the same methods whichever it runs and never asks which:

- :class:`AtLeastOnce`: an input offset is *done* when its outputs are acknowledged, and the
  contiguous done prefix of each partition is committed through the consumer (see offsets.py
  for the worked example: done 34 35 36 40 commits 37). The periodic commit goes out in the
  background, so scoring does not stall for its round trip; its answer comes through the
  consumer's commit callback and :meth:`settled` reports it; one whose answer is overdue goes
  again, and one whose resend is unanswered too ends the process for a restart (pending.py). A
  revoke or a stop commits synchronously: the partitions must be committed before they go.
- :class:`Transactional` (exactly-once, KIP-447): outputs are produced inside a transaction and
  the consumed positions are added to it with the consumer's group metadata; the consumer never
  commits by itself. A failed output or an abortable error aborts the transaction, and the
  :class:`Commit` returned tells the loop where to read again (``rewind``).

Both survive a producer that librdkafka declares fatal (its error callback, or a transactional call
answering a fatal error: INVALID_TXN_STATE from an abort after a network cut, librdkafka issue
4849): at the next commit the producer is replaced with a new one (exactly-once: a new
``init_transactions``, which aborts what the old one left open) and everything after the last
commit is read again. A fenced producer is replaced once: librdkafka reports every stale epoch
as fenced, and the coordinator bumps the epoch itself when it aborts a transaction that outlived
``transaction.timeout.ms`` (a network cut longer than that), with no other instance involved. A
second fence within :data:`FENCE_WINDOW_S` means another instance does hold the transactional.id
and fenced us back: this one stops (:class:`ProducerFatalError`, exit 3) and leaves the id to it.
The replacement cannot write anything the group has moved past: the offsets of a transaction carry
the consumer's group generation (KIP-447). Nor is a producer that keeps failing replaced for
ever: after :data:`MAX_RENEWALS` replacements without a commit in between, the process exits.

Neither calls back into the loop: each returns a :class:`Commit` that says what happened.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from streamer.config import Config, transactional_id
from streamer.errors import CommitError, ProducerFatalError, TransactionAbortedError
from streamer.kafka.delivery import Deliveries
from streamer.kafka.messages import Acked, Failed
from streamer.kafka.offsets import OffsetTracker
from streamer.kafka.pending import OnItsWay
from streamer.kafka.quiet import MIN_QUIET_MS, QuietSpell
from streamer.kafka.transactions import Transactions, fatal_error
from streamer.kafka.watchdog import deadline
from streamer.pipeline.records import Partition

log = logging.getLogger(__name__)
MAX_RENEWALS = 5  # producers replaced in a row without a commit in between; then exit
# A fence within this long of the previous one ends the process: two instances share the
# transactional.id and would otherwise take it from each other for ever.
FENCE_WINDOW_S = 300.0


@dataclass(frozen=True, slots=True)
class Commit:
    """What one commit did. Empty when there was nothing to commit."""

    committed: dict[Partition, int] = field(default_factory=dict)  # positions accepted
    counted: Acked = field(default_factory=Acked)  # outputs that became final with it
    error: CommitError | None = None  # partitions whose commit failed (retried next time)
    failed_partitions: int = 0
    attempted: bool = False  # a commit request went to the broker
    rewind: dict[Partition, int] | None = None  # aborted: read from here again, drop the rest
    write_failure: str | None = None  # aborted because an output could not be written


class Checkpoint(Protocol):
    """The committer interface the loop sees."""

    tracker: OffsetTracker

    def acknowledged(self, acked: Acked) -> Acked:
        """Mark acknowledged outputs' offsets done; return those that are final now."""

    def failed(self, failed: Failed) -> Failed:
        """Note failed deliveries; return those the loop must act on (dead-letter, cut short,
        produce again: their verdicts)."""

    def commit_due(self, read: bool = True) -> bool:
        """Is a commit due: the interval passed, a failure waits, or the input went quiet (``read``:
        this pass read events) for a consume timeout, all done, with progress uncommitted? Each pass."""

    def commit(self, tps: Iterable[Partition] | None = None, failing: bool = False,
               background: bool = False) -> Commit:
        """Commit progress (of ``tps`` only, where the guarantee allows); ``failing``: the loop
        died, commit only what is safe; ``background``: do not wait for the broker's answer
        where the guarantee allows (it comes from :meth:`settled`)."""

    def commit_reported(self, err: KafkaError | None, partitions: list[KafkaTopicPartition]) -> None:
        """The consumer's commit callback (``on_commit``): a background commit was answered."""

    def settled(self) -> Commit:
        """What the background commits answered since the last call did."""

    def lost(self, tps: set[Partition]) -> Commit:
        """Partitions lost: their work is dropped and never committed."""

    def sending(self) -> None:
        """The loop is about to send outputs (the first after a commit opens a transaction)."""

    def close(self) -> None:
        """Release what is open (an open transaction is aborted unless the producer is dead)."""

    def producer_failed(self, err: KafkaError) -> None:
        """librdkafka declared the producer fatal: replace it at the next commit (now due);
        raises :class:`ProducerFatalError` when it was fenced."""


class _Base:
    def __init__(self, cfg: Config, tracker: OffsetTracker, consumer: Any, deliveries: Deliveries,
                 clock: Callable[[], float], metadata: Callable[[Partition], str] | None) -> None:
        self.tracker = tracker
        self._consumer, self._deliveries, self._clock, self._metadata = consumer, deliveries, clock, metadata
        self._interval_s = cfg.processing.commit_interval_ms / 1000.0
        self._ack_timeout_s = cfg.output.ack_timeout_ms / 1000.0
        self._last = clock()
        self._quiet = QuietSpell(max(cfg.input.consume_timeout_ms, MIN_QUIET_MS) / 1000.0, clock)
        self._reports: list[tuple[KafkaError | None, list[KafkaTopicPartition]]] = []
        self._broken: ProducerFatalError | None = None  # the producer is fatal: renew at the commit
        self._renewals = 0  # in a row, without a commit in between
        self._fenced_at: float | None = None  # when a fenced producer was last replaced

    def producer_failed(self, err: KafkaError) -> None:
        self._mark_broken(fatal_error(err))

    def _mark_broken(self, broken: ProducerFatalError) -> None:
        """Renew the producer at the next commit (due now); fenced again soon, end the loop at once."""
        if self._fenced_again(broken):
            raise broken
        self._broken = broken

    def _fenced_again(self, broken: ProducerFatalError) -> bool:
        return broken.fenced and self._fenced_at is not None and self._clock() - self._fenced_at < FENCE_WINDOW_S

    def _renew(self, broken: ProducerFatalError) -> Commit:
        """Replace a fatal producer; everything after the last commit is to be read again (the
        outputs sent through the old one are written off)."""
        self._broken = None
        self._renewals += 1
        if self._fenced_again(broken) or self._renewals > MAX_RENEWALS:
            raise broken
        if broken.fenced:
            self._fenced_at = self._clock()
            log.warning("%s: the epoch moved on (a transaction that outlived transaction.timeout.ms, or another "
                        "instance with this transactional.id); replacing the producer once, a second fence "
                        "within %.0f s ends the process", broken, FENCE_WINDOW_S)
        log.warning("%s: replacing the producer, reading again from the last commit", broken)
        self._deliveries.renew()
        return Commit(rewind=self.tracker.rewind())

    def commit_reported(self, err: KafkaError | None, partitions: list[KafkaTopicPartition]) -> None:
        self._reports.append((err, partitions))

    def settled(self) -> Commit:
        return Commit()

    def commit_due(self, read: bool = True) -> bool:
        settled = self._quiet.passed(heard=read) and not self.tracker.in_flight() and self._uncommitted()
        if settled:
            self._quiet.spend()  # once a spell (quiet.py): a failed one waits for the interval
        return settled or self._broken is not None or self._clock() - self._last >= self._interval_s

    def _uncommitted(self) -> bool:  # progress no commit carries yet: each guarantee's own
        return False

    def _position(self, tp: Partition, offset: int) -> KafkaTopicPartition:
        if self._metadata is None:
            return KafkaTopicPartition(tp[0], tp[1], offset)
        return KafkaTopicPartition(tp[0], tp[1], offset, metadata=self._metadata(tp))

    def _done(self, acked: Acked) -> None:
        for tp, offsets in acked.offsets().items():
            self.tracker.done(tp, offsets[0] if len(offsets) == 1 else np.concatenate(offsets))


class AtLeastOnce(_Base):
    """Commits the done prefix through the consumer after the acks: in the background when
    periodic, synchronously on revoke and stop."""

    def __init__(self, cfg: Config, tracker: OffsetTracker, consumer: Any, deliveries: Deliveries,
                 clock: Callable[[], float], metadata: Callable[[Partition], str] | None) -> None:
        super().__init__(cfg, tracker, consumer, deliveries, clock, metadata)
        # Unanswered for the ack timeout (how long a broker's answer to outputs is waited for; at
        # least two intervals, so a slow, healthy coordinator is not asked twice): overdue.
        self._on_its_way = OnItsWay(max(2 * self._interval_s, self._ack_timeout_s), clock)

    @staticmethod
    def producer_settings(cfg: Config) -> dict[str, Any]:
        return {}

    def acknowledged(self, acked: Acked) -> Acked:
        self._done(acked)
        return acked

    def failed(self, failed: Failed) -> Failed:
        return failed

    def commit(self, tps: Iterable[Partition] | None = None, failing: bool = False,
               background: bool = False) -> Commit:
        self._last = self._clock()
        if self._broken is not None:
            return self._renew(self._broken)
        positions = self.tracker.committable(tps)
        if background:
            positions = self._on_its_way.sendable(positions)
        if not positions:
            return Commit()
        offsets = [self._position(tp, off) for tp, off in positions.items()]
        if background:
            try:
                self._consumer.commit(offsets=offsets, asynchronous=True)
            except KafkaException as exc:
                return Commit(error=CommitError({"all": str(exc.args[0])}), failed_partitions=len(offsets))
            self._on_its_way.sent(positions)
            return Commit(attempted=True)
        try:
            with deadline(2 * self._ack_timeout_s + 10, "offset commit"):
                result = self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            return Commit(error=CommitError({"all": str(exc.args[0])}), failed_partitions=len(offsets))
        failures = {f"{tp.topic}[{tp.partition}]": str(tp.error) for tp in result if tp.error}
        accepted = {(tp.topic, tp.partition): tp.offset for tp in result if not tp.error}
        self._on_its_way.forget(accepted)  # answered here
        self.tracker.mark_committed(accepted)
        if accepted:
            self._renewals = 0
        return Commit(committed=accepted, attempted=True, error=CommitError(failures) if failures else None,
                      failed_partitions=len(failures))

    def settled(self) -> Commit:
        if not self._reports:
            return Commit()
        reports, self._reports = self._reports, []
        accepted: dict[Partition, int] = {}
        failures: dict[str, str] = {}
        for err, partitions in reports:
            if err is not None and not partitions:  # it names nothing: all on its way may be lost
                self._on_its_way.forget()
                failures["all"] = str(err)
            # A partition's own error decides it; the report's error alone (none of its
            # partitions carries one) failed the whole request.
            whole = err is not None and not any(tp.error is not None for tp in partitions or ())
            for tp in partitions or ():
                key = (tp.topic, tp.partition)
                ok = tp.error is None and not whole
                self._on_its_way.answered(key, tp.offset, ok)
                if ok:
                    accepted[key] = tp.offset
                else:
                    failures[f"{tp.topic}[{tp.partition}]"] = str(tp.error or err)
        self.tracker.mark_committed(accepted)
        if accepted:
            self._renewals = 0
        return Commit(committed=accepted, error=CommitError(failures) if failures else None,
                      failed_partitions=len(failures))

    def _uncommitted(self) -> bool:  # positions not yet sent
        return self._on_its_way.unsent(self.tracker.committable())

    def lost(self, tps: set[Partition]) -> Commit:
        self._on_its_way.forget(tps)  # back later, their positions go anew
        return Commit()

    def sending(self) -> None:
        pass  # nothing opens: each output counts once acknowledged

    def close(self) -> None:
        pass


class Transactional(_Base):
    """Exactly-once: each commit interval's outputs and consumed positions in one transaction."""

    @staticmethod
    def producer_settings(cfg: Config) -> dict[str, Any]:
        return {"transactional.id": transactional_id(cfg),
                "transaction.timeout.ms": cfg.processing.transaction_timeout_ms}

    def __init__(self, cfg: Config, tracker: OffsetTracker, consumer: Any, deliveries: Deliveries,
                 clock: Callable[[], float], metadata: Callable[[Partition], str] | None) -> None:
        super().__init__(cfg, tracker, consumer, deliveries, clock, metadata)
        self._txn = self._transactions()
        self._failure: str | None = None  # an output of the open transaction failed
        self._uncounted = Acked()  # acknowledged, final once the transaction commits

    def _transactions(self) -> Transactions:
        """The transactional state of the current producer (init_transactions: this fences any
        older producer of our transactional.id and aborts what it left open)."""
        return Transactions(self._deliveries.producer, self._consumer.consumer_group_metadata, self._ack_timeout_s)

    def sending(self) -> None:
        """The first output after a commit opens the next transaction."""
        try:
            self._txn.begin()
        except ProducerFatalError as exc:  # its outputs fail; the commit (due now) renews it
            self._mark_broken(exc)

    def _renew(self, broken: ProducerFatalError) -> Commit:
        commit = super()._renew(broken)
        self._txn = self._transactions()
        self._uncounted = Acked()
        failure, self._failure = self._failure, None
        return replace(commit, write_failure=failure)

    def acknowledged(self, acked: Acked) -> Acked:
        self._done(acked)
        self._uncounted = self._uncounted.plus(acked)
        return Acked()

    def failed(self, failed: Failed) -> Failed:
        if failed:  # the transaction cannot commit: abort it at the next commit, redo from the last
            errors = (*failed.retry, *failed.refused)
            self._failure = (f"cannot write to {errors[0][0].topic}: {errors[0][1].str()}" if errors else
                             f"cannot write to {failed.shrink[0].topic}: a dead letter too large for it")
        return Failed()

    def commit_due(self, read: bool = True) -> bool:
        return super().commit_due(read) or self._failure is not None

    def _uncommitted(self) -> bool:  # the open transaction
        return self._txn.open

    def commit(self, tps: Iterable[Partition] | None = None, failing: bool = False,
               background: bool = False) -> Commit:
        """Commit the open transaction with every partition's position (``tps`` cannot narrow a
        transaction: a revoke commits them all). Always waits: the transaction must end before
        the next one begins."""
        self._last = self._clock()
        if self._broken is not None:
            return self._renew(self._broken)
        if not self._txn.open:
            return Commit()
        left = self._deliveries.flush(self._ack_timeout_s)
        acked, failed = self._deliveries.collect(0.0)
        self.acknowledged(acked)
        self.failed(failed)
        if failing or left or self._failure:
            return self._abort(self._failure or ("outputs unacknowledged" if left else "processing failed"))
        positions = self.tracker.committable()
        try:
            self._txn.commit([self._position(tp, off) for tp, off in positions.items()])
        except TransactionAbortedError as exc:
            return self._abort(str(exc))
        except ProducerFatalError as exc:
            return self._renew(exc)
        self.tracker.mark_committed(positions)
        self._renewals = 0
        counted, self._uncounted = self._uncounted, Acked()
        return Commit(committed=positions, counted=counted, attempted=True)

    def lost(self, tps: set[Partition]) -> Commit:
        # Its offsets can no longer be committed: abort, and read everything else again.
        return self._abort("partitions lost") if self._txn.open else Commit()

    def close(self) -> None:
        if self._txn.open and self._broken is None:
            try:
                self._txn.abort()
            except ProducerFatalError as exc:  # what it held is uncommitted: read again later
                log.warning("closing: %s", exc)

    def _abort(self, reason: str) -> Commit:
        """Abort the open transaction; everything after the last commit is to be read again."""
        log.warning("aborting the transaction (%s): rewinding to the last commit", reason)
        try:
            self._txn.abort()
        except ProducerFatalError as exc:
            return self._renew(exc)
        self._deliveries.discard()
        self._uncounted = Acked()
        failure, self._failure = self._failure, None
        return Commit(rewind=self.tracker.rewind(), write_failure=failure)


CHECKPOINTS: dict[str, type[AtLeastOnce] | type[Transactional]] = {
    "at_least_once": AtLeastOnce, "exactly_once": Transactional,
}
