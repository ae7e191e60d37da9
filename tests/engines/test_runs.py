"""An engine run's target: tables made as streamer score makes them, a committed run id refused unless forced."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from streamer.engines.runs import committed_in, mark_done, prepare
from streamer.errors import ConfigError, ReplayFinishedError
from streamer.lake.columns import REJECTS
from streamer.lake.places import open_catalog
from streamer.wiring.lake import Target
from tests.lake.test_score import config

SCHEMA = pa.schema([("event_id", pa.string()), ("event_time", pa.timestamp("us", tz="UTC")),
                    ("run_id", pa.string()), ("score", pa.float32())])


def test_a_table_run_is_refused_once_a_snapshot_of_its_id_is_in_the_tables_history(tmp_path: Path) -> None:
    lake = config(tmp_path).lake
    run = prepare(lake, Target(table="nightly"), "r1", SCHEMA)
    assert (run.table, run.rejects_table) == ("streamer.nightly", "streamer.nightly_rejects")
    catalog = open_catalog(lake)
    table = catalog.load_table(run.table)
    assert [f.name for f in table.spec().fields] == ["event_time_day"]
    assert catalog.load_table(run.rejects_table).schema().as_arrow().names == REJECTS.names
    assert not committed_in(table, "r1")

    assert not run.replaces(run.table) and not run.replaces(run.rejects_table)

    rows = pa.table({"event_id": ["a"], "event_time": pa.array([0], pa.timestamp("us", tz="UTC")),
                     "run_id": ["r1"], "score": pa.array([0.5], pa.float32())})
    table.append(rows, snapshot_properties=run.summary("spark"))
    assert committed_in(catalog.load_table(run.table), "r1")
    with pytest.raises(ReplayFinishedError, match="'r1' already committed into streamer.nightly; --force"):
        prepare(lake, Target(table="nightly"), "r1", SCHEMA)
    forced = prepare(lake, Target(table="nightly"), "r1", SCHEMA, force=True)
    assert forced.replaces(run.table) and not forced.replaces(run.rejects_table)
    assert prepare(lake, Target(table="nightly"), "r2", SCHEMA).run_id == "r2"


def test_a_parquet_run_has_its_own_folder_and_is_refused_once_it_holds_success(tmp_path: Path) -> None:
    lake = config(tmp_path).lake
    out = str(tmp_path / "scores")
    run = prepare(lake, Target(parquet=out), "r1", SCHEMA)
    assert (run.parquet, run.rejects_parquet) == (f"{out}/run_id=r1", f"{out}_rejects/run_id=r1")
    mark_done(lake, run)
    with pytest.raises(ReplayFinishedError, match="already committed"):
        prepare(lake, Target(parquet=out), "r1", SCHEMA)
    assert prepare(lake, Target(parquet=out), "r1", SCHEMA, force=True).parquet == run.parquet


def test_the_key_value_store_is_streamer_scores_alone(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--to-kv"):
        prepare(config(tmp_path).lake, Target(kv=""), "r1", SCHEMA)


def test_a_tables_run_ids_keep_whole_bounds_so_runs_alike_in_16_characters_stay_apart(tmp_path: Path) -> None:
    lake = config(tmp_path).lake
    run = prepare(lake, Target(table="nightly"), "transactions-2026-12-01", SCHEMA)
    table = open_catalog(lake).load_table(run.table)
    long_id = "transactions-2026-12-01"
    table.append(pa.table({"event_id": ["a"], "event_time": pa.array([0], pa.timestamp("us", tz="UTC")),
                           "run_id": [long_id], "score": pa.array([0.5], pa.float32())}))
    field = table.schema().find_field("run_id").field_id
    (task,) = table.scan().plan_files()
    bounds = (task.file.lower_bounds[field], task.file.upper_bounds[field])
    assert bounds == (long_id.encode(), long_id.encode())  # whole: Iceberg's default keeps 16 characters
