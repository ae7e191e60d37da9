"""A range of a topic: bounds as written, resolved to offsets per partition against the watermarks."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition

from streamer.errors import ConfigError
from streamer.kafka.ranges import When, parse_when, resolve


def test_bounds_are_parsed_in_every_form() -> None:
    now = 1_700_000_000_000
    assert parse_when("earliest", "--from") == When("earliest")
    assert parse_when(" latest ", "--to") == When("latest")
    assert parse_when("2h", "--from", now_ms=now) == When("timestamp", now - 7_200_000)
    assert parse_when("1.5s", "--from", now_ms=now) == When("timestamp", now - 1500)
    assert parse_when("0:5,2:7", "--from") == When("offsets", offsets=((0, 5), (2, 7)))
    assert parse_when("2026-12-01T00:00:00Z", "--from") == When("timestamp", 1_796_083_200_000)
    assert parse_when("2026-12-01T00:00:00", "--from") == When("timestamp", 1_796_083_200_000)  # UTC unless told
    with pytest.raises(ConfigError, match="--to"):
        parse_when("yesterday", "--to")


class Marks:
    """A consumer that knows each partition's watermarks (what resolve asks of the broker)."""

    def __init__(self, marks: dict[int, tuple[int, int]]) -> None:
        self.marks = marks

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        return self.marks[tp.partition]


def test_partition_offset_bounds_replay_the_listed_partitions_only() -> None:
    tps = [TopicPartition("t", p) for p in range(3)]
    consumer = Marks({0: (0, 100), 1: (10, 50), 2: (0, 70)})
    got = resolve(consumer, tps, parse_when("0:5,1:5", "--from"), When("latest"))  # type: ignore[arg-type]
    assert got == {("t", 0): (5, 100), ("t", 1): (10, 50), ("t", 2): (0, 0)}  # 1:5 is below its start
    got = resolve(consumer, tps, When("earliest"), parse_when("2:20", "--to"))  # type: ignore[arg-type]
    assert got == {("t", 0): (0, 0), ("t", 1): (10, 10), ("t", 2): (0, 20)}
    assert resolve(consumer, tps, When("earliest"), When("latest")) == {  # type: ignore[arg-type]
        ("t", 0): (0, 100), ("t", 1): (10, 50), ("t", 2): (0, 70)}
