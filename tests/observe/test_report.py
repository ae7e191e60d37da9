"""The progress line and the shutdown summary: their content on a fake clock, and that the loop writes them."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from streamer.config import with_overrides
from streamer.observe.report import ProgressLog, span_ms
from streamer.observe.stats import Stats
from streamer.testing import FakeClock
from tests.support.fakes import event
from tests.test_processor import P0, Harness, config


def test_the_progress_line_comes_once_per_interval_and_counts_the_interval() -> None:
    clock = FakeClock()
    progress = ProgressLog(30.0, clock, "fraud")
    stats = Stats(events=600, predictions=590, dead_letters=Counter(validate=7, deserialize=3))
    clock.advance(29.9)
    assert progress.tick(stats, version="4", assigned=3, lag={}, held=None) is None
    clock.advance(0.1)
    line = progress.tick(stats, version="4", assigned=3, lag={("f", 0): 200, ("f", 1): 112}, held=None)
    assert line == ("progress: 600 events in 30 s (20/s), 590 predictions, 10 dead letters (validate 7, "
                    "deserialize 3), lag 312, 3 partitions, model fraud 4")
    stats.events = 900
    clock.advance(30)
    line = progress.tick(stats, version="5", assigned=2, lag={}, held="model failing: boom")
    assert line is not None and line.startswith("progress: 300 events in 30 s (10/s)")
    assert "lag" not in line and line.endswith("2 partitions, model fraud 5, held: model failing: boom")


def test_no_progress_line_with_interval_zero_and_a_summary_anyway() -> None:
    clock = FakeClock()
    progress = ProgressLog(0.0, clock, "fraud")
    clock.advance(3600)
    stats = Stats(events=7200, predictions=7200, commits=12, latencies_ms=[float(i) for i in range(1, 101)])
    assert progress.tick(stats, version="1", assigned=1, lag={}, held=None) is None
    assert progress.summary(stats, failed=True) == (
        "stopped on an error after 3600 s: 7,200 events (2/s), 7,200 predictions, 0 dead letters, "
        "0 degraded, 0 reloads, 12 commits, latency p50 50 ms p99 99 ms")


@pytest.mark.parametrize(("ms", "shown"), [
    (0.4, "0 ms"), (9_999, "9999 ms"), (10_000, "10 s"), (119_000, "119 s"), (120_000, "2 min"),
    (7_140_000, "119 min"), (7_200_000, "2 h"), (47 * 3_600_000, "47 h"), (48 * 3_600_000, "2 d"),
    (29_138_105_227, "337 d"),
])
def test_a_latency_is_shown_in_a_unit_read_at_a_glance(ms: float, shown: str) -> None:
    assert span_ms(ms) == shown


def test_the_loop_logs_progress_every_interval_and_a_summary_when_it_stops(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(with_overrides(config(max_wait_ms=0), metrics={"log_interval_ms": 500}))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(5)])
    with caplog.at_level(logging.INFO, logger="streamer.progress"):
        h.run(lambda s: s.predictions == 5, lambda s: h.clock() >= 1.2)  # a pass is 10 ms of the fake clock
    lines = [r.getMessage() for r in caplog.records if r.name == "streamer.progress"]
    assert len(lines) == 3, lines
    assert lines[0].startswith("progress: 5 events in 0.5 s (10/s), 5 predictions, 0 dead letters, 1 partition,")
    assert lines[1].startswith("progress: 0 events in 0.5 s")
    assert lines[2].startswith("stopped after 1.2 s: 5 events") and "5 predictions, 0 dead letters" in lines[2]
