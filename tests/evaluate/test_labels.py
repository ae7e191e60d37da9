"""Outcomes joined to evaluated rows: on event_id, on entity_id and a time, from CSV, Parquet."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamer.cli import main
from streamer.config import LakeConfig
from streamer.config_check import Location
from streamer.errors import ConfigError
from streamer.evaluate.labels import LabelsFrom, outcome, prepare, read
from streamer.evaluate.pair import PairColumns
from streamer.formats.avro import load_schema
from streamer.schemas import bundled
from tests.conftest import EXAMPLE, ROOT

DAY = 86_400_000


def lake(tmp_path: Path) -> LakeConfig:
    return LakeConfig(warehouse=Location(str(tmp_path / "lake")))


def test_on_event_id_the_last_outcome_of_an_id_wins_and_unknown_ids_stay_unlabeled() -> None:
    table = pa.table({"event_id": ["a", "b", "a", "b", None], "label": [0, 1, 1, None, 1]})
    known = prepare(LabelsFrom("x.csv"), table)
    np.testing.assert_array_equal(known.join(["a", "b", "c"], np.zeros(3, np.int64)), [1.0, 1.0, np.nan])
    assert known.how == "x.csv, column 'label', joined on event_id; 2 of its rows say nothing (null or no outcome)"


def test_on_entity_id_an_event_takes_the_first_outcome_at_or_after_it_within_the_bound() -> None:
    table = pa.table({"entity_id": ["e1", "e1", "e2"], "label": [1, 0, 1],
                      "label_time": pa.array([10 * DAY, 20 * DAY, 5 * DAY], pa.timestamp("ms", tz="UTC"))})
    times = np.array([1 * DAY, 10 * DAY, 15 * DAY, 25 * DAY, 1 * DAY], np.int64)
    entities = ["e1", "e1", "e1", "e1", "e2"]
    known = prepare(LabelsFrom("t"), table)
    np.testing.assert_array_equal(known.join(entities, times), [1.0, 1.0, 0.0, np.nan, 1.0])
    assert "entity_id and label_time" in known.how
    bounded = prepare(LabelsFrom("t", within_ms=7 * DAY), table)
    np.testing.assert_array_equal(bounded.join(entities, times), [np.nan, 1.0, 0.0, np.nan, 1.0])


def test_on_entity_id_outcomes_without_a_value_or_time_are_skipped_and_dates_are_days() -> None:
    table = pa.table({"entity_id": ["e1", "e1", "e1"], "label": [None, 0, 1],
                      "label_time": pa.array([2, 3, None], pa.int32()).cast(pa.date32())})
    known = prepare(LabelsFrom("t"), table)
    assert known.left_out == 2  # a null outcome, a null time
    np.testing.assert_array_equal(known.join(["e1", "e1"], np.array([1 * DAY, 3 * DAY + 1], np.int64)), [0.0, np.nan])


def test_a_csv_and_a_parquet_file_read_alike(tmp_path: Path) -> None:
    csv = tmp_path / "labels.csv"
    csv.write_text("entity_id,label,label_time\ne1,true,2026-01-02T00:00:00Z\ne1,false,2026-01-05T00:00:00Z\n")
    table = read(lake(tmp_path), LabelsFrom(str(csv)))
    pq.write_table(table, tmp_path / "labels.parquet")
    again = read(lake(tmp_path), LabelsFrom(str(tmp_path / "labels.parquet")))
    t0 = 1_767_225_600_000  # 2026-01-01
    for t in (table, again):
        got = prepare(LabelsFrom("l"), t).join(["e1", "e1"], np.array([t0, t0 + 3 * DAY], np.int64))
        np.testing.assert_array_equal(got, [1.0, 0.0])


def test_what_cannot_join_is_refused_by_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--labels-from.*no file"):
        read(lake(tmp_path), LabelsFrom(str(tmp_path / "missing.csv")))
    with pytest.raises(ConfigError, match="--labels-column.*no column 'label'"):
        prepare(LabelsFrom("l"), pa.table({"event_id": ["a"], "outcome": [1]}))
    with pytest.raises(ConfigError, match="--labels-time"):
        prepare(LabelsFrom("l"), pa.table({"entity_id": ["a"], "label": [1]}))
    with pytest.raises(ConfigError, match="--labels-time.*is string"):
        prepare(LabelsFrom("l"), pa.table({"entity_id": ["a"], "label": [1], "label_time": ["soon"]}))
    with pytest.raises(ConfigError, match="--labels-within.*entity_id"):
        prepare(LabelsFrom("l", within_ms=DAY), pa.table({"event_id": ["a"], "label": [1]}))
    with pytest.raises(ConfigError, match="--labels-key"):
        LabelsFrom("l", key="account")
    unreadable = prepare(LabelsFrom("l"), pa.table({"event_id": ["a", "b"], "label": ["fraud", "1"]}))
    assert unreadable.left_out == 1 and unreadable.join(["a", "b"], np.zeros(2, np.int64)).tolist()[1] == 1.0


LABELS_REFUSED = {  # case: (the labels file's columns, extra flags, the flag named, words the line holds)
    "no key column": ({"id": ["a"], "label": [1]}, ["--labels-key", "entity_id"], "--labels-key",
                      "has no column 'entity_id' (it has id, label)"),
    "a key of doubles": ({"event_id": [1.5], "label": [1]}, [], "--labels-key",
                         "the column 'event_id' of {path} is double: text or an integer"),
    "no label column": ({"event_id": ["a"], "outcome": [1]}, ["--labels-column", "fraud"], "--labels-column",
                        "has no column 'fraud' (it has event_id, outcome)"),
    "a label of lists": ({"event_id": ["a"], "label": [[1]]}, [], "--labels-column",
                         "the column 'label' of {path} is list<element: int64>: a number, a boolean or text"),
}


@pytest.mark.parametrize("case", LABELS_REFUSED)
def test_labels_columns_are_checked_on_the_schema_before_anything_is_scored(
        tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    columns, flags, flag, words = LABELS_REFUSED[case]
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "127.0.0.1:1")  # refused before any broker is asked
    path = tmp_path / "labels.parquet"
    pq.write_table(pa.table(columns), path)
    code = main(["evaluate", "--config", str(EXAMPLE), "--candidate", str(ROOT / "models" / "fraud_mlp.onnx"),
                 "--from", "earliest", "--to-parquet", str(tmp_path / "out"), "--labels-from", str(path), *flags])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("streamer")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"streamer: flag {flag}: "), lines
    assert words.format(path=path) in lines[0]
    assert not (tmp_path / "out").exists()


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
