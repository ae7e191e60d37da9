"""The pure micro-batcher: collects rows and says when a batch must flush, and why.

A batch flushes when it holds ``max_size`` rows (``full``) or when ``max_wait_ms`` has passed
since its FIRST row arrived (``timeout``): the deadline is fixed by the first row and never
extended by later ones, so a steady trickle cannot starve that row. The owner also flushes on
``revoke`` and ``shutdown``. No Kafka, no ONNX and no sleeping here: time comes from an injected
clock, which makes every rule testable to the millisecond.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

FlushReason = Literal["full", "timeout", "revoke", "shutdown"]
T = TypeVar("T")
# A deadline within a nanosecond counts as reached: first_at + max_wait is a float sum that can
# land a hair past the instant it names (0.1 + 0.05 > 0.15), which would cost a whole extra pass.
_EPSILON_S = 1e-9


@dataclass(frozen=True, slots=True)
class Batch(Generic[T]):
    """Rows flushed together, why, and how long the first row waited (seconds)."""

    rows: tuple[T, ...]
    reason: FlushReason
    wait_s: float

    def keep(self, wanted: Callable[[T], bool]) -> Batch[T]:
        """The same batch with only the rows ``wanted`` (partitions revoked meanwhile)."""
        return Batch(tuple(r for r in self.rows if wanted(r)), self.reason, self.wait_s)


class MicroBatcher(Generic[T]):
    """Accumulates rows; :meth:`add` and :meth:`poll` return the batches that are due."""

    def __init__(self, max_size: int, max_wait_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        self.max_size = max_size
        self.max_wait_s = max_wait_ms / 1000.0
        self._clock = clock
        self._rows: list[T] = []
        self._first_at: float | None = None

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, rows: Iterable[T]) -> list[Batch[T]]:
        """Add rows in order; returns every batch that became due (full ones, or a timed-out one).

        A timed-out open batch is flushed before new rows join it: rows that arrive after the
        deadline start the next batch and its own deadline.
        """
        out: list[Batch[T]] = []
        due = self.poll()
        if due is not None:
            out.append(due)
        for row in rows:
            if not self._rows:
                self._first_at = self._clock()
            self._rows.append(row)
            if len(self._rows) >= self.max_size:
                out.append(self._take("full"))
        return out

    def poll(self) -> Batch[T] | None:
        """The open batch if its first row has waited ``max_wait_ms``, else None."""
        if self._rows and self.remaining_s() <= _EPSILON_S:  # type: ignore[operator]
            return self._take("timeout")
        return None

    def remaining_s(self) -> float | None:
        """Seconds until the open batch is due; None when there is no open batch.

        The consume loop uses it as its wait, so a quiet topic does not delay the flush.
        """
        if self._first_at is None:
            return None
        return max(0.0, self._first_at + self.max_wait_s - self._clock())

    def flush(self, reason: FlushReason) -> Batch[T] | None:
        """Flush whatever is open now (revoke, shutdown); None when nothing is open."""
        return self._take(reason) if self._rows else None

    def drop(self, keep: Callable[[T], bool]) -> int:
        """Remove rows for which ``keep`` is false (partitions lost); returns how many went.

        The open batch keeps its first-row deadline: the rows that stay waited that long already.
        """
        before = len(self._rows)
        self._rows = [r for r in self._rows if keep(r)]
        if not self._rows:
            self._first_at = None
        return before - len(self._rows)

    def _take(self, reason: FlushReason) -> Batch[T]:
        rows = self._rows[: self.max_size]
        self._rows = self._rows[self.max_size:]
        assert self._first_at is not None
        now = self._clock()
        batch = Batch(tuple(rows), reason, now - self._first_at)
        # Rows beyond max_size can only remain when add() overfilled, which it never does; a
        # remainder would otherwise restart its deadline now, not at the old first row.
        self._first_at = now if self._rows else None
        return batch
