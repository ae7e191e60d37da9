"""What a worker tells its metrics (observe/jobs.py) over a job, with a fake consumer and board
around the real Worker and the real JobMetrics: every row counted once, the running job's gauges
gone however the job ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry

from streamer.config import JobsConfig
from streamer.errors import StaleCommitError
from streamer.jobs.spec import JobSpec, parse_spec
from streamer.jobs.states import Done, JobStatus
from streamer.jobs.worker import Outcome, Worker, _Run
from streamer.observe.jobs import JobMetrics

GROUP = "workers"
TOPIC = "t.jobs"
WHERE = (0, 5)  # the job's message: partition 0, offset 5
SPEC = parse_spec({"name": "m", "source": {"parquet": "in.parquet"}, "target": {"parquet": "out"},
                   "within": "1h"})


class FakeBoard:
    """Statuses kept in memory; ``on_write`` runs after each write (the job's thread moving on)."""

    def __init__(self, on_write: Callable[[JobStatus], None] = lambda s: None) -> None:
        self.jobs: dict[str, JobStatus] = {}
        self.on_write = on_write

    def write(self, status: JobStatus) -> JobStatus:
        self.jobs[status.id] = status
        self.on_write(status)
        return status

    def get(self, job_id: str) -> JobStatus | None:
        return self.jobs.get(job_id)

    def cancel_of(self, job_id: str) -> JobStatus | None:
        return None

    def all(self) -> list[JobStatus]:
        return list(self.jobs.values())


class FakeConsumer:
    """The calls a worker makes on its consumer while a job runs; ``on_poll`` serves a poll."""

    def __init__(self, on_poll: Callable[[float], None]) -> None:
        self.on_poll = on_poll
        self.committed: list[tuple[int, int]] = []
        self.seeks: list[tuple[int, int]] = []

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, 0)]

    def pause(self, parts: list[TopicPartition]) -> None: ...

    def resume(self, parts: list[TopicPartition]) -> None: ...

    def poll(self, timeout: float) -> None:
        self.on_poll(timeout)

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.partition, tp.offset))

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        self.committed += [(tp.partition, tp.offset) for tp in offsets]
        return offsets


class Runner:
    """Reports ``reports`` (rows done, rows in all), then ends, or with ``until_stopped`` waits for
    the worker's stop first."""

    def __init__(self, reports: list[tuple[int, int]], until_stopped: bool = False) -> None:
        self.reports, self.until_stopped = reports, until_stopped
        self.ended = threading.Event()

    def run(self, job_id: str, spec: JobSpec, stop: threading.Event,
            progress: Callable[[int, int | None], None], abandon: threading.Event | None = None) -> Outcome:
        for rows, total in self.reports:
            progress(rows, total)
        if self.until_stopped:
            stop.wait(10)
        self.ended.set()
        rows = self.reports[-1][0]
        return Outcome(Done(rows, rows, 0, "parquet out", "parquet out_rejects"), stopped=stop.is_set())


def worker(board: FakeBoard, runner: Runner, progress_ms: int) -> tuple[Worker, CollectorRegistry]:
    registry = CollectorRegistry()
    cfg: Any = SimpleNamespace(jobs=JobsConfig(topic=TOPIC, status_topic="t.status", group_id=GROUP,
                                               progress_ms=progress_ms), kafka={})
    return Worker(cfg, runner, "w1", board=board, meters=JobMetrics(registry, GROUP)), registry  # type: ignore[arg-type]


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"group": GROUP, **labels})


def queued() -> JobStatus:
    return JobStatus.queued("m-1", SPEC.with_id("m-1"), int(time.time() * 1000) - 2000, WHERE)


def test_a_job_ended_between_two_reports_has_all_its_rows_counted() -> None:
    runner = Runner([(60_000, 100_000), (100_000, 100_000)])  # ends before a progress period passes
    board = FakeBoard()
    w, registry = worker(board, runner, progress_ms=600_000)
    w._execute(FakeConsumer(lambda t: runner.ended.wait(t)), WHERE, queued(), threading.Event())
    assert board.jobs["m-1"].state == "completed"
    assert sample(registry, "streamer_job_rows_total") == 100_000
    assert sample(registry, "streamer_job_duration_seconds_count", state="completed") == 1
    assert sample(registry, "streamer_job_queued_seconds_count") == 1
    assert sample(registry, "streamer_job_queued_seconds_sum") >= 2  # submitted 2 s before it started
    assert sample(registry, "streamer_job_eta_seconds") is None  # idle after it


