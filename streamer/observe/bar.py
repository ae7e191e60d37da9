"""A bounded run's progress (a replay, a backfill into the lake, an evaluation): a bar on a
terminal, a log line every few seconds elsewhere, with the rate and the time left."""

from __future__ import annotations

import logging
import time
from typing import TextIO

log = logging.getLogger(__name__)


class ProgressBar:
    """A bounded run's progress (``verb`` says which): a bar on a terminal, a log line every few
    seconds elsewhere."""

    def __init__(self, total: int, stream: TextIO, verb: str = "replay") -> None:
        self.total, self.stream, self.verb = max(total, 1), stream, verb
        self.tty = stream.isatty()
        self.started = self.last = time.monotonic()

    def update(self, done: int) -> bool:
        now = time.monotonic()
        if now - self.last >= (0.2 if self.tty else 5.0):
            self.last = now
            rate = done / max(now - self.started, 1e-9)
            eta = (self.total - done) / rate if rate > 0 else float("inf")
            text = (f"{done:,}/{self.total:,} events ({100 * done / self.total:.1f}%), "
                    f"{rate:,.0f}/s, ETA {eta:,.0f} s")
            if self.tty:
                filled = int(30 * done / self.total)
                self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {text}")
                self.stream.flush()
            else:
                log.info("%s progress: %s", self.verb, text)
        return False  # never the reason to stop: the processor stops at the bounds

    def close(self, done: int) -> None:
        if self.tty:
            self.stream.write("\n")
