"""A Spark run's rows in and out: a Parquet source or an Iceberg table as a DataFrame with each row's place, and a run's two frames written into its target.

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

from pathlib import Path
from typing import Any

from streamer.config import LakeConfig
from streamer.engines.runs import RunTarget, clear_run, mark_done
from streamer.engines.scorer import POSITION
from streamer.engines.spark import CATALOG
from streamer.errors import ConfigError
from streamer.lake.places import identifier
from streamer.lake.table import parquet_files

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
