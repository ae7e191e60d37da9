"""`streamer replay --to-table/--to-parquet` and `streamer score`: a topic's range or a table, scored into the lake.

Both build the stream's house without its Kafka side (the model checked as at start-up, its
serving with breaker and fallback, the input contract), open the sink (lake/iceberg.py or
lake/parquet.py), read the run's plan and progress from it, and run lake/run.py's loop. A replay's
bounds are resolved once, when the run is planned, and saved in the sink: a resumed run keeps
them, even when ``--from 2h`` would mean another time.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

import pyarrow as pa

from streamer.config import Config, ShadowConfig
from streamer.errors import ConfigError
from streamer.formats.codec import Codec
from streamer.kafka.ranges import When, parse_when
from streamer.lake.columns import PredictionColumns, prediction_arrow_schema
from streamer.lake.run import LakeCounts, LakeRun, Predictions, Source
from streamer.lake.sink import Resume, Shard, Sink
from streamer.lake.topic import replay_plan
from streamer.model.runner import ModelRunner
from streamer.observe.bar import ProgressBar
from streamer.pipeline.serving import Serving

_RUN_ID = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
BATCH_SIZE = 8192  # rows per model call: nobody waits on a backfill's latency


@dataclass(frozen=True, slots=True)
class Target:
    """Where a run writes: an Iceberg table's name, or a Parquet dataset's folder or URL."""

    table: str | None = None
    parquet: str | None = None

    def __post_init__(self) -> None:
        if (self.table is None) == (self.parquet is None):
            raise ConfigError("--to-table", "give one of --to-table NAME or --to-parquet PATH")


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


def new_run_id(given: str | None) -> str:
    run_id = given or dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S-") + uuid.uuid4().hex[:4]
    if not _RUN_ID.match(run_id):
        raise ConfigError("--run-id", f"{run_id!r}: letters, digits, '.', '_' and '-' only, up to 100")
    return run_id


def parse_shard(text: str | None) -> Shard:
    """``I/N``: this process takes the partitions p with p % N == I."""
    if text is None:
        return Shard()
    m = re.match(r"^(\d+)/(\d+)$", text.strip())
    if m is None or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise ConfigError("--shard", f"{text!r} is not INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/4")
    return Shard(int(m.group(1)), int(m.group(2)))


@dataclass(frozen=True, slots=True)
class LakeHouse:
    """What one run scores with: its config (no shadow, no reloads), the model, its serving, the
    output codec (the stages' encoder, built once: an avro-confluent one asks the registry) and
    the prediction columns."""

    cfg: Config
    runner: ModelRunner
    serving: Serving
    encoder: Codec
    columns: PredictionColumns


def lake_house(cfg: Config, model_path: Path | None = None, model_version: str | None = None, *,
               key: str = "model.path", like: ModelRunner | None = None) -> LakeHouse:
    """The house of one run, its model checked as at start-up (refused on ``key``), with
    ``like``'s signature when given."""
    from streamer.wiring import checked_runner, output_codec, prediction_schema, serving

    cfg = replace(cfg, shadow=ShadowConfig(),
                  model=replace(cfg.model, path=model_path or cfg.model.path,
                                version=model_version or cfg.model.version, reload_check_ms=0))
    runner = checked_runner(cfg, model_path, key, like)
    encoder = output_codec(cfg, runner)
    served = serving(cfg, runner, None, encoder, model_version)
    columns = PredictionColumns(prediction_arrow_schema(prediction_schema(cfg, runner)), cfg.output.include)
    return LakeHouse(cfg, runner, served, encoder, columns)


def open_sink(cfg: Config, target: Target, schema: pa.Schema) -> Sink:
    """The sink of ``target``, for rows of ``schema``."""
    if target.table is not None:
        from streamer.lake.iceberg import IcebergSink

        return IcebergSink(cfg.lake, target.table, schema)
    from streamer.lake.parquet import ParquetSink

    assert target.parquet is not None
    return ParquetSink(cfg.lake, target.parquet, schema)


def run_lake_replay(cfg: Config, start: When, end: When, target: Target, *, run_id: str | None = None,
                    shard: Shard = Shard(), force: bool = False, batch_size: int | None = None,
                    model_path: Path | None = None, model_version: str | None = None,
                    progress: TextIO | None = None) -> LakeSummary:
    """Score the range into ``target`` exactly once under ``run_id`` (resumed when it has progress there)."""
    from streamer.lake.topic import TopicSource
    from streamer.pipeline.stages import Stages
    from streamer.wiring import input_codec

    run_id = new_run_id(run_id)
    cfg = replace(cfg, input=replace(cfg.input, group_id=f"{cfg.input.group_id}.replay.{run_id}"))
    house = lake_house(cfg, model_path, model_version)
    cfg = house.cfg
    sink = open_sink(cfg, target, house.columns.schema)
    resume = sink.resume(run_id, shard, replay_plan(cfg, start, end, shard), force)
    stages = Stages.serving(input_codec(cfg), house.encoder, cfg, house.runner)
    return _run("replay", run_id, sink, house, TopicSource(cfg, stages), resume, batch_size, progress)


def run_score(cfg: Config, location: str, target: Target, *, run_id: str | None = None, force: bool = False,
              batch_size: int | None = None, progress: TextIO | None = None) -> LakeSummary:
    """Score every row of ``location`` (Parquet files, a dataset, an Iceberg table) into ``target``."""
    from streamer.lake.arrow_fields import ArrowFields
    from streamer.lake.table import TableSource
    from streamer.pipeline.validate import EventValidator

    run_id = new_run_id(run_id)
    house = lake_house(cfg)
    cfg, contract = house.cfg, house.runner.contract
    validator = EventValidator(cfg.input, contract, cfg.output.include)
    source = TableSource(cfg.lake, location, validator, contract.stack, batch_size or BATCH_SIZE,
                         ArrowFields.compile(cfg.input, contract, cfg.output.include))
    sink = open_sink(cfg, target, house.columns.schema)
    resume = sink.resume(run_id, Shard(), source.plan(), force)
    return _run("score", run_id, sink, house, source, resume, batch_size, progress)


def _run(verb: str, run_id: str, sink: Sink, house: LakeHouse, source: Source, resume: Resume,
         batch_size: int | None, progress: TextIO | None) -> LakeSummary:
    bar = ProgressBar(resume.left(), progress or sys.stderr, verb)
    started = time.monotonic()
    lake = LakeRun(sink, Predictions(house.serving, house.columns, run_id), run_id, batch_size or BATCH_SIZE,
                   lambda c: bar.update(c.rows))
    counts = lake.run(source, resume)
    bar.close(counts.rows)
    return LakeSummary(verb, run_id, sink.name, resume, counts, time.monotonic() - started)


def supervise_replay(argv: list[str], cfg: Config, workers: int, run_id: str | None, start: str) -> int:
    """``--workers N``: N processes of this replay, process I taking the partitions p with p % N == I,
    under one run id, into one table (Iceberg's optimistic commits take turns). A relative ``--from``
    is fixed here, so that every worker resolves the same time. Exit: the worst of theirs."""
    import signal
    import subprocess

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
