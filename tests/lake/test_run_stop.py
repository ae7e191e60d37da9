"""A lake run's stop without Kafka (`streamer score` in this process): what was read before the stop
is scored and committed, the summary says stopped and how to resume, the same run id finishes it;
a stop after the last row is a finish; a --workers run's exit code.

tests/commands/test_stops_kafka.py sends the real signals to every command."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from streamer.commands.lake import Target, run_score, worst_exit
from tests.lake.test_score import config, many

N = 20_000
BATCH = 1024


class StopAfter(threading.Event):
    """A stop that is set from the ``n``-th time the run asks: the run asks after each chunk."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.asked = n

    def is_set(self) -> bool:
        self.asked -= 1
        return self.asked <= 0


def committed(folder: Path) -> int:
    """The rows a reader sees: the committed files (a run's open files are ``.inprogress``)."""
    return int(duckdb.sql(f"SELECT count(*) FROM read_parquet('{folder}/**/*.parquet', "
                          "hive_partitioning = true)").fetchall()[0][0])


def test_a_stopped_score_commits_what_it_read_and_the_same_run_id_finishes_it(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    pq.write_table(many(N), tmp_path / "events.parquet", row_group_size=BATCH)
    out = tmp_path / "scores"
    stopped = run_score(cfg, str(tmp_path / "events.parquet"), Target(parquet=str(out)), run_id="s1",
                        batch_size=BATCH, progress=io.StringIO(), stop=StopAfter(3))
    assert stopped.counts.stopped and stopped.counts.rows == 3 * BATCH
    assert committed(out) == 3 * BATCH, "the rows read before the stop are committed, the open batch too"
    assert not (out / "_SUCCESS").exists(), "a stopped run has not covered its rows"
    lines = stopped.lines()
    assert lines[0] == f"score s1 stopped into parquet {out}"
    assert lines[1] == f"read {3 * BATCH} of {N} rows: predictions {3 * BATCH} + rejects 0"
    assert " rows/s read, scored and written, " in lines[2] and lines[2].count("/s") == 1
    assert lines[-1] == "resume with --run-id s1"

    done = run_score(cfg, str(tmp_path / "events.parquet"), Target(parquet=str(out)), run_id="s1",
                     batch_size=BATCH, progress=io.StringIO())
    assert done.resume.resumed and not done.counts.stopped and done.counts.rows == N - 3 * BATCH
    assert committed(out) == N and (out / "_SUCCESS").exists()
    assert done.lines()[0] == f"score s1 resumed and finished into parquet {out}"
    assert not any(line.startswith("resume with") for line in done.lines())


def test_a_stop_that_comes_after_the_last_row_is_a_finish(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    pq.write_table(many(BATCH), tmp_path / "events.parquet", row_group_size=BATCH)
    stop = threading.Event()
    stop.set()  # before the run: it reads one chunk, which is all there is
    summary = run_score(cfg, str(tmp_path / "events.parquet"), Target(parquet=str(tmp_path / "out")), run_id="s2",
                        batch_size=BATCH, progress=io.StringIO(), stop=stop)
    assert summary.counts.rows == BATCH and not summary.counts.stopped
    assert (tmp_path / "out" / "_SUCCESS").exists()


def test_a_workers_run_exits_with_a_failure_first_then_a_stop() -> None:
    assert worst_exit([0, 0]) == 0
    assert worst_exit([0, 6]) == worst_exit([6, 6]) == 6  # a worker stopped: the run is resumable
    assert worst_exit([6, 3]) == worst_exit([3, 0]) == 3  # a failure is not hidden by a stop
    assert worst_exit([6, -9]) == -9  # a worker killed


def test_an_abandoned_run_ends_without_another_commit_and_the_same_run_id_reads_the_rest(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    pq.write_table(many(N), tmp_path / "events.parquet", row_group_size=BATCH)
    out = tmp_path / "scores"
    abandoned = run_score(cfg, str(tmp_path / "events.parquet"), Target(parquet=str(out)), run_id="a1",
                          batch_size=BATCH, progress=io.StringIO(), stop=StopAfter(3), abandon=StopAfter(3))
    assert abandoned.counts.stopped and abandoned.counts.commits == 0
    assert not list(out.rglob("*.parquet")), "a run that lost its job to another writer commits nothing more"
    done = run_score(cfg, str(tmp_path / "events.parquet"), Target(parquet=str(out)), run_id="a1",
                     batch_size=BATCH, progress=io.StringIO())
    assert done.counts.rows == N and committed(out) == N
