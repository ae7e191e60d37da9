"""`streamer produce` and `streamer tail` (commands/produce.py) as the teams upstream and
downstream run them, against the real broker and a real Schema Registry: JSON Lines, CSV and
Parquet, registered and framed as avro-confluent, scored, and the predictions printed as JSON lines.
A row that does not fit the input schema as it is is refused with its file, line and field before
anything is sent."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from streamer.cli import main as cli
from streamer.commands.demo import synthetic_events
from streamer.config_file import load_config
from streamer.errors import EXIT_CONFIG
from streamer.wiring.stream import build_processor
from tests.conftest import ROOT, Topics, end_offsets, read_all, run_until_outputs
from tests.support.schema_registry import SchemaRegistry

pytestmark = pytest.mark.kafka


def config_file(tmp_path: Path, bootstrap: str, topics: Topics, registry: SchemaRegistry) -> Path:
    raw = yaml.safe_load((ROOT / "deploy" / "config" / "example.yaml").read_text())
    raw["kafka"]["bootstrap.servers"] = bootstrap
    raw["input"] |= {"topics": [topics.input], "group_id": topics.group, "format": "avro-confluent",
                     "schema": str(ROOT / "streamer" / "schemas" / "feature_event.avsc"), "registry": {"url": registry.url}}
    raw["model"]["path"] = str(ROOT / "models" / "fraud_mlp.onnx")
    raw["output"] |= {"topic": topics.output, "schema": str(ROOT / "streamer" / "schemas" / "prediction.avsc"),
                      "format": "avro-confluent", "key": "entity_id"}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def events(n: int) -> list[dict[str, Any]]:
    return [{**e, "features": [float(x) for x in e["features"]]}  # type: ignore[union-attr]
            for e in synthetic_events(n, 32, seed=3)]


def test_produce_jsonl_and_csv_then_tail_the_predictions(
        bootstrap: str, topics: Topics, schema_registry: SchemaRegistry, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = config_file(tmp_path, bootstrap, topics, schema_registry)
    jsonl, table, columnar = events(30), events(50)[30:], events(60)[50:]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in jsonl))
    with (tmp_path / "events.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, ["event_id", "entity_id", "event_time", "features"])
        writer.writeheader()
        writer.writerows({**e, "features": json.dumps(e["features"])} for e in table)
    assert cli(["produce", "--config", str(path), str(tmp_path / "events.jsonl")]) == 0
    assert cli(["produce", "--config", str(path), str(tmp_path / "events.csv")]) == 0
    pq.write_table(pa.Table.from_pylist(columnar), tmp_path / "events.parquet")
    assert cli(["produce", "--config", str(path), str(tmp_path / "events.parquet")]) == 0
    assert "produced 30" in capsys.readouterr().out
    sent = read_all(bootstrap, topics.input)
    assert len(sent) == 60 and all(m.value()[0] == 0 for m in sent)  # Confluent framing
    assert {m.key() for m in sent} == {str(e["entity_id"]).encode() for e in jsonl + table + columnar}

    processor = build_processor(load_config(path))
    run_until_outputs(processor, 60)
    assert processor.stats.predictions == 60

    assert cli(["tail", "--config", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    predictions = [json.loads(line) for line in lines]
    assert sorted(p["event_id"] for p in predictions) == sorted(str(e["event_id"]) for e in jsonl + table + columnar)
    assert all(len(p["scores"]) == 1 and p["model_name"] == "fraud_mlp" for p in predictions)
    assert cli(["tail", "--config", str(path), "--limit", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_a_row_that_does_not_fit_is_refused_with_its_line_and_nothing_is_sent(
        bootstrap: str, topics: Topics, schema_registry: SchemaRegistry, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = config_file(tmp_path, bootstrap, topics, schema_registry)
    rows = events(3)
    with (tmp_path / "bad.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, ["event_id", "entity_id", "event_time", "features"])
        writer.writeheader()
        writer.writerows({**e, "features": json.dumps(e["features"])} for e in rows)
        writer.writerow({**rows[0], "event_time": "yesterday", "features": "[]"})
    assert cli(["produce", "--config", str(path), str(tmp_path / "bad.csv")]) == EXIT_CONFIG
    said = capsys.readouterr().err
    assert f"file '{tmp_path / 'bad.csv'}', line 5, field 'event_time': expected long: " in said
    (tmp_path / "bad.jsonl").write_text(json.dumps({**rows[0], "features": "not a list"}) + "\n")
    assert cli(["produce", "--config", str(path), str(tmp_path / "bad.jsonl")]) == EXIT_CONFIG
    assert (f"file '{tmp_path / 'bad.jsonl'}', line 1, field 'features': expected array, got string"
            in capsys.readouterr().err)
    # fastavro would write 4.5 as 4 and 1 as 1.0: produce refuses the row instead, and the rows
    # before it are not sent either
    coerced = [rows[0], rows[1], {**rows[2], "event_time": 4.5}]
    (tmp_path / "coerced.jsonl").write_text("".join(json.dumps(e) + "\n" for e in coerced))
    assert cli(["produce", "--config", str(path), str(tmp_path / "coerced.jsonl")]) == EXIT_CONFIG
    assert capsys.readouterr().err == (f"streamer: file '{tmp_path / 'coerced.jsonl'}', line 3, field 'event_time': "
                                       "expected long, got number 4.5 (not a whole number)\n")
    assert sum(end_offsets(bootstrap, topics.input).values()) == 0
