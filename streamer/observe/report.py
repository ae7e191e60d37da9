"""The log's view of a processor: a progress line every ``metrics.log_interval_ms`` and a summary
when it stops, so that a process run without Prometheus still says what it is doing.

Example, every 30 s and at the end (one line each)::

    progress: 41,207 events in 30 s (1,374/s), 41,190 predictions, 17 dead letters (validate 17),
        lag 312, 3 partitions, model fraud 4
    stopped after 95 s: 130,004 events (1,368/s), 129,950 predictions, 54 dead letters (validate 50,
        deserialize 4), 0 degraded, 0 reloads, 31 commits, latency p50 14 ms p99 41 ms

A line while input is held names the hold (``held: model failing: ...``); lag is librdkafka's
consumer lag summed over the assigned partitions (absent until its first statistics arrive).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import numpy as np

from streamer.observe.stats import Stats

log = logging.getLogger("streamer.progress")


def dead_letters(stats: Stats) -> str:
    stages = ", ".join(f"{stage} {n:,}" for stage, n in stats.dead_letters.most_common())
    return count(sum(stats.dead_letters.values()), "dead letter") + (f" ({stages})" if stages else "")


def count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def span_ms(ms: float) -> str:
    """A latency in the unit a reader takes in at a glance: events replayed from last month are
    hours or days behind, not billions of milliseconds."""
    if ms < 10_000:
        return f"{ms:.0f} ms"
    for unit, size, limit in (("s", 1_000, 120), ("min", 60_000, 120), ("h", 3_600_000, 48)):
        if ms / size < limit:
            return f"{ms / size:.0f} {unit}"
    return f"{ms / 86_400_000:,.0f} d"


class ProgressLog:
    """Writes the progress line when due (``interval_s`` 0: never) and the summary line."""

    def __init__(self, interval_s: float, clock: Callable[[], float], model: str) -> None:
        self._interval_s, self._clock, self._model = interval_s, clock, model
        self._started = self._last = clock()
        self._events_then = 0

    def tick(self, stats: Stats, *, version: str, assigned: int, lag: Mapping[object, int],
             held: str | None) -> str | None:
        """The progress line, logged, when one is due; None otherwise."""
        now = self._clock()
        if not self._interval_s or now - self._last < self._interval_s:
            return None
        seconds, self._last = now - self._last, now
        events, self._events_then = stats.events - self._events_then, stats.events
        line = (f"progress: {count(events, 'event')} in {duration(seconds)} ({events / seconds:,.0f}/s), "
                f"{count(stats.predictions, 'prediction')}, {dead_letters(stats)}"
                + (f", lag {sum(lag.values()):,}" if lag else "")
                + f", {count(assigned, 'partition')}, model {self._model} {version}"
                + (f", held: {held}" if held else ""))
        log.info("%s", line)
        return line

    def summary(self, stats: Stats, failed: bool) -> str:
        """The shutdown summary, logged: totals since start, and latency percentiles when known."""
        seconds = max(self._clock() - self._started, 1e-9)
        latency = ""
        if stats.latencies_ms:
            p50, p99 = np.percentile(np.asarray(stats.latencies_ms), [50, 99])
            latency = f", latency p50 {span_ms(p50)} p99 {span_ms(p99)}"
        line = (f"stopped{' on an error' if failed else ''} after {duration(seconds)}: "
                f"{count(stats.events, 'event')} ({stats.events / seconds:,.0f}/s), "
                f"{count(stats.predictions, 'prediction')}, {dead_letters(stats)}, {stats.degraded:,} degraded, "
                f"{count(stats.reloads, 'reload')}, {count(stats.commits, 'commit')}{latency}")
        log.info("%s", line)
        return line
