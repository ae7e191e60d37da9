"""An engine run's target: its tables made as ``streamer score`` makes them, and a run id that committed refused, so a retried submit never writes twice.

An engine (Spark, Ray Data) writes a run in one commit per table, at the end: the rejects'
table first, then the predictions'. The predictions' commit is the run's: its snapshot summary
carries ``streamer.run-id`` (and ``streamer.engine``), and a later run under the same id is
refused (:class:`ReplayFinishedError`) unless forced. A commit into a table that an earlier
attempt of the run committed into replaces the run's own rows (``run_id = <run>``) rather than
appends: a run that died between its two commits, run again, leaves each row once, and a forced
run replaces what the first one wrote. The tables keep their files' ``run_id`` bounds whole, so
the run's filter tells its files from any other run's.

A Parquet target holds each run in its own folder, ``PATH/run_id=<run>/event_date=.../*.parquet``
(rejects: ``PATH_rejects/run_id=<run>/``), and ``_SUCCESS`` in the run's folder says it
committed; a run again writes its folder anew. DuckDB reads every run with
``read_parquet('PATH/**/*.parquet', hive_partitioning = true)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from streamer.config import LakeConfig
from streamer.errors import ConfigError, ReplayFinishedError
from streamer.lake.ancestry import RUN, history
from streamer.lake.columns import REJECTS
from streamer.lake.iceberg import ensure_table
from streamer.lake.places import filesystem, identifier, open_catalog
from streamer.wiring.lake import Target

ENGINE = "streamer.engine"  # which engine wrote a run's snapshot: spark or ray
DONE = "_SUCCESS"  # a Parquet run's folder holds it once the run committed
RUN_ID_METRICS = "write.metadata.metrics.column.run_id"  # an Iceberg table property: the bounds kept of run_id


@dataclass(frozen=True, slots=True)
class RunTarget:
    """Where one engine run writes: an Iceberg table and its rejects' (``namespace.name``), or a
    Parquet run folder and its rejects' (local paths or ``s3://`` URLs)."""

    run_id: str
    table: str | None = None
    rejects_table: str | None = None
    parquet: str | None = None
    rejects_parquet: str | None = None
    holding: frozenset[str] = frozenset()  # the tables an earlier attempt of the run committed rows into

    def replaces(self, table: str) -> bool:
        """Whether the run's commit into ``table`` replaces rows of the run (an earlier attempt's,
        a forced run's) rather than appends: only then is the run's filter evaluated on the table."""
        return table in self.holding

    @property
    def name(self) -> str:
        return self.table or self.parquet or ""

    @property
    def rejects_at(self) -> str:
        return self.rejects_table or self.rejects_parquet or ""

    def summary(self, engine: str) -> dict[str, str]:
        """What the run's snapshots record."""
        return {RUN: self.run_id, ENGINE: engine}


@dataclass(frozen=True, slots=True)
class EngineRun:
    """What an engine run wrote: its counts, where, and its own seconds (a session's start apart)."""

    run_id: str
    source: str
    target: RunTarget
    predictions: int
    rejects: int
    seconds: float


def prepare(lake: LakeConfig, target: Target, run_id: str, schema: pa.Schema, *, force: bool = False) -> RunTarget:
    """The run's target, its tables made (partitioned by day, as ``streamer score`` makes them) or
    checked against ``schema``; ReplayFinishedError when ``run_id`` committed there and not ``force``."""
    if target.kv is not None:
        raise ConfigError("--to-kv", "is for streamer score alone: an engine writes --to-table or --to-parquet")
    if target.table is not None:
        catalog = open_catalog(lake)
        ident = identifier(lake, target.table)
        tables = {ident: _exact_run_ids(ensure_table(catalog, ident, schema, "event_time")),
                  f"{ident}_rejects": _exact_run_ids(ensure_table(catalog, f"{ident}_rejects", REJECTS, "rejected_at"))}
        holding = frozenset(name for name, table in tables.items() if committed_in(table, run_id))
        run = RunTarget(run_id, table=ident, rejects_table=f"{ident}_rejects", holding=holding)
        committed = ident in holding
    else:
        assert target.parquet is not None
        base = target.parquet.rstrip("/")
        run = RunTarget(run_id, parquet=f"{base}/run_id={run_id}", rejects_parquet=f"{base}_rejects/run_id={run_id}")
        fs, folder = filesystem(lake, run.parquet or "")
        committed = fs.get_file_info(f"{folder}/{DONE}").type == pafs.FileType.File
    if committed and not force:
        raise ReplayFinishedError(f"run {run_id!r} already committed into {run.name}; --force scores it again, "
                                  f"replacing its rows, or give another --run-id", run.name, rejects_at=run.rejects_at)
    return run


def _exact_run_ids(table: Any) -> Any:
    """``table``, its data files' ``run_id`` bounds kept whole (:data:`RUN_ID_METRICS`): Iceberg cuts a
    string's bounds to 16 characters, and two run ids alike in their first 16 would leave a run's
    files unprovably apart from another's when a commit replaces a run's rows."""
    if table.properties.get(RUN_ID_METRICS) != "full":
        with table.transaction() as change:
            change.set_properties({RUN_ID_METRICS: "full"})
    return table


def committed_in(table: Any, run_id: str) -> bool:
    """Whether a snapshot of ``table``'s history (its current snapshot's ancestry: a rolled-back
    commit is no part of it) was committed by ``run_id``."""
    return any(snap.summary is not None and snap.summary.get(RUN) == run_id for snap in history(table))


def mark_done(lake: LakeConfig, run: RunTarget) -> None:
    """A Parquet run's ``_SUCCESS``, written once its rows and rejects are all in place."""
    if run.parquet is None:
        return
    fs, folder = filesystem(lake, run.parquet)
    fs.create_dir(folder, recursive=True)
    with fs.open_output_stream(f"{folder}/{DONE}") as out:
        out.write(run.run_id.encode())


def clear_run(lake: LakeConfig, run: RunTarget) -> None:
    """A Parquet run's folders emptied before the run writes them (a run that died part-way, a
    forced run): its files are the last attempt's alone."""
    for place in (run.parquet, run.rejects_parquet):
        if place is None:
            continue
        fs, folder = filesystem(lake, place)
        if fs.get_file_info(folder).type != pafs.FileType.NotFound:
            fs.delete_dir(folder)
