"""Producing outputs and collecting their delivery reports, one cheap callback per message.

An :class:`Output` is one message to write for one source offset: a prediction or a dead letter.
Outputs are sent in units (a batch's predictions, or one dead letter); the per-message callback
only notes an error and counts down, and the bookkeeping happens when :meth:`Deliveries.collect`
is called, per unit. A failed output is handed back with its error, never dropped: the processor
decides whether to dead-letter it (a permanent error) or to produce it again later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException

Headers = list[tuple[str, bytes]]

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


class _Unit:
    __slots__ = ("outputs", "remaining", "errors", "finished", "generation")

    def __init__(self, outputs: list[Output], finished: list[_Unit], generation: int) -> None:
        self.outputs, self.remaining, self.finished = outputs, len(outputs), finished
        self.errors: dict[int, KafkaError] = {}
        self.generation = generation

    def report(self, index: int, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self.errors[index] = err
        self.remaining -= 1
        if self.remaining == 0:
            self.finished.append(self)


class Deliveries:
    """Sends outputs through one producer and sorts the reports into acked and failed."""

    def __init__(self, producer: Any, on_full: Callable[[], None],
                 before_send: Callable[[], None] = lambda: None) -> None:
        self.producer = producer
        self._on_full = on_full  # called when the local queue is full, to serve reports
        self.before_send = before_send  # exactly-once: the checkpoint opens its transaction here
        self._finished: list[_Unit] = []
        self._generation = 0
        self.in_flight = 0  # outputs sent and not yet reported
        self.units_in_flight = 0  # batches (or dead letters) sent and not yet fully reported

    def send(self, outputs: list[Output]) -> None:
        if not outputs:
            return
        self.before_send()
        unit = _Unit(outputs, self._finished, self._generation)
        self.in_flight += len(outputs)
        self.units_in_flight += 1
        for i, out in enumerate(outputs):
            out.attempts += 1
            callback = partial(unit.report, i)
            try:
                produce(self.producer, self._on_full, out.topic, out.value, out.key,
                        headers=out.headers, on_delivery=callback)
            except KafkaException as exc:  # refused before sending (too large, say)
                callback(exc.args[0], None)

    def collect(self, timeout_s: float) -> tuple[list[Output], list[tuple[Output, KafkaError]]]:
        """Serve delivery reports; return the outputs acknowledged and those that failed."""
        self.producer.poll(timeout_s)
        acked: list[Output] = []
        failed: list[tuple[Output, KafkaError]] = []
        if not self._finished:
            return acked, failed
        finished, self._finished[:] = list(self._finished), []
        for unit in finished:
            if unit.generation != self._generation:
                continue  # sent before discard(): already written off
            self.in_flight -= len(unit.outputs)
            self.units_in_flight -= 1
            for i, out in enumerate(unit.outputs):
                err = unit.errors.get(i)
                if err is None:
                    acked.append(out)
                else:
                    failed.append((out, err))
        return acked, failed

    def discard(self) -> None:
        """Write off everything sent so far (an aborted transaction): its reports are ignored."""
        self._generation += 1
        self._finished[:] = []
        self.in_flight = 0
        self.units_in_flight = 0

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
