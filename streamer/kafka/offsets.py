"""Per-partition tracking of done offsets, committing only the contiguous done prefix.

An offset is *done* when everything it produced (its prediction, or its dead letter) has been
acknowledged by the broker. What may be committed for a partition is the next offset to read
after the longest run of done offsets, in consumption order, from the last commit.

Worked example. Consumed so far, in order: 34 35 36 37 38 39 40. Done: 34 35 36 40.
- 34, 35, 36 are done in a row, so the prefix ends at 36.
- 37 is still in flight, so 38..40 wait behind it whatever their state.
- We commit 37 (the NEXT offset to read: last done + 1), never 41. A crash now re-reads
  37..40: 40 is scored twice (at-least-once) and 37..39 are not lost. Committing 41 would lose
  37..39, which is the bug this module exists to prevent.
Later 37, 38, 39 finish: the prefix runs to 40 and the commit becomes 41.

The prefix is taken over *consumed* offsets, not over integers, because offsets have gaps that
are never delivered (transaction markers, compaction): after 40, the next consumed offset may
be 42, and once everything consumed is done, last consumed + 1 is safe to commit.

Offsets are tracked in bulk: each consumed chunk of a partition is kept as an array with a done
flag per offset, so marking a batch done and finding the new prefix are a few numpy operations
per chunk, not a Python step per offset.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import TopicPartition as KafkaTopicPartition

from streamer.pipeline.records import Partition

Offsets = Iterable[int] | np.ndarray | int


@dataclass
class _Partition:
    chunks: deque[np.ndarray] = field(default_factory=deque)  # consumed, ascending, not all in the prefix
    flags: deque[np.ndarray] = field(default_factory=deque)  # per chunk: which of its offsets are done
    head: int = 0  # chunks[0][:head] are in the done prefix already
    pending: int = 0  # consumed offsets not yet in the done prefix
    position: int | None = None  # next offset to read after the done prefix
    committed: int | None = None  # last position committed successfully
    first: int | None = None  # first offset consumed since tracking began


def _array(offsets: Offsets) -> np.ndarray:
    if isinstance(offsets, np.ndarray):
        return offsets.astype(np.int64, copy=False).reshape(-1)
    if isinstance(offsets, int):
        return np.array([offsets], np.int64)
    return np.fromiter(offsets, np.int64)


class OffsetTracker:
    """Tracks, for each assigned partition, which offsets are done and what is safe to commit."""

    def __init__(self) -> None:
        self._parts: dict[Partition, _Partition] = {}

    def consumed(self, tp: Partition, offsets: Offsets) -> None:
        """Note offsets handed to us by the consumer (always increasing per partition)."""
        offs = _array(offsets)
        if not len(offs):
            return
        state = self._parts.setdefault(tp, _Partition())
        if state.first is None:
            state.first = int(offs[0])
        state.chunks.append(offs)
        state.flags.append(np.zeros(len(offs), bool))
        state.pending += len(offs)

    def done(self, tp: Partition, offsets: Offsets) -> None:
        """Mark offsets done (their outputs are acknowledged) and advance the prefix.

        Offsets that were never consumed, or are in the prefix already, change nothing.
        """
        state = self._parts.get(tp)
        if state is None:  # revoked or lost meanwhile: nothing of it may be committed
            return
        offs = _array(offsets)
        for chunk, flags in zip(state.chunks, state.flags):
            if not len(offs):
                break
            inside = (offs >= chunk[0]) & (offs <= chunk[-1])
            if inside.any():
                sub = offs[inside]
                at = np.searchsorted(chunk, sub)
                flags[at[chunk[at] == sub]] = True
                offs = offs[~inside]
        self._advance(state)

    @staticmethod
    def _advance(state: _Partition) -> None:
        while state.chunks:
            rest = state.flags[0][state.head:]
            if rest.all():
                state.position = int(state.chunks[0][-1]) + 1
                state.pending -= len(rest)
                state.chunks.popleft()
                state.flags.popleft()
                state.head = 0
                continue
            k = int(np.argmin(rest))  # the first offset not done
            if k:
                state.position = int(state.chunks[0][state.head + k - 1]) + 1
                state.pending -= k
                state.head += k
            return

    def committable(self, tps: Iterable[Partition] | None = None) -> dict[Partition, int]:
        """Positions (next offset to read) that moved since their last successful commit."""
        chosen = self._parts if tps is None else [tp for tp in tps if tp in self._parts]
        out: dict[Partition, int] = {}
        for tp in chosen:
            state = self._parts[tp]
            if state.position is not None and state.position != state.committed:
                out[tp] = state.position
        return out

    def mark_committed(self, positions: dict[Partition, int]) -> None:
        """Record positions the broker accepted, in the order it answered. An older position
        answered after a newer one is the broker's committed offset now (it keeps the last commit
        it applies, not the highest: a request retried across a coordinator's failover lands
        late), so the newer position becomes committable again and goes out once more."""
        for tp, pos in positions.items():
            state = self._parts.get(tp)
            if state is not None:
                state.committed = pos

    def rewind(self) -> dict[Partition, int]:
        """Forget everything not committed; return where each partition must be read again.

        For an aborted transaction: its outputs are gone, so every offset after the last commit
        (or from the first one consumed, when nothing was committed yet) is read again.
        """
        positions = {}
        for tp, state in self._parts.items():
            start = state.committed if state.committed is not None else state.first
            if start is None:
                continue
            positions[tp] = start
            self._parts[tp] = _Partition(committed=state.committed, first=start)
        return positions

    def in_flight(self, tp: Partition | None = None) -> int:
        """How many consumed offsets are not yet in a done prefix (one partition, or all)."""
        if tp is not None:
            return self._parts[tp].pending if tp in self._parts else 0
        return sum(s.pending for s in self._parts.values())

    def forget(self, tps: Iterable[Partition]) -> None:
        """Stop tracking partitions (revoked or lost); later acks for them are ignored."""
        for tp in tps:
            self._parts.pop(tp, None)


class ReadRange:
    """A replay's fixed range: exactly ``[start, end)`` of each partition, assigned directly.

    Offsets at or past a partition's end are not ours to score; the range is read when the
    consumer's position (not the last offset seen: commit markers take offsets too) reached
    every end.
    """

    def __init__(self, bounds: dict[Partition, tuple[int, int]]) -> None:
        self.bounds = bounds
        self._todo = [tp for tp, (start, end) in bounds.items() if start < end]

    def assignment(self) -> list[KafkaTopicPartition]:
        return [KafkaTopicPartition(t, p, self.bounds[(t, p)][0]) for t, p in self._todo]

    def past_end(self, tp: Partition, offsets: np.ndarray) -> np.ndarray:
        """Which of ``offsets`` (of partition ``tp``) are at or past its end."""
        return offsets >= self.bounds[tp][1]

    def read(self, consumer: Any) -> bool:
        positions = consumer.position([KafkaTopicPartition(t, p) for t, p in self._todo])
        return all(tp.offset >= self.bounds[(tp.topic, tp.partition)][1] for tp in positions)
