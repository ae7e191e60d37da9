"""One model call at a time, the urgent ones first: online requests before stream batches.

The stream and the online server share one serving model. A call holds the lock while it runs;
when it ends, a waiting urgent call (an online batch) goes before any waiting ordinary one (a
stream batch), so an online request waits for at most the model call in progress. The stream
yields, it never starves the online side; the online side can slow the stream, by as much as
it asks of the model.

Worked example: a stream batch is in the model; an online batch and the next stream batch
arrive; when the first ends, the online batch runs, then the stream's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class PriorityLock:
    """Holds one caller at a time; urgent callers go before ordinary ones."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._urgent = 0  # urgent callers waiting
        self._urgent_calls = 0  # urgent callers that took the lock, ever
        self.yielded = 0  # ordinary calls that an urgent one went before (what the tests count)

    @contextmanager
    def hold(self, urgent: bool = False) -> Iterator[None]:
        with self._cond:
            if urgent:
                self._urgent += 1
                while self._busy:
                    self._cond.wait()
                self._urgent -= 1
                self._urgent_calls += 1
            else:
                before = self._urgent_calls
                while self._busy or self._urgent:
                    self._cond.wait()
                self.yielded += self._urgent_calls != before
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
