"""Triggers on the real broker, run by a real worker: a table appended to three times gives three
incremental jobs whose rows are exactly the appended ones; an overwrite is reported, not rescored;
a folder's complete files are scored once each, a half-written one when it is whole."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from streamer import cli
from streamer.jobs.states import State
from tests.jobs.support import await_status, events_file, jobs_config, start_worker, stop_workers, table_rows

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def _look(config: Path, spec: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert cli.main(["jobs", "watch", "--config", str(config), str(spec), "--once"]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_table_and_a_folder_trigger_score_each_increment_once(bootstrap: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = jobs_config(tmp_path, bootstrap)
    lake = tmp_path / "lake"
    lake.mkdir()
    catalog = SqlCatalog("streamer", uri=f"sqlite:///{lake}/catalog.db", warehouse=lake.as_uri())
    catalog.create_namespace("streamer")
    rows = [pq.read_table(events_file(tmp_path / f"part{i}.parquet", 1000, seed=i, first=1000 * i)) for i in range(3)]
    events = catalog.create_table("streamer.events", schema=rows[0].schema)
    table_spec = tmp_path / "table.yaml"
    table_spec.write_text("name: fresh\ntrigger: {table: events}\ntarget: {table: fresh_scores}\n")
    worker = start_worker(config, "w1", tmp_path / "w1.log")
    try:
        events.append(rows[0])
        first = events.current_snapshot().snapshot_id
        assert _look(config, table_spec, capsys) == [f"job fresh-s{first} queued"]
        assert await_status(config, f"fresh-s{first}", lambda s: s.final).state == State.COMPLETED
        events.append(rows[1])
        events.append(rows[2])
        later = [s.snapshot_id for s in events.snapshots()][1:]
        assert _look(config, table_spec, capsys) == [f"job fresh-s{s} queued" for s in later]
        done = [await_status(config, f"fresh-s{s}", lambda s: s.final) for s in later]
        assert [(s.state, s.predictions) for s in done] == [(State.COMPLETED, 1000)] * 2
        assert _look(config, table_spec, capsys) == []  # every append scored: nothing new
        count, distinct, ids = table_rows(config, "fresh_scores")
        assert (count, distinct) == (3000, 3000) and set(ids) == {f"e-{i}" for i in range(3000)}

        events.delete("event_id == 'e-0'")  # a file rewritten without a row: an overwrite, reported, never rescored
        deleted = events.current_snapshot().snapshot_id
        assert _look(config, table_spec, capsys) == [
            f"snapshot {deleted} of streamer.events is an overwrite: its rows were not scored again; "
            "score them with a job of their own"]
        assert table_rows(config, "fresh_scores")[0] == 3000

        folder = tmp_path / "incoming"
        folder.mkdir()
        events_file(folder / "a.parquet", 500, first=10_000)
        whole = events_file(tmp_path / "b.parquet", 700, first=20_000).read_bytes()
        (folder / "b.parquet").write_bytes(whole[: len(whole) // 2])  # still being written
        folder_spec = tmp_path / "folder.yaml"
        folder_spec.write_text(f"name: drop\ntrigger: {{folder: {folder}}}\ntarget: {{table: drop_scores}}\n")
        queued = _look(config, folder_spec, capsys)
        assert len(queued) == 1 and queued[0].startswith("job drop-f") and queued[0].endswith(" queued"), queued
        assert await_status(config, queued[0].split()[1], lambda s: s.final).predictions == 500
        assert _look(config, folder_spec, capsys) == []  # a.parquet seen, b.parquet not whole
        (folder / "b.parquet").write_bytes(whole)
        second = _look(config, folder_spec, capsys)
        assert len(second) == 1 and second != queued, second
        assert await_status(config, second[0].split()[1], lambda s: s.final).predictions == 700
        count, distinct, _ = table_rows(config, "drop_scores")
        assert (count, distinct) == (1200, 1200)
    finally:
        stop_workers(worker)
