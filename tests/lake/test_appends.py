"""The rows one snapshot of an Iceberg table appended, scored as a run of their own (a table trigger's
jobs): exactly those rows, each once, stopped and resumed mid-snapshot; the source snapshot recorded
in each commit; a snapshot that overwrote or deleted rows refused. Read back with DuckDB; no Kafka."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamer.config import Config
from streamer.errors import ConfigError
from streamer.jobs.trigger import scored_snapshots, snapshot_job_id, table_increments
from streamer.lake.appends import Appended, table_snapshots
from streamer.lake.places import open_catalog
from streamer.lake.run import LakeCounts, LakeRun
from streamer.wiring.lake import Target, score_job
from tests.lake.test_replay_lake_kafka import iceberg
from tests.lake.test_run_stop import StopAfter
from tests.lake.test_score import config, events

BATCH = 64


def rows(start: int, n: int) -> pa.Table:
    """Events ``evt-<start>`` .. ``evt-<start + n - 1>``: each batch of appends its own ids."""
    table = events(start + n, {})
    return table.slice(start, n)


def score(cfg: Config, source: Any, target: Target, run_id: str, stop: StopAfter | None = None) -> LakeCounts:
    """One run of ``source`` into ``target``, as a job runs it: score_job, then LakeRun."""
    job = score_job(cfg, source, target, run_id, batch_size=BATCH, key="job.source")
    return LakeRun(job.sink, job.scorer(), job.run_id, BATCH).run(job.source, job.resume, stop)


def test_three_appends_scored_one_snapshot_each_give_exactly_the_appended_rows(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    source = open_catalog(cfg.lake).create_table("streamer.events", schema=events(1, {}).schema)
    appended = {}
    for start, n in ((0, 100), (100, 150), (250, 70)):
        source.append(rows(start, n))
        appended[source.current_snapshot().snapshot_id] = {f"evt-{i}" for i in range(start, start + n)}
    todo, report = table_increments(cfg.lake, "events", set())
    assert [s.snapshot_id for s in todo] == list(appended) and report == []  # oldest first
    assert [s.added_rows for s in todo] == [100, 150, 70]

    for snap in todo:
        counts = score(cfg, snap.source(), Target(table="scored"), snapshot_job_id("inc", snap.snapshot_id))
        assert (counts.rows, counts.predictions, counts.rejects) == (len(appended[snap.snapshot_id]),) * 2 + (0,)
    target = open_catalog(cfg.lake).load_table("streamer.scored")
    for snapshot_id, ids in appended.items():
        got = iceberg(target.metadata_location, f"SELECT event_id FROM {{T}} WHERE source_topic = "
                                                f"'streamer.events@+{snapshot_id}'")
        assert sorted(r[0] for r in got) == sorted(ids), "a snapshot's run scores the rows it appended, no others"
    # Every source row once: rows equal the source's, no duplicates, none missing.
    [(total, distinct)] = iceberg(target.metadata_location, "SELECT count(*), count(DISTINCT event_id) FROM {T}")
    want = {r[0] for r in iceberg(source.metadata_location, "SELECT event_id FROM {T}")}
    have = {r[0] for r in iceberg(target.metadata_location, "SELECT event_id FROM {T}")}
    assert (total, distinct, have) == (320, 320, want)

    # The target's history says which snapshot each commit scored, and its runs finished.
    summaries = [s.summary for s in target.snapshots() if s.summary is not None and "streamer.run-id" in s.summary]
    assert summaries and all(s.get("streamer.source-table") == "streamer.events" for s in summaries)
    assert {int(s.get("streamer.source-snapshot") or 0) for s in summaries} == set(appended)
    assert scored_snapshots(cfg.lake, "scored") == set(appended)
    assert table_increments(cfg.lake, "events", set(appended)) == ([], [])
    source.append(rows(320, 5))
    todo, _ = table_increments(cfg.lake, "events", scored_snapshots(cfg.lake, "scored"))
    assert [s.snapshot_id for s in todo] == [source.current_snapshot().snapshot_id]


def test_an_overwrite_or_a_delete_is_reported_and_refused(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    source = open_catalog(cfg.lake).create_table("streamer.events", schema=events(1, {}).schema)
    source.append(rows(0, 50))
    first = source.current_snapshot().snapshot_id
    source.delete("event_id == 'evt-3'")  # rewrites the file: an overwrite
    rewritten = source.current_snapshot()
    source.delete("event_id >= 'evt-0'")  # every row: the file removed, a delete
    deleted = source.current_snapshot()
    assert (rewritten.summary.operation.value, deleted.summary.operation.value) == ("overwrite", "delete")
    source.append(rows(50, 10))
    last = source.current_snapshot().snapshot_id

    todo, report = table_increments(cfg.lake, "events", {first})
    assert [s.snapshot_id for s in todo] == [last]
    assert report == [f"snapshot {rewritten.snapshot_id} of streamer.events is an overwrite: its rows were not "
                      "scored again; score them with a job of their own",
                      f"snapshot {deleted.snapshot_id} of streamer.events is a delete: its rows were not "
                      "scored again; score them with a job of their own"]
    assert table_increments(cfg.lake, "events", {first, last}) == ([], [])  # reported once, while new

    for snap, operation in ((rewritten, "an overwrite"), (deleted, "a delete")):
        with pytest.raises(ConfigError, match=f"snapshot {snap.snapshot_id} of streamer.events is {operation}, "
                                              "not an append") as refused:
            score(cfg, Appended("events", snap.snapshot_id), Target(table="scored"), f"x-{snap.snapshot_id}")
        assert refused.value.key == "job.source.snapshot"
    with pytest.raises(ConfigError, match="has no snapshot 12345") as missing:
        score(cfg, Appended("events", 12345), Target(table="scored"), "x-missing")
    assert missing.value.key == "job.source.snapshot"
    assert not open_catalog(cfg.lake).table_exists("streamer.scored"), "a refused source writes nothing"


def test_a_snapshot_source_stopped_and_resumed_scores_each_row_once(tmp_path: Path) -> None:
    """One append of three files (500 rows each); the run stops in the second file and resumes there
    without opening the first again, into a Parquet dataset whose commit log names the snapshot."""
    cfg = config(tmp_path)
    source = open_catalog(cfg.lake).create_table("streamer.events", schema=events(1, {}).schema)
    source.append(rows(0, 7))  # an earlier snapshot: not this run's
    files = []
    for k in range(3):
        files.append(str(tmp_path / f"part-{k}.parquet"))
        pq.write_table(rows(1000 + 500 * k, 500), files[-1], row_group_size=100)
    source.add_files(files)
    snap = source.current_snapshot()
    assert snap.summary.operation.value == "append"
    out = tmp_path / "scores"
    run_id = snapshot_job_id("inc", snap.snapshot_id)

    stopped = score(cfg, Appended("events", snap.snapshot_id), Target(parquet=str(out)), run_id, StopAfter(13))
    assert stopped.stopped and 500 < stopped.rows < 1000, "stopped inside the second file"
    done = score(cfg, Appended("events", snap.snapshot_id), Target(parquet=str(out)), run_id)
    assert not done.stopped and stopped.rows + done.rows == 1500
    [(total, offsets, ids, low, high)] = duckdb.sql(
        f"SELECT count(*), count(DISTINCT source_offset), count(DISTINCT event_id), min(event_id), max(event_id) "
        f"FROM read_parquet('{out}/**/*.parquet', hive_partitioning = true)").fetchall()
    assert (total, offsets, ids, low, high) == (1500, 1500, 1500, "evt-1000", "evt-2499")
    entries = [json.loads(p.read_text()) for p in sorted((out / "_streamer" / run_id).glob("*/0*.json"))]
    assert len(entries) >= 2 and all(e["source"] == {"streamer.source-table": "streamer.events",
                                                      "streamer.source-snapshot": str(snap.snapshot_id)}
                                      for e in entries)


def test_a_snapshot_counts_as_scored_once_its_run_covered_all_its_rows(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    source = open_catalog(cfg.lake).create_table("streamer.events", schema=events(1, {}).schema)
    source.append(rows(0, 300))
    snap = source.current_snapshot().snapshot_id
    run_id = snapshot_job_id("inc", snap)
    stopped = score(cfg, Appended("events", snap), Target(table="scored"), run_id, StopAfter(2))
    assert stopped.stopped and stopped.commits == 1
    assert scored_snapshots(cfg.lake, "scored") == set(), "a run stopped midway has not scored its snapshot"
    assert [s.snapshot_id for s in table_increments(cfg.lake, "events", set())[0]] == [snap]
    score(cfg, Appended("events", snap), Target(table="scored"), run_id)
    assert scored_snapshots(cfg.lake, "scored") == {snap}
    assert scored_snapshots(cfg.lake, "never-made") == set()


def test_a_list_of_files_is_scored_each_file_a_partition(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    files = []
    for k in range(2):
        files.append(str(tmp_path / f"in-{k}.parquet"))
        pq.write_table(rows(100 * k, 100), files[-1])
    pq.write_table(rows(500, 100), tmp_path / "not-listed.parquet")
    counts = score(cfg, files, Target(parquet=str(tmp_path / "out")), "files-1")
    assert counts.predictions == 200
    got = duckdb.sql(f"SELECT source_topic, count(*) FROM read_parquet('{tmp_path}/out/**/*.parquet', "
                     "hive_partitioning = true) GROUP BY 1 ORDER BY 1").fetchall()
    assert got == [(files[0], 100), (files[1], 100)]
    with pytest.raises(ConfigError, match="no file at") as refused:
        score(cfg, [str(tmp_path / "gone.parquet")], Target(parquet=str(tmp_path / "out")), "files-2")
    assert refused.value.key == "job.source"


def test_the_snapshots_of_a_table_are_its_main_history_oldest_first(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    source = open_catalog(cfg.lake).create_table("streamer.events", schema=events(1, {}).schema)
    assert table_snapshots(cfg.lake, "events") == []
    source.append(rows(0, 3))
    kept = source.current_snapshot().snapshot_id
    source.append(rows(3, 3))
    source.manage_snapshots().rollback_to_snapshot(kept).commit()
    assert [s.snapshot_id for s in table_snapshots(cfg.lake, "events")] == [kept], "a rolled-back append is gone"
    with pytest.raises(ConfigError) as missing:
        table_snapshots(cfg.lake, "nothing")
    assert missing.value.key == "job.trigger.table"
