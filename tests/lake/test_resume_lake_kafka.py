"""Exactly once per run, on the real broker: a replay into the lake SIGKILLed mid-way and resumed
leaves every offset of the range once, read back by DuckDB (Iceberg and Parquet)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import yaml

from streamer.commands.lake import Target, run_lake_replay
from streamer.config_file import load_config
from streamer.kafka.ranges import When
from tests.conftest import Topics, make_config
from tests.integration.test_replay_kafka import produce_stamped
from tests.lake.test_replay_lake_kafka import iceberg, recent
from tests.support.faults import write_config

pytestmark = pytest.mark.kafka
EVENTS = 200_000


def killed_midway(config: Path, target: list[str], run_id: str, commits: int = 1) -> None:
    """The replay, SIGKILLed as it begins commit ``commits + 1`` (tests/support/lake_kill.py)."""
    proc = subprocess.run([sys.executable, "-m", "tests.support.lake_kill", str(commits), "replay", "--config",
                           str(config), "--from", "earliest", "--run-id", run_id, *target], capture_output=True,
                          text=True, timeout=240, env={**os.environ, "STREAMER_LOG_LEVEL": "WARNING"})
    assert proc.returncode == -signal.SIGKILL, f"not killed ({proc.returncode}): {proc.stdout}{proc.stderr}"


@pytest.mark.timeout(420)
def test_sigkill_midway_then_resume_leaves_every_offset_once(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.yaml", bootstrap=bootstrap, input_topic=topics.input,
                          output_topic=topics.output, group=topics.group, guarantee="at_least_once")
    doc = yaml.safe_load(config.read_text())
    doc["lake"] = {"warehouse": str(tmp_path / "lake"), "target_file_mb": 1}
    config.write_text(yaml.safe_dump(doc))
    cfg = load_config(config)
    produce_stamped(bootstrap, make_config(bootstrap, topics), topics.input, 0, EVENTS, step_ms=1000,
                    base_ms=recent(EVENTS, 1000))

    from streamer.lake.places import open_catalog

    killed_midway(config, ["--to-table", "scores"], "kill")
    table = open_catalog(cfg.lake).load_table("streamer.scores")
    before = iceberg(table.metadata_location, "SELECT count(*) FROM {T}")[0][0]
    assert 0 < before < EVENTS, f"the kill did not land mid-way: {before} rows committed"

    summary = run_lake_replay(cfg, When("earliest"), When("latest"), Target(table="scores"), run_id="kill",
                              progress=io.StringIO())
    assert summary.resume.resumed and summary.counts.commits >= 1
    table = open_catalog(cfg.lake).load_table("streamer.scores")
    rows = iceberg(table.metadata_location,
                   "SELECT count(*), count(DISTINCT (source_partition, source_offset)) FROM {T}")
    assert rows == [(EVENTS, EVENTS)], f"rows, distinct (partition, offset): {rows}; before the kill {before}"
    summaries = [s.summary for s in table.metadata.snapshots if s.summary.get("streamer.run-id") == "kill"]
    assert len(summaries) >= 2 and all("streamer.offsets" in s for s in summaries)


@pytest.mark.timeout(300)
def test_parquet_killed_and_resumed_has_each_offset_once_and_success_last(
        bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.yaml", bootstrap=bootstrap, input_topic=topics.input,
                          output_topic=topics.output, group=topics.group, guarantee="at_least_once")
    doc = yaml.safe_load(config.read_text())
    doc["lake"] = {"target_file_mb": 1}
    config.write_text(yaml.safe_dump(doc))
    cfg = load_config(config)
    n = EVENTS
    produce_stamped(bootstrap, make_config(bootstrap, topics), topics.input, 0, n, step_ms=1000,
                    base_ms=recent(n, 1000))
    out = tmp_path / "scores"
    log = out / "_streamer" / "kill"

    killed_midway(config, ["--to-parquet", str(out)], "kill")
    assert len([p for p in log.rglob("*.json") if p.name != "plan.json"]) == 1  # one commit, then the kill
    assert not (out / "_SUCCESS").exists()
    summary = run_lake_replay(cfg, When("earliest"), When("latest"), Target(parquet=str(out)), run_id="kill",
                              progress=io.StringIO())
    assert summary.resume.resumed and (out / "_SUCCESS").exists()
    rows = duckdb.sql(f"SELECT count(*), count(DISTINCT (source_partition, source_offset)), "
                      f"count(DISTINCT event_date) FROM read_parquet('{out}/**/*.parquet', hive_partitioning = true)"
                      ).fetchall()
    assert rows[0][:2] == (n, n) and rows[0][2] >= 1
    listed = yaml.safe_load((out / "_SUCCESS").read_text())["files"]
    assert sorted(listed) == sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet"))
