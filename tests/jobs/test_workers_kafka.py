"""Jobs on the real broker, run by real worker processes: a worker killed mid-job, a schedule's
slot submitted twice, a job past its window, a cancel, read back with DuckDB."""

from __future__ import annotations

import datetime as dt
import os
import signal
from pathlib import Path

import pytest

from streamer import cli
from streamer.jobs.states import State
from tests.jobs.support import (
    await_members,
    await_status,
    events_file,
    jobs_config,
    start_worker,
    stop_workers,
    table_rows,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def _spec(folder: Path, text: str) -> Path:
    path = folder / "job.yaml"
    path.write_text(text)
    return path


def test_a_worker_killed_mid_job_leaves_it_to_another_which_resumes_it_with_exactly_its_rows(
        bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = jobs_config(tmp_path, bootstrap, target_file_mb=1)
    source = events_file(tmp_path / "events.parquet", 250_000)  # about 1 MB of predictions each 70,000 rows
    token = tmp_path / "killed"  # the first worker to reach its second commit claims it and dies there
    workers = [start_worker(config, f"w{i}", tmp_path / f"w{i}.log", ["kill", "1", str(token)]) for i in (1, 2)]
    try:
        await_members(config, 2)
        spec = _spec(tmp_path, f"source: {{parquet: {source}}}\ntarget: {{table: scores}}\n")
        assert cli.main(["jobs", "submit", "--config", str(config), str(spec), "--id", "kill-1"]) == 0
        status = await_status(config, "kill-1", lambda s: s.final)
        assert token.exists()  # a worker died mid-job
        assert sorted(p.poll() for p in workers if p.poll() is not None) == [-9]
    finally:
        stop_workers(*workers)
    assert status.state == State.COMPLETED, status
    assert status.attempt == 2 and any("resumed by" in e for e in status.events), status.events
    rows, distinct, ids = table_rows(config, "scores")
    assert (rows, distinct) == (250_000, 250_000)  # 0 duplicates
    assert set(ids) == {f"e-{i}" for i in range(250_000)}  # 0 missing
    assert (status.rows_done, status.predictions, status.rejects) == (250_000, 250_000, 0)  # both workers' commits


def test_a_slot_submitted_twice_is_one_job_a_past_window_expires_and_a_cancel_stops_at_the_next_commit(
        bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = jobs_config(tmp_path, bootstrap, target_file_mb=1)
    source = events_file(tmp_path / "events.parquet", 30_000)
    gate = tmp_path / "gate"  # the worker's commits after its first (the slot's only one) wait for it
    worker = start_worker(config, "w1", tmp_path / "w1.log", ["gate", "1", str(gate)])
    try:
        # A schedule's slot, submitted twice (a CronJob pod retried): one job, one result.
        scheduled = _spec(tmp_path, f"name: nightly\nsource: {{parquet: {source}}}\ntarget: {{table: nightly}}\n"
                                    "schedule: '0 2 * * *'\ntimezone: Europe/Berlin\n")
        for _ in range(2):
            assert cli.main(["jobs", "submit", "--config", str(config), str(scheduled),
                             "--slot", "2026-12-05T02:00+01:00"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0] == "job nightly-20261205T0100 queued"
        assert out[1].startswith("job nightly-20261205T0100 is already "), out
        gate.touch()
        done = await_status(config, "nightly-20261205T0100", lambda s: s.final)
        assert done.state == State.COMPLETED and done.attempt == 1, done
        assert table_rows(config, "nightly")[:2] == (30_000, 30_000)
        assert cli.main(["jobs", "submit", "--config", str(config), str(scheduled), "--slot",
                         "2026-12-05T01:00Z"]) == 0  # the same slot, in UTC, after its job completed
        assert capsys.readouterr().out.strip() == "job nightly-20261205T0100 is already completed: not queued again"

        # A job whose window ends before it may start: expired, nothing written.
        soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)).isoformat()
        late = _spec(tmp_path, f"source: {{parquet: {source}}}\ntarget: {{table: late}}\nwithin: 1s\n"
                               f"not_before: '{soon}'\n")
        assert cli.main(["jobs", "submit", "--config", str(config), str(late), "--id", "late-1"]) == 0
        expired = await_status(config, "late-1", lambda s: s.final)
        assert expired.state == State.EXPIRED and expired.started_at_ms is None, expired

        # A job not due yet waits off the queue: the job submitted after it runs first, and it runs when due.
        due = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=4)
        off_peak = _spec(tmp_path, f"source: {{parquet: {source}}}\ntarget: {{table: off_peak}}\n"
                                   f"not_before: '{due.isoformat()}'\n")
        assert cli.main(["jobs", "submit", "--config", str(config), str(off_peak), "--id", "off-peak-1"]) == 0
        now_spec = _spec(tmp_path, f"source: {{parquet: {source}}}\ntarget: {{table: now}}\n")
        assert cli.main(["jobs", "submit", "--config", str(config), str(now_spec), "--id", "now-1"]) == 0
        ran = await_status(config, "now-1", lambda s: s.final)
        assert ran.state == State.COMPLETED and ran.finished_at_ms < due.timestamp() * 1000, ran
        waited = await_status(config, "off-peak-1", lambda s: s.final)
        assert waited.state == State.COMPLETED and waited.started_at_ms >= due.timestamp() * 1000, waited
        assert any("off the queue until its not_before" in e for e in waited.events), waited.events
        capsys.readouterr()

        # A cancel reaches a running job (its first commit held, rows left): it stops at that commit, cancelled.
        gate.unlink()
        big = events_file(tmp_path / "big.parquet", 250_000)  # commits at about 70,000 rows each
        long = _spec(tmp_path, f"source: {{parquet: {big}}}\ntarget: {{table: cancelled}}\n")
        assert cli.main(["jobs", "submit", "--config", str(config), str(long), "--id", "cancel-1"]) == 0
        await_status(config, "cancel-1", lambda s: s.state == State.RUNNING and s.rows_done > 0)
        assert cli.main(["jobs", "cancel", "--config", str(config), "cancel-1"]) == 0
        assert "cancel-1: cancelling (it stops at its next commit)" in capsys.readouterr().out
        gate.touch()
        cancelled = await_status(config, "cancel-1", lambda s: s.final)
        assert cancelled.state == State.CANCELLED, cancelled
        rows, distinct, _ = table_rows(config, "cancelled")
        assert rows == distinct and 0 < rows < 250_000  # a committed prefix, each row once
        assert cancelled.predictions == rows
        assert cli.main(["jobs", "wait", "--config", str(config), "cancel-1", "--timeout", "5"]) == 1
        assert cli.main(["jobs", "list", "--config", str(config)]) == 0
        listed = capsys.readouterr().out
        for job, state in (("nightly-20261205T0100", "completed"), ("late-1", "expired"),
                           ("cancel-1", "cancelled")):
            assert any(line.split()[:2] == [job, state] for line in listed.splitlines()), listed
    finally:
        stop_workers(worker)


def test_a_job_submitted_while_one_worker_is_busy_goes_to_the_idle_one_and_a_stopped_worker_leaves_its_job(
        bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = jobs_config(tmp_path, bootstrap, target_file_mb=1)
    sources = {"first": events_file(tmp_path / "first.parquet", 250_000),  # a commit at about 70,000 rows
               "second": events_file(tmp_path / "second.parquet", 5_000)}
    gate = tmp_path / "gate"  # every commit waits for it: a job taken stays running
    workers = [start_worker(config, f"w{i}", tmp_path / f"w{i}.log", ["gate", "0", str(gate)]) for i in (1, 2)]
    try:
        await_members(config, 2)
        for name, source in sources.items():
            spec = _spec(tmp_path, f"source: {{parquet: {source}}}\ntarget: {{table: {name}}}\n")
            assert cli.main(["jobs", "submit", "--config", str(config), str(spec), "--id", name]) == 0
            await_status(config, name, lambda s: s.state == State.RUNNING)
        first = await_status(config, "first", lambda s: s.state == State.RUNNING)
        second = await_status(config, "second", lambda s: s.state == State.RUNNING)
        assert {first.worker, second.worker} == {"w1", "w2"}  # the second went to the idle member's partition
        # SIGTERM to the first's worker: it stops at the job's next commit and leaves it to the other
        stopped = workers[int(first.worker == "w2")]
        os.killpg(stopped.pid, signal.SIGTERM)
        gate.touch()
        assert stopped.wait(60) == 0
        for name, rows in (("first", 250_000), ("second", 5_000)):
            done = await_status(config, name, lambda s: s.final)
            assert done.state == State.COMPLETED and done.predictions == rows, done
            assert table_rows(config, name)[:2] == (rows, rows)
        resumed = await_status(config, "first", lambda s: s.final)
        assert resumed.worker == second.worker and resumed.attempt == 2, resumed
        assert any(f"stopped with {first.worker}: the next worker resumes it" in e for e in resumed.events)
    finally:
        stop_workers(*workers)
