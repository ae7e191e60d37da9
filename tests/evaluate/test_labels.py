"""Outcomes joined to evaluated rows: on event_id, on entity_id and a time, from CSV, Parquet."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamer.config import LakeConfig
from streamer.config_check import Location
from streamer.errors import ConfigError
from streamer.evaluate.labels import LabelsFrom, join, read
from streamer.evaluate.pair import PairColumns, outcome
from streamer.formats.avro import load_schema
from streamer.schemas import bundled

DAY = 86_400_000


def lake(tmp_path: Path) -> LakeConfig:
    return LakeConfig(warehouse=Location(str(tmp_path / "lake")))


def test_on_event_id_the_last_outcome_of_an_id_wins_and_unknown_ids_stay_unlabeled() -> None:
    table = pa.table({"event_id": ["a", "b", "a"], "label": [0, 1, 1]})
    got, how = join(LabelsFrom("x.csv"), table, ["a", "b", "c"], ["e", "e", "e"], np.zeros(3, np.int64))
    np.testing.assert_array_equal(got, [1.0, 1.0, np.nan])
    assert how == "x.csv, column 'label', joined on event_id"


def test_on_entity_id_an_event_takes_the_first_outcome_at_or_after_it_within_the_bound() -> None:
    table = pa.table({"entity_id": ["e1", "e1", "e2"], "label": [1, 0, 1],
                      "label_time": pa.array([10 * DAY, 20 * DAY, 5 * DAY], pa.timestamp("ms", tz="UTC"))})
    times = np.array([1 * DAY, 10 * DAY, 15 * DAY, 25 * DAY, 1 * DAY], np.int64)
    entities = ["e1", "e1", "e1", "e1", "e2"]
    got, how = join(LabelsFrom("t"), table, ["x"] * 5, entities, times)
    np.testing.assert_array_equal(got, [1.0, 1.0, 0.0, np.nan, 1.0])
    assert "entity_id and label_time" in how
    bounded, _ = join(LabelsFrom("t", within_ms=7 * DAY), table, ["x"] * 5, entities, times)
    np.testing.assert_array_equal(bounded, [np.nan, 1.0, 0.0, np.nan, 1.0])


def test_a_csv_and_a_parquet_file_read_alike(tmp_path: Path) -> None:
    csv = tmp_path / "labels.csv"
    csv.write_text("entity_id,label,label_time\ne1,true,2026-01-02T00:00:00Z\ne1,false,2026-01-05T00:00:00Z\n")
    table = read(lake(tmp_path), LabelsFrom(str(csv)))
    pq.write_table(table, tmp_path / "labels.parquet")
    again = read(lake(tmp_path), LabelsFrom(str(tmp_path / "labels.parquet")))
    t0 = 1_767_225_600_000  # 2026-01-01
    for t in (table, again):
        got, _ = join(LabelsFrom("l"), t, ["x", "y"], ["e1", "e1"], np.array([t0, t0 + 3 * DAY], np.int64))
        np.testing.assert_array_equal(got, [1.0, 0.0])


def test_what_cannot_join_is_refused_by_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--labels-from.*no file"):
        read(lake(tmp_path), LabelsFrom(str(tmp_path / "missing.csv")))
    with pytest.raises(ConfigError, match="--labels-from.*no column 'label'"):
        join(LabelsFrom("l"), pa.table({"event_id": ["a"], "outcome": [1]}), ["a"], ["e"], np.zeros(1, np.int64))
    with pytest.raises(ConfigError, match="--labels-time"):
        join(LabelsFrom("l"), pa.table({"entity_id": ["a"], "label": [1]}), ["a"], ["e"], np.zeros(1, np.int64))
    with pytest.raises(ConfigError, match="--labels-from.*0/1 or true/false, got 'fraud'"):
        join(LabelsFrom("l"), pa.table({"event_id": ["a"], "label": ["fraud"]}), ["a"], ["e"], np.zeros(1, np.int64))
    with pytest.raises(ConfigError, match="--labels-key"):
        LabelsFrom("l", key="account")


def test_outcomes_are_zero_one_true_false_or_unknown() -> None:
    assert [outcome(v) for v in (1, 0, True, False, "1", "false", 1.0)] == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert np.isnan(outcome(None)) and np.isnan(outcome(""))
    with pytest.raises(ValueError, match="got 2"):
        outcome(2)


def test_the_side_by_side_record_holds_each_model_field_twice_and_the_shared_ones_once() -> None:
    pair = PairColumns(load_schema(bundled("prediction.avsc")), ["scores"])
    names = [f["name"] for f in pair.avro["fields"]]
    assert names[:4] == ["event_id", "entity_id", "champion_scores", "candidate_scores"]
    for field in ("model_name", "model_version", "model_digest", "scored_at"):
        assert f"champion_{field}" in names and f"candidate_{field}" in names and field not in names
    assert "degraded" not in names and names.count("event_time") == 1 and "run_id" in names
    assert pair.schema.names == names


def test_a_json_events_pass_through_field_is_a_text_column_of_its_json() -> None:
    from streamer.lake.columns import arrow_type
    from streamer.model.prediction_schema import JSON_VALUE

    assert arrow_type(JSON_VALUE, {}) == (pa.string(), True)
    with pytest.raises(ValueError, match="no single column type"):
        arrow_type(["null", "string", {"type": "array", "items": "long"}], {})
