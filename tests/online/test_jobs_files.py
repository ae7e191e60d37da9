"""A file of requests stored from an HTTP body: JSON Lines split across chunks anywhere, written in
batches bounded by lines and by bytes (long lines are not held by the thousand)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from streamer.config import LakeConfig
from streamer.config_check import Location
from streamer.online import jobs_files
from streamer.online.jobs_files import Upload


async def _chunks(body: bytes, size: int) -> AsyncIterator[bytes]:
    for at in range(0, len(body), size):
        yield body[at:at + size]


def test_long_lines_cut_anywhere_are_written_in_batches_bounded_by_bytes(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs_files, "BATCH_BYTES", 1 << 20)  # 1 MiB held at most
    batches: list[int] = []
    add = jobs_files._LinesWriter.add
    monkeypatch.setattr(jobs_files._LinesWriter, "add", lambda self, lines: (batches.append(len(lines)),
                                                                           add(self, lines))[1])
    rows = [{"event_id": f"e-{i}", "note": "x" * 100_000, "features": [float(i)] * 4} for i in range(40)]
    body = b"\n".join(orjson.dumps(r) for r in rows) + b"\n"
    upload = Upload(LakeConfig(warehouse=Location(str(tmp_path))), str(tmp_path / "job"), 1 << 30)
    assert asyncio.run(upload.write("application/x-ndjson", _chunks(body, 7_777))) == 40
    assert max(batches) <= 11 and sum(batches) >= 40  # about 1 MiB of 100 kB lines a batch, not all 40
    table = pq.read_table(upload.location)
    assert table.column("event_id").to_pylist() == [f"e-{i}" for i in range(40)]
    assert table.column("note").to_pylist()[39] == "x" * 100_000
