"""A Spark run on a session: its rows in (a Parquet source or an Iceberg table as a DataFrame with each row's place), scored once, and its two frames written into its target (score_table).

A Parquet file or folder (as ``streamer score --from`` names one: its files sorted, less those
under ``_`` or ``.`` names) is read with ``_metadata.file_path`` and ``_metadata.row_index`` as
the scorer's POSITION columns, so every row is named as ``streamer score`` names it (its file's
path, the file's number, its row in the file) and the rows equal ``streamer score``'s. An Iceberg
table (``streamer.<namespace>.<table>`` in Spark) is read with Iceberg's ``_file`` and ``_pos``.

An Iceberg target gets two commits, rejects first, each an append (or, where an earlier attempt
of the run committed into the table, ``overwrite(run_id = <run>)``) and carrying the run's snapshot properties; a Parquet target's
run folders are emptied, written (Hive-partitioned by ``event_date``, rejects by
``rejected_date``, as the lake's dataset is) and marked done with ``_SUCCESS``, last.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamer.config import Config, LakeConfig
from streamer.engines.runs import EngineRun, RunTarget, clear_run, mark_done, prepare
from streamer.engines.scorer import POSITION, ArrowScorer
from streamer.engines.spark import CATALOG, scored_frame, split
from streamer.errors import ConfigError
from streamer.lake.places import identifier
from streamer.lake.table import parquet_files
from streamer.wiring.lake import Target

ENGINE = "spark"


def read_source(spark: Any, lake: LakeConfig, location: str) -> tuple[Any, list[str]]:
    """``location``'s rows with their POSITION columns, and its Parquet files (none for a table)."""
    from pyspark.sql import functions as F

    if location.startswith("s3://"):
        raise ConfigError("--from", "the Spark engine reads Parquet from a local or shared filesystem path")
    found = parquet_files(lake, location, "--from")
    if found is None:
        name = f"{CATALOG}.{identifier(lake, location, '--from')}"
        if not spark.catalog.tableExists(name):
            raise ConfigError("--from", f"{location!r} is no file or folder here, nor a table of the catalog")
        table = spark.table(name)
        return table.select("*", F.col("_file").alias(POSITION[0]), F.lit(0).alias(POSITION[1]),
                            F.col("_pos").alias(POSITION[2])), []
    files = found[1]
    frame = spark.read.parquet(*(Path(f).as_uri() for f in files))
    return frame.select("*", F.col("_metadata.file_path").alias(POSITION[0]), F.lit(0).alias(POSITION[1]),
                        F.col("_metadata.row_index").alias(POSITION[2])), files


def write_run(lake: LakeConfig, run: RunTarget, predictions: Any, rejects: Any) -> None:
    """The run's rejects, then its predictions, into its target."""
    if run.table is not None and run.rejects_table is not None:
        _commit(rejects, run.rejects_table, run)
        _commit(predictions, run.table, run)
        return
    assert run.parquet is not None and run.rejects_parquet is not None
    from pyspark.sql import functions as F

    clear_run(lake, run)
    for frame, folder, day, of in ((rejects, run.rejects_parquet, "rejected_date", "rejected_at"),
                                   (predictions, run.parquet, "event_date", "event_time")):
        (frame.withColumn(day, F.to_date(F.col(of))).write.mode("overwrite").partitionBy(day)
         .parquet(Path(folder).resolve().as_uri()))
    mark_done(lake, run)


def _commit(frame: Any, table: str, run: RunTarget) -> None:
    """One Iceberg commit of ``frame`` into ``table``, its properties set: appended, or replacing the
    run's rows where an earlier attempt of the run committed some (RunTarget.replaces)."""
    from pyspark.sql import functions as F

    # Each task writes its own rows' files, day by day: no shuffle of the scored rows before the write.
    writer = frame.writeTo(f"{CATALOG}.{table}").option("distribution-mode", "none").option("fanout-enabled", "true")
    for key, value in run.summary(ENGINE).items():
        writer = writer.option(f"snapshot-property.{key}", value)
    if run.replaces(table):
        writer.overwrite(F.col("run_id") == F.lit(run.run_id))
    else:
        writer.append()


@dataclass(frozen=True, slots=True)
class SparkRun(EngineRun):
    """What a Spark run wrote, and its summary line."""

    def line(self) -> str:
        return (f"spark: scored {self.predictions + self.rejects} rows of {self.source} into {self.target.name} "
                f"({self.predictions} predictions, {self.rejects} rejects into {self.target.rejects_at}), "
                f"run {self.run_id}, engine {ENGINE}, in {self.seconds:.1f}s")


def checked_run(cfg: Config, source: str, target: Target, run_id: str, scorer: ArrowScorer, *,
                force: bool = False) -> RunTarget:
    """A run's target made or checked, and its source checked, before any session works on it:
    ConfigError for a target or source the run cannot take, ReplayFinishedError when the run id
    committed and not ``force``."""
    if (target.parquet or "").startswith("s3://"):
        raise ConfigError("--to-parquet", "the Spark engine writes Parquet to a local or shared filesystem path")
    scorer.check(source)
    return prepare(cfg.lake, target, run_id, scorer.schema, force=force)


def score_table(spark: Any, cfg: Config, source: str, target: Target, run_id: str, *, force: bool = False,
                scorer: ArrowScorer | None = None, run: RunTarget | None = None) -> SparkRun:
    """Score every row of ``source`` into ``target`` under ``run_id`` on the session ``spark`` (its
    catalog set by :func:`~streamer.engines.spark.catalog_conf`); ReplayFinishedError when the run
    id committed and not ``force``. ``run``: the target :func:`checked_run` gave already."""
    scorer = scorer or ArrowScorer(cfg, run_id)
    run = run or checked_run(cfg, source, target, run_id, scorer, force=force)
    started = time.monotonic()
    frame, files = read_source(spark, cfg.lake, source)
    scored = scored_frame(frame, cfg, run_id, files, scorer)
    predictions, rejects = split(scored, scorer.schema)
    try:
        counts = (predictions.count(), rejects.count())
        write_run(cfg.lake, run, predictions, rejects)
    finally:
        scored.unpersist()
    return SparkRun(run_id, source, run, counts[0], counts[1], time.monotonic() - started)
