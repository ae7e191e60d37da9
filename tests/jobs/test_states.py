"""A job's states: the table of moves, each record's history, and what a status keeps as JSON."""

from __future__ import annotations

import pytest

from streamer.errors import JobStateError
from streamer.jobs.spec import parse_spec
from streamer.jobs.states import FINAL, MOVES, Done, JobStatus, State

SPEC = parse_spec({"source": {"parquet": "in"}, "target": {"table": "scores"}, "within": "1h"})
DONE = Done(10, 9, 1, "table streamer.scores", "table streamer.scores_rejects")


def in_state(state: State) -> JobStatus:
    s = JobStatus.queued("j", SPEC, 1000)
    path = {State.QUEUED: [], State.RUNNING: ["run"], State.COMPLETED: ["run", "done"],
            State.FAILED: ["run", "fail"], State.EXPIRED: ["expire"], State.CANCELLING: ["run", "ask"],
            State.CANCELLED: ["ask"]}[state]
    for step in path:
        s = {"run": lambda x: x.started("w", (0, 1), 2000), "done": lambda x: x.finished(DONE, 3000),
             "fail": lambda x: x.failed("boom", 3000), "expire": lambda x: x.expired(3000),
             "ask": lambda x: x.cancel_asked(2500)}[step](s)
    assert s.state == state
    return s


MOVERS = {
    State.RUNNING: lambda s: s.started("w2", (0, 1), 5000),
    State.COMPLETED: lambda s: s.finished(DONE, 5000),
    State.FAILED: lambda s: s.failed("boom", 5000),
    State.EXPIRED: lambda s: s.expired(5000),
    State.CANCELLED: lambda s: s.cancelled(5000),
    State.QUEUED: lambda s: JobStatus.queued("j", SPEC, 5000, previous=s),
}


@pytest.mark.parametrize("start", list(State))
@pytest.mark.parametrize("to", list(MOVERS))
def test_every_move_the_table_allows_is_made_and_every_other_refused(start: State, to: State) -> None:
    status = in_state(start)
    allowed = to in MOVES[start] or (to == State.RUNNING and start == State.CANCELLING)  # resumed while cancelling
    if allowed:
        moved = MOVERS[to](status)
        assert moved.state == (State.CANCELLING if start == State.CANCELLING and to == State.RUNNING else to)
        assert moved.updated_at_ms == 5000 and len(moved.events) == len(status.events) + 1
    else:
        with pytest.raises(JobStateError):
            MOVERS[to](status)


def test_a_resumed_job_counts_its_attempts_and_says_who_resumed_it() -> None:
    s = JobStatus.queued("j", SPEC, 1000).started("a", (3, 17), 1500).started("b", (3, 17), 9000)
    assert (s.attempt, s.worker, s.started_at_ms, s.deadline_ms) == (2, "b", 1500, 1000 + 3_600_000)
    assert s.events[-1].endswith("resumed by b after a stopped (attempt 2)")
    again = JobStatus.queued("j", SPEC, 20_000, previous=s.failed("disk full", 10_000))
    assert again.state == State.QUEUED and again.attempt == 2 and "submitted again after failed" in again.events[-1]


def test_a_cancel_cancels_a_queued_job_at_once_and_asks_a_running_one() -> None:
    assert JobStatus.queued("j", SPEC, 1).cancel_asked(2).state == State.CANCELLED
    assert in_state(State.RUNNING).cancel_asked(3000).state == State.CANCELLING
    assert {State.COMPLETED, State.EXPIRED} <= FINAL and not MOVES[State.COMPLETED]


def test_a_status_is_the_same_after_json_and_skips_fields_it_does_not_know() -> None:
    s = in_state(State.COMPLETED)
    assert JobStatus.of(s.to_dict()) == s
    assert JobStatus.of({**s.to_dict(), "from_a_newer_writer": 1}) == s
    assert (s.predictions, s.rejects, s.output) == (9, 1, "table streamer.scores")
