"""The worker's runner: a job run by the batch command of its source and target, under its id; a
job whose run finished already (its worker died after the last commit) is complete with what the
commits hold."""

from __future__ import annotations

import threading
from pathlib import Path

from streamer.cli_jobs import JobRunner
from streamer.jobs.spec import parse_spec
from tests.jobs.support import events_file, jobs_config


def test_a_job_run_again_after_its_last_commit_reports_what_its_commits_hold(tmp_path: Path) -> None:
    config = jobs_config(tmp_path, "127.0.0.1:1")  # a lake job: no broker is asked
    source = events_file(tmp_path / "events.parquet", 3000)
    reports: list[tuple[int, int | None]] = []
    for target in ({"table": "scores"}, {"parquet": str(tmp_path / "out")}):
        spec = parse_spec({"source": {"parquet": str(source)}, "target": target})
        runner = JobRunner(str(config))
        first = runner.run("job-1", spec, threading.Event(), lambda rows, total: reports.append((rows, total)))
        again = runner.run("job-1", spec, threading.Event(), lambda rows, total: None)  # a resumed job, all done
        assert (first.done.rows, first.done.predictions, first.done.rejects, first.stopped) == (3000, 3000, 0, False)
        assert again == first, (again, first)
    assert reports[-1] == (3000, 3000)
    assert first.done.output == f"parquet {tmp_path / 'out'}"
