"""Stall detection: which assigned partitions have work but no commit progress, and lag per
partition from librdkafka's statistics."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from streamer.observe.metrics import Metrics, NullMetrics
from streamer.pipeline.records import Partition


class ProgressWatch:
    """A partition with work (lag, or rows in flight) whose commit has not moved for
    ``stall_s`` seconds is stalled; an idle partition never is."""

    def __init__(self, stall_s: float, clock: Callable[[], float],
                 metrics: Metrics | NullMetrics | None) -> None:
        self.stall_s, self._clock = stall_s, clock
        self._metrics = metrics if metrics is not None else NullMetrics()
        self.lag: dict[Partition, int] = {}
        self._progress_at: dict[Partition, float] = {}
        self.stalled: set[Partition] = set()

    def assigned(self, tps: Iterable[Partition]) -> None:
        for tp in tps:
            self._progress_at[tp] = self._clock()
            # A series per partition from the start, for alerts.
            self._metrics.partition_stalled.labels(tp[0], str(tp[1])).set(0)

    def committed(self, tps: Iterable[Partition]) -> None:
        now = self._clock()
        for tp in tps:
            self._progress_at[tp] = now

    def forget(self, tps: Iterable[Partition]) -> None:
        for tp in tps:
            self.lag.pop(tp, None)
            self._progress_at.pop(tp, None)
            self.stalled.discard(tp)

    def check(self, in_flight: Callable[[Partition], int]) -> set[Partition]:
        """Recompute the stalled set over the watched partitions; returns it."""
        now = self._clock()
        stalled = set()
        for tp, since in list(self._progress_at.items()):
            if self.lag.get(tp, 0) <= 0 and in_flight(tp) == 0:
                self._progress_at[tp] = now
            elif now - since > self.stall_s:
                stalled.add(tp)
        for tp in stalled ^ self.stalled:
            self._metrics.partition_stalled.labels(tp[0], str(tp[1])).set(1 if tp in stalled else 0)
        self.stalled = stalled
        return stalled

    def on_stats(self, stats_json: str) -> None:
        """librdkafka's statistics callback: consumer lag of each watched partition."""
        try:
            stats = json.loads(stats_json)
        except ValueError:
            return
        for topic, tstats in stats.get("topics", {}).items():
            for part, pstats in tstats.get("partitions", {}).items():
                tp = (topic, int(part))
                lag = pstats.get("consumer_lag", -1)
                if tp not in self._progress_at or lag < 0:
                    continue
                self.lag[tp] = lag
                self._metrics.consumer_lag.labels(topic, part).set(lag)
