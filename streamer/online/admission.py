"""Admission of online requests: whether a request's rows can be answered by its deadline, at once.

A request is admitted, or refused with :class:`Shed` (a reason and the seconds to retry after),
never queued past what can be answered in time. An answer takes one batch wait
(``max_wait_ms``), the rows queued ahead of it at the measured rate, and one model call:

- the queue holds at most ``max_queue_rows`` rows; one more is refused (``queue``);
- a request whose deadline falls before its answer would come is refused (``deadline``);
- once stopping, every request is refused (``stopping``);
- a request whose deadline passes while it waits is answered expired, not scored (``expired``).

The rows ahead of a request are those queued and its own past the first batch it joins, so an
empty queue always admits what one batch wait and one call can answer, whatever rate the last
backlog measured. The rate is measured over whole batch cycles that had a backlog behind them
(the call, the cutting, the answering, the next batch's wait for the thread): a model call's own
time would promise more than the server gives. Until a backlog measures it, the first call's
rows over its seconds stand in.

Worked example: ``max_size`` 64, ``max_wait_ms`` 5, a measured rate of 20,000 rows/s and a
2 ms call. With 1,000 rows queued, a one-row request is answered in about 5 + 1000/20000 s
(50 ms) + 2 = 57 ms: with a 40 ms deadline it is shed (``deadline``, Retry-After 1 s, the
least), with 100 ms it is admitted. The call's share is the batch's rows over the last call's:
after a 110 ms call of 256 rows, a one-row request into an empty queue takes 5 + 0.43 ms. Into an empty queue, 200 rows take 5 + (200 - 64)/20000 s
(6.8 ms) + 2 = 13.8 ms. A batch of 64 rows ending 4 ms after the last one, with rows still
queued, measures 16,000 rows/s; the rate becomes 0.8 x 20,000 + 0.2 x 16,000 = 19,200.

Not locked: its owner (online/dispatch.py) admits, releases and stops under the one lock that
also orders its queue, so a stop's end marker comes after every admitted request; the rate and
the call's time are measured by the one thread that scores (a float read as it is written is
either value).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from streamer.errors import Expired, Shed
from streamer.online.meters import OnlineMetrics


class Admission:
    """Admits rows against their deadlines on a measured rate, counts what it sheds and why."""

    def __init__(self, max_queue_rows: int, batch_rows: int, batch_wait_s: float,
                 clock: Callable[[], float] = time.monotonic, metrics: OnlineMetrics | None = None) -> None:
        """``batch_rows``: a batch's most rows; ``batch_wait_s``: the longest a request waits for
        its batch to flush."""
        self.max_queue_rows, self._batch_rows, self._batch_wait_s = max_queue_rows, batch_rows, batch_wait_s
        self._clock = clock
        self.metrics = metrics or OnlineMetrics()
        self.queued_rows = 0  # admitted, not yet answered
        self.rows_per_s = 0.0  # rows answered per second while a backlog waited (0 until measured)
        self.call_s = 0.0  # the last model call's seconds
        self.call_rows = 1  # the last model call's rows
        self.shed = 0  # requests refused at admission
        self.stopping = False
        self._last_end: float | None = None  # when the last batch's answers were settled

    def admit(self, rows: int, deadline: float) -> float:
        """Admit ``rows`` to be answered by ``deadline`` (the clock's time) and return the time of
        admission, or raise :class:`Shed` with the reason and the seconds to retry after."""
        now = self._clock()
        if self.stopping:
            self._refused("stopping")
            raise Shed("the server is stopping", 1.0, "stopping")
        if self.queued_rows + rows > self.max_queue_rows:
            self._refused("queue")
            raise Shed(f"the queue holds {self.queued_rows} rows, at most {self.max_queue_rows}",
                       self.retry_after_s(), "queue")
        eta = self.answer_in(self.queued_rows + max(0, rows - self._batch_rows),
                             batch=min(self.queued_rows + rows, self._batch_rows))
        if now + eta > deadline:
            self._refused("deadline")
            raise Shed(f"the deadline is {max(deadline - now, 0) * 1000:.0f} ms away; an answer takes about "
                       f"{eta * 1000:.0f} ms at this load", self.retry_after_s(), "deadline")
        self.queued_rows += rows
        self.metrics.queued_rows.set(self.queued_rows)
        return now

    def expired(self, deadline: float, now: float) -> Expired | None:
        """The answer of a request whose ``deadline`` passed (counted) while it waited; None while
        it holds."""
        if now <= deadline:
            return None
        self.metrics.shed.labels("expired").inc()
        return Expired(f"the deadline passed {(now - deadline) * 1000:.0f} ms before its batch was scored")

    def release(self, rows: int) -> None:
        """``rows`` answered (scored or failed): they leave the queue."""
        self.queued_rows -= rows
        self.metrics.queued_rows.set(self.queued_rows)

    def stop(self) -> None:
        """Refuse every request from now on."""
        self.stopping = True

    def backlog(self, rows: int) -> bool:
        """Whether rows wait behind a batch of ``rows`` (asked before it is answered)."""
        return self.queued_rows > rows

    def called(self, seconds: float, rows: int = 1) -> None:
        """A model call of ``rows`` rows took ``seconds``."""
        self.call_s, self.call_rows = seconds, max(rows, 1)

    def cycle_ended(self, rows: int, backlog: bool) -> None:
        """A batch of ``rows`` is answered; ``backlog``: rows waited behind it. A cycle that
        follows another with a backlog measures the rate (the latest cycle weighs a fifth)."""
        end = self._clock()
        if backlog and self._last_end is not None and end > self._last_end:
            rate = rows / (end - self._last_end)
            self.rows_per_s = rate if self.rows_per_s == 0 else 0.8 * self.rows_per_s + 0.2 * rate
        elif self.rows_per_s == 0 and self.call_s > 0:
            self.rows_per_s = rows / self.call_s  # a first guess, until a backlog measures the real rate
        self._last_end = end

    def answer_in(self, rows: int, batch: int | None = None) -> float:
        """Seconds until a request with ``rows`` rows ahead of it would be answered: one batch
        wait, the rows ahead at the measured rate, one call of ``batch`` rows (None: as many as
        the last call's); a call of fewer rows than the last one is taken as that much shorter,
        so a slow call of a full batch does not keep refusing a one-row request into an empty
        queue, where no call follows to measure again."""
        rate = self.rows_per_s if self.rows_per_s > 0 else math.inf
        share = 1.0 if batch is None else min(1.0, max(batch, 1) / self.call_rows)
        return self._batch_wait_s + rows / rate + self.call_s * share

    def retry_after_s(self) -> float:
        """When to retry a refused request: once the queue as it stands is answered, at least 1 s."""
        return max(1.0, math.ceil(self.answer_in(self.queued_rows)))

    def _refused(self, why: str) -> None:
        self.shed += 1
        self.metrics.shed.labels(why).inc()
