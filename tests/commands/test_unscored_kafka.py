"""The commands that neither score nor read the prediction schema (`topics create`, `produce`,
`dlq inspect`, `dlq redrive`) run where `model.path` does not exist; a dead letter asked for by
id or place that is not there exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from streamer.cli import main
from streamer.errors import EXIT_CONFIG
from tests.conftest import Topics, read_all
from tests.support.faults import write_config

pytestmark = pytest.mark.kafka


def without_model(tmp_path: Path, bootstrap: str, topics: Topics) -> Path:
    """The example config on these topics, its model.path a file that does not exist."""
    path = write_config(tmp_path / "config.yaml", bootstrap=bootstrap, input_topic=topics.input,
                        output_topic=topics.output, group=topics.group, guarantee="at_least_once")
    doc = yaml.safe_load(path.read_text())
    doc["model"]["path"] = str(tmp_path / "not-here" / "model.onnx")
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_commands_that_do_not_score_start_without_the_model_file(
        bootstrap: str, topics: Topics, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = without_model(tmp_path, bootstrap, topics)
    assert main(["run", "--config", str(path)]) == EXIT_CONFIG  # scoring needs it: refused
    assert "config key 'model.path'" in capsys.readouterr().err

    assert main(["topics", "create", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"exists   {topics.input} (input.topics[0])" in out and f"{topics.dlq}" in out, out

    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"event_id": f"e-{i}", "entity_id": "a", "event_time": 1_700_000_000_000,
                                          "features": [0.5] * 32}) + "\n" for i in range(3)))
    assert main(["produce", "--config", str(path), str(events)]) == 0
    assert capsys.readouterr().out == f"produced 3 events to {topics.input} (avro)\n"
    assert len(read_all(bootstrap, topics.input)) == 3

    assert main(["dlq", "inspect", "--config", str(path)]) == 0
    assert capsys.readouterr().out == "no dead letters\n"
    assert main(["dlq", "redrive", "--config", str(path)]) == 0
    assert capsys.readouterr().out.startswith("redriven 0, refused 0")


@pytest.mark.parametrize("asked", [["--event-id", "nope"], ["--offset", "0:99"]])
def test_a_dead_letter_asked_for_that_is_not_there_exits_2(
        asked: list[str], bootstrap: str, topics: Topics, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = without_model(tmp_path, bootstrap, topics)
    assert main(["dlq", "redrive", "--config", str(path), *asked]) == EXIT_CONFIG
    got = capsys.readouterr()
    assert got.out.rstrip().endswith(f"not found {asked[1]}"), got.out
    assert got.err == f"streamer: no dead letter in {topics.dlq} has {asked[1]} (streamer dlq inspect lists them)\n"


def test_tail_of_a_topic_that_is_not_there_exits_2_naming_the_flag(
        bootstrap: str, topics: Topics, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path / "config.yaml", bootstrap=bootstrap, input_topic=topics.input,
                        output_topic=topics.output, group=topics.group, guarantee="at_least_once")
    missing = f"{topics.output}-not-here"
    assert main(["tail", "--config", str(path), "--topic", missing]) == EXIT_CONFIG
    assert capsys.readouterr().err == f"streamer: flag --topic: topic '{missing}' does not exist\n"
