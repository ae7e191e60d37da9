"""`streamer check` and `streamer run` agree on which missing topics start-up creates (commands/check.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from streamer.commands import check
from streamer.config import Config, with_overrides
from streamer.config_file import load_config

ROOT = Path(__file__).resolve().parents[2]


def config(**overrides: dict[str, object]) -> Config:
    cfg = load_config(ROOT / "deploy" / "config" / "example.yaml",
                      env={"KAFKA_BOOTSTRAP": "fake:9092", "INPUT_TOPIC": "in", "OUTPUT_TOPIC": "out",
                           "GROUP_ID": "g"})
    return with_overrides(cfg, **overrides)


class Listing:
    """An admin client whose cluster has ``topics`` (each with two partitions)."""

    def __init__(self, *topics: str) -> None:
        self.topics = {t: SimpleNamespace(error=None, partitions={0: None, 1: None}) for t in topics}

    def list_topics(self, timeout: float) -> SimpleNamespace:
        return SimpleNamespace(topics=self.topics)


def lines(monkeypatch: pytest.MonkeyPatch, cfg: Config, *existing: str) -> dict[str, str]:
    monkeypatch.setattr(check, "make_admin", lambda cfg: Listing(*existing))
    return {f.key: f.line() for f in check._kafka(cfg, 1.0)}


def test_missing_topics_that_start_up_creates_are_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(input={"create_topics": True}, processing={"create_dead_letter_topic": True})
    found = lines(monkeypatch, cfg, "out")
    assert found["input.topics[0]"] == "ok    input.topics[0]: topic 'in' does not exist on fake:9092: " \
                                       "will be created at start"
    assert found["processing.dead_letter_topic"].startswith("ok    processing.dead_letter_topic: topic 'in.dlq' ")
    assert found["output.topic"] == "ok    output.topic: topic 'out', 2 partitions"


def test_missing_topics_that_start_up_may_not_create_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(input={"create_topics": False}, processing={"create_dead_letter_topic": False})
    found = lines(monkeypatch, cfg)
    for key, topic in [("input.topics[0]", "in"), ("output.topic", "out"), ("processing.dead_letter_topic", "in.dlq")]:
        assert found[key].startswith(f"FAIL  {key}: topic {topic!r} does not exist on fake:9092"), found


def test_existing_topics_are_ok_whatever_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    found = lines(monkeypatch, config(processing={"create_dead_letter_topic": False}), "in", "out", "in.dlq")
    assert all(line.startswith("ok") for line in found.values()), found


@pytest.mark.parametrize("amount", ["amount", "{field: amount, fill: 0}"])
def test_a_nullable_field_mapped_without_fill_is_a_warning_that_names_its_dead_letters(
        tmp_path: Path, amount: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from streamer.cli import main
    from tests.lake.test_table_check import tiny_model

    (tmp_path / "event.avsc").write_text(json.dumps({"type": "record", "name": "Purchase", "fields": [
        {"name": "event_id", "type": "string"}, {"name": "amount", "type": ["null", "float"]},
        {"name": "n_items", "type": "long"}]}))
    (tmp_path / "streamer.yaml").write_text(f"""
kafka: {{bootstrap.servers: "fake:9092"}}
input: {{topics: [in], group_id: g, format: avro, schema: event.avsc}}
model: {{path: {tiny_model(tmp_path / "tiny.onnx")}, name: tiny, version: "1",
         inputs: {{amount: {amount}, n_items: n_items}}}}
output: {{topic: out}}
""")
    monkeypatch.setattr(check, "make_admin", lambda cfg: Listing("in", "out", "in.dlq"))
    code = main(["check", "--config", str(tmp_path / "streamer.yaml")])
    out = capsys.readouterr().out.splitlines()
    warned = [line for line in out if line.startswith("warn")]
    assert code == 0 and out[-1] == "ready to run", out  # a warning: the run starts
    if amount == "amount":
        assert warned == ["warn  model.inputs.amount: field 'amount' can be null in input.schema and "
                          "model.inputs.amount has no fill: a null is a dead letter; set model.inputs.amount.fill "
                          "or make the field not null"]
    else:
        assert warned == []
