"""`jobs list` and `jobs status` as people read them: the jobs of a state, and a schedule's missed slots."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from streamer.commands.jobs import list_lines, missed_slots, status_lines
from streamer.errors import ConfigError
from streamer.jobs.spec import parse_spec, slot_id
from streamer.jobs.states import Done, JobStatus

SPEC = parse_spec({"name": "nightly", "source": {"parquet": "in"}, "target": {"table": "scores"},
                   "schedule": "0 2 * * *", "timezone": "UTC"})
SCHEDULE = {"name": "nightly", "schedule": "0 2 * * *", "timezone": "UTC"}


def slot(day: int) -> JobStatus:
    at = dt.datetime(2026, 12, day, 2, 0, tzinfo=dt.UTC)
    ms = int(at.timestamp() * 1000)
    status = JobStatus.queued(slot_id("nightly", at), SPEC.with_id(slot_id("nightly", at)), ms)
    return dataclasses.replace(status, schedule=SCHEDULE)


def test_a_slot_between_the_first_submitted_one_and_now_without_a_job_is_missed() -> None:
    statuses = [slot(1), slot(2), slot(4)]
    now = dt.datetime(2026, 12, 5, 10, 0, tzinfo=dt.UTC)
    assert missed_slots(statuses, now) == [
        "missed nightly slot 2026-12-03T02:00:00+00:00 (no job nightly-20261203T0200)",
        "missed nightly slot 2026-12-05T02:00:00+00:00 (no job nightly-20261205T0200)"]
    assert missed_slots([*statuses, slot(3), slot(5)], now) == []
    assert missed_slots([slot(1)], dt.datetime(2026, 12, 1, 2, 0, 30, tzinfo=dt.UTC)) == []  # its own slot


def test_the_list_shows_a_state_s_jobs_and_refuses_a_state_that_is_none() -> None:
    done = slot(1).started("w1", (0, 0), 1).finished(Done(5, 4, 1, "table streamer.scores",
                                                          "table streamer.scores_rejects"), 2)
    now = dt.datetime(2026, 12, 2, 10, 0, tzinfo=dt.UTC)
    lines = list_lines([done, slot(2)], "completed", now)
    assert [line.split()[:3] for line in lines[1:]] == [["nightly-20261201T0200", "completed", "5"]]
    with pytest.raises(ConfigError) as err:
        list_lines([], "done", now)
    assert err.value.key == "--status"
    shown = status_lines(done)
    assert shown[:4] == ["job nightly-20261201T0200: completed", "worker w1, attempt 1", "rows 5 of 5",
                         "predictions 4 in table streamer.scores, rejects 1 in table streamer.scores_rejects"]
