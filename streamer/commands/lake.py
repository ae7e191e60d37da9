"""`streamer replay --to-table/--to-parquet` and `streamer score`: a topic's range or a table, scored into the lake.

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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from streamer.config import Config
from streamer.errors import ConfigError
from streamer.house import new_run_id
from streamer.kafka.ranges import When, parse_when
from streamer.lake.run import LakeCounts, LakeRun
from streamer.lake.sink import Resume, Shard
from streamer.observe.bar import ProgressBar
from streamer.wiring.lake import BATCH_SIZE, LakeJob, Target, replay_job, score_job


@dataclass(frozen=True, slots=True)
class LakeSummary:
    """What a finished run did; the counts add up: ``rows = predictions + rejects``."""

    verb: str  # 'replay' or 'score'
    run_id: str
    sink: str
    resume: Resume
    counts: LakeCounts
    seconds: float

    def lines(self) -> list[str]:
        c = self.counts
        left = self.resume.left()
        counts = f"predictions {c.predictions} + rejects {c.rejects}"
        if self.verb == "replay":  # a topic's offsets: commit markers take some, retention may delete some
            if c.gone:
                counts += f" + deleted by retention before they were read {c.gone}"
            counts = (f"offsets in range {left} = {counts} + without an event "
                      f"{max(left - c.predictions - c.rejects - c.gone, 0)} (transaction markers, aborted records)")
        else:
            counts = f"rows {left} = {counts}"
        return [f"{self.verb} {self.run_id} {'resumed and ' if self.resume.resumed else ''}finished into {self.sink}",
                counts,
                f"{c.commits} commits, throughput {c.rows / max(self.seconds, 1e-9):,.0f} rows/s, "
                f"{self.seconds:.1f} s in all"]

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
                    progress: TextIO | None = None) -> LakeSummary:
    """Score the range into ``target`` exactly once under ``run_id`` (resumed when it has progress there)."""
    job = replay_job(cfg, start, end, target, new_run_id(run_id), shard=shard, force=force, model_path=model_path,
                     model_version=model_version)
    return _run("replay", job, batch_size, progress)


def run_score(cfg: Config, location: str, target: Target, *, run_id: str | None = None, force: bool = False,
              batch_size: int | None = None, progress: TextIO | None = None) -> LakeSummary:
    """Score every row of ``location`` (Parquet files, a dataset, an Iceberg table) into ``target``."""
    job = score_job(cfg, location, target, new_run_id(run_id), force=force, batch_size=batch_size)
    return _run("score", job, batch_size, progress)


def _run(verb: str, job: LakeJob, batch_size: int | None, progress: TextIO | None) -> LakeSummary:
    bar = ProgressBar(job.resume.left(), progress or sys.stderr, verb)
    started = time.monotonic()
    lake = LakeRun(job.sink, job.scorer(), job.run_id, batch_size or BATCH_SIZE, lambda c: bar.update(c.rows))
    counts = lake.run(job.source, job.resume)
    bar.close(counts.rows)
    return LakeSummary(verb, job.run_id, job.sink.name, job.resume, counts, time.monotonic() - started)


def supervise_replay(argv: list[str], cfg: Config, workers: int, run_id: str | None, start: str) -> int:
    """``--workers N``: N processes of this replay, process I taking the partitions p with p % N == I,
    under one run id, into one table (Iceberg's optimistic commits take turns). A relative ``--from``
    is fixed here, so that every worker resolves the same time. Exit: the worst of theirs."""
    if workers < 1:
        raise ConfigError("--workers", f"must be >= 1, got {workers}")
    when = parse_when(start, "--from")
    fixed = (dt.datetime.fromtimestamp(when.timestamp_ms / 1000, dt.UTC).isoformat()
             if when.kind == "timestamp" else start)
    run_id = new_run_id(run_id)
    rest = _without(argv, {"--workers": True, "--run-id": True, "--from": True})
    procs = [subprocess.Popen([sys.executable, "-m", "streamer", *rest, "--from", fixed, "--run-id", run_id,
                               "--shard", f"{i}/{workers}"]) for i in range(workers)]

    def stop(*_: object) -> None:
        for p in procs:
            p.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    codes = [p.wait() for p in procs]
    print(f"replay {run_id}: {workers} workers finished, exit codes {codes}")
    return max(codes, key=lambda c: (c != 0, abs(c)))


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
