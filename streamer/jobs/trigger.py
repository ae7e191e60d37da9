"""What new data a trigger makes jobs of: a source table's unscored append snapshots, a folder's complete new Parquet files.

Pure functions of the lake (no Kafka): ``streamer jobs watch`` submits a job per increment under an
id made from it, so an increment submitted twice is scored once.

- A table trigger reads the source table's history (the ancestry of its current snapshot) against
  what the target's own history says was scored (``streamer.source-snapshot`` in the summaries of
  its runs' commits, a run counted once it covered its whole plan). Each ``append`` not scored is
  an increment, its job ``<name>-s<snapshot>``. A snapshot that overwrote or deleted rows after the
  last scored one is reported and skipped: its rows are not rescored without a job of their own.
- A folder trigger takes the Parquet files under the folder that it has not seen and that are
  complete: their folder (or one above it, up to the trigger's) holds a ``_SUCCESS``, or the file is
  whole by itself (``PAR1`` at both ends and a footer that parses: a writer still writing has none).
  Its job is ``<name>-f<the first 12 hex digits of the SHA-256 of the sorted paths, one a line>``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from streamer.config import LakeConfig
from streamer.lake.ancestry import scored_sources
from streamer.lake.appends import APPEND, TableSnapshot, a_or_an, table_snapshots
from streamer.lake.places import filesystem, identifier, open_catalog

MAGIC = b"PAR1"
SUCCESS = "_SUCCESS"


def snapshot_job_id(name: str, snapshot: int) -> str:
    """The id of a table trigger's job for one snapshot: ``nightly-s4711``."""
    return f"{name}-s{snapshot}"


def folder_job_id(name: str, files: Iterable[str]) -> str:
    """The id of a folder trigger's job for these files, whatever their order: ``nightly-f3a7bd3e5f0c1``."""
    digest = hashlib.sha256("\n".join(sorted(files)).encode()).hexdigest()
    return f"{name}-f{digest[:12]}"


def scored_snapshots(lake: LakeConfig, target_table: str) -> set[int]:
    """The source snapshots the target table's history says were scored (none: no table yet)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = open_catalog(lake).load_table(identifier(lake, target_table, "job.target.table"))
    except NoSuchTableError:
        return set()
    return scored_sources(table)


def table_increments(lake: LakeConfig, table: str, scored: set[int]) -> tuple[list[TableSnapshot], list[str]]:
    """The append snapshots of ``table`` not in ``scored``, oldest first; and a report line for each
    snapshot that is no append and came after the last scored one (those before were reported when
    they were new)."""
    snapshots = table_snapshots(lake, table)
    last = max((i for i, s in enumerate(snapshots) if s.snapshot_id in scored), default=-1)
    todo, report = [], []
    for i, snap in enumerate(snapshots):
        if snap.operation == APPEND:
            if snap.snapshot_id not in scored:
                todo.append(snap)
        elif i > last:
            report.append(_skipped(snap))
    return todo, report


def _skipped(snap: TableSnapshot) -> str:
    what = f"snapshot {snap.snapshot_id} of {snap.table} is {a_or_an(snap.operation)}"
    if snap.operation == "replace":  # Iceberg's replace rewrites files, its rows unchanged (a compaction)
        return f"{what} (its files rewritten, its rows the same): nothing to score"
    return f"{what}: its rows were not scored again; score them with a job of their own"


def complete_files(lake: LakeConfig, folder: str, seen: set[str]) -> list[str]:
    """The complete Parquet files under ``folder`` (local or ``s3://``) not in ``seen``, sorted; names
    starting with ``_`` or ``.`` (and what is under them) skipped, as a folder source skips them.
    Paths are as a job's ``source: {parquet: [...]}`` takes them: absolute, or ``s3://bucket/key``."""
    fs, root = filesystem(lake, folder)
    scheme = "s3://" if folder.startswith("s3://") else ""
    found = [f for f in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
             if f.type == pafs.FileType.File]
    done = {f.path.rpartition("/")[0] for f in found if f.base_name == SUCCESS}
    out = []
    for info in found:
        inside = info.path[len(root):].lstrip("/")
        if not info.path.endswith(".parquet") or any(part.startswith(("_", ".")) for part in inside.split("/")):
            continue
        name = scheme + info.path
        if name not in seen and (_under(info.path, root, done) or whole(fs, info.path, info.size)):
            out.append(name)
    return sorted(out)


def _under(path: str, root: str, done: set[str]) -> bool:
    """``path``'s folder, or one above it up to ``root``, holds a ``_SUCCESS``."""
    folder = path.rpartition("/")[0]
    while True:
        if folder in done:
            return True
        if len(folder) <= len(root):
            return False
        folder = folder.rpartition("/")[0]


def whole(fs: pafs.FileSystem, path: str, size: int | None) -> bool:
    """A Parquet file its writer finished: ``PAR1`` at both ends, and its footer parses."""
    if size is None or size < 2 * len(MAGIC) + 4:
        return False
    try:
        with fs.open_input_file(path) as f:
            head = f.read_at(len(MAGIC), 0)
            tail = f.read_at(len(MAGIC), size - len(MAGIC))
            if head != MAGIC or tail != MAGIC:
                return False
            pq.ParquetFile(f)  # the footer: its length and its metadata
    except (OSError, pa.ArrowException):
        return False
    return True
