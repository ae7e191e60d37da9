"""`--model NAME` on a real broker: a replay writes the named model's predictions, with its version,
and evaluate proves a candidate against that model as the champion."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from streamer.cli import main
from streamer.formats.avro import AvroCodec, load_schema
from tests.commands.test_models_batch import ENCODER, features_of, models_config, offline
from tests.conftest import Topics, read_all
from tests.jobs.support import ROOT, events_file

MLP = ROOT / "models" / "fraud_mlp.onnx"
N = 150

pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("own_signals")]


def produced(tmp_path: Path, bootstrap: str, topics: Topics) -> tuple[Path, list[str], np.ndarray]:
    """The two-model config on the test's topics, its input holding ``N`` events; their ids and features."""
    config = models_config(tmp_path, bootstrap, run=topics.group.removeprefix("group-"))
    source = events_file(tmp_path / "events.parquet", N)
    assert main(["produce", "--config", str(config), str(source)]) == 0
    return (config, *features_of(source))


def test_replay_with_model_writes_that_models_predictions_and_its_version(
        bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    config, ids, x = produced(tmp_path, bootstrap, topics)
    out = f"{topics.output}.acme"
    assert main(["replay", "--config", str(config), "--model", "acme", "--from", "earliest",
                 "--output-topic", out]) == 0
    decoder = AvroCodec(load_schema(ROOT / "streamer" / "schemas" / "prediction.avsc"))
    preds = {p["event_id"]: p for p in (decoder.decode(m.value()) for m in read_all(bootstrap, out))}
    assert sorted(preds) == sorted(ids)
    assert {(p["model_name"], p["model_version"]) for p in preds.values()} == {("acme", "7")}
    np.testing.assert_array_equal(np.array([preds[i]["scores"] for i in ids], np.float32), offline(ENCODER, x))


def test_evaluate_with_model_proves_a_candidate_against_that_model(
        bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    config, ids, x = produced(tmp_path, bootstrap, topics)
    report = tmp_path / "report"
    assert main(["evaluate", "--config", str(config), "--model", "acme", "--candidate", str(MLP),
                 "--candidate-version", "8", "--from", "earliest", "--report", str(report),
                 "--min-events", "10", "--bootstrap", "10"]) == 0
    run = json.loads((report / "report.json").read_text())["run"]
    assert (run["champion"]["name"], run["champion"]["version"]) == ("acme", "7")
    rows = pq.read_table(report / "predictions").to_pylist()
    got = {r["event_id"]: r for r in rows}
    assert sorted(got) == sorted(ids)
    np.testing.assert_array_equal(np.array([got[i]["champion_scores"] for i in ids], np.float32), offline(ENCODER, x))
    np.testing.assert_array_equal(np.array([got[i]["candidate_scores"] for i in ids], np.float32), offline(MLP, x))
