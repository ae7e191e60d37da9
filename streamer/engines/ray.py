"""Scoring a table on Ray Data: an actor pool of scorers over a Dataset, and a run's read, score and writes (``streamer score --engine ray``).

:func:`score_dataset` maps a Dataset's batches (``batch_format="pyarrow"``) through an actor pool
of ``concurrency`` actors, each holding one :class:`~streamer.engines.scorer.ArrowScorer` (its
model loaded once, on its first batch), to :meth:`ArrowScorer.outcomes`: one table per batch,
predictions and rejects together. The outcomes are materialized once and split into the
predictions and the rejects, so each row is scored once however both are read. An actor that
dies (its process killed, its node lost) is restarted by Ray and its batches run again: Ray
Data's actor pools retry without end (``max_restarts=-1``, ``max_task_retries=-1``), and a
batch's outcome is stored once, when its task succeeds.

:func:`run_ray` is a whole run: the source read with each row's place (ray_read.py), the run's
target made or refused (runs.py: a run id that committed is refused unless forced), then the
rejects' commit and the predictions' (an Iceberg ``write_iceberg`` that appends, or replaces the
rows an earlier attempt of the run committed, with ``streamer.run-id`` and ``streamer.engine`` in
its snapshot summary), or the run's
Parquet folders written anew (``event_date=`` / ``rejected_date=`` folders, ``_SUCCESS`` last).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.data import ActorPoolStrategy, Dataset

from streamer.config import Config, LakeConfig
from streamer.engines.ray_read import placed_source
from streamer.engines.runs import EngineRun, RunTarget, clear_run, mark_done, prepare
from streamer.engines.scorer import ArrowScorer, split_outcomes
from streamer.lake.places import catalog_properties, filesystem
from streamer.wiring.lake import BATCH_SIZE, Target

ENGINE = "ray"


def default_concurrency() -> int:
    """Scoring actors when ``--concurrency`` is not given: one per CPU of the cluster but one, so a
    CPU is left to the read and write tasks (actors holding every CPU would starve them)."""
    return max(1, int(ray.cluster_resources().get("CPU", 2)) - 1)


class Scoring:
    """An actor of the pool: one scorer, its model loaded on the first batch."""

    def __init__(self, scorer: ArrowScorer) -> None:
        self.scorer = scorer

    def __call__(self, batch: pa.Table) -> pa.Table:
        return self.scorer.outcomes(batch)


def _predictions(outcomes: pa.Table, schema: pa.Schema) -> pa.Table:
    return split_outcomes(outcomes, schema).predictions


def _rejects(outcomes: pa.Table, schema: pa.Schema) -> pa.Table:
    return split_outcomes(outcomes, schema).rejects


def score_dataset(ds: Dataset, cfg: Config, run_id: str, concurrency: int | None = None,
                  batch_size: int = BATCH_SIZE, scorer: ArrowScorer | None = None) -> tuple[Dataset, Dataset]:
    """``ds``'s predictions (the lake's prediction columns) and rejects (the rejects table's), each
    row scored once by an actor pool of ``concurrency`` scorers (None: :func:`default_concurrency`) in
    batches of ``batch_size`` rows. ``ds``'s rows may carry :data:`~streamer.engines.scorer.POSITION`
    columns (their places). ``scorer``: one built already (its model read on the driver), else a new one.

    Example::

        ds = ray.data.read_parquet("events/")
        predictions, rejects = score_dataset(ds, cfg, "nightly-1", concurrency=4)
        predictions.write_parquet("scores/")
    """
    scorer = scorer or ArrowScorer(cfg, run_id, batch_rows=batch_size)
    schema = scorer.schema  # the driver reads the model's outputs once; actors get the config alone (pickled)
    size = concurrency or default_concurrency()
    outcomes = ds.map_batches(Scoring, fn_constructor_args=(scorer,),
                              batch_format="pyarrow", batch_size=batch_size,
                              compute=ActorPoolStrategy(size=size), zero_copy_batch=True).materialize()
    # Each part materialized too: a write fused with its split would take the outcomes' schema for the
    # table's (Ray's write_iceberg evolves a table to its first input's schema).
    predictions = outcomes.map_batches(partial(_predictions, schema=schema), batch_format="pyarrow",
                                       batch_size=None).materialize()
    rejects = outcomes.map_batches(partial(_rejects, schema=schema), batch_format="pyarrow",
                                   batch_size=None).materialize()
    return predictions, rejects


@dataclass(frozen=True, slots=True)
class RayRun(EngineRun):
    """What a Ray run wrote, with its pool's size, and its summary lines."""

    concurrency: int | None = None

    def lines(self) -> list[str]:
        rows = self.predictions + self.rejects
        return [f"score {self.run_id} finished on ray into {self.target.name}",
                f"rows {rows} = predictions {self.predictions} + rejects {self.rejects}",
                f"{self.concurrency or 'default'} scoring actors, throughput {rows / max(self.seconds, 1e-9):,.0f} rows/s read, "
                f"scored and written, {self.seconds:.1f} s in all"]

    @property
    def all_rejected(self) -> bool:
        return self.predictions == 0 and self.rejects > 0

    @property
    def rejects_at(self) -> str:
        return self.target.rejects_at


def connect(address: str | None) -> None:
    """This process as a driver of the Ray cluster at ``address`` (``RAY_ADDRESS``, else a local
    one, when None); Ray's own logs kept to warnings."""
    if not ray.is_initialized():
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    ray.data.DataContext.get_current().enable_progress_bars = False


def run_ray(cfg: Config, location: str, target: Target, run_id: str, *, address: str | None = None,
            concurrency: int | None = None, batch_size: int = BATCH_SIZE, force: bool = False) -> RayRun:
    """Score every row of ``location`` (Parquet files, a folder, a table of the catalog) into
    ``target`` on the Ray cluster at ``address``, under ``run_id``."""
    started = time.monotonic()
    source, name = placed_source(cfg.lake, location)
    scorer = ArrowScorer(cfg, run_id, batch_rows=batch_size)
    scorer.check(location)
    run = prepare(cfg.lake, target, run_id, scorer.schema, force=force)  # a committed run id: refused before any work
    connect(address)
    concurrency = concurrency or default_concurrency()
    predictions, rejects = score_dataset(ray.data.read_datasource(source), cfg, run_id, concurrency, batch_size,
                                         scorer)
    counts = (predictions.count(), rejects.count())
    if run.table is not None:
        _write_tables(cfg.lake, run, predictions, rejects)
    else:
        _write_parquet(cfg.lake, run, predictions, rejects)
    return RayRun(run_id, name, run, counts[0], counts[1], time.monotonic() - started, concurrency)


def catalog_kwargs(lake: LakeConfig) -> dict[str, Any]:
    """pyiceberg's ``load_catalog`` keywords for the project's catalog (places.py's)."""
    return {"name": "streamer", "type": lake.catalog, **catalog_properties(lake)}


def _write_tables(lake: LakeConfig, run: RunTarget, predictions: Dataset, rejects: Dataset) -> None:
    """The rejects' commit, then the predictions' (the run's): each appends, or replaces the run's
    own rows where an earlier attempt of the run committed some."""
    from ray.data import SaveMode
    from ray.data.expressions import col

    kwargs = catalog_kwargs(lake)
    for ds, table in ((rejects, run.rejects_table), (predictions, run.table)):
        assert table is not None
        if run.replaces(table):
            ds.write_iceberg(table, catalog_kwargs=kwargs, snapshot_properties=run.summary(ENGINE),
                             mode=SaveMode.OVERWRITE, overwrite_filter=col("run_id") == run.run_id)
        else:
            ds.write_iceberg(table, catalog_kwargs=kwargs, snapshot_properties=run.summary(ENGINE))


def _write_parquet(lake: LakeConfig, run: RunTarget, predictions: Dataset, rejects: Dataset) -> None:
    """The run's folders written anew, each Hive-partitioned by day, ``_SUCCESS`` last."""
    clear_run(lake, run)
    for ds, place, stamp, day in ((rejects, run.rejects_parquet, "rejected_at", "rejected_date"),
                                  (predictions, run.parquet, "event_time", "event_date")):
        assert place is not None
        dated = ds.map_batches(partial(_with_day, stamp=stamp, day=day), batch_format="pyarrow", batch_size=None)
        fs, path = filesystem(lake, place)
        dated.write_parquet(path, partition_cols=[day], filesystem=fs)
    mark_done(lake, run)


def _with_day(table: pa.Table, stamp: str, day: str) -> pa.Table:
    """``table`` and its ``day`` column: the UTC date of ``stamp`` (the Hive partition's value)."""
    return table.append_column(day, pc.strftime(table.column(stamp), format="%Y-%m-%d"))
