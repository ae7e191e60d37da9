"""`streamer jobs watch`: a triggered spec's looks at its table or folder, each submitting a job per new increment.

A table trigger submits a job per append snapshot of its table that the target has not scored
(the target's history says which), oldest first, each ``<name>-s<snapshot>`` scoring only the rows
that snapshot appended; a snapshot that overwrote or deleted rows is reported in the look's lines
and not scored again. A folder trigger submits one job for the complete Parquet files it has not
seen yet (those of its earlier jobs on the status board), ``<name>-f<hash of the files>``. An
increment's job that exists in any state is left as it is: a failed one waits for ``jobs retry``,
never resubmitted by every look.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from typing import Protocol

from streamer.config import LakeConfig
from streamer.errors import ConfigError
from streamer.jobs.board import Board, JobsSections
from streamer.jobs.queue import submit
from streamer.jobs.spec import JobSource, JobSpec
from streamer.jobs.trigger import (
    complete_files,
    folder_job_id,
    scored_snapshots,
    snapshot_job_id,
    table_increments,
)

log = logging.getLogger(__name__)


class Watched(JobsSections, Protocol):
    """The config a watch reads: ``kafka``, ``jobs`` and ``lake``."""

    @property
    def lake(self) -> LakeConfig: ...


def look(cfg: Watched, spec: JobSpec, board: Board) -> list[str]:
    """One look: the jobs it submitted, and what it skipped and why, as lines."""
    if spec.trigger is None or spec.name is None:
        raise ConfigError("job.trigger", "jobs watch takes a spec with a trigger (and a name)")
    lines: list[str] = []
    board.load()
    if spec.trigger.table is not None:
        scored = scored_snapshots(cfg.lake, spec.target.table) if spec.target.table else set()
        snapshots, reports = table_increments(cfg.lake, spec.trigger.table, scored)
        lines += reports
        for snap in snapshots:
            source = JobSource(table=spec.trigger.table, snapshot=snap.snapshot_id)
            lines.append(_submit(cfg, spec, board, snapshot_job_id(spec.name, snap.snapshot_id), source))
        return lines
    assert spec.trigger.folder is not None
    mine = f"{spec.name}-f"
    seen = {path for s in board.all() if s.id.startswith(mine) for path in _files(s.spec)}
    new = complete_files(cfg.lake, spec.trigger.folder, seen)
    if new:
        lines.append(_submit(cfg, spec, board, folder_job_id(spec.name, new), JobSource(parquet=tuple(new))))
    return lines


def watch(cfg: Watched, spec: JobSpec, stop: threading.Event, interval_s: float, once: bool,
          say: Callable[[str], None]) -> int:
    """Look every ``interval_s`` until ``stop`` (once with ``once``); 0."""
    board = Board(cfg)
    try:
        while True:
            for line in look(cfg, spec, board):
                say(line)
            if once or stop.wait(interval_s):
                return 0
    finally:
        board.close()


def _submit(cfg: JobsSections, spec: JobSpec, board: Board, job_id: str, source: JobSource) -> str:
    existing = board.get(job_id)
    if existing is not None:
        return f"job {job_id} is {existing.state}"
    status, queued = submit(cfg, spec.with_id(job_id, source), board, now=dt.datetime.now(dt.UTC))
    return f"job {status.id} {'queued' if queued else f'is {status.state}'}"


def _files(spec: dict[str, object] | object) -> list[str]:
    source = spec.get("source") if isinstance(spec, dict) else None
    files = source.get("parquet") if isinstance(source, dict) else None
    return [files] if isinstance(files, str) else [f for f in files if isinstance(f, str)] if isinstance(files, list) \
        else []
