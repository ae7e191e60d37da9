"""What the processor writes to the broker, and what became of it: outputs, a batch's
predictions, what was acknowledged, and failed deliveries sorted by what to do with them.

A failed delivery gets one verdict (:class:`Failed`), decided by the delivery layer
(delivery.py) where the error is known, and acted on by the loop:

    verdict   what failed                                            the loop
    refused   a prediction the broker refuses for good (too large,   dead-letters it
              invalid): retrying cannot help
    shrink    a dead letter too large for its topic (deadletter.py   produces it now, cut short
              cuts it short, once)
    retry     anything else (the broker away, a timeout, a denied    holds input, produces it again
              topic, a dead letter refused otherwise)                after a back-off (holds.py)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
from confluent_kafka import KafkaError, Message

from streamer.config import OutputKey
from streamer.pipeline.records import Messages, Partition, Rows

Headers = list[tuple[str, bytes]]

# A message larger than the topic (or the producer) takes.
TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE,
                       KafkaError.INVALID_MSG_SIZE})
# Errors that concern the one message, whatever the broker's state: retrying cannot help.
PERMANENT = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG, KafkaError.INVALID_MSG_SIZE,
    KafkaError.INVALID_RECORD, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_REQUIRED_ACKS,
})


def consumed(messages: Sequence[Any]) -> Messages:
    """A consumed chunk as columns (:class:`Messages`): confluent_kafka's methods mapped in C over
    its own messages, a fifth less per message than calling each by name; any other message (a
    test's fake) by name. An error event has no topic: the chunk holds none (consume_batch)."""
    items, n = list(messages), len(messages)
    try:
        topics = cast("list[str]", list(map(Message.topic, items)))
        return Messages(items, topics, np.fromiter(map(Message.partition, items), np.int64, n),
                        np.fromiter(map(Message.offset, items), np.int64, n))
    except TypeError:  # not confluent_kafka's Message: the descriptors refuse it
        return Messages.of(items)


def keys_of(messages: Sequence[Any]) -> list[bytes | None]:
    """The key of each consumed message, mapped in C as :func:`consumed` maps coordinates."""
    try:
        return list(map(Message.key, messages))
    except TypeError:
        return [m.key() for m in messages]


@dataclass(frozen=True, slots=True)
class Output:
    """One message to produce on behalf of one consumed message (``source``)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    source: Any  # the consumed confluent_kafka.Message this output stands for (where no offset waits on
    # the output, whatever names it: then source_tp, Acked.offsets and Failed.within do not apply)
    stage: str | None = None  # None for a prediction, else the dead letter's stage
    event_time_ms: int = 0
    attempts: int = 0

    @property
    def source_tp(self) -> Partition:
        return self.source.topic(), self.source.partition()


@dataclass(frozen=True, slots=True)
class Predictions:
    """A batch's predictions: ``values[i]`` is the prediction of ``rows`` row i, all to ``topic``;
    ``keys[i]`` its key (None: the input message's key, ``output.key: input``)."""

    topic: str
    values: list[bytes]
    rows: Rows
    keys: list[bytes | None] | None = None

    def __len__(self) -> int:
        return len(self.values)

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


@dataclass(frozen=True, slots=True)
class Acked:
    """What the broker acknowledged: predictions as batches of rows, other outputs one by one."""

    batches: tuple[Rows, ...] = ()
    outputs: tuple[Output, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.batches or self.outputs)

    def plus(self, other: Acked) -> Acked:
        """These and ``other``'s, in order."""
        if not other:
            return self
        return Acked(self.batches + other.batches, self.outputs + other.outputs) if self else other

    def offsets(self) -> dict[Partition, list[np.ndarray]]:
        """The source offsets now done, per partition."""
        out: dict[Partition, list[np.ndarray]] = {}
        for rows in self.batches:
            for tp, offsets in rows.source.by_partition().items():
                out.setdefault(tp, []).append(offsets)
        for o in self.outputs:
            out.setdefault(o.source_tp, []).append(np.array([o.source.offset()], np.int64))
        return out


def is_permanent(err: KafkaError) -> bool:
    return err.code() in PERMANENT


Failure = tuple[Output, KafkaError]


@dataclass(frozen=True, slots=True)
class Failed:
    """Failed deliveries, each with its verdict (see the module docstring)."""

    refused: tuple[Failure, ...] = ()
    shrink: tuple[Output, ...] = ()
    retry: tuple[Failure, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.refused or self.shrink or self.retry)

    def within(self, tps: set[Partition]) -> Failed:
        """Only the outputs of partitions ``tps`` (still assigned): the others are their new owner's to redo."""
        if all(o.source_tp in tps for o, _ in (*self.refused, *self.retry)) and \
                all(o.source_tp in tps for o in self.shrink):
            return self
        return Failed(tuple(f for f in self.refused if f[0].source_tp in tps),
                      tuple(o for o in self.shrink if o.source_tp in tps),
                      tuple(f for f in self.retry if f[0].source_tp in tps))
