"""A range of a topic: its bounds as written (a time, a duration ago, earliest, latest, offsets) and
as offsets per partition (``[start, end)``), resolved once against the broker.

Worked example: ``--from 2h --to latest`` at 12:00 reads, for each partition, from the first
offset at or after 10:00 to the partition's end as of now; ``--from 0:5,1:5`` reads partitions 0
and 1 from offset 5, and nothing of the others.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import Consumer, TopicPartition

from streamer.errors import ConfigError
from streamer.pipeline.records import Partition

Ranges = dict[Partition, tuple[int, int]]  # [start, end) per partition: a topic's offsets, or a table's row numbers
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_OFFSETS = re.compile(r"^\d+:\d+(,\d+:\d+)*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class When:
    """A replay bound: 'earliest', 'latest', a timestamp in ms, or per-partition offsets."""

    kind: Literal["earliest", "latest", "timestamp", "offsets"]
    timestamp_ms: int = 0
    offsets: tuple[tuple[int, int], ...] = ()


def parse_when(text: str, key: str, now_ms: int | None = None) -> When:
    """ISO-8601 time, a duration ago (``2h``, ``30m``, ``7d``), earliest/latest, or ``P:O,...``
    (those partitions only)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    text = text.strip()
    if text == "earliest":
        return When("earliest")
    if text == "latest":
        return When("latest")
    if m := _DURATION.match(text):
        return When("timestamp", now_ms - int(float(m.group(1)) * _UNIT_MS[m.group(2)]))
    if _OFFSETS.match(text):
        pairs = tuple((int(p), int(o)) for p, o in (item.split(":") for item in text.split(",")))
        return When("offsets", offsets=pairs)
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(key, f"{text!r} is not an ISO-8601 time, a duration like 2h, "
                               "'earliest', 'latest' or partition:offset pairs") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return When("timestamp", int(moment.timestamp() * 1000))


def resolve(consumer: Consumer, tps: list[TopicPartition], start: When, end: When,
            timeout_s: float = 30.0) -> Ranges:
    """Turn the two bounds into ``[start, end)`` offsets per partition, as of now."""
    marks = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=timeout_s)
             for tp in tps}

    def offsets(when: When) -> dict[Partition, int]:
        if when.kind == "earliest":
            return {k: low for k, (low, _) in marks.items()}
        if when.kind == "latest":
            return {k: high for k, (_, high) in marks.items()}
        if when.kind == "offsets":
            if len({tp.topic for tp in tps}) != 1:
                raise ConfigError("--from/--to", "partition:offset bounds need a single input topic")
            given = dict(when.offsets)
            return {k: min(max(given.get(k[1], marks[k][0]), marks[k][0]), marks[k][1]) for k in marks}
        found = consumer.offsets_for_times(
            [TopicPartition(t, p, when.timestamp_ms) for t, p in marks], timeout=timeout_s)
        # -1: no message at or after that time, so the bound is the partition's end.
        return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else marks[(tp.topic, tp.partition)][1]
                for tp in found}

    starts, ends = offsets(start), offsets(end)
    # partition:offset bounds name the partitions to replay: an unlisted one has an empty range
    # (``--from 0:5,1:5`` reads partitions 0 and 1 from offset 5, and nothing of partition 2).
    listed = [{p for p, _ in w.offsets} for w in (start, end) if w.kind == "offsets"]
    return {k: (starts[k], max(starts[k], ends[k])) if all(k[1] in named for named in listed)
            else (starts[k], starts[k]) for k in marks}
