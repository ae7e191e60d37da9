"""Columns of consumed messages and decoded rows: grouping by partition, taking, joining, filtering."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamer.model.signature import Columns
from streamer.pipeline.records import Messages, Rows
from tests.support.fakes import FakeMessage


def chunk(coords: list[tuple[str, int, int]]) -> Messages:
    return Messages.of([FakeMessage(t, p, o, b"v%d" % o) for t, p, o in coords])


def rows_of(messages: Messages) -> Rows:
    n = len(messages)
    return Rows(messages, [f"e{o}" for o in messages.offsets.tolist()], ["a"] * n, messages.offsets * 10,
                Columns({"features": np.arange(n * 2, dtype=np.float32).reshape(n, 2)}))


coords = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), st.integers(0, 10**6)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(coords)
def test_by_partition_keeps_each_partitions_offsets_in_consumption_order(cs: list[tuple[str, int, int]]) -> None:
    want: dict[tuple[str, int], list[int]] = {}
    for t, p, o in cs:
        want.setdefault((t, p), []).append(o)
    got = {tp: offs.tolist() for tp, offs in chunk(cs).by_partition().items()}
    assert got == want


@settings(max_examples=200, deadline=None)
@given(coords, st.sets(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3))), st.integers(0, 10**6))
def test_within_and_without_keep_exactly_the_rows_of_the_chosen_partitions(
        cs: list[tuple[str, int, int]], tps: set[tuple[str, int]], end: int) -> None:
    mine = chunk(cs).within(tps)
    assert [(m.topic(), m.partition(), m.offset()) for m in mine.items] == [c for c in cs if c[:2] in tps]
    bounded = chunk(cs).within(tps, lambda tp, offsets: offsets >= end)
    assert bounded.offsets.tolist() == [o for t, p, o in cs if (t, p) in tps and o < end]
    left = rows_of(chunk(cs)).without(tps)
    assert left.event_ids == [f"e{o}" for t, p, o in cs if (t, p) not in tps]
    assert left.source.offsets.tolist() == [o for t, p, o in cs if (t, p) not in tps]


def test_take_join_and_record_carry_every_column() -> None:
    rows = rows_of(chunk([("a", 0, 5), ("a", 1, 6), ("a", 0, 7)]))
    picked = rows.take(np.array([2, 0]))
    assert picked.event_ids == ["e7", "e5"] and picked.event_times.tolist() == [70, 50]
    assert picked.features.arrays["features"].tolist() == [[4.0, 5.0], [0.0, 1.0]]
    joined = Rows.join([rows[:1], rows[1:]])
    assert joined.event_ids == rows.event_ids and (joined.features.arrays["features"] == rows.features.arrays["features"]).all()
    assert joined.source.items == rows.source.items
    record = rows.record(1)
    assert (record.topic, record.partition, record.offset, record.event_id, record.event_time_ms) == ("a", 1, 6, "e6", 60)
    assert record.key is None  # FakeMessage has no key unless given
    empty = Rows.empty(Columns({"features": np.empty((0, 3), np.float32)}))
    assert len(empty) == 0 and empty.features.arrays["features"].shape == (0, 3)
