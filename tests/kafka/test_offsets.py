"""The contiguous done prefix: what may be committed, and what must wait."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamer.kafka.offsets import OffsetTracker

TP = ("features", 0)


def consumed(tracker: OffsetTracker, offsets: range | list[int], tp: tuple[str, int] = TP) -> None:
    for o in offsets:
        tracker.consumed(tp, o)


def test_worked_example_commits_37_not_41() -> None:
    t = OffsetTracker()
    consumed(t, range(34, 41))
    t.done(TP, [34, 35, 36, 40])
    assert t.committable() == {TP: 37}
    assert t.in_flight(TP) == 4  # 37 38 39 40
    t.done(TP, [37, 38, 39])
    assert t.committable() == {TP: 41}


def test_nothing_done_nothing_to_commit() -> None:
    t = OffsetTracker()
    consumed(t, range(5))
    t.done(TP, [3, 4])
    assert t.committable() == {}


def test_gaps_in_consumed_offsets_are_skipped() -> None:
    t = OffsetTracker()
    consumed(t, [10, 11, 14, 15])  # 12, 13: a transaction marker and a compacted record
    t.done(TP, [10, 11, 14, 15])
    assert t.committable() == {TP: 16}


def test_only_moved_positions_are_reported_again() -> None:
    t = OffsetTracker()
    consumed(t, range(3))
    t.done(TP, [0, 1, 2])
    assert t.committable() == {TP: 3}
    t.mark_committed({TP: 3})
    assert t.committable() == {}
    consumed(t, [3])
    t.done(TP, [3])
    assert t.committable() == {TP: 4}


def test_partitions_are_independent_and_can_be_chosen() -> None:
    other = ("features", 1)
    t = OffsetTracker()
    consumed(t, range(3))
    consumed(t, range(100, 103), other)
    t.done(TP, [0, 1])
    t.done(other, [100, 101, 102])
    assert t.committable() == {TP: 2, other: 103}
    assert t.committable([other]) == {other: 103}


def test_forgotten_partitions_ignore_late_acks() -> None:
    t = OffsetTracker()
    consumed(t, range(3))
    t.forget([TP])
    t.done(TP, [0, 1, 2])
    assert t.committable() == {}
    assert t.in_flight() == 0


def test_rewind_returns_the_last_commit_or_the_first_consumed_offset() -> None:
    other = ("features", 1)
    t = OffsetTracker()
    consumed(t, range(10, 20))
    consumed(t, range(50, 55), other)
    t.done(TP, range(10, 15))
    t.mark_committed({TP: 15})
    t.done(TP, range(15, 18))
    t.done(other, [50, 51])
    assert t.rewind() == {TP: 15, other: 50}
    assert t.committable() == {} and t.in_flight() == 0
    consumed(t, range(15, 17))
    t.done(TP, [15, 16])
    assert t.committable() == {TP: 17}


class _ReferenceTracker:
    """The tracker's rule, one offset at a time: the bulk tracker must agree with it exactly."""

    def __init__(self) -> None:
        self.consumed: list[int] = []
        self.done: set[int] = set()
        self.position: int | None = None

    def mark(self, offsets: list[int]) -> None:
        self.done.update(o for o in offsets if o in self.consumed)
        while self.consumed and self.consumed[0] in self.done:
            self.position = self.consumed.pop(0) + 1


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_bulk_tracking_agrees_with_the_one_offset_rule(data: st.DataObject) -> None:
    """Chunks of gapped offsets, acks in any order, in any grouping, repeated or never consumed."""
    gaps = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=60))
    offsets = list(np.cumsum(gaps) + data.draw(st.integers(0, 10**12)))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(offsets)), max_size=8))) | {len(offsets)})
    tracker, ref = OffsetTracker(), _ReferenceTracker()
    start = 0
    for cut in cuts:
        chunk = offsets[start:cut]
        tracker.consumed(TP, np.array(chunk, np.int64))
        ref.consumed.extend(chunk)
        start = cut
        for _ in range(data.draw(st.integers(0, 3))):
            acks = data.draw(st.lists(st.sampled_from(offsets + [offsets[-1] + 5, offsets[0] - 1]), max_size=12))
            tracker.done(TP, np.array(acks, np.int64))
            ref.mark(acks)
            assert tracker.committable() == ({TP: ref.position} if ref.position is not None else {})
            assert tracker.in_flight(TP) == len(ref.consumed)
    tracker.done(TP, offsets)
    assert tracker.committable() == {TP: offsets[-1] + 1} and tracker.in_flight() == 0


def test_an_older_answer_after_a_newer_one_makes_the_newer_committable_again() -> None:
    """The broker keeps the last commit it applies: the tracker takes the last answer."""
    t = OffsetTracker()
    t.consumed(TP, range(20))
    t.done(TP, range(20))
    t.mark_committed({TP: 20})
    assert t.committable() == {}
    t.mark_committed({TP: 12})
    assert t.committable() == {TP: 20}
