"""A worker: a member of the jobs' consumer group that runs one job at a time, polling while it runs.

The loop, as steps: take the best job in hand (priority, then age; one not yet due is held on its
partition), decide from its status whether to run it (see :meth:`Worker._decide`), run it on a
thread while this one keeps the group membership alive (partitions paused, ``poll``), writes its
progress and watches for a cancel, a window's end and a lost partition; then write the outcome and
commit the job's message. The message is committed only when the job ended, so a worker that
dies mid-job leaves it to the group: the member that gets the partition takes the same message and
resumes the job from its last commit (the job id is the run id).

A worker stopped (SIGTERM) stops its job at the next commit and leaves its message uncommitted:
another worker resumes it. A running job's status is written every ``jobs.progress_ms``; a
worker that finds a job running elsewhere under the same message, with a status read within
:data:`ALIVE_PERIODS` periods, leaves it alone and looks again later; two runs of one job never
commit at once (the lake's stale-commit refusal, a topic's transactional fence, stops the loser).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from streamer.errors import StaleCommitError, StreamerError
from streamer.jobs.board import Board, JobsSections, ensure_topics
from streamer.jobs.queue import requeue
from streamer.jobs.spec import JobSpec
from streamer.jobs.states import Done, JobStatus, State
from streamer.kafka import clients
from streamer.observe.health import Status

log = logging.getLogger(__name__)
ALIVE_PERIODS = 3  # a running job whose status was read within this many progress periods has a live worker
SWEEP_S = 5.0  # how often an idle worker expires queued jobs past their window and counts the states


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a job's run did: its counts and places, and whether a stop ended it early."""

    done: Done
    stopped: bool


class Runner(Protocol):
    """Runs one job under its id (the run id) until its end or until ``stop`` is set (then at its
    next commit); reports ``(rows done, rows in all or None)`` through ``progress``. ``abandon`` set:
    the job is another worker's now: end without another commit."""

    def run(self, job_id: str, spec: JobSpec, stop: threading.Event,
            progress: Callable[[int, int | None], None], abandon: threading.Event | None = None) -> Outcome: ...


class Meters(Protocol):
    """What a worker reports (observe/jobs.py's JobMetrics)."""

    def states(self, counts: dict[str, int]) -> None: ...
    def started(self, queued_s: float) -> None: ...
    def progress(self, rows: int, rows_per_s: float, eta_s: float | None, deadline_s: float | None) -> None: ...
    def finished(self, state: str, duration_s: float) -> None: ...
    def idle(self) -> None: ...


class NoMeters:
    def states(self, counts: dict[str, int]) -> None: ...
    def started(self, queued_s: float) -> None: ...
    def progress(self, rows: int, rows_per_s: float, eta_s: float | None, deadline_s: float | None) -> None: ...
    def finished(self, state: str, duration_s: float) -> None: ...
    def idle(self) -> None: ...


@dataclass
class _Run:
    """The job in hand: its message, status, the thread running it and what it reported."""

    message: tuple[int, int]
    status: JobStatus
    stop: threading.Event = field(default_factory=threading.Event)
    abandon: threading.Event = field(default_factory=threading.Event)  # lost: end without another commit
    rows: int = 0
    total: int | None = None
    started: float = field(default_factory=time.monotonic)
    outcome: Outcome | None = None
    error: BaseException | None = None
    why_stop: str | None = None  # 'cancel', 'expire', 'lost', 'shutdown'
    # the first report of this run: its rate counts the rows this run scored, not earlier runs' of the job
    base: tuple[int, float] | None = None


