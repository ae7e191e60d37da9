"""The rows one snapshot of an Iceberg table appended, as a lake run's source partition; a table's snapshots, oldest first.

An ``append`` snapshot adds data files and removes none: the rows it appended are the rows of the
files it added (its manifests' entries ADDED by it), read as it wrote them: a later delete does not
take them back. A snapshot that overwrote, deleted or replaced rows is refused (ConfigError naming
``job.source.snapshot``): its rows are no increment of the table, and scoring them again would score
rows twice without a word.

The partition of a snapshot's rows is named ``<table>@+<snapshot>`` (``streamer.events@+4711``,
beside ``streamer.events@4711`` for the whole table as of that snapshot). Its positions are row
numbers over the added files in the order of their paths, so a resumed run skips the files it
finished and continues mid-snapshot.

Worked example: snapshot 7 appended ``a.parquet`` (300 rows) and ``b.parquet`` (200 rows). Its
partition ``streamer.events@+7`` holds positions ``[0, 500)``; a run stopped at 420 resumes in
``b.parquet`` at its row 120, and never opens ``a.parquet``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from streamer.config import LakeConfig
from streamer.errors import ConfigError
from streamer.lake.ancestry import SOURCE_SNAPSHOT, SOURCE_TABLE
from streamer.lake.places import identifier, open_catalog

APPEND = "append"
MARK = "@+"  # <table>@+<snapshot>: the rows that snapshot appended


@dataclass(frozen=True, slots=True)
class Appended:
    """A run's source: the rows snapshot ``snapshot`` of table ``table`` appended."""

    table: str
    snapshot: int


@dataclass(frozen=True, slots=True)
class TableSnapshot:
    """One snapshot of a table as a trigger sees it: its id, operation (``append``, ``overwrite``,
    ``delete``, ``replace``), when it was made, and the rows it added by its summary (0 unsaid)."""

    table: str
    snapshot_id: int
    operation: str
    timestamp_ms: int
    added_rows: int

    def source(self) -> Appended:
        return Appended(self.table, self.snapshot_id)


def a_or_an(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def load(lake: LakeConfig, name: str, key: str) -> Any:
    """The table ``name`` of the catalog; a ConfigError naming ``key`` when there is none."""
    from pyiceberg.exceptions import NoSuchTableError

    ident = identifier(lake, name, key)
    try:
        return open_catalog(lake).load_table(ident)
    except NoSuchTableError as exc:
        raise ConfigError(key, f"the catalog has no table {ident} ({exc})") from exc


def table_snapshots(lake: LakeConfig, name: str, key: str = "job.trigger.table") -> list[TableSnapshot]:
    """The snapshots of ``name`` in the ancestry of its current one (its ``main`` history), oldest
    first: a snapshot a rollback left behind is none of them."""
    from pyiceberg.table.snapshots import ancestors_of

    table = load(lake, name, key)
    ident = identifier(lake, name)
    out = []
    for snap in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snap.summary
        out.append(TableSnapshot(ident, snap.snapshot_id, _operation(snap), snap.timestamp_ms,
                                 int((summary.get("added-records") if summary is not None else None) or 0)))
    return out[::-1]


def _operation(snap: Any) -> str:
    return "unknown" if snap.summary is None else str(snap.summary.operation.value)


def files_nulls(schema: Any, tasks: Iterable[Any], path: str) -> bool:
    """Whether the data files of ``tasks`` (pyiceberg's scan tasks) count a null in the field of
    ``schema`` at ``path``, or in its list's items, by their statistics."""
    field = schema.find_field(path)
    ids = {field.field_id, getattr(field.field_type, "element_id", field.field_id)}  # a list: its items too
    return any((task.file.null_value_counts or {}).get(i, 0) for task in tasks for i in ids)


class AppendedRows:
    """The rows one append snapshot added: its data files, in the order of their paths."""

    def __init__(self, lake: LakeConfig, source: Appended) -> None:
        from pyiceberg.table import FileScanTask

        self.table = load(lake, source.table, "job.source.table")
        self.ident = identifier(lake, source.table)
        self.snapshot = source.snapshot
        self.name = f"{self.ident}{MARK}{source.snapshot}"
        snap = self.table.snapshot_by_id(source.snapshot)
        if snap is None:
            raise ConfigError("job.source.snapshot", f"table {self.ident} has no snapshot {source.snapshot} "
                                                     "(expired, or of another table)")
        operation = _operation(snap)
        if operation != APPEND:
            raise ConfigError("job.source.snapshot", f"snapshot {source.snapshot} of {self.ident} is "
                                                     f"{a_or_an(operation)}, not an append: its rows are no "
                                                     "increment of the table and are not scored as one; score "
                                                     "the table, or name an append snapshot")
        scan = self.table.incremental_append_scan(from_snapshot_id_exclusive=snap.parent_snapshot_id,
                                                  to_snapshot_id_inclusive=source.snapshot)
        # without delete files: the rows as the snapshot appended them
        self.tasks = sorted((FileScanTask(t.file) for t in scan.plan_files()), key=lambda t: str(t.file.file_path))

    def summary(self) -> dict[str, str]:
        """What each commit of a run of these rows records (ancestry.SOURCE_TABLE, SOURCE_SNAPSHOT)."""
        return {SOURCE_TABLE: self.ident, SOURCE_SNAPSHOT: str(self.snapshot)}

    def schema(self) -> pa.Schema:
        return self.table.schema().as_arrow()

    def rows(self) -> int:
        return sum(int(t.file.record_count) for t in self.tasks)

    def nulls(self, path: str) -> bool:
        """Whether the added files count a null in the field at ``path`` (or its list's items)."""
        return files_nulls(self.table.schema(), self.tasks, path)

    def batches(self, at: int, size: int) -> tuple[Iterator[pa.RecordBatch], int]:
        """Batches of up to ``size`` rows from the file that holds row ``at``, and that file's first row."""
        first, tasks = 0, list(self.tasks)
        while tasks and first + int(tasks[0].file.record_count) <= at:
            first += int(tasks.pop(0).file.record_count)
        return self._read(tasks, size), first

    def _read(self, tasks: list[Any], size: int) -> Iterator[pa.RecordBatch]:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan

        scan = ArrowScan(self.table.metadata, self.table.io, self.table.schema(), AlwaysTrue())
        for task in tasks:  # one file at a time: memory holds one file's batches
            for batch in scan.to_record_batches([task]):
                for start in range(0, batch.num_rows, size):
                    yield batch.slice(start, size)
