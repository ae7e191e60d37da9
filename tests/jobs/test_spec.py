"""A job's spec: checked once, every refusal naming its field; a schedule's slots and their ids."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from streamer.errors import ConfigError
from streamer.jobs.queue import _fixed
from streamer.jobs.spec import JobSource, latest_slot, parse_slot, parse_spec, slot_id, slots_between

BASE: dict[str, Any] = {"source": {"parquet": "s3://events/2026-12-04/"}, "target": {"table": "scores"}}
UTC = dt.UTC


def test_a_full_spec_round_trips_through_its_mapping() -> None:
    spec = parse_spec({**BASE, "name": "nightly", "within": "24h", "priority": 3, "labels": {"team": "fraud"},
                       "schedule": "0 2 * * *", "timezone": "Europe/Berlin", "not_before": "2026-12-05T01:00:00Z"})
    assert parse_spec(spec.to_dict()) == spec
    assert (spec.within_s, spec.priority, dict(spec.labels)) == (86_400, 3, {"team": "fraud"})
    assert spec.not_before_ms == int(dt.datetime(2026, 12, 5, 1, tzinfo=UTC).timestamp() * 1000)
    for source in ({"table": "events", "snapshot": 7}, {"parquet": ["a.parquet", "b.parquet"]},
                   {"topic": {"from": "2026-12-01T00:00:00+00:00", "to": "2026-12-02T00:00:00+00:00"}}):
        one = parse_spec({"source": source, "target": {"parquet": "out"}})
        assert parse_spec(one.to_dict()) == one


@pytest.mark.parametrize(("change", "key"), [
    ({"source": None}, "job.source"),
    ({"source": {"parquet": "a", "table": "b"}}, "job.source"),
    ({"source": {"s3": "x"}}, "job.source.s3"),
    ({"source": {"parquet": []}}, "job.source.parquet"),
    ({"source": {"parquet": "a", "snapshot": 3}}, "job.source.snapshot"),
    ({"source": {"topic": {"to": "1h"}}}, "job.source.topic"),
    ({"source": {"topic": {"from": "yesterday-ish"}}}, "job.source.topic.from"),
    ({"target": {"topic": "t"}}, "job.target.topic"),  # a topic target takes a topic source
    ({"target": {}}, "job.target"),
    ({"within": "3 weeks"}, "job.within"),
    ({"within": "0h"}, "job.within"),
    ({"priority": "high"}, "job.priority"),
    ({"labels": ["a"]}, "job.labels"),
    ({"not_before": "2026-12-05T01:00:00"}, "job.not_before"),  # no zone
    ({"id": "a b"}, "job.id"),
    ({"schedule": "0 2 * * *"}, "job.name"),  # a schedule's ids start with the name
    ({"name": "n", "schedule": "0 2 * *"}, "job.schedule"),
    ({"name": "n", "schedule": "0 25 * * *"}, "job.schedule"),
    ({"name": "n", "schedule": "0 2 * * *", "timezone": "Mars/Olympus"}, "job.timezone"),
    ({"timezone": "UTC"}, "job.timezone"),
    ({"name": "n", "id": "x", "schedule": "0 2 * * *"}, "job.id"),
    ({"name": "n", "trigger": {"table": "t"}}, "job.source"),  # the trigger's rows, not a source's
    ({"colour": "blue"}, "job.colour"),
])
def test_a_bad_field_is_refused_naming_it(change: dict[str, Any], key: str) -> None:
    raw = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(ConfigError) as err:
        parse_spec(raw)
    assert err.value.key == key, err.value


def test_a_slot_is_the_schedule_s_time_in_its_zone_and_its_id_is_in_utc() -> None:
    spec = parse_spec({**BASE, "name": "nightly", "schedule": "0 2 * * *", "timezone": "Europe/Berlin"})
    at = dt.datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
    slot = latest_slot(spec, at)
    assert slot_id("nightly", slot) == "nightly-20261205T0100"  # 02:00 in Berlin, winter
    assert latest_slot(spec, slot) == slot  # at the slot itself: that slot, a pod retried at once gets it
    assert latest_slot(spec, slot - dt.timedelta(seconds=1)) == slot - dt.timedelta(days=1)
    assert parse_slot("latest", spec, at) == slot
    assert parse_slot("2026-12-05T01:00Z", spec, at) == slot
    assert slot_id("nightly", parse_slot("2026-07-05T02:00", spec, at)) == "nightly-20260705T0000"  # summer
    with pytest.raises(ConfigError, match="not a time of the schedule") as err:
        parse_slot("2026-12-05T02:30+01:00", spec, at)
    assert err.value.key == "--slot"
    with pytest.raises(ConfigError) as err:
        parse_slot("latest", parse_spec(BASE), at)
    assert err.value.key == "--slot"
    week = slots_between(spec, at - dt.timedelta(days=7), at)
    assert [slot_id("n", t) for t in week[-2:]] == ["n-20261204T0100", "n-20261205T0100"] and len(week) == 7


def test_a_topic_range_s_relative_times_are_fixed_at_submission() -> None:
    now = dt.datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
    fixed = _fixed(JobSource(topic_from="2h"), now)
    assert (fixed.topic_from, fixed.topic_to) == ("2026-12-05T08:00:00+00:00", "2026-12-05T10:00:00+00:00")
    assert _fixed(JobSource(topic_from="earliest", topic_to="latest"), now).topic_from == "earliest"