class Worker:
    """Runs the jobs of ``cfg.jobs.topic`` with ``runner``, one at a time, as ``name``."""

    def __init__(self, cfg: JobsSections, runner: Runner, name: str, *, board: Board | None = None,
                 meters: Meters | None = None, clock: Callable[[], float] = time.time) -> None:
        self.cfg, self.runner, self.name = cfg, runner, name
        self.board = board or Board(cfg)
        self.meters = meters or NoMeters()
        self.clock = clock
        self._held: dict[int, float] = {}  # partition -> when its head job is due (clock seconds)
        self._run: _Run | None = None
        self._lost: set[int] = set()
        self._tick = time.monotonic()  # the loop's last turn: /healthz says a silent loop is stuck
        self._ready = False

    def health(self, stall_s: float) -> Status:
        """/healthz and /readyz: alive while the loop turns (it polls every fraction of a second,
        a job running or not), ready once it follows the status topic and takes jobs."""
        silent = time.monotonic() - self._tick
        reason = f"the worker's loop silent for {silent:.0f} s" if self._ready and silent > stall_s else ""
        return Status(healthy=not reason, ready=self._ready and not reason, reason=reason,
                      waiting="" if self._ready else "starting: reading the status topic, joining the group")

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ---- the loop -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> int:
        """Take and run jobs until ``stop`` is set; 0."""
        ensure_topics(self.cfg)
        self.board.follow()
        consumer = clients.config_consumer(self.cfg, self.cfg.jobs.group_id)
        consumer.subscribe([self.cfg.jobs.topic], on_assign=self._assigned, on_revoke=self._revoked,
                           on_lost=self._revoked)
        log.info("worker %s: taking jobs from %s (group %s)", self.name, self.cfg.jobs.topic, self.cfg.jobs.group_id)
        swept = 0.0
        try:
            self._ready = True
            while not stop.is_set():
                self._tick = time.monotonic()
                self._release_due(consumer)
                message = self._take(consumer)
                if message is not None:
                    self._handle(consumer, message, stop)
                elif time.monotonic() - swept > SWEEP_S:
                    self._sweep()
                    swept = time.monotonic()
        finally:
            consumer.close()
            self.board.close()
        return 0

    def _take(self, consumer: Consumer) -> Message | None:
        """The best job at the heads of the partitions in hand (priority, then the oldest); the
        other partitions are put back to their heads."""
        first = consumer.consume(1, 0.5)  # returns as soon as a job is there
        batch = [m for m in (first + consumer.consume(63, 0) if first else []) if not m.error()]
        heads: dict[int, Message] = {}
        for m in batch:
            heads.setdefault(_at(m)[0], m)
        if not heads:
            return None
        best = max(heads.values(), key=lambda m: (_field(m, "priority", 0), -_field(m, "submitted_at_ms", 0)))
        for p, m in heads.items():  # the next read of each partition: the best's successor, the others' heads
            consumer.seek(TopicPartition(self.cfg.jobs.topic, p, _at(m)[1] + (1 if m is best else 0)))
        return best

    def _handle(self, consumer: Consumer, message: Message, stop: threading.Event) -> None:
        where = _at(message)
        try:
            sent = JobStatus.of(orjson.loads(message.value() or b""))
        except (ValueError, KeyError, TypeError) as exc:
            log.error("worker %s: %s at %s is not a job (%s): skipped", self.name, self.cfg.jobs.topic, where, exc)
            self._commit(consumer, where)
            return
        self.board.sync()
        decision, status = self._decide(sent, where)
        log.info("worker %s: job %s at %s: %s", self.name, sent.id, where, decision)
        if decision == "hold":  # its worker elsewhere is alive: this partition looks again shortly
            self._hold(consumer, where, self.clock() + ALIVE_PERIODS * self.cfg.jobs.progress_ms / 1000)
        elif decision == "park":  # not due: off the queue, so the jobs behind it run; a sweep queues it again
            self.board.write(status.park(self._now_ms()))
            self._commit(consumer, where)
        elif decision == "run":
            self._execute(consumer, where, status, stop)
        else:
            if decision == "expire":
                self.board.write(status.expired(self._now_ms()))
            elif decision == "cancel":
                self.board.write(status.cancelled(self._now_ms()))
            self._commit(consumer, where)

    def _decide(self, sent: JobStatus, where: tuple[int, int]) -> tuple[str, JobStatus]:
        """Run, hold, skip, expire or cancel the job of a message, from its latest status.

        - completed, expired, or failed/cancelled and not submitted again: skip (commit past it);
        - running or cancelling under another message: a second submission of a running job, skip;
        - running under this message with a live worker elsewhere: hold, look again later;
        - past its window: expire; cancel asked before it ran: cancel;
        - not yet due (``not_before``): park it (committed past; a sweep queues it again when due);
        - else run it (or resume it).
        """
        known = self.board.get(sent.id)
        # a failed or cancelled job's newer submission (a retry) is the message's, whatever the board read
        status = sent if known is None or (known.state in (State.FAILED, State.CANCELLED) and
                                           sent.submitted_at_ms > known.submitted_at_ms) else known
        now = self._now_ms()
        if status.state in (State.COMPLETED, State.EXPIRED, State.FAILED, State.CANCELLED):
            return "skip", status
        if status.state in (State.RUNNING, State.CANCELLING) and status.message not in (None, where):
            return "skip", status
        if status.state == State.RUNNING and status.worker not in (None, self.name) and \
                self.board.quiet_s(sent.id) < ALIVE_PERIODS * self.cfg.jobs.progress_ms / 1000:
            return "hold", status
        if status.deadline_ms is not None and now >= status.deadline_ms:
            return "expire", status
        if status.state == State.CANCELLING and status.attempt == 0:
            return "cancel", status
        if status.not_before_ms is not None and now < status.not_before_ms:
            return "park", status
        return "run", status

    # ---- running one job ------------------------------------------------------------------

    def _execute(self, consumer: Consumer, where: tuple[int, int], status: JobStatus, stop: threading.Event) -> None:
        status = self.board.write(status.started(self.name, where, self._now_ms()))
        self.meters.started(max(self._now_ms() - status.submitted_at_ms, 0) / 1000 if status.attempt == 1 else 0.0)
        run = self._run = _Run(where, status)
        consumer.pause(consumer.assignment())
        thread = threading.Thread(target=self._work, args=(run,), name=f"job-{status.id}", daemon=True)
        thread.start()
        period = self.cfg.jobs.progress_ms / 1000
        last = time.monotonic()
        while thread.is_alive():
            consumer.poll(0.2)  # keeps the membership: rebalances are served here
            self._tick = time.monotonic()
            self._watch(run, stop)
            if time.monotonic() - last >= period:
                last = time.monotonic()
                self._progress(run)
                self._count()  # the board's states, this job's running among them, while it runs
        self._progress(run)  # the rows since the last report: counted once, before the end is written
        self._run = None
        self._end(consumer, run)
        self.meters.idle()  # however it ended: final, stopped with the worker, or gone to another worker
        consumer.resume([tp for tp in consumer.assignment() if tp.partition not in self._held])

    def _work(self, run: _Run) -> None:
        def progress(rows: int, total: int | None) -> None:
            if run.base is None:
                run.base = (rows, time.monotonic())
            run.rows, run.total = rows, total

        try:
            run.outcome = self.runner.run(run.status.id, run.status.job, run.stop, progress, abandon=run.abandon)
        except BaseException as exc:  # noqa: BLE001 (the main thread writes it as the job's failure)
            run.error = exc

    def _watch(self, run: _Run, stop: threading.Event) -> None:
        """Set the job's stop for a cancel, its window's end, a lost partition or the worker's stop."""
        if run.why_stop is not None:
            return
        latest = self.board.get(run.status.id)
        asked = self.board.cancel_of(run.status.id)
        why = None
        if run.message[0] in self._lost:
            why = "lost"
        elif asked is not None:
            run.status = run.status.cancel_asked(self._now_ms())
            why = "cancel"
        elif latest is not None and (latest.final or latest.message not in (None, run.message) or
                                     (latest.worker not in (None, self.name) and latest.attempt > run.status.attempt)):
            why = "lost"  # ended, or run by another worker (resumed there, or under another submission)
        elif run.status.deadline_ms is not None and self._now_ms() >= run.status.deadline_ms:
            why = "expire"
        elif stop.is_set():
            why = "shutdown"
        if why is not None:
            log.info("worker %s: job %s stops at its next commit (%s)", self.name, run.status.id, why)
            run.why_stop = why
            if why == "lost":  # the job is another worker's: what this run read since its last commit is dropped
                run.abandon.set()
            run.stop.set()

    def _progress(self, run: _Run) -> None:
        if run.why_stop == "lost":
            return
        rows, total, base = run.rows, run.total, run.base  # read once: the job's thread moves them on meanwhile
        rate = 0.0 if base is None else (rows - base[0]) / max(time.monotonic() - base[1], 1e-3)
        done_before = run.status.rows_done
        run.status = self.board.write(run.status.progressed(rows, total, rate, self._now_ms()))
        eta = None if total is None or rate <= 0 else max(total - rows, 0) / rate
        deadline = None if run.status.deadline_ms is None else run.status.deadline_ms / 1000
        self.meters.progress(max(rows - done_before, 0), rate, eta, deadline)

    def _end(self, consumer: Consumer, run: _Run) -> None:
        """Write the outcome and commit the job's message; a lost job neither (its new worker does)."""
        now = self._now_ms()
        lost = run.why_stop == "lost" or isinstance(run.error, StaleCommitError)
        status, done = run.status, None if run.outcome is None else run.outcome.done
        if lost:
            log.error("worker %s: job %s went to another worker; this run stopped%s", self.name, status.id,
                      f": {run.error}" if run.error else "")
            if run.message[0] not in self._lost:  # still this member's: its message is read and decided again
                consumer.seek(TopicPartition(self.cfg.jobs.topic, *run.message))
            return
        if run.why_stop == "shutdown" and (run.error is None and run.outcome is not None and run.outcome.stopped):
            self.board.write(status.released(run.rows, now))
            log.info("worker %s: job %s stopped with this worker: the next worker resumes it", self.name, status.id)
            return  # not committed: the group gives it to another worker
        if run.error is not None:
            if not isinstance(run.error, StreamerError):
                log.error("worker %s: job %s failed", self.name, status.id, exc_info=run.error)
            final = status.failed(_reason(run.error), now, done)
        elif run.outcome is not None and run.outcome.stopped and run.why_stop == "cancel":
            final = status.cancelled(now, done)
        elif run.outcome is not None and run.outcome.stopped and run.why_stop == "expire":
            final = status.expired(now, done)
        else:
            assert done is not None
            final = status.finished(done, now)
        self.board.write(final)
        self.meters.finished(str(final.state), (now - (status.started_at_ms or now)) / 1000)
        self._commit(consumer, run.message)

    # ---- partitions -----------------------------------------------------------------------

    def _commit(self, consumer: Consumer, where: tuple[int, int]) -> None:
        tp = TopicPartition(self.cfg.jobs.topic, where[0], where[1] + 1)
        try:
            for part in consumer.commit(offsets=[tp], asynchronous=False) or []:
                if part.error:
                    log.warning("worker %s: commit of %s failed: %s", self.name, where, part.error)
        except KafkaException as exc:  # the partition went to another member: it takes the job again
            log.warning("worker %s: commit of %s failed: %s", self.name, where, exc)

    def _hold(self, consumer: Consumer, where: tuple[int, int], due: float) -> None:
        tp = TopicPartition(self.cfg.jobs.topic, where[0], where[1])
        consumer.pause([tp])
        consumer.seek(tp)
        self._held[where[0]] = due

    def _release_due(self, consumer: Consumer) -> None:
        now = self.clock()
        due = [p for p, at in self._held.items() if at <= now]
        for p in due:
            del self._held[p]
        if due:
            consumer.resume([TopicPartition(self.cfg.jobs.topic, p) for p in due])

    def _assigned(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self._lost -= {tp.partition for tp in parts}
        if self._run is not None and parts:  # busy: a new partition waits for the job's end
            consumer.pause(parts)

    def _revoked(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in parts}
        self._lost |= gone
        for p in gone:
            self._held.pop(p, None)

    def _sweep(self) -> None:
        """Expire queued jobs whose window ended (whichever worker has them), forget finished jobs
        older than ``jobs.keep_finished_days``, and count the states."""
        now = self._now_ms()
        keep_ms = self.cfg.jobs.keep_finished_days * 86_400_000
        for status in self.board.all():
            if status.state == State.QUEUED and status.deadline_ms is not None and now >= status.deadline_ms:
                self.board.write(status.expired(now))
            elif status.state == State.QUEUED and status.parked and (status.not_before_ms or 0) <= now:
                requeue(self.cfg, self.board, status)  # two sweeps at once queue it twice: the second is skipped
                self.board.write(status.unparked(now))
            elif keep_ms and status.final and now - (status.finished_at_ms or status.updated_at_ms) > keep_ms:
                self.board.forget(status.id)
        self._count()

    def _count(self) -> None:
        """The jobs per state on the board, to the metrics."""
        counts = dict.fromkeys((str(s) for s in State), 0)
        for status in self.board.all():
            counts[str(status.state)] += 1
        self.meters.states(counts)


def _field(message: Message, key: str, default: Any) -> Any:
    try:
        return orjson.loads(message.value() or b"").get(key, default)
    except (ValueError, AttributeError):
        return default


def _at(message: Message) -> tuple[int, int]:
    """A consumed message's (partition, offset)."""
    p, o = message.partition(), message.offset()
    assert p is not None and o is not None
    return p, o


def _reason(exc: BaseException) -> str:
    """A failure as the status says it: streamer's errors by their message (never a secret)."""
    return str(exc) if isinstance(exc, StreamerError) else f"{type(exc).__name__}: {exc}"
