"""How a worker decides what to do with a job's message, and which job it takes among those in
hand: the real Worker around a fake board and consumer, with a fixed clock."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from confluent_kafka import TopicPartition

from streamer.config import JobsConfig
from streamer.jobs.board import Board as StatusBoard
from streamer.jobs.queue import cancel
from streamer.jobs.spec import parse_spec
from streamer.jobs.states import Done, JobStatus
from streamer.jobs.worker import ALIVE_PERIODS, Worker

NOW_MS = 1_000_000
WHERE = (0, 5)
SPEC = parse_spec({"source": {"parquet": "in"}, "target": {"table": "scores"}, "within": "1h"})
DONE = Done(1, 1, 0, "table streamer.scores", "table streamer.scores_rejects")


class Board:
    def __init__(self, status: JobStatus | None, quiet_s: float = 1e9) -> None:
        self.status, self.quiet = status, quiet_s

    def get(self, job_id: str) -> JobStatus | None:
        return self.status

    def quiet_s(self, job_id: str) -> float:
        return self.quiet


def worker(board: Any, progress_ms: int = 1000) -> Worker:
    cfg = SimpleNamespace(jobs=JobsConfig(topic="t", progress_ms=progress_ms))
    return Worker(cfg, runner=None, name="me", board=board, clock=lambda: NOW_MS / 1000)  # type: ignore[arg-type]


def queued(**changes: Any) -> JobStatus:
    return dataclasses.replace(JobStatus.queued("j", SPEC, NOW_MS - 1000), **changes)


CASES = {
    "queued: run": (queued(), 1e9, "run"),
    "completed: skip": (queued().started("w", WHERE, 1).finished(DONE, 2), 1e9, "skip"),
    "failed, not submitted again: skip": (queued().started("w", WHERE, 1).failed("x", 2), 1e9, "skip"),
    "cancelled before it ran: skip": (queued().cancel_asked(2), 1e9, "skip"),
    "expired: skip": (queued().expired(2), 1e9, "skip"),
    "running under another message (a second submission): skip": (queued().started("w", (1, 9), 1), 0.0, "skip"),
    "running here by a worker heard from lately: hold": (queued().started("w", WHERE, 1), 0.5, "hold"),
    "running here by a worker gone quiet: resume": (queued().started("w", WHERE, 1), ALIVE_PERIODS + 0.1, "run"),
    "running here by this worker's earlier self: resume": (queued().started("me", WHERE, 1), 0.0, "run"),
    "left by a worker stopped at a commit: resume": (queued().started("w", WHERE, 1).released(9, 2), 0.0, "run"),
    "past its window: expire": (queued(deadline_ms=NOW_MS), 1e9, "expire"),
    "cancel asked before any start: cancel": (queued(state="cancelling"), 1e9, "cancel"),
    "not yet due: park": (queued(not_before_ms=NOW_MS + 1), 1e9, "park"),
    "retried after it failed, the board not read that far: run": (
        queued(submitted_at_ms=NOW_MS - 9000).started("w", WHERE, 1).failed("x", 2), 1e9, "run"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_job_s_status_decides_what_its_worker_does(case: str) -> None:
    status, quiet_s, decision = CASES[case]
    assert worker(Board(status, quiet_s))._decide(queued(), WHERE)[0] == decision


def test_a_message_whose_job_the_board_has_not_read_yet_is_decided_by_the_message() -> None:
    assert worker(Board(None))._decide(queued(), WHERE)[0] == "run"
    assert worker(Board(None))._decide(queued(not_before_ms=NOW_MS + 5), WHERE)[0] == "park"


class Message:
    def __init__(self, partition: int, offset: int, priority: int, submitted_ms: int) -> None:
        self.p, self.o = partition, offset
        self.body = orjson.dumps({"priority": priority, "submitted_at_ms": submitted_ms})

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def value(self) -> bytes:
        return self.body


class Consumer:
    def __init__(self, batch: list[Message]) -> None:
        self.batch, self.seeks = batch, {}

    def consume(self, n: int, timeout: float) -> list[Message]:
        taken, self.batch = self.batch[:n], self.batch[n:]
        return taken

    def seek(self, tp: TopicPartition) -> None:
        self.seeks[tp.partition] = tp.offset


def test_the_best_job_in_hand_is_taken_and_every_other_partition_is_read_again_from_its_head() -> None:
    batch = [Message(0, 10, 0, 100), Message(0, 11, 9, 50), Message(1, 3, 2, 300), Message(2, 7, 2, 200)]
    consumer = Consumer(list(batch))
    best = worker(Board(None))._take(consumer)  # type: ignore[arg-type]
    # a partition's head alone is in hand (its order is kept): partition 0 offers priority 0, not 9
    assert best is batch[3]  # priority 2, and submitted before partition 1's priority 2
    assert consumer.seeks == {0: 10, 1: 3, 2: 8}  # the taken one's successor, the others' heads


class Kept:
    """A board of statuses that records what a sweep writes and forgets."""

    def __init__(self, statuses: list[JobStatus]) -> None:
        self.jobs = {s.id: s for s in statuses}
        self.forgotten: list[str] = []

    def all(self) -> list[JobStatus]:
        return list(self.jobs.values())

    def write(self, status: JobStatus) -> JobStatus:
        self.jobs[status.id] = status
        return status

    def forget(self, job_id: str) -> None:
        self.forgotten.append(job_id)
        del self.jobs[job_id]


def test_a_sweep_queues_a_parked_job_again_once_it_is_due_and_leaves_one_not_due(
        monkeypatch: pytest.MonkeyPatch) -> None:
    requeued: list[str] = []
    monkeypatch.setattr("streamer.jobs.worker.requeue", lambda cfg, board, status: requeued.append(status.id))
    due = dataclasses.replace(queued(not_before_ms=NOW_MS - 1).park(1), id="due")
    later = dataclasses.replace(queued(not_before_ms=NOW_MS + 60_000).park(1), id="later")
    board = Kept([due, later])
    worker(board)._sweep()
    assert requeued == ["due"]
    assert (board.jobs["due"].parked, board.jobs["later"].parked) == (False, True)
    assert board.jobs["due"].events[-1].endswith("due: queued again")


def test_a_sweep_expires_queued_jobs_past_their_window_and_forgets_old_finished_ones() -> None:
    day = 86_400_000
    old = dataclasses.replace(queued().started("w", WHERE, 1).finished(DONE, NOW_MS - 2 * day), id="old")
    recent = dataclasses.replace(queued().started("w", WHERE, 1).finished(DONE, NOW_MS - day // 2), id="recent")
    late = dataclasses.replace(queued(deadline_ms=NOW_MS - 1), id="late")
    running = dataclasses.replace(queued().started("w", WHERE, 1), id="running", updated_at_ms=NOW_MS - 9 * day)
    board = Kept([old, recent, late, running])
    w = worker(board)
    w.cfg = SimpleNamespace(jobs=JobsConfig(topic="t", keep_finished_days=1))
    w._sweep()
    assert board.forgotten == ["old"]
    assert {i: str(s.state) for i, s in board.jobs.items()} == {"recent": "completed", "late": "expired",
                                                                "running": "running"}
    kept_forever = Kept([old])
    worker(kept_forever)._sweep()  # keep_finished_days 0: nothing forgotten
    assert kept_forever.forgotten == []


def test_a_cancel_read_stays_the_job_s_whatever_its_worker_writes_after_it_until_it_is_queued_again() -> None:
    board = StatusBoard(SimpleNamespace(jobs=JobsConfig(topic="t")))  # type: ignore[arg-type]
    running = queued().started("w", WHERE, 1)
    for status in (running, running.cancel_asked(2), running.progressed(5, 10, 1.0, 3)):  # the worker's write last
        board._take(b"j", orjson.dumps(status.to_dict()))
    assert board.get("j").state == "running"  # the topic's latest
    assert board.cancel_of("j") is not None  # the cancel still reaches the worker
    board._take(b"j", orjson.dumps(running.cancel_asked(2).cancelled(4).to_dict()))
    board._take(b"j", orjson.dumps(JobStatus.queued("j", SPEC, 5, previous=board.get("j")).to_dict()))
    assert board.cancel_of("j") is None  # submitted again: that cancel was the earlier run's


class Crossed:
    """A status topic in which the job completes just before a cancel, built from a copy that
    said running, lands after it."""

    def __init__(self, running: JobStatus, completed: JobStatus) -> None:
        self.topic = [running]
        self.completed = completed

    def must(self, job_id: str) -> JobStatus:
        return self.topic[-1]

    def before(self, job_id: str) -> JobStatus | None:
        return self.topic[-2] if len(self.topic) > 1 else None

    def write(self, status: JobStatus) -> JobStatus:
        if status.state == "cancelling" and self.completed not in self.topic:
            self.topic.append(self.completed)  # the worker's write reached the topic first
        self.topic.append(status)
        return status

    def load(self) -> None: ...


def test_a_cancel_that_lands_over_a_job_just_completed_puts_the_completed_status_back() -> None:
    running = queued().started("w", WHERE, 1)
    completed = running.finished(DONE, 2)
    board = Crossed(running, completed)
    assert cancel(board, "j") == completed  # type: ignore[arg-type]
    assert [str(s.state) for s in board.topic] == ["running", "completed", "cancelling", "completed"]
