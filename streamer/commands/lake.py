"""`streamer replay --to-table/--to-parquet/--to-kv` and `streamer score`: a topic's range or a table, scored into the lake or the key-value store.

``streamer score --engine ray`` scores the table on a Ray cluster instead (engines/ray.py).

Both take a run from wiring/lake.py (the model side without Kafka's, the sink with the run's plan
and progress, the source) and run lake/run.py's loop, with a progress bar and a summary. A
replay's bounds are resolved once, when the run is planned, and saved in the sink: a resumed run
keeps them, even when ``--from 2h`` would mean another time.
"""

from __future__ import annotations

import datetime as dt
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from streamer.config import Config
from streamer.errors import EXIT_STOPPED, ConfigError
from streamer.house import new_run_id
from streamer.kafka.ranges import When, parse_when
from streamer.lake.run import LakeCounts, LakeRun
from streamer.lake.sink import Resume, Shard
from streamer.lake.table import Where
from streamer.observe.bar import ProgressBar
from streamer.wiring.lake import BATCH_SIZE, LakeJob, Target, replay_job, score_job

if TYPE_CHECKING:
    from streamer.engines.ray import RayRun

Rows = Callable[[int, int], None]  # (rows done, rows in all): a run's progress, for a job's status


@dataclass(frozen=True, slots=True)
class LakeSummary:
    """What a run did, finished or stopped; the counts add up: ``rows = predictions + rejects``."""

    verb: str  # 'replay' or 'score'
    run_id: str
    sink: str
    resume: Resume
    counts: LakeCounts
    seconds: float
    committed_rows: tuple[int, int] = (0, 0)  # (predictions, rejects) the commits of its id hold, earlier runs' too
    rejects_at: str = ""  # where its rejects are: '<sink>_rejects', or a kv run's stream

    @property
    def rows_done(self) -> int:
        """The run's rows read, by this process and the earlier ones of its id."""
        total = sum(e - s for s, e in self.resume.bounds.values())
        return total - self.resume.left() + self.counts.rows

    def lines(self) -> list[str]:
        c = self.counts
        left = self.resume.left()
        counts = f"predictions {c.predictions} + rejects {c.rejects}"
        if self.verb == "replay" and c.gone:  # a topic's offsets: retention may delete some
            counts += f" + deleted by retention before they were read {c.gone}"
        if c.stopped:  # a part of the range: markers and the rest unread, the equation is the finished run's
            counts = f"read {c.rows} of {left} {'offsets in range' if self.verb == 'replay' else 'rows'}: {counts}"
        elif self.verb == "replay":  # commit markers take some offsets
            counts = (f"offsets in range {left} = {counts} + without an event "
                      f"{max(left - c.predictions - c.rejects - c.gone, 0)} (transaction markers, aborted records)")
        else:
            counts = f"rows {left} = {counts}"
        unit = "events" if self.verb == "replay" else "rows"
        lines = [f"{self.verb} {self.run_id} {'resumed and ' if self.resume.resumed else ''}"
                 f"{'stopped' if c.stopped else 'finished'} into {self.sink}",
                 counts,
                 f"{c.commits} commits, throughput {c.rows / max(self.seconds, 1e-9):,.0f} {unit}/s read, scored "
                 f"and written, {self.seconds:.1f} s in all"]
        if c.stopped:
            lines.append(f"resume with --run-id {self.run_id}")
        return lines

    @property
    def all_rejected(self) -> bool:
        return self.counts.rows > 0 and self.counts.predictions == 0


def parse_shard(text: str | None) -> Shard:
    """``I/N``: this process takes the partitions p with p % N == I."""
    if text is None:
        return Shard()
    m = re.match(r"^(\d+)/(\d+)$", text.strip())
    if m is None or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise ConfigError("--shard", f"{text!r} is not INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/4")
    return Shard(int(m.group(1)), int(m.group(2)))


def run_lake_replay(cfg: Config, start: When, end: When, target: Target, *, run_id: str | None = None,
                    shard: Shard = Shard(), force: bool = False, batch_size: int | None = None,
                    model_path: Path | None = None, model_version: str | None = None,
                    progress: TextIO | None = None, stop: threading.Event | None = None,
                    on_rows: Rows | None = None, abandon: threading.Event | None = None) -> LakeSummary:
    """Score the range into ``target`` exactly once under ``run_id`` (resumed when it has progress
    there); ``stop`` set ends it early, committed and resumable."""
    job = replay_job(cfg, start, end, target, new_run_id(run_id), shard=shard, force=force, model_path=model_path,
                     model_version=model_version)
    return _run("replay", job, batch_size, progress, stop, on_rows, abandon)


