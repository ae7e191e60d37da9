"""A completed job's status gives its rows in all, also when no progress was written while it ran."""

from __future__ import annotations

from streamer.commands.jobs import status_lines
from streamer.jobs.spec import parse_spec
from streamer.jobs.states import Done, JobStatus, State

SPEC = parse_spec({"source": {"parquet": "events.parquet"}, "target": {"table": "scores"}})
DONE = Done(7, 6, 1, "table streamer.scores", "table streamer.scores_rejects")


def test_a_job_done_before_its_first_progress_write_shows_its_rows_of_all() -> None:
    status = JobStatus.queued("j1", SPEC, now_ms=1000).started("worker-1", (0, 0), now_ms=1500)
    assert status.rows_total is None  # no progress written: a job shorter than jobs.progress_ms
    done = status.finished(DONE, now_ms=2000)
    assert (done.state, done.rows_done, done.rows_total) == (State.COMPLETED, 7, 7)
    assert "rows 7 of 7" in status_lines(done)


def test_a_completed_status_keeps_its_total_through_the_status_topic() -> None:
    status = JobStatus.queued("j1", SPEC, now_ms=1000).started("worker-1", (0, 0), now_ms=1500)
    done = JobStatus.of(status.progressed(3, 7, 10.0, now_ms=1800).finished(DONE, now_ms=2000).to_dict())
    assert (done.rows_done, done.rows_total, done.predictions, done.rejects) == (7, 7, 6, 1)
