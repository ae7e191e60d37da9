"""Producing outputs and collecting their delivery reports: one callback object per batch.

A batch's predictions go to librdkafka in one ``produce_batch`` call (confluent-kafka's binding of
``rd_kafka_produce_batch``): the partitioner runs per message, as for ``produce``, and the
messages are queued in their order, so each partition gets them in order. It is used only when
the local queue has room for the whole batch (``queue.buffering.max.messages``), since a message
refused by a full queue while later ones were queued would land out of order; otherwise, and for
single outputs (they have headers, which the batch call does not take), one ``produce`` each.

Outputs go out in units: a batch's predictions (:class:`Predictions`, columns: one value per
scored row) or single :class:`Output` messages (dead letters, predictions produced again). Every
message of a unit reports to the same bound method, which only notes an error and counts down;
the bookkeeping happens when :meth:`Deliveries.collect` is called, per unit, and comes back as
:class:`Acked` (what the broker took) and failures. A failed output is handed back with its
error as an :class:`Output`, never dropped: the processor decides whether to dead-letter it (a
permanent error) or to produce it again later.
"""

from __future__ import annotations

import contextlib

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException

from streamer.config import OutputKey
from streamer.pipeline.records import Rows

Headers = list[tuple[str, bytes]]
QUEUE_LIMIT = 100_000  # librdkafka's queue.buffering.max.messages default
# While outputs wait for their acks, the loop blocks in consume for at most this long: their
# reports are served by producer.poll between two consumes, and the end-to-end latency (and the
# commit) of a prediction runs to the moment its ack is collected. A whole consume timeout (100 ms)
# in between put p50 at 200 ms for a 7,000 events/s trickle.
ACK_POLL_S = 0.005

# A message larger than the topic (or the producer) takes.
TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE,
                       KafkaError.INVALID_MSG_SIZE})
# Errors that concern the one message, whatever the broker's state: retrying cannot help.
PERMANENT = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG, KafkaError.INVALID_MSG_SIZE,
    KafkaError.INVALID_RECORD, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_REQUIRED_ACKS,
})


@dataclass(slots=True)
class Output:
    """One message to produce on behalf of one consumed message (``source``)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    source: Any  # the consumed confluent_kafka.Message this output stands for
    stage: str | None = None  # None for a prediction, else the dead letter's stage
    event_time_ms: int = 0
    attempts: int = 0

    @property
    def source_tp(self) -> tuple[str, int]:
        return self.source.topic(), self.source.partition()


@dataclass(frozen=True, slots=True)
class Predictions:
    """A batch's predictions: ``values[i]`` is the prediction of ``rows`` row i, all to ``topic``;
    ``keys[i]`` its key (None: the input message's key, ``output.key: input``)."""

    topic: str
    values: list[bytes]
    rows: Rows
    keys: list[bytes | None] | None = None

    def output(self, i: int) -> Output:
        """Row ``i``'s prediction as a single output (to produce it again, or dead-letter it)."""
        m = self.rows.source.items[i]
        key = m.key() if self.keys is None else self.keys[i]
        return Output(self.topic, key, self.values[i], None, m, event_time_ms=int(self.rows.event_times[i]),
                      attempts=1)

    def keyed(self, key_by: OutputKey) -> Predictions:
        """These predictions keyed as ``output.key`` says: the input's key, or a prediction field's
        UTF-8 bytes (``entity_id``: every prediction of an entity in one partition, in order, and
        the latest kept by a compacted topic); an empty id is a null key."""
        if key_by == "input":
            return self
        ids = self.rows.entity_ids if key_by == "entity_id" else self.rows.event_ids
        # an event without an entity is keyed null, not b"": one key for all of them would put
        # them in one partition, and a compacted topic would keep one of them
        return replace(self, keys=[None if not i else i if isinstance(i, bytes) else str(i).encode() for i in ids])


@dataclass(slots=True)
class Acked:
    """What the broker acknowledged: predictions as batches of rows, other outputs one by one."""

    batches: list[Rows] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.batches or self.outputs)

    def extend(self, other: Acked) -> None:
        self.batches.extend(other.batches)
        self.outputs.extend(other.outputs)

    def offsets(self) -> dict[tuple[str, int], list[np.ndarray]]:
        """The source offsets now done, per partition."""
        out: dict[tuple[str, int], list[np.ndarray]] = {}
        for rows in self.batches:
            for tp, offsets in rows.source.by_partition().items():
                out.setdefault(tp, []).append(offsets)
        for o in self.outputs:
            out.setdefault(o.source_tp, []).append(np.array([o.source.offset()], np.int64))
        return out


