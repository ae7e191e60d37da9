"""`streamer jobs submit | status | list | cancel | wait | retry`: the jobs' queue and their statuses, as people read them.

``submit`` queues a spec (a schedule's slot with ``--slot``), ``status`` shows one job, ``list``
every job (``--status S``: those in S) and, for each schedule seen on the board, its missed slots:
the slots from its first submitted one to now that no job was submitted for. ``wait`` follows a job
to its end; ``retry`` queues a failed or cancelled job again, which resumes from its last commit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import orjson

from streamer.errors import ConfigError
from streamer.jobs.board import Board, JobsSections
from streamer.jobs.queue import submit
from streamer.jobs.spec import JobSpec, parse_slot, parse_spec, slot_id, slots_between
from streamer.jobs.states import JobStatus, State


def submitted_line(status: JobStatus, queued: bool) -> str:
    if queued:
        return f"job {status.id} queued"
    return f"job {status.id} is already {status.state}: not queued again"


def submit_spec(cfg: JobsSections, spec: JobSpec, slot: str | None, now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    board = Board(cfg)
    try:
        board.load()  # no status topic yet: an empty board (submit makes the topics)
        when = None if slot is None else parse_slot(slot, spec, now)
        status, queued = submit(cfg, spec, board, slot=when, now=now)
    finally:
        board.close()
    return submitted_line(status, queued)


def status_lines(status: JobStatus) -> list[str]:
    """One job, as ``jobs status`` prints it."""
    out = [f"job {status.id}: {status.state}"]
    if status.spec.get("model"):
        out.append(f"model {status.spec['model']}")
    if status.worker:
        out.append(f"worker {status.worker}, attempt {status.attempt}")
    if status.rows_done or status.rows_total:
        total = "?" if status.rows_total is None else f"{status.rows_total:,}"
        out.append(f"rows {status.rows_done:,} of {total}" +
                   (f", {status.rows_per_s:,.0f} rows/s" if status.state == State.RUNNING else ""))
    if status.state == State.COMPLETED or status.output:
        out.append(f"predictions {status.predictions:,} in {status.output}, rejects {status.rejects:,} "
                   f"in {status.rejects_at}")
    if status.reason and status.state != State.CANCELLED:
        out.append(f"reason: {status.reason}")
    out.append(f"submitted {_time(status.submitted_at_ms)}" +
               (f", started {_time(status.started_at_ms)}" if status.started_at_ms else "") +
               (f", finished {_time(status.finished_at_ms)}" if status.finished_at_ms else "") +
               (f", window ends {_time(status.deadline_ms)}" if status.deadline_ms else ""))
    out.extend(f"  {line}" for line in status.events)
    return out


def status_json(status: JobStatus) -> str:
    return orjson.dumps(status.to_dict()).decode()


def list_lines(statuses: Iterable[JobStatus], state: str | None, now: dt.datetime) -> list[str]:
    """A table of the jobs (of ``state``), then each schedule's missed slots."""
    if state is not None and state not in {str(s) for s in State}:
        raise ConfigError("--status", f"{state!r} is not a state ({', '.join(str(s) for s in State)})")
    statuses = list(statuses)
    shown = [s for s in statuses if state is None or s.state == state]
    out = [f"{'ID':<40} {'STATE':<10} {'ROWS':>12} {'SUBMITTED':<20} WORKER"]
    for s in shown:
        out.append(f"{s.id:<40} {s.state!s:<10} {s.rows_done:>12,} {_time(s.submitted_at_ms):<20} {s.worker or '-'}")
    if state is None:
        out.extend(missed_slots(statuses, now))
    return out


def missed_slots(statuses: list[JobStatus], now: dt.datetime) -> list[str]:
    """``missed <name> slot <time>``: each schedule's slots, from its first submitted slot to
    ``now`` less a minute's grace, that no job was submitted for."""
    by_name: dict[str, tuple[JobSpec, dt.datetime]] = {}
    ids = {s.id for s in statuses}
    for s in statuses:
        if s.schedule is None:
            continue
        spec = parse_spec({**s.spec, **s.schedule, "id": None})
        first = dt.datetime.fromtimestamp(s.submitted_at_ms / 1000, dt.UTC)
        if spec.name and (spec.name not in by_name or first < by_name[spec.name][1]):
            by_name[spec.name] = (spec, first)
    out = []
    for name, (spec, first) in sorted(by_name.items()):
        slots = slots_between(spec, first - dt.timedelta(days=1), now - dt.timedelta(minutes=1))
        first_slot = min((t for t in slots if slot_id(name, t) in ids), default=None)
        for t in slots:
            if first_slot is not None and t > first_slot and slot_id(name, t) not in ids:
                out.append(f"missed {name} slot {t.isoformat()} (no job {slot_id(name, t)})")
    return out


def _time(ms: int | None) -> str:
    return "-" if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
