"""Parquet files of one commit, one per event day, written as rows come and closed at a target size.

Rows are grouped by the UTC day of ``event_time`` and appended to that day's open file in row
groups of up to :data:`ROW_GROUP_ROWS` rows, or a quarter of the target size in memory (a reader
skips row groups by their statistics; many tiny ones cost it), so memory holds at most one row
group per open day, however long the run. A
file is *full* when the bytes written reach the target: the caller commits then, and a commit
closes every open file. The files' names are the caller's, decided before anything is written,
so a run that resumes after a crash writes the same names again over what was never committed.
With ``staged``, a file is written under its name plus that suffix and renamed when it closes:
a Parquet dataset's readers never see a file being written.

Worked example: a commit whose rows fall on 2026-12-01 and 2026-12-02 leaves two files,
``<folder>/<partition>=2026-12-01/<name>-0.parquet`` and ``.../<partition>=2026-12-02/<name>-0.parquet``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

ROW_GROUP_ROWS = 128 * 1024
MAX_OPEN_DAYS = 16  # a commit comes when this many days have files open: memory holds a row group each
_DAY_US = 86_400_000_000


@dataclass
class _Open:
    path: str
    stream: Any
    writer: pq.ParquetWriter
    pending: list[pa.Table] = field(default_factory=list)
    pending_rows: int = 0
    pending_bytes: int = 0


class DayFiles:
    """The open files of one commit in ``folder`` (of ``fs``), partitioned as ``<partition>=<day>``."""

    def __init__(self, fs: pafs.FileSystem, folder: str, schema: pa.Schema, target_bytes: int,
                 partition: str, name: Callable[[], str], time_column: str = "event_time", staged: str = "") -> None:
        self.fs, self.folder, self.schema, self.target = fs, folder, schema, target_bytes
        self.partition, self.name, self.time_column = partition, name, time_column
        self.staged = staged  # a suffix the files are written under, dropped when they close
        self._open: dict[int, _Open] = {}
        self._closed: list[str] = []
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        """Append ``table``'s rows to the files of their days (of its time column, a timestamp)."""
        if not table.num_rows:
            return
        days = pc.divide(table.column(self.time_column).cast(pa.int64()), _DAY_US).to_numpy()
        if (days == days[0]).all():
            self._add(int(days[0]), table)
        else:
            for day in np.unique(days).tolist():
                self._add(int(day), table.filter(pa.array(days == day)))
        self.rows += table.num_rows

    def full(self) -> bool:
        """A file reached the target size (or too many days are open): time to commit."""
        return len(self._open) >= MAX_OPEN_DAYS or any(f.stream.tell() >= self.target for f in self._open.values())

    def close(self) -> list[str]:
        """Close every file; the paths written since the last close, in the order they were opened."""
        for f in self._open.values():
            self._flush(f)
            f.writer.close()
            f.stream.close()
            if self.staged:
                self.fs.move(f.path + self.staged, f.path)
            self._closed.append(f.path)
        self._open.clear()
        done, self._closed, self.rows = self._closed, [], 0
        return done

    def _add(self, day: int, part: pa.Table) -> None:
        f = self._open.get(day)
        if f is None:
            text = (dt.date(1970, 1, 1) + dt.timedelta(days=day)).isoformat()
            folder = f"{self.folder}/{self.partition}={text}"
            self.fs.create_dir(folder, recursive=True)
            path = f"{folder}/{self.name()}.parquet"
            stream = self.fs.open_output_stream(path + self.staged)
            f = self._open[day] = _Open(path, stream, pq.ParquetWriter(stream, self.schema, compression="zstd"))
        f.pending.append(part)
        f.pending_rows += part.num_rows
        f.pending_bytes += part.nbytes
        if f.pending_rows >= ROW_GROUP_ROWS or f.pending_bytes >= self.target // 4:
            self._flush(f)

    @staticmethod
    def _flush(f: _Open) -> None:
        if f.pending_rows:
            f.writer.write_table(pa.concat_tables(f.pending), row_group_size=max(f.pending_rows, 1))
            f.pending.clear()
            f.pending_rows = f.pending_bytes = 0
