"""Replays into the lake on the real broker: an Iceberg table and a Parquet dataset, read back by DuckDB."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from streamer.commands.lake import Target, run_lake_replay
from streamer.commands.replay import ReplayFinishedError, When
from streamer.config import Config, LakeConfig
from streamer.config_check import Location
from tests.conftest import Topics, make_config
from tests.integration.test_replay_kafka import T0, produce_stamped

pytestmark = pytest.mark.kafka
DAY_MS = 86_400_000


def lake_config(bootstrap: str, topics: Topics, tmp_path: Path, target_file_mb: int = 1) -> Config:
    cfg = make_config(bootstrap, topics)
    return replace(cfg, lake=LakeConfig(warehouse=Location(str(tmp_path / "lake")), target_file_mb=target_file_mb))


def iceberg(metadata: str, sql: str) -> list[tuple]:
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect()
    for mod in (duckdb_extension_avro, duckdb_extension_iceberg):
        path = next(Path(mod.__file__).parent.glob("extensions/*/*.duckdb_extension"))
        con.execute(f"LOAD '{path}'")
    return con.execute(sql.replace("{T}", f"iceberg_scan('{metadata}')")).fetchall()


def test_replay_into_an_iceberg_table_reads_back_in_duckdb(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    cfg = lake_config(bootstrap, topics, tmp_path)
    produce_stamped(bootstrap, cfg, topics.input, 0, 3000, step_ms=DAY_MS // 1000)  # 1000 events a day
    summary = run_lake_replay(cfg, When("earliest"), When("latest"), Target(table="scores"), run_id="r1",
                              progress=io.StringIO())
    assert (summary.counts.predictions, summary.counts.rejects) == (3000, 0)
    from streamer.lake.places import open_catalog

    table = open_catalog(cfg.lake).load_table("streamer.scores")
    rows = iceberg(table.metadata_location, "SELECT count(*), count(DISTINCT (source_partition, source_offset)), "
                                            "count(DISTINCT event_id), min(run_id), max(run_id) FROM {T}")
    assert rows == [(3000, 3000, 3000, "r1", "r1")]
    days = iceberg(table.metadata_location, "SELECT count(DISTINCT CAST(event_time AS DATE)) FROM {T}")
    assert days[0][0] in (3, 4)
    with pytest.raises(ReplayFinishedError):
        run_lake_replay(cfg, When("earliest"), When("latest"), Target(table="scores"), run_id="r1",
                        progress=io.StringIO())
