"""A Parquet dataset as a run's sink: Hive-partitioned by event date, with a commit log and ``_SUCCESS``.

Layout under PATH (a folder or ``s3://bucket/prefix``)::

    event_date=2026-12-01/<run>-<shard>-<commit>-<n>.parquet   the predictions
    _streamer/<run>/<shard>/plan.json                           the run's bounds
    _streamer/<run>/<shard>/<commit>.json                       a commit: its files, the range it covers (and
                                                                its source's table and snapshot, when it has them)
    _SUCCESS                                                    written last, by the last shard to finish

File names are fixed by run, shard and commit number, and a commit is its log entry, written
after its files: a run that starts again with the same id reads its entries, deletes the files
no entry names (a crash's), and writes the rest under the same names, so it never appends twice.
A shard has one writer: a commit is refused (StaleCommitError) before its files are renamed into
the dataset when the shard's latest entry is not the one this writer continued from, and a
writer's files in progress carry its own id, so that a second writer never writes into them.
Rows that could not be scored go to a dataset of their own beside it, ``PATH_rejects``
(``rejected_date=.../*.parquet``). Readers that honour ``_SUCCESS`` (Spark, Hadoop tools) read a finished dataset; DuckDB and
pandas read ``PATH/**/*.parquet``.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from streamer.config import LakeConfig
from streamer.errors import ConfigError, ReplayFinishedError, StaleCommitError
from streamer.kafka.ranges import Ranges
from streamer.lake.columns import REJECTS
from streamer.lake.files import DayFiles
from streamer.lake.places import filesystem
from streamer.lake.sink import FilesSink, Resume, Shard, ranges_of, ranges_text
from streamer.pipeline.records import Partition

log = logging.getLogger(__name__)
LOG = "_streamer"
STAGED = ".inprogress"  # a file being written: readers of *.parquet skip it; renamed when its commit comes
ENTRY = re.compile(r"(\d{6})\.json")  # a commit's log entry: its number


class ParquetSink(FilesSink):
    """Writes a run's predictions as a Parquet dataset at ``location``."""

    def __init__(self, lake: LakeConfig, location: str, schema: pa.Schema,
                 summary: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.summary = dict(summary or {})  # in every commit's log entry, as "source"
        self.fs, self.root = filesystem(lake, location)
        self.name = f"parquet {location}"
        self.schema, self.target = schema, lake.target_file_mb * 1024 * 1024

    def resume(self, run_id: str, shard: Shard, plan: Ranges | None, force: bool) -> Resume:

        self._run, self._shard = run_id, shard
        folder = f"{self.root}/{LOG}/{run_id}/{shard}"
        if force:  # the log first: a crash midway leaves files no entry names, deleted when it runs again
            self._delete([], folder)
            self._delete(self._run_files(), None)
        saved = self._read(f"{folder}/plan.json")
        if saved is None:
            if plan is None:
                raise ConfigError("--run-id", f"run {run_id!r} has no saved plan in {self.name}")
            self.fs.create_dir(folder, recursive=True)
            self._write(f"{folder}/plan.json", ranges_text(plan).encode())
            bounds = plan
        else:
            bounds = ranges_of(saved.decode())
        entries = self._entries(folder)
        resume = Resume(bounds, _reached(entries), len(entries))
        if saved is not None and resume.done:
            w = entries[-1].get("written", (0, 0)) if entries else (0, 0)
            raise ReplayFinishedError(f"run {run_id!r} (shard {shard}) already finished into {self.name}; "
                                      "pass --force to run it again", self.name,
                                      (int(w[0]), int(w[1]), sum(e - s for s, e in bounds.values())), self.rejects_at)
        committed = {f for e in entries for f in e["files"]}
        self._delete([f for f in self._run_files() if f not in committed], None)  # a crash's files
        self._seq = resume.seq
        w = entries[-1].get("written", (0, 0)) if entries else (0, 0)
        self.committed_rows = (int(w[0]), int(w[1]))
        staged = f".{uuid.uuid4().hex[:8]}{STAGED}"  # this writer's own
        self._files = DayFiles(self.fs, self.root, self.schema, self.target, "event_date", self._name, staged=staged)
        self._rejected = DayFiles(self.fs, f"{self.root}_rejects", REJECTS, self.target, "rejected_date",
                                  self._name, "rejected_at", staged=staged)
        return resume

    def commit(self, covered: Ranges) -> None:
        assert self._files is not None and self._rejected is not None
        folder = f"{self.root}/{LOG}/{self._run}/{self._shard}"
        resumed = self._seq - 1 if self._seq else None
        names = self._names(folder)
        found = max((int(m.group(1)) for m in map(ENTRY.fullmatch, names) if m), default=None)
        if found != resumed or "plan.json" not in names:  # checked before its files are in the dataset
            raise StaleCommitError(self._run, str(self._shard), resumed, found, self.name)
        files = [*self._files.close(), *self._rejected.close()]
        totals = self._totals()
        entry = {"run": self._run, "shard": str(self._shard), "seq": self._seq,
                 "offsets": json.loads(ranges_text(covered)), "files": files, "written": list(totals)}
        if self.summary:
            entry["source"] = self.summary
        self._write(f"{self.root}/{LOG}/{self._run}/{self._shard}/{self._seq:06d}.json", json.dumps(entry).encode())
        self._committed(totals)
        self._seq += 1
        self._n = 0

    def finish(self) -> None:
        """``_SUCCESS`` once every shard of every run here finished (a shard not started yet, known by
        its siblings' ``I-of-N`` names, has not): the committed files, all of them."""
        runs = self.fs.get_file_info(pafs.FileSelector(f"{self.root}/{LOG}", recursive=False))
        files: list[str] = []
        for run in runs:
            shards = self.fs.get_file_info(pafs.FileSelector(run.path, recursive=False))
            names = {shard.base_name for shard in shards}
            counts = {int(name.rpartition("-of-")[2]) for name in names if "-of-" in name}
            if any(f"{i}-of-{n}" not in names for n in counts for i in range(n)):
                return  # a shard that has not started yet: the last to finish writes _SUCCESS
            for shard in shards:
                plan = self._read(f"{shard.path}/plan.json")
                entries = self._entries(shard.path)
                if plan is None or not Resume(ranges_of(plan.decode()), _reached(entries), len(entries)).done:
                    return  # another shard is still writing: it writes _SUCCESS when it ends
                files += [f for e in entries for f in e["files"]]
        root = f"{self.root}/"  # the rejects' files are in PATH_rejects, a dataset of their own
        self._write(f"{self.root}/_SUCCESS", json.dumps(
            {"files": sorted(f[len(root):] for f in files if f.startswith(root))}).encode())

    # ---- the log --------------------------------------------------------------------------

    def _entries(self, folder: str) -> list[dict[str, Any]]:
        try:
            found = self.fs.get_file_info(pafs.FileSelector(folder, recursive=False))
        except FileNotFoundError:
            return []
        entries = []
        for info in sorted(found, key=lambda i: i.path):
            if info.path.endswith(".json") and not info.path.endswith("plan.json"):
                data = self._read(info.path)
                if data is not None:
                    entries.append(json.loads(data))
        return entries

    def _names(self, folder: str) -> list[str]:
        selector = pafs.FileSelector(folder, recursive=False, allow_not_found=True)
        return [info.base_name for info in self.fs.get_file_info(selector)]

    def _run_files(self) -> list[str]:
        prefix = f"{self._run}-{self._shard}-"
        found = [f for root in (self.root, f"{self.root}_rejects")
                 for f in self.fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))]
        return [f.path for f in found if f.type == pafs.FileType.File and f.base_name.startswith(prefix)
                and f.base_name.endswith((".parquet", STAGED))]

    def _delete(self, files: list[str], folder: str | None) -> None:
        for f in files:
            self.fs.delete_file(f)
        if folder is not None and self.fs.get_file_info(folder).type == pafs.FileType.Directory:
            self.fs.delete_dir(folder)
        if files:
            log.info("%s: deleted %d files of run %s never committed (or replaced)", self.name, len(files), self._run)

    def _read(self, path: str) -> bytes | None:
        try:
            with self.fs.open_input_stream(path) as f:
                return bytes(f.read())
        except FileNotFoundError:  # any other error is raised: a log entry that cannot be read is not absent
            return None

    def _write(self, path: str, data: bytes) -> None:
        """Whole or not at all: a local file is renamed into place; an object store's PUT is atomic."""
        if isinstance(self.fs, pafs.LocalFileSystem):
            tmp = f"{path}.tmp"
            with self.fs.open_output_stream(tmp) as f:
                f.write(data)
            self.fs.move(tmp, path)
            return
        with self.fs.open_output_stream(path) as f:
            f.write(data)


def _reached(entries: list[dict[str, Any]]) -> dict[Partition, int]:
    """The position each partition reached in a shard's committed log entries."""
    reached: dict[Partition, int] = {}
    for entry in entries:
        for tp, (_, to) in ranges_of(json.dumps(entry["offsets"])).items():
            reached[tp] = max(reached.get(tp, to), to)
    return reached
