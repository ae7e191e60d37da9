"""A job's states and the moves between them: one table, and the status record the status topic keeps per job.

::

    queued ──> running ──> completed
      │  │       │ │ └──> failed ──> queued (submitted again: a retry resumes from its last commit)
      │  │       │ └────> expired
      │  │       └──> cancelling ──> cancelled (at the job's next commit)
      │  └──> expired (its window ended before a worker started it)
      └──> cancelled (before any worker started it)

A running job moves to ``running`` again when another worker resumes it (its worker died: the
group gave its partition to another) and for progress. A status is a frozen record; each move
returns a new one with ``updated_at_ms`` and a line in ``events``. Worked example, with a clock
at 1000 ms::

    s = JobStatus.queued("j1", spec, now_ms=1000)        # state 'queued'
    s = s.started("worker-a", (3, 17), now_ms=1500)      # 'running', attempt 1
    s = s.started("worker-b", (3, 17), now_ms=9000)      # 'running', attempt 2: events say resumed
    s = s.finished(Done(...), now_ms=20000)              # 'completed'
    s.started("worker-c", (3, 17), now_ms=21000)         # JobStateError: completed is final
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamer.errors import JobStateError
from streamer.jobs.spec import JobSpec, parse_spec

MAX_EVENTS = 20  # the history a status keeps, newest last


class State(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"


Q, R, C, F, E, CG, CD = State
MOVES: Mapping[State, frozenset[State]] = {
    Q: frozenset({R, CD, E, F}),
    R: frozenset({R, C, F, E, CG}),
    CG: frozenset({CD, C, F, E, CG}),
    F: frozenset({Q}),
    CD: frozenset({Q}),
    E: frozenset(),
    C: frozenset(),
}
FINAL = frozenset({C, F, E, CD})  # no worker runs it (failed and cancelled may be submitted again)


@dataclass(frozen=True, slots=True)
class Done:
    """What a finished (or stopped) run of a job did, and where its rows are."""

    rows: int
    predictions: int
    rejects: int
    output: str  # e.g. "table streamer.scores"
    rejects_at: str  # e.g. "table streamer.scores_rejects"


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A job's latest status, as the status topic keeps it (JSON, keyed by the id)."""

    id: str
    state: State
    spec: Mapping[str, Any]
    submitted_at_ms: int
    updated_at_ms: int
    deadline_ms: int | None = None  # submitted + within: not finished by then, expired
    not_before_ms: int | None = None
    priority: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    message: tuple[int, int] | None = None  # the queue's (partition, offset) of the submission running it
    worker: str | None = None
    attempt: int = 0  # how often a worker started it
    started_at_ms: int | None = None  # the first start
    finished_at_ms: int | None = None
    rows_done: int = 0
    rows_total: int | None = None
    rows_per_s: float = 0.0
    predictions: int = 0
    rejects: int = 0
    output: str | None = None
    rejects_at: str | None = None
    reason: str | None = None
    events: tuple[str, ...] = ()
    schedule: Mapping[str, str] | None = None  # a slot's: its spec's name, schedule and timezone
    parked: bool = False  # queued, off the queue until its not_before: a worker queues it again then

    @staticmethod
    def queued(job_id: str, spec: JobSpec, now_ms: int, message: tuple[int, int] | None = None,
               previous: JobStatus | None = None) -> JobStatus:
        """A job submitted at ``now_ms`` (``previous``: its failed or cancelled status, a retry)."""
        if previous is not None:
            _check(previous, Q)
        return JobStatus(job_id, Q, spec.to_dict(), now_ms, now_ms,
                         None if spec.within_s is None else now_ms + spec.within_s * 1000, spec.not_before_ms,
                         spec.priority, dict(spec.labels), message,
                         attempt=0 if previous is None else previous.attempt,
                         events=_more(() if previous is None else previous.events, now_ms,
                                      "submitted" if previous is None else f"submitted again after {previous.state}"))

    @property
    def job(self) -> JobSpec:
        return parse_spec(self.spec)

    @property
    def final(self) -> bool:
        return self.state in FINAL

    def started(self, worker: str, message: tuple[int, int], now_ms: int) -> JobStatus:
        """A worker starts it, or resumes it after another worker stopped or died."""
        again = self.state in (R, CG)
        after = f" after {self.worker} stopped" if self.worker else ""
        line = (f"resumed by {worker}{after} (attempt {self.attempt + 1})" if again
                else f"running on {worker}" + (f" (attempt {self.attempt + 1})" if self.attempt else ""))
        return self._to(R if self.state != CG else CG, now_ms, line, worker=worker, message=message,
                        attempt=self.attempt + 1, started_at_ms=self.started_at_ms or now_ms)

    def progressed(self, rows_done: int, rows_total: int | None, rows_per_s: float, now_ms: int) -> JobStatus:
        if self.state not in (R, CG):
            raise JobStateError(self.id, str(self.state), "progress")
        return dataclasses.replace(self, rows_done=rows_done, rows_total=rows_total, rows_per_s=rows_per_s,
                                   updated_at_ms=now_ms)

    def park(self, now_ms: int) -> JobStatus:
        """A queued job not due yet taken off the queue, so that it blocks no job behind it."""
        if self.state != Q:
            raise JobStateError(self.id, str(self.state), "parked")
        at = dt.datetime.fromtimestamp((self.not_before_ms or 0) / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return dataclasses.replace(self, parked=True, updated_at_ms=now_ms,
                                   events=_more(self.events, now_ms, f"off the queue until its not_before, {at}"))

    def unparked(self, now_ms: int) -> JobStatus:
        return dataclasses.replace(self, parked=False, updated_at_ms=now_ms,
                                   events=_more(self.events, now_ms, "due: queued again"))

    def released(self, rows_done: int, now_ms: int) -> JobStatus:
        """Its worker stopped (SIGTERM) at a commit and left it to the next: no worker holds it."""
        if self.state not in (R, CG):
            raise JobStateError(self.id, str(self.state), "released")
        return dataclasses.replace(self, worker=None, rows_done=rows_done, rows_per_s=0.0, updated_at_ms=now_ms,
                                   events=_more(self.events, now_ms, f"stopped with {self.worker}: the next worker "
                                                                     "resumes it"))

    def finished(self, done: Done, now_ms: int) -> JobStatus:
        """Every row read: the rows in all are the rows done (a job shorter than a progress period
        has no total written before)."""
        return self._to(C, now_ms, f"completed: {done.predictions} predictions, {done.rejects} rejects",
                        **_counts(done), rows_total=done.rows, finished_at_ms=now_ms)

    def failed(self, reason: str, now_ms: int, done: Done | None = None) -> JobStatus:
        return self._to(F, now_ms, f"failed: {reason}", reason=reason, finished_at_ms=now_ms,
                        **({} if done is None else _counts(done)))

    def expired(self, now_ms: int, done: Done | None = None) -> JobStatus:
        reason = ("its window ended before it finished" if self.state in (R, CG)
                  else "its window ended before a worker started it")
        return self._to(E, now_ms, f"expired: {reason}", reason=reason, finished_at_ms=now_ms,
                        **({} if done is None else _counts(done)))

    def cancel_asked(self, now_ms: int) -> JobStatus:
        """``jobs cancel``: a queued job is cancelled at once, a running one at its next commit."""
        if self.state == Q:
            return self._to(CD, now_ms, "cancelled before it started", reason="cancelled", finished_at_ms=now_ms)
        return self._to(CG, now_ms, "cancel asked: it stops at its next commit")

    def cancelled(self, now_ms: int, done: Done | None = None) -> JobStatus:
        return self._to(CD, now_ms, "cancelled", reason="cancelled", finished_at_ms=now_ms,
                        **({} if done is None else _counts(done)))

    def _to(self, state: State, now_ms: int, line: str, **changes: Any) -> JobStatus:
        _check(self, state)
        return dataclasses.replace(self, state=state, updated_at_ms=now_ms, events=_more(self.events, now_ms, line),
                                   **changes)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["state"] = str(self.state)
        out["events"] = list(self.events)
        out["message"] = None if self.message is None else list(self.message)
        return out

    @staticmethod
    def of(raw: Mapping[str, Any]) -> JobStatus:
        names = {f.name for f in dataclasses.fields(JobStatus)}
        values = {k: v for k, v in raw.items() if k in names}  # a newer writer's extra fields are skipped
        values["state"] = State(values["state"])
        values["events"] = tuple(values.get("events", ()))
        values["message"] = None if values.get("message") is None else tuple(values["message"])
        return JobStatus(**values)


def _check(status: JobStatus, to: State) -> None:
    if to not in MOVES[status.state]:
        raise JobStateError(status.id, str(status.state), str(to))


def _counts(done: Done) -> dict[str, Any]:
    return {"rows_done": done.rows, "predictions": done.predictions, "rejects": done.rejects,
            "output": done.output, "rejects_at": done.rejects_at}


def _more(events: tuple[str, ...], now_ms: int, line: str) -> tuple[str, ...]:
    at = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (*events, f"{at} {line}")[-MAX_EVENTS:]
