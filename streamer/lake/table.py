"""A table's rows as a lake run's source (``streamer score``, a job): Parquet files, a dataset, an Iceberg table, or the rows one of its snapshots appended.

Rows are read batch by batch through Arrow (memory holds one batch, however large the input),
and each goes through the stream's contract and validation (``model.inputs``, ``output.include``,
the id, entity and time fields): a row that fails is a reject with its reason and the row itself,
as JSON. Positions are row numbers: each Parquet file is a partition of the source (its index in
the sorted file list, or of the list a job names), an Iceberg table's snapshot one partition, and
the rows a snapshot appended one partition too (appends.py), so a run resumes mid-file.
Timestamps are read as milliseconds, as an event's ``event_time`` is. Before the first row,
:meth:`TableSource.check` reads each file's schema (an Iceberg table's) and refuses what would
reject every row (arrow_fields.check_schema); whether a nullable column holds nulls is read from
the files' statistics (Parquet's null counts, Iceberg's), never from the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from streamer.config import LakeConfig
from streamer.errors import ConfigError, RecordError, detach
from streamer.kafka.ranges import Ranges
from streamer.lake.appends import MARK, Appended, AppendedRows, files_nulls
from streamer.lake.arrow_fields import ArrowFields, check_schema
from streamer.lake.columns import as_json
from streamer.lake.places import filesystem, identifier, open_catalog
from streamer.lake.run import Chunk
from streamer.lake.sink import Resume
from streamer.model.contract import Contract
from streamer.model.signature import Columns
from streamer.pipeline.records import Messages, Origin, Rows
from streamer.pipeline.stages import Reject
from streamer.pipeline.validate import EventValidator

# Where a run's rows are: a Parquet file or folder, or a table's name (``--from``); the rows one
# snapshot of a table appended; a list of Parquet files (a job's ``source: {parquet: [...]}``).
Where = str | Appended | Sequence[str]



def parquet_files(lake: LakeConfig, location: str, key: str) -> tuple[pafs.FileSystem, list[str]] | None:
    """The Parquet files ``location`` names (a file, or a folder's files, sorted, less those under
    ``_`` or ``.`` names) and their filesystem; None when it names no file or folder (a table's
    name). ConfigError on ``key`` when the path is missing or holds no Parquet file."""
    if not ("/" in location or location.endswith(".parquet") or Path(location).exists()):
        return None
    fs, path = filesystem(lake, location)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise ConfigError(key, f"no file or folder at {location}")
    if info.type == pafs.FileType.File:
        return fs, [path]
    found = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    files = sorted(f.path for f in found if f.type == pafs.FileType.File and f.path.endswith(".parquet")
                   and not any(part.startswith(("_", ".")) for part in f.path[len(path):].split("/")))
    if not files:
        raise ConfigError(key, f"no Parquet files under {location}")
    return fs, files

@dataclass(frozen=True, slots=True)
class TableRow:
    """A table row as the origin of a row (records.Origin): its file and row number, and the row as
    JSON bytes (built only when asked for: a reject's original)."""

    source: str
    index: int
    row: int
    batch: pa.RecordBatch
    at: int  # the row's place in ``batch``

    def topic(self) -> str:
        return self.source

    def partition(self) -> int:
        return self.index

    def offset(self) -> int:
        return self.row

    def key(self) -> None:
        return None

    def payload(self) -> dict[str, Any]:
        return dict(self.batch.slice(self.at, 1).to_pylist()[0])

    def value(self) -> bytes:
        return as_json(self.payload())

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)