def run_score(cfg: Config, location: Where, target: Target, *, run_id: str | None = None, force: bool = False,
              batch_size: int | None = None, progress: TextIO | None = None,
              stop: threading.Event | None = None, on_rows: Rows | None = None, key: str = "--from",
              abandon: threading.Event | None = None) -> LakeSummary:
    """Score every row of ``location`` (Parquet files, a dataset, an Iceberg table, the rows one of its
    snapshots appended, a list of files) into ``target``; ``key``: what a refusal of the source names."""
    job = score_job(cfg, location, target, new_run_id(run_id), force=force, batch_size=batch_size, key=key)
    return _run("score", job, batch_size, progress, stop, on_rows, abandon)


def run_ray_score(cfg: Config, location: str, target: Target, *, run_id: str | None = None, force: bool = False,
                  batch_size: int | None = None, address: str | None = None,
                  concurrency: int | None = None) -> RayRun:
    """``streamer score --engine ray``: every row of ``location`` scored by an actor pool of
    ``concurrency`` scorers on the Ray cluster at ``address``, written into ``target`` once per run id."""
    if concurrency is not None and concurrency < 1:
        raise ConfigError("--concurrency", f"must be >= 1, got {concurrency}")
    if batch_size is not None and batch_size < 1:
        raise ConfigError("--batch-size", f"must be >= 1, got {batch_size}")
    from streamer.engines.ray import CONCURRENCY, run_ray

    return run_ray(cfg, location, target, new_run_id(run_id), address=address, concurrency=concurrency or CONCURRENCY,
                   batch_size=batch_size or BATCH_SIZE, force=force)


def _run(verb: str, job: LakeJob, batch_size: int | None, progress: TextIO | None,
         stop: threading.Event | None, on_rows: Rows | None = None,
         abandon: threading.Event | None = None) -> LakeSummary:
    """The run, with a progress bar; ``on_rows(done, total)`` after each chunk, counting what
    earlier runs of the id committed."""
    bar = ProgressBar(job.resume.left(), progress or sys.stderr, verb)
    total = sum(e - s for s, e in job.resume.bounds.values())
    before = total - job.resume.left()

    def update(c: LakeCounts) -> None:
        bar.update(c.rows)
        if on_rows is not None:
            on_rows(before + c.rows, total)

    started = time.monotonic()
    if on_rows is not None:  # where this run starts: its rate counts its own rows from here
        on_rows(before, total)
    lake = LakeRun(job.sink, job.scorer(), job.run_id, batch_size or BATCH_SIZE, update)
    counts = lake.run(job.source, job.resume, stop, abandon)
    bar.close(counts.rows)
    return LakeSummary(verb, job.run_id, job.sink.name, job.resume, counts, time.monotonic() - started,
                       job.sink.committed_rows, job.sink.rejects_at)


def supervise_replay(argv: list[str], cfg: Config, workers: int, run_id: str | None, start: str) -> int:
    """``--workers N``: N processes of this replay, process I taking the partitions p with p % N == I,
    under one run id, into one table (Iceberg's optimistic commits take turns). A relative ``--from``
    is fixed here, so that every worker resolves the same time. A resumed run's shards that finished
    before exit 0 at once (``--finished-ok``). The workers run in a process group
    of their own, so that a terminal's Ctrl+C reaches them once, forwarded: a SIGTERM or SIGINT
    here is passed on to each (a second one too: they exit at once). Exit: the worst of theirs, a
    failure before a stop (6)."""
    if workers < 1:
        raise ConfigError("--workers", f"must be >= 1, got {workers}")
    when = parse_when(start, "--from")
    fixed = (dt.datetime.fromtimestamp(when.timestamp_ms / 1000, dt.UTC).isoformat()
             if when.kind == "timestamp" else start)
    run_id = new_run_id(run_id)
    rest = _without(argv, {"--workers": True, "--run-id": True, "--from": True, "--finished-ok": False})
    procs: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, _frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)  # before the first worker starts: none is left unstopped
    signal.signal(signal.SIGINT, forward)
    for i in range(workers):  # one by one: a signal meanwhile reaches those started
        procs.append(subprocess.Popen([sys.executable, "-m", "streamer", *rest, "--from", fixed, "--run-id", run_id,
                                       "--shard", f"{i}/{workers}", "--finished-ok"], process_group=0))
    codes = [p.wait() for p in procs]
    code = worst_exit(codes)
    print(f"replay {run_id}: {workers} workers "
          f"{'finished' if code == 0 else 'stopped' if code == EXIT_STOPPED else 'ended'}, exit codes {codes}")
    if code == EXIT_STOPPED:
        print(f"resume with --run-id {run_id} (and the same --workers)")
    return 128 - code if code < 0 else code  # a worker killed by signal N: 128 + N, as a shell says it


def worst_exit(codes: list[int]) -> int:
    """A ``--workers`` run's exit code: 0 when all finished, a failure before a stop (6), the
    larger failure first (a signal's death, -9, counts as 9)."""
    return max(codes, key=lambda c: (c != 0, c != EXIT_STOPPED, abs(c)))


def _without(argv: list[str], flags: dict[str, bool]) -> list[str]:
    """``argv`` less the given flags (and their values)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in flags:
            skip = "=" not in arg and flags[name]
            continue
        out.append(arg)
    return out
