"""Exactly-once: transactions that carry a batch's outputs and its input offsets together.

Read-process-write (KIP-447): outputs are produced inside a transaction, and the consumed
positions are added with ``send_offsets_to_transaction`` and the consumer's *group metadata*, so a
member fenced by a rebalance cannot commit. The consumer never commits by itself in this mode.

Errors come in three kinds, and anything unclassified counts as fatal:
- retriable: the same call is tried again, a few times;
- abortable (``txn_requires_abort``): :class:`TransactionAbortedError`; the caller aborts and
  rewinds its consumer to the last committed positions;
- fatal: :class:`ProducerFatalError`, left behind with the producer: the checkpoint builds a new
  one (INVALID_TXN_STATE from an abort after a network cut, librdkafka issue 4849; a fence, once
  within checkpoint.FENCE_WINDOW_S, since a timed-out transaction also fences).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streamer.errors import BrokerError, ProducerFatalError, TransactionAbortedError
from streamer.kafka.watchdog import deadline

log = logging.getLogger(__name__)
RETRIES = 5
T = TypeVar("T")
# send_offsets_to_transaction answers in milliseconds, or within a group coordinator failover
# (broker.session.timeout.ms, 9 s by default, plus loading the offsets) when its broker dies. Past
# this it is the librdkafka hang (issues 5456, 5511: a decommissioned coordinator stays cached and
# the call waits for a broker state change that may never come): exit 70 then, not after its timeout.
SEND_OFFSETS_DEADLINE_S = 20.0
# A stale epoch: a newer instance with our transactional.id, or the coordinator's own bump when it
# aborted a transaction that outlived transaction.timeout.ms (librdkafka reports both as _FENCED).
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def fatal_error(err: KafkaError, what: str = "producer") -> ProducerFatalError:
    return ProducerFatalError(f"{what}: fatal producer error: {err}", fenced=err.code() in FENCED)


class Transactions:
    """The transactional state of one producer: at most one transaction open at a time."""

    def __init__(self, producer: Any, group_metadata: Callable[[], Any], timeout_s: float) -> None:
        self._producer = producer
        self._group_metadata = group_metadata
        self._timeout_s = timeout_s
        self.open = False
        self._call("init_transactions", lambda: producer.init_transactions(timeout_s))

    def begin(self) -> None:
        if not self.open:
            self._call("begin_transaction", self._producer.begin_transaction)
            self.open = True

    def commit(self, offsets: list[TopicPartition]) -> None:
        """Add ``offsets`` (next offsets to read) to the open transaction and commit it."""
        if offsets:
            metadata = self._group_metadata()
            self._call("send_offsets_to_transaction", lambda: self._producer.send_offsets_to_transaction(
                offsets, metadata, self._timeout_s), deadline_s=min(SEND_OFFSETS_DEADLINE_S, self._timeout_s + 10))
        self._call("commit_transaction", lambda: self._producer.commit_transaction(self._timeout_s))
        self.open = False

    def abort(self) -> None:
        if self.open:
            self._call("abort_transaction", lambda: self._producer.abort_transaction(self._timeout_s))
            self.open = False

    def _call(self, name: str, fn: Callable[[], T], deadline_s: float | None = None) -> T:
        for attempt in range(1, RETRIES + 1):
            try:
                # The call returns by its timeout unless librdkafka hangs: then exit 70, soon.
                with deadline(deadline_s or self._timeout_s + 10, name):
                    return fn()
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():
                    raise fatal_error(err, name) from exc
                if err.txn_requires_abort():
                    raise TransactionAbortedError(f"{name}: {err}") from exc
                if not err.retriable() or attempt == RETRIES:
                    raise BrokerError(f"{name} failed: {err}") from exc
                log.warning("%s: %s (retrying, %d of %d)", name, err, attempt, RETRIES)
        raise AssertionError("unreachable")