class TableSource:
    """The rows of ``location``: a Parquet file or folder (local or ``s3://``), or an Iceberg table's
    name; the rows one snapshot appended; a list of Parquet files. ``key``: what a refusal of a file
    or table names."""

    def __init__(self, lake: LakeConfig, location: Where, validator: EventValidator,
                 stack: Callable[[list[Any]], Columns], batch_rows: int, fast: ArrowFields | None = None,
                 key: str = "--from") -> None:
        self.lake, self.batch_rows, self.key = lake, batch_rows, key
        self.validator, self.stack = validator, stack
        self.fast = fast
        self._footers: dict[str, pq.FileMetaData] = {}
        self.summary: dict[str, str] = {}  # what the sink records in each commit (appends.py)
        if isinstance(location, Appended):
            appended = AppendedRows(lake, location)
            self.location, self.summary = appended.name, appended.summary()
            self._parts: list[tuple[str, Any]] = [(appended.name, appended)]
        elif isinstance(location, str):
            self.location = location
            self._parts = self._find()
        else:
            self.location = ", ".join(location)
            self._parts = self._files(list(location))

    def _files(self, locations: list[str]) -> list[tuple[str, Any]]:
        """A list of Parquet files, each a partition as a folder's files are, in the list's order."""
        if not locations:
            raise ConfigError(self.key, "names no file")
        parts = []
        for location in locations:
            fs, path = filesystem(self.lake, location)
            if fs.get_file_info(path).type != pafs.FileType.File:
                raise ConfigError(self.key, f"no file at {location}")
            parts.append((path, (fs, path)))
        if len({name for name, _ in parts}) < len(parts):
            raise ConfigError(self.key, "names a file twice: its rows would be scored twice")
        return parts

    def _find(self) -> list[tuple[str, Any]]:
        """``(name, how to read it)`` per partition of the source."""
        found = parquet_files(self.lake, self.location, self.key)
        if found is not None:
            fs, files = found
            return [(f, (fs, f)) for f in files]
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = open_catalog(self.lake).load_table(identifier(self.lake, self.location, self.key))
        except NoSuchTableError as exc:
            raise ConfigError(self.key, f"{self.location!r} is no file or folder here, nor a table of the "
                                        f"catalog ({exc})") from exc
        snap = table.current_snapshot()
        return [(f"{identifier(self.lake, self.location)}@{snap.snapshot_id if snap else 0}", table)]

    def check(self, contract: Contract) -> None:
        """Refuse a source the model's inputs cannot read (ConfigError naming the key and the column)."""
        for name, how in self._parts:
            if isinstance(how, tuple):
                meta = self._meta(how)
                check_schema(meta.schema.to_arrow_schema(), contract, how[1], partial(_parquet_nulls, meta))
            elif isinstance(how, AppendedRows):
                check_schema(how.schema(), contract, name, how.nulls)
            else:
                check_schema(how.schema().as_arrow(), contract, identifier(self.lake, self.location),
                             partial(_iceberg_nulls, how))

    def _meta(self, how: tuple[Any, str]) -> pq.FileMetaData:
        """A Parquet file's footer, read once."""
        if how[1] not in self._footers:
            fs, path = how
            with fs.open_input_file(path) as f:
                self._footers[path] = pq.ParquetFile(f).metadata
        return self._footers[how[1]]

    def plan(self) -> Ranges:
        """Every row of the source: ``[0, rows)`` per partition."""
        out: Ranges = {}
        for i, (name, how) in enumerate(self._parts):
            out[(name, i)] = (0, self._count(how))
        return out

    def _count(self, how: Any) -> int:
        if isinstance(how, tuple):
            return int(self._meta(how).num_rows)
        if isinstance(how, AppendedRows):
            return how.rows()
        snap = how.current_snapshot()
        return 0 if snap is None else int(how.scan(snapshot_id=snap.snapshot_id).count())  # deletes applied

    def chunks(self, resume: Resume) -> Iterator[Chunk]:
        """The rows of the run's plan: the files, or the table snapshot, it was planned on (a resumed
        run reads what it started on, whatever was added since)."""
        for (name, i), (start, end) in sorted(resume.bounds.items(), key=lambda item: item[0][1]):
            at = max(resume.reached.get((name, i), start), start)
            if at >= end:
                continue
            batches, row = self._batches(name, at)
            for batch in batches:
                first, row = row, row + batch.num_rows
                if row <= at:
                    continue
                if first < at:
                    batch = batch.slice(at - first)
                    first = at
                yield self._chunk(name, i, first, batch)

    def _batches(self, name: str, at: int) -> tuple[Iterator[pa.RecordBatch], int]:
        """A partition's batches from the row group that holds row ``at`` (a Parquet file; a table's
        snapshot from its first row), and the row number of the first."""
        parts = dict(self._parts)
        if name in parts and isinstance(parts[name], AppendedRows):
            return parts[name].batches(at, self.batch_rows)
        if name in parts and isinstance(parts[name], tuple):
            fs, path = parts[name]
            file = pq.ParquetFile(fs.open_input_file(path))
            first, group = 0, 0
            meta = file.metadata
            while group < meta.num_row_groups and first + meta.row_group(group).num_rows <= at:
                first += meta.row_group(group).num_rows
                group += 1
            return file.iter_batches(self.batch_rows, row_groups=range(group, meta.num_row_groups)), first
        if MARK in name:  # the rows of a snapshot the run was planned on, asked of another source
            raise ConfigError(self.key, f"{name} was planned for this run, which reads {self.location}")
        ident, _, snapshot = name.rpartition("@")
        if not ident or not snapshot.isdigit():  # a file of the plan that is not there any more
            raise ConfigError(self.key, f"{name} was planned for this run and is gone")
        table = open_catalog(self.lake).load_table(ident)
        if not int(snapshot):
            return iter(()), 0
        return iter(table.scan(snapshot_id=int(snapshot)).to_arrow_batch_reader()), 0

    def _chunk(self, name: str, index: int, first: int, batch: pa.RecordBatch) -> Chunk:
        n = batch.num_rows
        at = Positions([name] * n, np.full(n, index, np.int64), np.arange(first, first + n, dtype=np.int64))
        rows, rejects = table_rows(batch, at, self.validator, self.stack, self.fast)
        return Chunk(rows, rejects, {(name, index): first + n})