class _Unit:
    """One send: its messages report to :meth:`report`; ``errors`` hold (value, error) pairs."""

    __slots__ = ("sent", "size", "remaining", "errors", "finished", "generation")

    def __init__(self, sent: Predictions | list[Output], finished: list[_Unit], generation: int) -> None:
        self.sent, self.finished, self.generation = sent, finished, generation
        self.size = len(sent.values) if isinstance(sent, Predictions) else len(sent)
        self.remaining = self.size  # reports still to come
        self.errors: list[tuple[int | bytes | None, KafkaError]] = []

    def report(self, err: KafkaError | None, msg: Any) -> None:
        """Called once per message, from poll(): kept to a decrement (the count inline, not a call)."""
        if err is not None:
            self.errors.append((msg.value() if msg is not None else None, err))
        self.remaining -= 1
        if self.remaining == 0:
            self.finished.append(self)

    def refused(self, index: int, err: KafkaError) -> None:
        """Refused before sending (too large, say): reported at once, by index."""
        self.errors.append((index, err))
        self.report(None, None)

    def sort(self) -> tuple[Acked, list[tuple[Output, KafkaError]]]:
        """Acked and failed, with each failure mapped back to its output by index or by value."""
        sent = self.sent
        values = sent.values if isinstance(sent, Predictions) else [o.value for o in sent]
        bad: dict[int, KafkaError] = {}
        if self.errors:
            where: dict[bytes | None, list[int]] = {}
            for i, v in enumerate(values):
                where.setdefault(v, []).append(i)
            for ref, err in self.errors:
                if isinstance(ref, int):
                    where_i = ref
                else:  # a value sent twice in one unit fails once per copy: take them in order
                    left = [i for i in where.get(ref, []) if i not in bad]
                    where_i = left[0] if left else next(i for i in range(len(values)) if i not in bad)
                bad[where_i] = err
        if isinstance(sent, Predictions):
            if not bad:
                return Acked(batches=[sent.rows]), []
            ok = np.ones(len(values), bool)
            ok[list(bad)] = False
            return Acked(batches=[sent.rows.take(ok)]), [(sent.output(i), e) for i, e in sorted(bad.items())]
        return (Acked(outputs=[o for i, o in enumerate(sent) if i not in bad]),
                [(sent[i], e) for i, e in sorted(bad.items())])


