"""The pure micro-batcher: collects rows and says when a batch must flush, and why.

A batch flushes when it holds ``max_size`` rows (``full``) or when ``max_wait_ms`` has passed
since its FIRST row arrived (``timeout``): the deadline is fixed by the first row and never
extended by later ones, so a steady trickle cannot starve that row. The owner also flushes on
``revoke`` and ``shutdown``. No Kafka, no ONNX and no sleeping here: time comes from an injected
clock, which makes every rule testable to the millisecond.

With ``max_wait_ms=None`` the batcher is size-only (a bounded run reading a range as fast as it
can, where no row waits on a clock): no deadline, so ``remaining_s()`` is None and ``poll()``
never flushes; a batch flushes when full, or when the owner flushes it. Worked rule, ``max_size``
4: rows 0-2 wait however long the clock runs; row 3 flushes (0, 1, 2, 3) as ``full``; rows 4-5
stay open until ``flush("shutdown")``. Each batch's ``wait_s`` still runs from its first row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Generic, Literal, Protocol, TypeVar

FlushReason = Literal["full", "timeout", "revoke", "shutdown"]


class Chunk(Protocol):
    """What the batcher holds: rows that count and slice (a tuple, or pipeline.records.Rows)."""

    def __len__(self) -> int: ...

    def __getitem__(self, idx: slice, /) -> Any: ...


C = TypeVar("C", bound=Chunk)
# A deadline within a nanosecond counts as reached: first_at + max_wait is a float sum that can
# land a hair past the instant it names (0.1 + 0.05 > 0.15), which would cost a whole extra pass.
_EPSILON_S = 1e-9


def join_rows(parts: Sequence[Sequence[Any]]) -> Any:
    """The default join: the rows of ``parts`` as one tuple."""
    return tuple(chain.from_iterable(parts))


@dataclass(frozen=True, slots=True)
class Batch(Generic[C]):
    """Rows flushed together (one chunk, joined), why, and how long the first row waited (seconds)."""

    rows: C
    reason: FlushReason
    wait_s: float

    def keep(self, wanted: Callable[[C], C]) -> Batch[C]:
        """The same batch with only the rows that ``wanted`` keeps (partitions revoked meanwhile)."""
        return Batch(wanted(self.rows), self.reason, self.wait_s)


class MicroBatcher(Generic[C]):
    """Accumulates chunks of rows; :meth:`add` and :meth:`poll` return the batches that are due.

    Rows come in chunks (anything sliceable with a length: a list, or the columnar ``Rows``) and
    are cut and joined per chunk, never per row; ``join`` makes one chunk of several.
    """

    def __init__(self, max_size: int, max_wait_ms: int | None, clock: Callable[[], float] = time.monotonic,
                 join: Callable[[list[C]], C] = join_rows) -> None:  # type: ignore[assignment]
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        if max_wait_ms is not None and max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0 (or None: no deadline), got {max_wait_ms}")
        self.max_size = max_size
        self.max_wait_s = None if max_wait_ms is None else max_wait_ms / 1000.0  # None: size-only
        self._clock, self._join = clock, join
        self._pieces: list[C] = []
        self._size = 0
        self._first_at: float | None = None

    def __len__(self) -> int:
        return self._size

    def add(self, rows: C) -> list[Batch[C]]:
        """Add a chunk of rows in order; returns every batch that became due (full ones, or a
        timed-out one).

        A timed-out open batch is flushed before new rows join it: rows that arrive after the
        deadline start the next batch and its own deadline.
        """
        out: list[Batch[C]] = []
        due = self.poll()
        if due is not None:
            out.append(due)
        at, n = 0, len(rows)
        while at < n:
            if not self._pieces:
                self._first_at = self._clock()
            take = min(self.max_size - self._size, n - at)
            self._pieces.append(rows if take == n else rows[at:at + take])
            self._size += take
            at += take
            if self._size >= self.max_size:
                out.append(self._take("full"))
        return out

    def poll(self) -> Batch[C] | None:
        """The open batch if its first row has waited ``max_wait_ms``, else None (always None
        when size-only)."""
        remaining = self.remaining_s()
        if remaining is not None and remaining <= _EPSILON_S:
            return self._take("timeout")
        return None

    def remaining_s(self) -> float | None:
        """Seconds until the open batch is due; None when there is no open batch, or no deadline
        (size-only).

        The consume loop uses it as its wait, so a quiet topic does not delay the flush.
        """
        if self._first_at is None or self.max_wait_s is None:
            return None
        return max(0.0, self._first_at + self.max_wait_s - self._clock())

    def flush(self, reason: FlushReason) -> Batch[C] | None:
        """Flush whatever is open now (revoke, shutdown); None when nothing is open."""
        return self._take(reason) if self._pieces else None

    def drop(self, keep: Callable[[C], C]) -> int:
        """Keep only what ``keep`` returns of each open chunk (partitions lost); returns how many
        rows went.

        The open batch keeps its first-row deadline: the rows that stay waited that long already.
        """
        before = self._size
        self._pieces = [p for p in (keep(p) for p in self._pieces) if len(p)]
        self._size = sum(len(p) for p in self._pieces)
        if not self._pieces:
            self._first_at = None
        return before - self._size

    def _take(self, reason: FlushReason) -> Batch[C]:
        assert self._first_at is not None
        now = self._clock()
        batch = Batch(self._join(self._pieces), reason, now - self._first_at)
        self._pieces, self._size, self._first_at = [], 0, None
        return batch