@dataclass(frozen=True, slots=True)
class Positions:
    """Where each row of a batch was read: its file (or table snapshot), that file's partition
    number and the row's number in it; the coordinates its prediction or reject carries."""

    sources: list[str]
    partitions: np.ndarray  # int64
    rows: np.ndarray  # int64


def table_rows(batch: pa.RecordBatch, at: Positions, validator: EventValidator,
               stack: Callable[[list[Any]], Columns], fast: ArrowFields | None) -> tuple[Rows, list[Reject]]:
    """A batch of a table's rows through the stream's contract: the rows that pass, in order,
    and a reject (its reason, the row itself) for each that does not. ``at``: each row's place."""
    batch = _millis(batch)
    n = batch.num_rows
    items = [TableRow(at.sources[j], int(at.partitions[j]), int(at.rows[j]), batch, j) for j in range(n)]
    parts: list[Rows] = []
    order: list[np.ndarray] = []
    slow = np.arange(n)
    if fast is not None:
        cols = fast.decode(batch)
        parts.append(Rows(_messages([items[j] for j in cols.rows.tolist()]), cols.event_ids,
                          cols.entity_ids, cols.event_times, cast(Columns, cols.features), cols.passthrough))
        order.append(cols.rows)
        slow = cols.fallback
    good: list[int] = []
    records = []
    rejects: list[Reject] = []
    for j in slow.tolist():
        m = items[j]
        try:
            records.append(validator.to_record(m.payload(), m.source, m.index, m.row, None, 0))
        except RecordError as exc:
            rejects.append((detach(exc), m))
            continue
        good.append(j)
    order.append(np.array(good, np.intp))
    parts.append(Rows.from_records(records, _messages([items[j] for j in good]), stack))
    rows = parts[0] if len(parts) == 1 else Rows.join(parts).take(np.argsort(np.concatenate(order), kind="stable"))
    return rows, rejects


def _messages(items: list[TableRow]) -> Messages:
    return Messages(list[Origin](items), [m.source for m in items], np.array([m.index for m in items], np.int64),
                    np.array([m.row for m in items], np.int64))


def _parquet_nulls(meta: pq.FileMetaData, path: str) -> bool:
    """Whether a row group's statistics count a null in the column at ``path`` (its leaves)."""
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        for c in range(row_group.num_columns):
            column = row_group.column(c)
            if column.path_in_schema == path or column.path_in_schema.startswith(f"{path}."):
                stats = column.statistics
                if stats is not None and stats.has_null_count and stats.null_count:
                    return True
    return False


def _iceberg_nulls(table: Any, path: str) -> bool:
    """Whether the table's data files count a null in the field at ``path`` (or its list's items)."""
    snap = table.current_snapshot()
    if snap is None:
        return False
    return files_nulls(table.schema(), table.scan(snapshot_id=snap.snapshot_id).plan_files(), path)


def _millis(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Timestamp columns as integers of milliseconds (an event's times are)."""
    cols = [c.cast(pa.timestamp("ms", tz=c.type.tz)).cast(pa.int64()) if pa.types.is_timestamp(c.type) else c
            for c in batch.columns]
    return pa.RecordBatch.from_arrays(cols, names=batch.schema.names)
