"""Micro-batcher rules, driven by an injected clock (no sleeping)."""

from __future__ import annotations

import pytest

from streamer.pipeline.batcher import MicroBatcher
from streamer.testing import FakeClock


def test_flushes_when_full_and_keeps_the_rest_open() -> None:
    clock = FakeClock()
    b: MicroBatcher[int] = MicroBatcher(max_size=4, max_wait_ms=50, clock=clock)
    out = b.add(range(10))
    assert [batch.rows for batch in out] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert all(batch.reason == "full" for batch in out)
    assert len(b) == 2


def test_timeout_is_measured_from_the_first_row() -> None:
    clock = FakeClock()
    b: MicroBatcher[str] = MicroBatcher(max_size=100, max_wait_ms=50, clock=clock)
    assert b.add(["a"]) == []
    clock.advance(0.030)
    assert b.add(["b"]) == []
    assert b.remaining_s() == pytest.approx(0.020)
    clock.advance(0.019)
    assert b.poll() is None
    clock.advance(0.001)
    batch = b.poll()
    assert batch is not None and batch.rows == ("a", "b") and batch.reason == "timeout"
    assert batch.wait_s == pytest.approx(0.050)
    assert b.remaining_s() is None and len(b) == 0


def test_steady_trickle_cannot_starve_the_first_row() -> None:
    """One row every 10 ms for a second: every flush comes within max_wait of its first row."""
    clock = FakeClock()
    b: MicroBatcher[int] = MicroBatcher(max_size=1000, max_wait_ms=50, clock=clock)
    batches = []
    for i in range(100):
        batches.extend(b.add([i]))
        clock.advance(0.010)
    assert len(batches) >= 15
    assert all(batch.reason == "timeout" for batch in batches)
    assert max(batch.wait_s for batch in batches) <= 0.050 + 1e-9
    flushed = [row for batch in batches for row in batch.rows]
    assert flushed == list(range(len(flushed)))  # in order, nothing lost


def test_rows_after_the_deadline_start_a_new_batch() -> None:
    clock = FakeClock()
    b: MicroBatcher[int] = MicroBatcher(max_size=100, max_wait_ms=50, clock=clock)
    b.add([1, 2])
    clock.advance(0.060)
    out = b.add([3])
    assert [batch.rows for batch in out] == [(1, 2)]
    assert b.remaining_s() == pytest.approx(0.050)


def test_shutdown_flush_returns_the_open_rows_once() -> None:
    clock = FakeClock()
    b: MicroBatcher[int] = MicroBatcher(max_size=8, max_wait_ms=1000, clock=clock)
    b.add([1, 2, 3])
    clock.advance(0.004)
    batch = b.flush("shutdown")
    assert batch is not None and batch.rows == (1, 2, 3) and batch.reason == "shutdown"
    assert batch.wait_s == pytest.approx(0.004)
    assert b.flush("shutdown") is None


def test_drop_removes_lost_rows_and_keeps_the_deadline() -> None:
    clock = FakeClock()
    b: MicroBatcher[int] = MicroBatcher(max_size=8, max_wait_ms=50, clock=clock)
    b.add([1, 2, 3, 4])
    clock.advance(0.010)
    assert b.drop(lambda rows: [r for r in rows if r % 2 == 0]) == 2
    assert b.remaining_s() == pytest.approx(0.040)
    assert b.drop(lambda rows: rows[:0]) == 2
    assert b.remaining_s() is None


def test_size_only_flushes_when_full_or_asked_never_on_time() -> None:
    """The docstring's worked rule: max_size 4, no deadline."""
    clock = FakeClock()
    b: MicroBatcher[int] = MicroBatcher(max_size=4, max_wait_ms=None, clock=clock)
    assert b.add([0, 1, 2]) == []
    clock.advance(3600.0)  # an hour on the clock: still open
    assert b.remaining_s() is None and b.poll() is None and len(b) == 3
    out = b.add([3, 4, 5])
    assert [(batch.rows, batch.reason) for batch in out] == [((0, 1, 2, 3), "full")]
    assert out[0].wait_s == pytest.approx(3600.0)  # measured from the first row, as with a deadline
    clock.advance(1e9)
    assert b.poll() is None and b.add([]) == [] and b.remaining_s() is None
    batch = b.flush("shutdown")
    assert batch is not None and batch.rows == (4, 5) and batch.reason == "shutdown"
    assert batch.wait_s == pytest.approx(1e9)


def test_rejects_nonsense_sizes() -> None:
    with pytest.raises(ValueError, match="max_size"):
        MicroBatcher(max_size=0, max_wait_ms=5)
    with pytest.raises(ValueError, match="max_wait_ms"):
        MicroBatcher(max_size=1, max_wait_ms=-1)