def test_rows_scored_while_the_status_is_written_are_counted_once() -> None:
    run: _Run | None = None

    def job_moves_on(status: JobStatus) -> None:  # the job's thread scores a chunk during each write
        assert run is not None
        run.rows += 8192

    board = FakeBoard(job_moves_on)
    w, registry = worker(board, Runner([(0, 1)]), progress_ms=1000)
    run = _Run(WHERE, queued().started("w1", WHERE, int(time.time() * 1000)), rows=8192, total=100_000)
    for _ in range(3):
        w._progress(run)
    # What the status says the job has done is what the metrics counted: 8192 rows per report.
    assert run.status.rows_done == 3 * 8192
    assert sample(registry, "streamer_job_rows_total") == 3 * 8192


def test_a_job_gone_to_another_worker_leaves_no_running_job_on_this_one() -> None:
    runner = Runner([(10, 100_000)], until_stopped=True)
    board = FakeBoard()
    w, registry = worker(board, runner, progress_ms=1)
    consumer: FakeConsumer

    def poll(timeout: float) -> None:  # once the job's progress is out, a rebalance takes its partition
        if sample(registry, "streamer_job_deadline_timestamp_seconds") is not None:
            w._revoked(consumer, [TopicPartition(TOPIC, 0)])
        runner.ended.wait(timeout)

    consumer = FakeConsumer(poll)
    w._execute(consumer, WHERE, queued(), threading.Event())
    assert board.jobs["m-1"].state == "running"  # its new worker writes the rest, not this one
    assert consumer.committed == []
    for name in ("streamer_job_eta_seconds", "streamer_job_rows_per_second",
                 "streamer_job_deadline_timestamp_seconds"):
        assert sample(registry, name) is None, name


def test_a_busy_worker_counts_its_own_job_running_while_it_runs() -> None:
    runner = Runner([(10, 100_000)], until_stopped=True)
    w, registry = worker(FakeBoard(), runner, progress_ms=1)
    stop = threading.Event()

    def poll(timeout: float) -> None:  # the worker is stopped once its job is counted running
        if sample(registry, "streamer_jobs", state="running") == 1:
            stop.set()
        runner.ended.wait(timeout)

    w._execute(FakeConsumer(poll), WHERE, queued(), stop)
    assert stop.is_set(), "the running job was never counted running"


class Refused(Runner):
    """A run whose commit is refused as stale: another worker committed the job meanwhile."""

    def run(self, job_id: str, spec: JobSpec, stop: threading.Event,
            progress: Callable[[int, int | None], None], abandon: threading.Event | None = None) -> Outcome:
        self.ended.set()
        raise StaleCommitError(job_id, "0-of-1", 1, 2, "table streamer.scores")


def test_a_run_refused_as_stale_on_a_partition_still_held_reads_its_job_again_and_writes_nothing() -> None:
    runner = Refused([(0, 1)])
    board = FakeBoard()
    w, _ = worker(board, runner, progress_ms=600_000)
    consumer = FakeConsumer(lambda t: runner.ended.wait(t))
    w._execute(consumer, WHERE, queued(), threading.Event())
    assert consumer.committed == [] and consumer.seeks == [WHERE]  # decided again: held while the other runs
    assert board.jobs["m-1"].state == "running"  # no failure written over the other worker's run


def test_a_resumed_job_s_rate_counts_the_rows_of_this_run_alone() -> None:
    board = FakeBoard()
    w, registry = worker(board, Runner([(0, 1)]), progress_ms=1000)
    run = _Run(WHERE, queued().started("w1", WHERE, int(time.time() * 1000)), rows=950_000, total=1_000_000,
               base=(900_000, time.monotonic() - 10.0))  # resumed at 900,000: 50,000 rows in 10 s
    w._progress(run)
    rate = sample(registry, "streamer_job_rows_per_second")
    assert rate is not None and 4_000 < rate <= 5_000, rate  # not 95,000 rows/s
    eta = sample(registry, "streamer_job_eta_seconds")
    assert eta is not None and 10 <= eta < 13, eta  # 50,000 rows left at 5,000 rows/s
