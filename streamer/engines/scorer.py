"""One Arrow batch in, its predictions and rejects out: the lake's scoring of a table's rows as one picklable object, for engines that run it on many machines.

``streamer score`` reads a table through :func:`streamer.lake.table.table_rows` (the stream's
contract, conversion table, nulls and fills, ``output.include``) and scores it with one model's
serving (breaker, fallback, the version and digest in each row) into the lake's prediction
columns. :class:`ArrowScorer` is that path with no source and no sink: an engine (Spark's
``mapInArrow``, Ray Data's ``map_batches``) hands it record batches and writes what it returns.
It pickles as its config and run id; each worker (an executor's Python worker, a Ray actor) loads
the model once, on its first batch. Its rows equal ``streamer score``'s on the same rows, but
for the run's own stamps (``run_id``, ``scored_at``, ``rejected_at``).

Where a row was read travels with it in the optional :data:`POSITION` columns (its file, the
file's number, the row's number in it), which the scorer drops before the contract sees the
row; without them a batch's rows are numbered from 0 in a source named ``label``.

Engines that yield one schema per batch take :meth:`ArrowScorer.outcomes`: the prediction columns
(each nullable) and one more, :data:`REJECT` (a struct of the rejects table's fields), set on the
rows that are rejects and null on the predictions; :func:`split_outcomes` parts them again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamer.config import Config
from streamer.lake.arrow_fields import ArrowFields
from streamer.lake.columns import REJECTS, rejects_table
from streamer.lake.run import Predictions
from streamer.lake.table import Positions, TableSource, table_rows
from streamer.pipeline.validate import EventValidator
from streamer.wiring.lake import BATCH_SIZE, lake_house

# Optional columns that say where each row was read: its file (or table), the file's number in
# the source, the row's number in the file. Dropped before scoring; absent, a batch's rows are
# numbered from 0.
POSITION = ("_streamer_source", "_streamer_partition", "_streamer_row")
REJECT = "_streamer_reject"  # the outcomes' column of rejects (a struct of the rejects table's fields)


@dataclass(frozen=True, slots=True)
class Scored:
    """A batch's predictions (the lake's prediction columns) and rejects (the rejects table's)."""

    predictions: pa.Table
    rejects: pa.Table


class _Loaded:
    """What a worker scores with, built once on its first batch."""

    def __init__(self, cfg: Config, run_id: str) -> None:
        house = lake_house(cfg)
        contract = house.model.contract
        self.cfg, self.contract = house.cfg, contract
        self.schema = house.columns.schema
        self.validator = EventValidator(house.cfg.input, contract, house.cfg.output.include)
        self.stack = contract.stack
        self.fast = ArrowFields.compile(house.cfg.input, contract, house.cfg.output.include)
        self.predictions = Predictions(house.model.serving, house.columns, run_id)
        self.predictions.warm_up()


class ArrowScorer:
    """The lake's scoring of a table's rows, batch by batch, under one run id. ``cfg``: the run's
    config (its model paths are made absolute here, where the config was read); ``label``: the
    source a batch without :data:`POSITION` columns names."""

    def __init__(self, cfg: Config, run_id: str, *, batch_rows: int = BATCH_SIZE, label: str = "table") -> None:
        model = cfg.model
        self.cfg = replace(cfg, model=replace(model, path=Path(model.path).resolve(),
                                              fallback_path=None if model.fallback_path is None
                                              else Path(model.fallback_path).resolve()))
        self.run_id, self.batch_rows, self.label = run_id, batch_rows, label
        self._loaded: _Loaded | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"cfg": self.cfg, "run_id": self.run_id, "batch_rows": self.batch_rows, "label": self.label}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.cfg, self.run_id = state["cfg"], state["run_id"]
        self.batch_rows, self.label = state["batch_rows"], state["label"]
        self._loaded = None

    @property
    def loaded(self) -> _Loaded:
        """The model and contract, loaded on first use (once per worker)."""
        if self._loaded is None:
            self._loaded = _Loaded(self.cfg, self.run_id)
        return self._loaded

    def check(self, location: str, key: str = "--from") -> None:
        """Refuse a source (Parquet files, a table of the catalog) whose columns the model's inputs
        cannot read, before any row is scored: ConfigError naming the input and the column, as
        ``streamer score`` refuses it."""
        loaded = self.loaded
        source = TableSource(loaded.cfg.lake, location, loaded.validator, loaded.stack, self.batch_rows, None, key)
        source.check(loaded.contract)

    @property
    def schema(self) -> pa.Schema:
        """The predictions' Arrow schema (the lake's prediction columns)."""
        return self.loaded.schema

    @property
    def outcome_schema(self) -> pa.Schema:
        """:meth:`outcomes`' schema: every prediction column nullable, and :data:`REJECT`."""
        return outcome_schema(self.schema)

    def score(self, batch: pa.RecordBatch | pa.Table) -> Scored:
        """``batch``'s predictions and rejects, in the order of its rows; one model call per
        ``batch_rows`` rows."""
        loaded = self.loaded
        tables, rejects = [], []
        for part in _parts(batch, self.batch_rows):
            at, part = self._positions(part)
            rows, refused = table_rows(part, at, loaded.validator, loaded.stack, loaded.fast)
            table, failed = loaded.predictions.score(rows) if len(rows) else (loaded.schema.empty_table(), [])
            tables.append(table)
            rejects.extend(refused + failed)
        predictions = pa.concat_tables(tables) if tables else loaded.schema.empty_table()
        return Scored(predictions, rejects_table(self.run_id, rejects))

    def outcomes(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        """:meth:`score`'s predictions and rejects as one table of :attr:`outcome_schema`."""
        scored = self.score(batch)
        return join_outcomes(self.outcome_schema, scored)

    def _positions(self, batch: pa.RecordBatch) -> tuple[Positions, pa.RecordBatch]:
        names = batch.schema.names
        n = batch.num_rows
        if POSITION[0] not in names:
            return Positions([self.label] * n, np.zeros(n, np.int64), np.arange(n, dtype=np.int64)), batch
        source, part, row = (batch.column(names.index(c)) for c in POSITION)
        keep = [i for i, name in enumerate(names) if name not in POSITION]
        at = Positions([str(s) for s in source.to_pylist()],
                       np.asarray(part.cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64),
                       np.asarray(row.cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64))
        return at, batch.select(keep)


def _parts(batch: pa.RecordBatch | pa.Table, rows: int) -> Iterator[pa.RecordBatch]:
    """``batch`` in record batches of at most ``rows`` rows."""
    batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
    for b in batches:
        for start in range(0, b.num_rows, rows):
            yield b.slice(start, rows)


def outcome_schema(predictions: pa.Schema) -> pa.Schema:
    """The predictions' fields, each nullable, and :data:`REJECT`: a struct of the rejects table's."""
    return pa.schema([f.with_nullable(True) for f in predictions]
                     + [pa.field(REJECT, pa.struct(list(REJECTS)), nullable=True)])


def join_outcomes(schema: pa.Schema, scored: Scored) -> pa.Table:
    """A batch's predictions then its rejects, as rows of ``schema`` (:func:`outcome_schema`)."""
    p, r = scored.predictions.num_rows, scored.rejects.num_rows
    columns = []
    for field in schema:
        if field.name == REJECT:
            rejects = pa.StructArray.from_arrays(
                [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in scored.rejects.columns],
                fields=list(REJECTS))
            columns.append(pa.concat_arrays([pa.nulls(p, field.type), rejects]))
        else:
            column = scored.predictions.column(field.name).combine_chunks()
            columns.append(pa.concat_arrays([column, pa.nulls(r, field.type)]))
    return pa.Table.from_arrays(columns, schema=schema)


def split_outcomes(outcomes: pa.Table, predictions: pa.Schema) -> Scored:
    """:func:`join_outcomes` undone: the predictions as ``predictions``' rows, and the rejects."""
    reject = outcomes.column(REJECT)
    is_reject = reject.is_valid()
    preds = outcomes.filter(pc.invert(is_reject)).select(predictions.names).cast(predictions)
    flat = outcomes.filter(is_reject).column(REJECT).combine_chunks()
    rejects = pa.Table.from_arrays([flat.field(f.name) for f in REJECTS], schema=REJECTS) if len(flat) else \
        REJECTS.empty_table()
    return Scored(preds, rejects)
