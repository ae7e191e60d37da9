"""A Spark DataFrame of a table's rows scored into its predictions and rejects DataFrames, and the Spark session's view of the lake's catalog.

:func:`score_dataframe` runs the lake's scoring (:class:`~streamer.engines.scorer.ArrowScorer`)
through ONE ``mapInArrow`` whose Spark schema is the scorer's outcome schema (the prediction
columns, each nullable, and the rejects' struct): that frame is persisted once and split into
the predictions and the rejects, so each row is scored once however many actions read both.
A Python worker of an executor loads the model once, on its first batch, and keeps it for the
tasks it runs after.

Example::

    predictions, rejects = score_dataframe(spark.read.parquet("events/"), cfg, "nightly-42")
    rejects.writeTo("streamer.streamer.scores_rejects").overwrite(col("run_id") == "nightly-42")

:func:`catalog_conf` is the Spark configuration of the lake's catalog (``lake:``), as the catalog
``streamer``: pyiceberg's SQL catalog on SQLite is Iceberg's ``JdbcCatalog`` over the SQLite
JDBC driver (its tables' schema version left as pyiceberg made them), a REST catalog is
Iceberg's ``RestCatalog``; any other SQL database is refused. An ``s3://`` warehouse is reached
with Iceberg's ``S3FileIO`` (Iceberg's AWS bundle on the classpath, as the ``spark`` image has it).
Spark's columns are all nullable: ``spark.sql.iceberg.check-nullability`` is off, so their rows
go into the required columns of the tables ``streamer score`` makes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from streamer.config import Config, LakeConfig
from streamer.engines.scorer import POSITION, REJECT, ArrowScorer
from streamer.errors import ConfigError
from streamer.lake.places import catalog_uri, warehouse_uri

CATALOG = "streamer"  # the Spark catalog of the lake's tables: streamer.<namespace>.<table>
_WORKER_SCORERS: dict[str, ArrowScorer] = {}  # one per run in an executor's Python worker


def catalog_conf(lake: LakeConfig) -> dict[str, str]:
    """The Spark settings of the lake's catalog as Spark's catalog :data:`CATALOG`, and the
    session settings its writes need (UTC days, microsecond Parquet timestamps, nullable columns)."""
    prefix = f"spark.sql.catalog.{CATALOG}"
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.warehouse": warehouse_uri(lake),
            "spark.sql.iceberg.check-nullability": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
            # A Parquet run is committed by its _SUCCESS (engines.runs.mark_done), written last.
            "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false"}
    if lake.warehouse.remote:  # Iceberg's own S3 client (Iceberg's AWS bundle on the classpath)
        conf.update({f"{prefix}.{key}": value for key, value in _s3(lake).items()})
    uri = catalog_uri(lake)
    if lake.catalog == "rest":
        conf.update({f"{prefix}.type": "rest", f"{prefix}.uri": uri})
        for key, secret in (("token", lake.catalog_token), ("credential", lake.catalog_credential)):
            if secret is not None:
                conf[f"{prefix}.{key}"] = secret.value
        return conf
    if not uri.startswith("sqlite:///"):
        raise ConfigError("lake.catalog_uri", "the Spark engine reaches an SQL catalog on SQLite (sqlite:///PATH) "
                                              "or a REST catalog; this database is neither")
    path = Path(uri.removeprefix("sqlite:///")).resolve()
    conf.update({f"{prefix}.type": "jdbc", f"{prefix}.uri": f"jdbc:sqlite:{path}"})
    return conf


def _s3(lake: LakeConfig) -> dict[str, str]:
    """S3FileIO's properties for ``lake.s3`` (a store of one's own: buckets by path)."""
    s3 = lake.s3
    props = {"io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "client.region": s3.region}
    if s3.endpoint:
        props.update({"s3.endpoint": s3.endpoint, "s3.path-style-access": "true"})
    if s3.access_key_id is not None and s3.secret_access_key is not None:
        props.update({"s3.access-key-id": s3.access_key_id.value, "s3.secret-access-key": s3.secret_access_key.value})
    return props


def score_dataframe(df: Any, cfg: Config, run_id: str, files: Sequence[str] = (),
                    scorer: ArrowScorer | None = None) -> tuple[Any, Any]:
    """``df``'s rows scored under ``run_id``: (predictions, rejects), DataFrames of the lake's
    prediction columns and of the rejects table's. ``df`` has the stream's fields and, optionally,
    the scorer's POSITION columns. Both frames read one persisted scoring of ``df`` (cached until
    the session ends or ``spark.catalog.clearCache()``). ``files``: the sorted Parquet files of a
    source read with ``_metadata.file_path`` as its source column: each row's source becomes its
    file's path and its partition the file's number in ``files``, as ``streamer score`` names them.
    ``scorer``: one built already (its batch size, its model loaded on the driver), else a new one."""
    scorer = scorer or ArrowScorer(cfg, run_id)
    return split(scored_frame(df, cfg, run_id, files, scorer), scorer.schema)


def scored_frame(df: Any, cfg: Config, run_id: str, files: Sequence[str] = (),
                 scorer: ArrowScorer | None = None) -> Any:
    """:func:`score_dataframe`'s one scoring: the outcomes of ``df``'s rows, persisted (``unpersist()``
    it once both parts are written)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    scorer = scorer or ArrowScorer(cfg, run_id)
    score = _scoring(scorer, uuid.uuid4().hex, {path: i for i, path in enumerate(files)})
    return df.mapInArrow(score, from_arrow_schema(scorer.outcome_schema)).persist()


def split(scored: Any, schema: pa.Schema) -> tuple[Any, Any]:
    """The predictions (``schema``'s columns) and the rejects of a scored frame."""
    from pyspark.sql import functions as F

    predictions = scored.where(F.col(REJECT).isNull()).select(*schema.names)
    rejects = scored.where(F.col(REJECT).isNotNull()).select(f"{REJECT}.*")
    return predictions, rejects


def _scoring(scorer: ArrowScorer, token: str, numbers: dict[str, int]) -> Any:
    """mapInArrow's function: each record batch's outcomes. ``token`` names the run's scorer in
    the Python worker, so the model loads once per worker rather than once per task."""

    def score(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        loaded = _WORKER_SCORERS.setdefault(token, scorer)
        for batch in batches:
            yield from loaded.outcomes(_placed(batch, numbers) if numbers else batch).to_batches()

    return score


def _placed(batch: pa.RecordBatch, numbers: dict[str, int]) -> pa.RecordBatch:
    """A batch's source column (Spark's ``file:`` URIs of its files) as the files' paths, and its
    partition column as their numbers in ``numbers``."""
    names = batch.schema.names
    uris = batch.column(names.index(POSITION[0])).dictionary_encode()
    paths = [unquote(u.removeprefix("file://").removeprefix("file:")) for u in uris.dictionary.to_pylist()]
    unknown = [p for p in paths if p not in numbers]
    if unknown:
        raise ValueError(f"{unknown[0]} was read but is not a file of the run's source")
    indices = uris.indices
    source = pa.DictionaryArray.from_arrays(indices, pa.array(paths, pa.string())).cast(pa.string())
    part = pa.array([numbers[p] for p in paths], pa.int32()).take(indices)
    columns = list(batch.columns)
    columns[names.index(POSITION[0])], columns[names.index(POSITION[1])] = source, part
    return pa.RecordBatch.from_arrays(columns, names=names)
