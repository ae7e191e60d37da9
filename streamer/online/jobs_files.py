"""A file job's files over HTTP: a body of JSON Lines or Parquet streamed into one Parquet file, and a job's results read back as JSON Lines.

An upload is written as it arrives, never held whole: JSON Lines are parsed
:data:`BATCH_ROWS` lines at a time into Arrow batches of one Parquet file (the first batch's
columns and types are the file's: a later row with a column of another type is refused with its
line); a Parquet body is copied as it comes and then opened, so a body that is not Parquet is
refused. Past ``limit`` bytes, or on a bad line, the file is deleted and the upload refused
(:class:`~streamer.errors.Refused`, 413 or 400). The file's columns are then checked against the
model's inputs as ``streamer score`` checks a source (a missing input column: ConfigError naming
``model.inputs.<input>`` and the column), before the job is queued.

Results are read back a batch at a time (a Parquet dataset's files, its ``_`` and ``.`` entries
skipped: the commit log, ``_SUCCESS``, files in progress), each row one JSON line.

Worked example: a body of ``{"event_id": "e1", "entity_id": "a", "event_time": 1, "features": [...]}``
lines becomes ``<files>/<id>/requests.parquet`` with columns event_id: string, entity_id: string,
event_time: int64, features: list<double>.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from streamer.config import LakeConfig
from streamer.errors import Refused
from streamer.lake.places import filesystem

BATCH_BYTES = 32 * 1024 * 1024  # lines held before they are written, whatever their count
BATCH_ROWS = 8192  # JSON lines per Arrow batch written: what an upload holds in memory
MAX_LINE_BYTES = 16 << 20  # one JSON line, at most
COPY_BYTES = 1 << 20  # a Parquet body is written in pieces of about this size
JSONL = frozenset({"application/x-ndjson", "application/jsonl", "application/json-lines"})
REQUESTS = "requests.parquet"
PARQUET = frozenset({"application/vnd.apache.parquet", "application/x-parquet"})


class Upload:
    """One upload: the file ``<folder>/requests.parquet`` (``folder``: a local path or s3:// URL,
    the job's own), written from the loop's thread pool."""

    def __init__(self, lake: LakeConfig, folder: str, limit: int) -> None:
        self.folder, self.location, self.limit = folder, f"{folder.rstrip('/')}/{REQUESTS}", limit
        self.fs, self.root = filesystem(lake, folder)
        self.path = f"{self.root}/{REQUESTS}"
        self.size = 0

    async def write(self, kind: str, chunks: AsyncIterator[bytes]) -> int:
        """The body, written; its rows. Refused (400, 413), or anything else, leaves no folder."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, partial(self.fs.create_dir, self.root, recursive=True))
            if kind in JSONL:
                return await self._lines(loop, self._limited(chunks))
            return await self._parquet(loop, self._limited(chunks))
        except BaseException:
            await loop.run_in_executor(None, self.delete)
            raise

    async def _limited(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in chunks:
            self.size += len(chunk)
            if self.size > self.limit:
                raise Refused(413, f"the file is over the {self.limit}-byte limit (jobs.max_upload_bytes)")
            yield chunk

    async def _lines(self, loop: asyncio.AbstractEventLoop, chunks: AsyncIterator[bytes]) -> int:
        writer = _LinesWriter(self.fs, self.path)
        lines: list[bytes]
        try:
            # the line under way, in pieces (a long line is joined once); the whole lines not yet written
            rest: list[bytes] = []
            held, lines = 0, []
            async for chunk in chunks:
                parts = chunk.split(b"\n")
                if len(parts) > 1:
                    parts[0] = b"".join([*rest, parts[0]])
                    rest = []
                rest.append(parts.pop())
                if sum(map(len, rest)) > MAX_LINE_BYTES:
                    raise Refused(400, f"line {writer.lines + len(lines) + len(parts) + 1} is longer than "
                                       f"{MAX_LINE_BYTES} bytes")
                lines.extend(parts)
                held += sum(map(len, parts))
                if len(lines) >= BATCH_ROWS or held >= BATCH_BYTES:  # long lines: a batch by size too
                    await loop.run_in_executor(None, writer.add, lines)
                    lines, held = [], 0
            lines.append(b"".join(rest))
            await loop.run_in_executor(None, writer.add, lines)
        finally:
            await loop.run_in_executor(None, writer.close)
        if not writer.rows:
            raise Refused(400, "the file holds no rows (JSON Lines: one JSON object per line)")
        return writer.rows

    async def _parquet(self, loop: asyncio.AbstractEventLoop, chunks: AsyncIterator[bytes]) -> int:
        out = await loop.run_in_executor(None, self.fs.open_output_stream, self.path)
        try:
            held: list[bytes] = []
            size = 0
            async for chunk in chunks:
                held.append(chunk)
                size += len(chunk)
                if size >= COPY_BYTES:
                    await loop.run_in_executor(None, out.write, b"".join(held))
                    held, size = [], 0
            await loop.run_in_executor(None, out.write, b"".join(held))
        finally:
            await loop.run_in_executor(None, out.close)
        return await loop.run_in_executor(None, self._parquet_rows)

    def _parquet_rows(self) -> int:
        try:
            with self.fs.open_input_file(self.path) as f:
                rows = int(pq.ParquetFile(f).metadata.num_rows)
        except (pa.ArrowInvalid, OSError) as exc:
            raise Refused(400, f"the body is not a Parquet file: {exc}") from None
        if not rows:
            raise Refused(400, "the Parquet file holds no rows")
        return rows

    def exists(self) -> bool:
        return bool(self.fs.get_file_info(self.root).type != pafs.FileType.NotFound)

    def delete(self) -> None:
        """The job's folder, gone (a refused upload's)."""
        if self.exists():
            self.fs.delete_dir(self.root)


class _LinesWriter:
    """JSON lines into one Parquet file, a batch at a time; the first batch fixes the columns."""

    def __init__(self, fs: pafs.FileSystem, path: str) -> None:
        self.fs, self.path = fs, path
        self.rows = 0
        self.lines = 0
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None

    def add(self, lines: list[bytes]) -> None:
        rows = []
        for text in lines:
            self.lines += 1
            if not text.strip():
                continue
            try:
                row = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                raise Refused(400, f"line {self.lines} is not JSON: {exc}") from None
            if not isinstance(row, dict):
                raise Refused(400, f"line {self.lines} is not a JSON object (an event)")
            rows.append(row)
        if not rows:
            return
        first = self.lines - len(lines) + 1
        try:
            batch = pa.RecordBatch.from_pylist(rows, schema=self._schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise Refused(400, f"lines {first} to {self.lines}: a value does not fit its column's type "
                               f"(set by the first {BATCH_ROWS} lines): {exc}") from None
        if self._writer is None:
            self._schema = batch.schema
            self._writer = pq.ParquetWriter(self.fs.open_output_stream(self.path), batch.schema)
        self._writer.write_batch(batch)
        self.rows += len(rows)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def read_lines(lake: LakeConfig, location: str) -> Iterator[bytes]:
    """The rows of the Parquet files under ``location`` as JSON lines, one chunk per batch;
    nothing when there is no such folder (a job that wrote no row there)."""
    fs, root = filesystem(lake, location)
    if fs.get_file_info(root).type != pafs.FileType.Directory:
        return
    found = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    files = sorted(f.path for f in found if f.type == pafs.FileType.File and f.path.endswith(".parquet")
                   and not any(part.startswith(("_", ".")) for part in f.path[len(root):].split("/")))
    for path in files:
        with fs.open_input_file(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(BATCH_ROWS):
                yield b"".join(orjson.dumps(row, default=_plain, option=orjson.OPT_APPEND_NEWLINE)
                               for row in batch.to_pylist())


def _plain(value: Any) -> Any:
    """A value orjson does not write itself: bytes (a reject's original row) as text, others as str."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
