"""A table's rows as a Ray Dataset, each row with its place: Parquet files read row group by row group, with the POSITION columns ``streamer score`` would give them.

Ray Data's ``read_parquet`` can add each row's file (``include_paths``) but not its number in the
file (``include_row_hash`` hashes it), so :class:`PlacedParquet` is a datasource of its own: one
read task per run of whole row groups of a file, each block carrying
:data:`~streamer.engines.scorer.POSITION` (the file as ``streamer score`` names it, the file's
number in the sorted file list of :func:`streamer.lake.table.parquet_files`, the row's number in
the file). With them an engine run's rows equal ``streamer score``'s but for the run's stamps.

An Iceberg table (``--from NAME``) is read as its current snapshot's data files, each a run of
row groups numbered on from the rows of the files before it, in the order the table's scan plans
them: its rows take the places ``streamer score`` gives them, one partition named
``<namespace.table>@<snapshot id>``. A snapshot with delete files is refused (its rows are not
its files' rows); ``streamer score`` reads one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from streamer.config import LakeConfig
from streamer.engines.scorer import POSITION
from streamer.errors import ConfigError
from streamer.lake.places import filesystem, identifier, open_catalog
from streamer.lake.table import parquet_files

GROUPS_PER_TASK = 4  # row groups a read task takes: blocks of a few 65,536-row groups


@dataclass(frozen=True, slots=True)
class Piece:
    """Row groups ``groups`` of one file: its name (``source``), partition and the row number of
    its first row (in the file, or in the table's scan)."""

    path: str  # where the file is read (a local path or ``bucket/key``)
    source: str
    partition: int
    first: int
    groups: tuple[int, ...]
    rows: int
    size_bytes: int


class PlacedParquet(Datasource):
    """The pieces of a source, read with their POSITION columns. ``lake``: where the files are."""

    def __init__(self, lake: LakeConfig, pieces: list[Piece]) -> None:
        self.lake, self.pieces = lake, pieces

    def estimate_inmemory_data_size(self) -> int | None:
        return sum(p.size_bytes for p in self.pieces)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        lake = self.lake
        return [ReadTask(partial(read_piece, lake, piece),
                         BlockMetadata(num_rows=piece.rows, size_bytes=piece.size_bytes, exec_stats=None,
                                       input_files=(piece.path,)),
                         per_task_row_limit=per_task_row_limit)
                for piece in self.pieces]


def read_piece(lake: LakeConfig, piece: Piece) -> list[pa.Table]:
    """One piece's rows, with their places (a read task's blocks: one)."""
    fs, path = filesystem(lake, piece.path)
    with fs.open_input_file(path) as f:
        table = pq.ParquetFile(f).read_row_groups(list(piece.groups))
    n = table.num_rows
    return [table.append_column(POSITION[0], pa.array([piece.source] * n, pa.string()))
            .append_column(POSITION[1], pa.array(np.full(n, piece.partition, np.int64)))
            .append_column(POSITION[2], pa.array(np.arange(piece.first, piece.first + n, dtype=np.int64)))]


def _pieces_of(fs: pafs.FileSystem, path: str, read_as: str, source: str, partition: int, first: int) -> list[Piece]:
    """A file's runs of :data:`GROUPS_PER_TASK` row groups (read at ``read_as``), numbered from ``first``."""
    with fs.open_input_file(path) as f:
        meta = pq.ParquetFile(f).metadata
    out, group = [], 0
    while group < meta.num_row_groups:
        groups = tuple(range(group, min(group + GROUPS_PER_TASK, meta.num_row_groups)))
        rows = sum(meta.row_group(g).num_rows for g in groups)
        size = sum(meta.row_group(g).total_byte_size for g in groups)
        out.append(Piece(read_as, source, partition, first, groups, rows, size))
        first += rows
        group = groups[-1] + 1
    return out


def placed_source(lake: LakeConfig, location: str) -> tuple[PlacedParquet, str]:
    """``--from``'s rows (Parquet files, a folder of them, or a table of the catalog) as a
    datasource, and what the run's summary names as its source."""
    found = parquet_files(lake, location, "--from")
    if found is not None:
        fs, files = found
        remote = location.startswith("s3://")  # read as an s3:// URL; named as streamer score names it
        pieces = [p for i, f in enumerate(files) for p in _pieces_of(fs, f, f"s3://{f}" if remote else f, f, i, 0)]
        return PlacedParquet(lake, pieces), location
    from pyiceberg.exceptions import NoSuchTableError

    ident = identifier(lake, location, "--from")
    try:
        table = open_catalog(lake).load_table(ident)
    except NoSuchTableError as exc:
        raise ConfigError("--from", f"{location!r} is no file or folder here, nor a table of the catalog "
                                    f"({exc})") from exc
    snap = table.current_snapshot()
    name = f"{ident}@{snap.snapshot_id if snap else 0}"
    pieces = []
    first = 0
    for task in (table.scan(snapshot_id=snap.snapshot_id).plan_files() if snap else []):
        if task.delete_files:
            raise ConfigError("--from", f"{ident}'s snapshot has delete files: its rows are not its data files' "
                                        "rows; score it with streamer score")
        fs, path = filesystem(lake, task.file.file_path)
        pieces.extend(_pieces_of(fs, path, task.file.file_path, name, 0, first))
        first += task.file.record_count
    return PlacedParquet(lake, pieces), name
