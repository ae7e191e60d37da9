"""`streamer score`: Parquet files and Iceberg tables scored into the lake with no Kafka, rejects kept,
results equal to ONNX Runtime's, read back by DuckDB."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamer.cli import main
from streamer.commands.demo import synthetic_events
from streamer.commands.lake import Target, run_score
from streamer.config import Config, LakeConfig
from streamer.config_check import Location
from streamer.config_file import load_config
from streamer.errors import ConfigError, ReplayFinishedError
from tests.conftest import EXAMPLE
from tests.lake.test_replay_lake_kafka import iceberg

T0 = 1_796_000_000_000


def config(tmp_path: Path) -> Config:
    cfg = load_config(EXAMPLE, env={"KAFKA_BOOTSTRAP": "127.0.0.1:1"})  # never reached: no Kafka here
    return replace(cfg, lake=LakeConfig(warehouse=Location(str(tmp_path / "lake")), target_file_mb=1))


def events(n: int, bad: dict[int, dict], step_ms: int = 60_000) -> pa.Table:
    """``n`` feature events; those at the indices of ``bad`` altered as given (rows that cannot be scored)."""
    rows = []
    for i, e in enumerate(synthetic_events(n, 32, seed=7)):
        rows.append({**e, "event_id": f"evt-{i}", "event_time": T0 + i * step_ms, **bad.get(i, {})})
    return pa.Table.from_pylist(rows, schema=pa.schema([
        ("event_id", pa.string()), ("entity_id", pa.string()), ("event_time", pa.int64()),
        ("features", pa.list_(pa.float32()))]))


def many(n: int) -> pa.Table:
    """``n`` valid events, built in numpy: 10 a second."""
    features = np.random.default_rng(3).standard_normal((n, 32), dtype=np.float32)
    return pa.table({"event_id": [f"evt-{i}" for i in range(n)], "entity_id": [f"acct-{i % 97}" for i in range(n)],
                     "event_time": T0 + np.arange(n, dtype=np.int64) * 100,
                     "features": pa.FixedSizeListArray.from_arrays(features.ravel(), 32).cast(pa.list_(pa.float32()))},
                    schema=events(1, {}).schema)


def test_score_a_parquet_file_into_a_table_with_its_rejects(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    table = events(5000, {10: {"features": [1.0] * 3}, 20: {"features": [float("nan")] * 32}})
    pq.write_table(table, tmp_path / "events.parquet", row_group_size=1000)
    summary = run_score(cfg, str(tmp_path / "events.parquet"), Target(table="nightly"), run_id="n1",
                        batch_size=1024, progress=io.StringIO())
    assert (summary.counts.predictions, summary.counts.rejects) == (4998, 2)

    from streamer.lake.places import open_catalog

    catalog = open_catalog(cfg.lake)
    scores = catalog.load_table("streamer.nightly")
    got = iceberg(scores.metadata_location, "SELECT event_id, scores FROM {T} ORDER BY source_offset")
    assert len(got) == 4998 and {r[0] for r in got} == {f"evt-{i}" for i in range(5000)} - {"evt-10", "evt-20"}
    # The same answers as ONNX Runtime's, offline, for the same rows.
    session = ort.InferenceSession(str(cfg.model.path), providers=["CPUExecutionProvider"])
    keep = [i for i in range(5000) if i not in (10, 20)]
    feats = np.array([table.column("features")[i].as_py() for i in keep], np.float32)
    want = session.run(None, {session.get_inputs()[0].name: feats})[0]
    np.testing.assert_array_equal(np.array([r[1] for r in got], np.float32), want)

    rejects = catalog.load_table("streamer.nightly_rejects")
    bad = iceberg(rejects.metadata_location, "SELECT source_offset, error, reason, original FROM {T} ORDER BY 1")
    assert [(r[0], r[1]) for r in bad] == [(10, "ValidationError"), (20, "ValidationError")]
    assert "has 3 values, the model takes 32" in bad[0][2] and "NaN" in bad[1][2]
    assert json.loads(bad[0][3])["event_id"] == "evt-10"  # the original row, as JSON
    with pytest.raises(ReplayFinishedError):
        run_score(cfg, str(tmp_path / "events.parquet"), Target(table="nightly"), run_id="n1", progress=io.StringIO())


def test_score_an_iceberg_table_into_parquet_and_again_with_force(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    from streamer.lake.places import open_catalog

    source = open_catalog(cfg.lake).create_table("streamer.events", schema=events(1, {}).schema)
    source.append(events(3000, {}))
    out = tmp_path / "scored"
    for force in (False, True):
        summary = run_score(cfg, "events", Target(parquet=str(out)), run_id="t1", force=force, progress=io.StringIO())
        assert summary.counts.predictions == 3000
        rows = duckdb.sql(f"SELECT count(*), count(DISTINCT source_offset), count(DISTINCT event_date) "
                          f"FROM read_parquet('{out}/**/*.parquet', hive_partitioning = true)").fetchall()
        assert rows == [(3000, 3000, 3)]  # 3,000 minutes: three days; the run again replaced its rows
    assert (out / "_SUCCESS").exists()


def test_score_refuses_a_table_of_another_schema_by_column_and_adds_a_new_one(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    pq.write_table(events(100, {}), tmp_path / "events.parquet")
    from streamer.lake.places import open_catalog

    catalog = open_catalog(cfg.lake)
    catalog.create_table("streamer.other", schema=pa.schema([("event_id", pa.string()), ("scores", pa.string())]))
    with pytest.raises(ConfigError, match="table streamer.other has column 'scores' as string"):
        run_score(cfg, str(tmp_path / "events.parquet"), Target(table="other"), progress=io.StringIO())
    catalog.create_table("streamer.older", schema=pa.schema([("event_id", pa.string(), False)]))
    run_score(cfg, str(tmp_path / "events.parquet"), Target(table="older"), progress=io.StringIO())
    names = [f.name for f in catalog.load_table("streamer.older").schema().fields]
    assert names[0] == "event_id" and "scores" in names and "run_id" in names  # evolved: columns added


def test_score_from_the_command_line_prints_counts_that_add_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pq.write_table(events(300, {5: {"features": [1.0]}}), tmp_path / "in.parquet")
    code = main(["score", "--config", str(EXAMPLE), "--from", str(tmp_path / "in.parquet"),
                 "--to-parquet", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0 and "rows 300 = predictions 299 + rejects 1" in out


def test_a_resumed_score_reads_the_snapshot_it_was_planned_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that fails mid-way resumes on its planned snapshot: rows appended to the source since are
    not in the run, and each planned row is scored once."""
    cfg = replace(config(tmp_path), lake=replace(config(tmp_path).lake, target_file_mb=1))
    from streamer.lake.iceberg import IcebergSink
    from streamer.lake.places import open_catalog

    source = open_catalog(cfg.lake).create_table("streamer.events", schema=events(1, {}).schema)
    # Past one read batch (pyarrow's 131,072 rows): the run commits once mid-way and dies at its
    # second commit, with rows of the plan still to score.
    source.append(many(150_000))
    commit, made = IcebergSink.commit, []

    def failing(self: IcebergSink, covered: object) -> None:
        if made:
            raise RuntimeError("the run dies here")
        made.append(covered)
        commit(self, covered)  # type: ignore[arg-type]

    monkeypatch.setattr(IcebergSink, "commit", failing)
    with pytest.raises(RuntimeError):
        run_score(cfg, "events", Target(table="scored"), run_id="s", batch_size=4096, progress=io.StringIO())
    monkeypatch.setattr(IcebergSink, "commit", commit)
    source.append(many(500))  # after the plan: not this run's
    summary = run_score(cfg, "events", Target(table="scored"), run_id="s", progress=io.StringIO())
    assert summary.resume.resumed
    scored = open_catalog(cfg.lake).load_table("streamer.scored")
    assert iceberg(scored.metadata_location, "SELECT count(*), count(DISTINCT source_offset) FROM {T}") == [
        (150_000, 150_000)]