class Deliveries:
    """Sends outputs through one producer and sorts the reports into acked and failed."""

    def __init__(self, producer: Any, on_full: Callable[[], None],
                 before_send: Callable[[], None] = lambda: None,
                 make_producer: Callable[[], Any] | None = None, key_by: OutputKey = "input",
                 queue_limit: int = QUEUE_LIMIT) -> None:
        self.producer = producer
        self.queue_limit = queue_limit  # queue.buffering.max.messages: a batch call needs room for all
        self.key_by = key_by  # output.key
        self._make_producer = make_producer  # for renew(): a producer like the first one
        self._on_full = on_full  # called when the local queue is full, to serve reports
        self.before_send = before_send  # exactly-once: the checkpoint opens its transaction here
        self._finished: list[_Unit] = []
        self._generation = 0
        self.in_flight = 0  # outputs sent and not yet reported
        self.units_in_flight = 0  # batches (or dead letters) sent and not yet fully reported

    def send(self, outputs: list[Output] | Predictions) -> None:
        """Produce a batch's predictions, or single outputs, as one unit."""
        if not (outputs.values if isinstance(outputs, Predictions) else outputs):
            return
        self.before_send()
        if isinstance(outputs, Predictions):
            outputs = outputs.keyed(self.key_by)
        unit = _Unit(outputs, self._finished, self._generation)
        self.in_flight += unit.size
        self.units_in_flight += 1
        produce_, report = self.producer.produce, unit.report
        if isinstance(outputs, Predictions):
            topic = outputs.topic
            keys = outputs.keys or [m.key() for m in outputs.rows.source.items]
            if (len(self.producer) + unit.size <= self.queue_limit and hasattr(self.producer, "produce_batch")
                    and self._produce_batch(unit, topic, outputs.values, keys)):
                return
            for i, (value, key) in enumerate(zip(outputs.values, keys)):
                try:
                    produce_(topic, value, key, on_delivery=report)
                except (BufferError, KafkaException):
                    self._produce_hard(unit, i, topic, value, key, None)
            return
        for i, out in enumerate(outputs):
            out.attempts += 1
            self._produce_hard(unit, i, out.topic, out.value, out.key, out.headers)

    def _produce_batch(self, unit: _Unit, topic: str, values: list[bytes], keys: list[bytes | None]) -> bool:
        """One call for the batch; a message refused (too large, say) is reported as its failure.
        False when the call refused the whole batch before queueing any (the caller produces one by
        one). A message refused by ``queue.buffering.max.kbytes`` (the room check counts messages)
        is a failure produced again later, after later ones: as any retried output."""
        messages = [{"value": v, "key": k} for v, k in zip(values, keys)]
        try:
            queued = self.producer.produce_batch(topic, messages, on_delivery=unit.report)
        except (KafkaException, BufferError, TypeError, ValueError):  # raised before any is queued
            return False
        if queued < len(messages):
            for i, m in enumerate(messages):
                if "_error" in m:
                    unit.refused(i, m["_error"])
        return True

    def _produce_hard(self, unit: _Unit, i: int, topic: str, value: bytes | None, key: bytes | None,
                      headers: Headers | None) -> None:
        """Produce one message through a full local queue; a refusal is reported as its failure."""
        try:
            produce(self.producer, self._on_full, topic, value, key, headers=headers, on_delivery=unit.report)
        except KafkaException as exc:  # refused before sending (too large, say)
            unit.refused(i, exc.args[0])

    def collect(self, timeout_s: float) -> tuple[Acked, list[tuple[Output, KafkaError]]]:
        """Serve delivery reports; return what was acknowledged and the outputs that failed."""
        self.producer.poll(timeout_s)
        acked, failed = Acked(), []
        if not self._finished:
            return acked, failed
        finished, self._finished[:] = list(self._finished), []
        for unit in finished:
            if unit.generation != self._generation:
                continue  # sent before discard(): already written off
            self.in_flight -= unit.size
            self.units_in_flight -= 1
            ok, bad = unit.sort()
            acked.extend(ok)
            failed.extend(bad)
        return acked, failed

    @property
    def poll_s(self) -> float:
        """How long the loop may block in consume: briefly while outputs wait for their acks."""
        return ACK_POLL_S if self.in_flight else float("inf")

    def discard(self) -> None:
        """Write off everything sent so far (an aborted transaction): its reports are ignored."""
        self._generation += 1
        self._finished[:] = []
        self.in_flight = 0
        self.units_in_flight = 0

    def renew(self) -> None:
        """Replace a producer that librdkafka declared fatal with a new one like it; everything
        sent through the old one is written off (its inputs are to be read again)."""
        if self._make_producer is None:
            raise AssertionError("this Deliveries was built without make_producer")
        old, self.producer = self.producer, self._make_producer()
        with contextlib.suppress(KafkaException, RuntimeError):
            old.purge()  # its queue and in-flight requests end here; nothing is reported twice
        self.discard()

    def flush(self, timeout_s: float) -> int:
        """Wait for every report (up to ``timeout_s``); returns how many are still unreported."""
        return int(self.producer.flush(timeout_s))


def produce(producer: Any, on_full: Callable[[], object], topic: str, value: bytes | None,
            key: bytes | None = None, **kwargs: Any) -> None:
    """``producer.produce(topic, value, key, **kwargs)``, calling ``on_full`` (which should serve
    delivery reports) each time the local queue is full, until the message is queued.

    Any other refusal (:class:`KafkaException`: too large, say) is raised to the caller.
    """
    while True:
        try:
            producer.produce(topic, value, key, **kwargs)
            return
        except BufferError:
            on_full()


def is_permanent(err: KafkaError) -> bool:
    return err.code() in PERMANENT
