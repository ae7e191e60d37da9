"""The lake's house: a run's model side without Kafka's (no challengers, no reloads), its sink, and the source and plan of a topic's range or a table.

A replay into the lake reads ``[from, to)`` of the input topics with the stream's decode and
validation; ``streamer score`` (and a job) reads a table's rows through the same contract: Parquet
files, an Iceberg table, or the rows one of its snapshots appended, whose table and snapshot each
commit records (the target's snapshot summary, or the Parquet dataset's commit log). Either is scored by
one model's serving (breaker, fallback, the version label) into an Iceberg table, a Parquet
dataset or the key-value store (stores/sink.py), which is also the run's checkpoint: the plan and progress are read from it here, before
the run starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa

from streamer.config import Config, KvConfig, LakeConfig, ShadowConfig
from streamer.errors import ConfigError
from streamer.formats.configured import input_codec
from streamer.kafka.ranges import When
from streamer.lake.arrow_fields import ArrowFields
from streamer.lake.columns import PredictionColumns, prediction_arrow_schema
from streamer.lake.iceberg import IcebergSink
from streamer.lake.parquet import ParquetSink
from streamer.lake.run import Predictions, Source
from streamer.lake.sink import Resume, Shard, Sink
from streamer.lake.table import TableSource, Where
from streamer.lake.topic import TopicSource, replay_plan
from streamer.model.runner import ModelRunner
from streamer.pipeline.stages import Stages
from streamer.pipeline.validate import EventValidator
from streamer.stores.sink import KvSink
from streamer.wiring.model import ModelHouse, model_house

BATCH_SIZE = 8192  # rows per model call: nobody waits on a backfill's latency


@dataclass(frozen=True, slots=True)
class Target:
    """Where a run writes: an Iceberg table's name, a Parquet dataset's folder or URL, or the
    key-value store's key prefix (``kv``; empty: ``kv.prefix``)."""

    table: str | None = None
    parquet: str | None = None
    kv: str | None = None

    def __post_init__(self) -> None:
        if sum(t is not None for t in (self.table, self.parquet, self.kv)) != 1:
            raise ConfigError("--to-table", "give one of --to-table NAME, --to-parquet PATH or --to-kv [PREFIX]")


@dataclass(frozen=True, slots=True)
class LakeHouse:
    """What one run scores with: its config (no shadow, no reloads), the model side, and the
    prediction columns its rows are written as."""

    cfg: Config
    model: ModelHouse
    columns: PredictionColumns


@dataclass(frozen=True, slots=True)
class LakeJob:
    """A run ready to go: its id, the house, the sink (and checkpoint), the plan and progress read
    from it, and the source of its rows."""

    run_id: str
    house: LakeHouse
    sink: Sink
    resume: Resume
    source: Source

    def scorer(self) -> Predictions:
        return Predictions(self.house.model.serving, self.house.columns, self.run_id)


def lake_house(cfg: Config, model_path: Path | None = None, model_version: str | None = None, *,
               key: str = "model.path", like: ModelRunner | None = None) -> LakeHouse:
    """The house of one run, its model checked as at start-up (refused on ``key``), with
    ``like``'s signature when given; ``model_version``: the label its predictions carry."""
    cfg = replace(cfg, shadow=ShadowConfig(),
                  model=replace(cfg.model, path=model_path or cfg.model.path,
                                version=model_version or cfg.model.version, reload_check_ms=0))
    model = model_house(cfg, label=model_version, key=key, like=like)
    return LakeHouse(cfg, model, PredictionColumns(prediction_arrow_schema(model.schema_out), cfg.output.include))


def open_sink(lake: LakeConfig, target: Target, schema: pa.Schema, summary: Mapping[str, str] | None = None, *,
              kv: KvConfig | None = None, entity_field: str = "entity_id") -> Sink:
    """The sink of ``target``, for rows of ``schema``; ``summary``: what each of its commits records
    (a table's or a dataset's); ``kv``: the store of a ``kv`` target, whose rows are kept by ``entity_field``."""
    if target.kv is not None:
        store = _store(kv, target)
        return KvSink(store, target.kv or store.prefix, schema, entity_field)
    if target.table is not None:
        return IcebergSink(lake, target.table, schema, summary)
    assert target.parquet is not None
    return ParquetSink(lake, target.parquet, schema, summary)


def _store(kv: KvConfig | None, target: Target) -> KvConfig:
    """The store a ``kv`` target writes to; ConfigError on ``kv.address`` when it names none."""
    if target.kv is not None and (kv is None or kv.address is None):
        raise ConfigError("kv.address", "is required by --to-kv: the Redis store's HOST:PORT")
    assert kv is not None
    return kv


def replay_job(cfg: Config, start: When, end: When, target: Target, run_id: str, *, shard: Shard = Shard(),
               force: bool = False, model_path: Path | None = None, model_version: str | None = None) -> LakeJob:
    """A topic's range into ``target`` under ``run_id``, in its own consumer group (it commits
    nothing: the sink is the checkpoint); resumed where the sink says it stopped."""
    _store(cfg.kv, target)  # before the model loads
    cfg = replace(cfg, input=replace(cfg.input, group_id=f"{cfg.input.group_id}.replay.{run_id}"))
    house = lake_house(cfg, model_path, model_version)
    cfg, model = house.cfg, house.model
    sink = open_sink(cfg.lake, target, house.columns.schema, kv=cfg.kv, entity_field=cfg.input.entity_field)
    resume = sink.resume(run_id, shard, replay_plan(cfg, start, end, shard), force)
    stages = Stages.serving(input_codec(cfg.input, model.schema_in), model.encoder, cfg, model.runner)
    return LakeJob(run_id, house, sink, resume, TopicSource(cfg, stages))


def score_job(cfg: Config, location: Where, target: Target, run_id: str, *, force: bool = False,
              batch_size: int | None = None, key: str = "--from") -> LakeJob:
    """Every row of ``location`` (Parquet files, a dataset, an Iceberg table, the rows a snapshot of
    one appended: table.Where) into ``target``; ``key``: what a refusal of the source names."""
    _store(cfg.kv, target)  # before the model loads
    house = lake_house(cfg)
    cfg, contract = house.cfg, house.model.contract
    validator = EventValidator(cfg.input, contract, cfg.output.include)
    source = TableSource(cfg.lake, location, validator, contract.stack, batch_size or BATCH_SIZE,
                         ArrowFields.compile(cfg.input, contract, cfg.output.include), key)
    source.check(contract)  # before the sink is opened: a refused source writes nothing
    sink = open_sink(cfg.lake, target, house.columns.schema, source.summary, kv=cfg.kv,
                     entity_field=cfg.input.entity_field)
    return LakeJob(run_id, house, sink, sink.resume(run_id, Shard(), source.plan(), force), source)
