"""Stall detection with an injected clock."""

from __future__ import annotations

import json

from streamer.observe.progress import ProgressWatch
from streamer.testing import FakeClock

TP = ("features", 0)


def stats(lag: int) -> str:
    return json.dumps({"topics": {"features": {"partitions": {"0": {"consumer_lag": lag},
                                                               "-1": {"consumer_lag": -1}}}}})


def test_a_partition_with_lag_and_no_commit_stalls_after_the_timeout() -> None:
    clock = FakeClock()
    watch = ProgressWatch(stall_s=10, clock=clock, metrics=None)
    watch.assigned([TP])
    watch.on_stats(stats(lag=500))
    clock.advance(9)
    assert watch.check(lambda tp: 0) == set()
    clock.advance(2)
    assert watch.check(lambda tp: 0) == {TP}
    watch.committed([TP])
    assert watch.check(lambda tp: 0) == set()


def test_an_idle_partition_never_stalls_and_rows_in_flight_count_as_work() -> None:
    clock = FakeClock()
    watch = ProgressWatch(stall_s=10, clock=clock, metrics=None)
    watch.assigned([TP])
    watch.on_stats(stats(lag=0))
    clock.advance(60)
    assert watch.check(lambda tp: 0) == set()
    clock.advance(11)
    assert watch.check(lambda tp: 3) == {TP}
    watch.forget([TP])
    assert watch.check(lambda tp: 3) == set() and watch.stalled == set()
