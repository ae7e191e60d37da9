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
error as an :class:`Output`, never dropped, with its verdict (messages.py: refused, shrink,
retry), which the loop acts on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import numpy as np
from confluent_kafka import KafkaError, KafkaException

from streamer.config import OutputKey
from streamer.kafka.deadletter import cut_short, is_cut_short
from streamer.kafka.messages import (
    TOO_LARGE,
    Acked,
    Failed,
    Failure,
    Headers,
    Output,
    Predictions,
    is_permanent,
    keys_of,
)

QUEUE_LIMIT = 100_000  # librdkafka's queue.buffering.max.messages default
# While outputs wait for their acks, the loop blocks in consume for at most this long: their
# reports are served by producer.poll between two consumes, and the end-to-end latency (and the
# commit) of a prediction runs to the moment its ack is collected. A whole consume timeout (100 ms)
# in between put p50 at 200 ms for a 7,000 events/s trickle.
ACK_POLL_S = 0.005


class _Unit:
    """One send: its messages report to :meth:`report`; ``errors`` hold (value, error) pairs."""

    __slots__ = ("sent", "size", "remaining", "errors", "finished", "generation")

    def __init__(self, sent: Predictions | list[Output], finished: list[_Unit], generation: int) -> None:
        self.sent, self.finished, self.generation = sent, finished, generation
        self.size = len(sent.values) if isinstance(sent, Predictions) else len(sent)
        self.remaining = self.size  # reports still to come
        self.errors: list[tuple[int | bytes | None, KafkaError]] = []  # (index, or value sent, error)

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

    def sort(self) -> tuple[Acked, list[Failure]]:
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
                return Acked(batches=(sent.rows,)), []
            ok = np.ones(len(values), bool)
            ok[list(bad)] = False
            return Acked(batches=(sent.rows.take(ok),)), [(sent.output(i), e) for i, e in sorted(bad.items())]
        return (Acked(outputs=tuple(o for i, o in enumerate(sent) if i not in bad)),
                [(sent[i], e) for i, e in sorted(bad.items())])


class Producer(Protocol):
    """What delivery calls on a librdkafka producer (confluent_kafka.Producer, or a test's fake)."""

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, *,
                headers: Any = None, on_delivery: Callable[..., None] | None = None) -> None: ...

    def produce_batch(self, topic: str, messages: list[dict[str, Any]], *,
                      on_delivery: Callable[..., None] | None = None) -> int: ...

    def poll(self, timeout: float = ...) -> int: ...

    def flush(self, timeout: float = ...) -> int: ...

    def purge(self) -> None: ...

    def __len__(self) -> int: ...


def verdicts(failures: list[Failure]) -> Failed:
    """Each failed delivery's verdict (messages.py): a prediction refused for good is refused;
    a dead letter too large for its topic is cut short once (deadletter.cut_short), to produce
    now; the rest are retried after a back-off."""
    refused: list[Failure] = []
    shrink: list[Output] = []
    retry: list[Failure] = []
    for out, err in failures:
        if out.stage is not None and err.code() in TOO_LARGE and not is_cut_short(out.headers):
            shrink.append(cut_short(out))
        elif out.stage is None and is_permanent(err):
            refused.append((out, err))
        else:
            retry.append((out, err))
    return Failed(tuple(refused), tuple(shrink), tuple(retry))


class Deliveries:
    """Sends outputs through one producer and sorts the reports into acked and failed."""

    def __init__(self, producer: Producer, on_full: Callable[[], None],
                 make_producer: Callable[[], Producer] | None = None, key_by: OutputKey = "input",
                 queue_limit: int = QUEUE_LIMIT) -> None:
        self.producer = producer
        self.queue_limit = queue_limit  # queue.buffering.max.messages: a batch call needs room for all
        self.key_by = key_by  # output.key
        self._make_producer = make_producer  # for renew(): a producer like the first one
        self._on_full = on_full  # called when the local queue is full, to serve reports
        self._finished: list[_Unit] = []
        self._generation = 0
        self.in_flight = 0  # outputs sent and not yet reported
        self.units_in_flight = 0  # batches (or dead letters) sent and not yet fully reported

    def send(self, outputs: list[Output] | Predictions) -> None:
        """Produce a batch's predictions, or single outputs, as one unit."""
        if not outputs:
            return
        if isinstance(outputs, Predictions):
            outputs = outputs.keyed(self.key_by)
        else:  # counted per send: a failure hands back the output with its attempts
            outputs = [replace(o, attempts=o.attempts + 1) for o in outputs]
        unit = _Unit(outputs, self._finished, self._generation)
        self.in_flight += unit.size
        self.units_in_flight += 1
        produce_, report = self.producer.produce, unit.report
        if isinstance(outputs, Predictions):
            topic = outputs.topic
            keys = outputs.keys or keys_of(outputs.rows.source.items)
            if (len(self.producer) + unit.size <= self.queue_limit
                    and self._produce_batch(unit, topic, outputs.values, keys)):
                return
            for i, (value, key) in enumerate(zip(outputs.values, keys)):
                try:
                    produce_(topic, value, key, on_delivery=report)
                except (BufferError, KafkaException):
                    self._produce_hard(unit, i, topic, value, key, None)
            return
        for i, out in enumerate(outputs):
            self._produce_hard(unit, i, out.topic, out.value, out.key, out.headers)

    def _produce_batch(self, unit: _Unit, topic: str, values: list[bytes], keys: list[bytes | None]) -> bool:
        """One call for the batch; a message refused (too large, say) is reported as its failure.
        False when the call refused the whole batch before queueing any (the caller produces one by
        one). A message refused by ``queue.buffering.max.kbytes`` (the room check counts messages)
        is a failure produced again later, after later ones: as any retried output."""
        messages: list[dict[str, Any]] = [{"value": v, "key": k} for v, k in zip(values, keys)]
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

    def collect(self, timeout_s: float) -> tuple[Acked, Failed]:
        """Serve delivery reports; return what was acknowledged and the outputs that failed, each
        with its verdict (refused, shrink, retry: messages.py)."""
        self.producer.poll(timeout_s)
        if not self._finished:
            return Acked(), Failed()
        finished, self._finished[:] = list(self._finished), []
        acked, failed = Acked(), []
        for unit in finished:
            if unit.generation != self._generation:
                continue  # sent before discard(): already written off
            self.in_flight -= unit.size
            self.units_in_flight -= 1
            ok, bad = unit.sort()
            acked = acked.plus(ok)
            failed.extend(bad)
        return acked, verdicts(failed) if failed else Failed()

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
