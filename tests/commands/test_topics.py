"""`streamer topics create` (commands/topics.py): which topics, with which settings, and its lines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from streamer.commands import topics
from streamer.commands.topics import TopicsPlan, config_topics, create_topics, exit_code
from streamer.config import ChallengerConfig, ModelEntry, ModelsConfig, RouteConfig
from streamer.config_file import load_config, load_unscored, model_names
from streamer.errors import ConfigError
from streamer.kafka.clients import topic_wait
from tests.kafka.test_topics import FakeAdmin

ROOT = Path(__file__).resolve().parents[2]
CFG = load_config(ROOT / "deploy" / "config" / "example.yaml",
                  env={"KAFKA_BOOTSTRAP": "fake:9092", "INPUT_TOPIC": "in", "OUTPUT_TOPIC": "out", "GROUP_ID": "g"})


def test_the_topics_are_inputs_output_dead_letters_and_shadow_when_on() -> None:
    assert config_topics(CFG) == {"in": "input.topics[0]", "out": "output.topic",
                                  "in.dlq": "processing.dead_letter_topic"}
    shadowed = replace(CFG, shadow=replace(CFG.shadow, challengers=(ChallengerConfig(CFG.model.path, "b", "1"),)))
    assert config_topics(shadowed)["out.shadow"] == "shadow.topic"


def test_with_topic_per_model_each_model_has_its_topic_created_and_the_routed_ones_waited_for() -> None:
    """``output.topic_per_model``: ``topics create`` makes ``<output.topic>.<model>`` for every model
    of the config; the processor waits for those it scores with (kafka/clients.py topic_wait)."""
    named = {"acme": ModelEntry(replace(CFG.model, name="acme")), "idle": ModelEntry(replace(CFG.model, name="idle"))}
    cfg = replace(CFG, model=named["acme"].model, models=ModelsConfig(named=named, default="acme"), route=RouteConfig("tenant", {"a": "acme"}),
                  output=replace(CFG.output, topic_per_model=True))
    assert config_topics(cfg) == {"in": "input.topics[0]", "out.acme": "output.topic_per_model",
                                  "out.idle": "output.topic_per_model", "in.dlq": "processing.dead_letter_topic"}
    assert topic_wait(cfg)._needed == [("input.topics[0]", "in"), ("output.topic_per_model", "out.acme")]


def test_bad_flags_are_config_errors() -> None:
    for bad in ({"partitions": 0}, {"replication": 0}, {"retention_ms": -2}):
        with pytest.raises(ConfigError):
            TopicsPlan(**bad)  # type: ignore[arg-type]


def test_one_line_per_topic_and_exit_3_on_a_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = FakeAdmin(refuse={"in.dlq": 37})  # INVALID_REPLICATION_FACTOR
    monkeypatch.setattr(topics, "make_admin", lambda cfg: admin)
    lines = create_topics(CFG, TopicsPlan(partitions=4))
    assert lines[:2] == ["created  in (input.topics[0]): 4 partitions, replication 1",
                         "created  out (output.topic): 4 partitions, replication 1"]
    assert lines[2].startswith("FAIL     in.dlq (processing.dead_letter_topic): ")
    assert exit_code(lines) == 3
    admin.refuse.clear()
    again = create_topics(CFG, TopicsPlan())
    assert again[:2] == ["exists   in (input.topics[0]): 4 partitions", "exists   out (output.topic): 4 partitions"]
    assert again[2] == "created  in.dlq (processing.dead_letter_topic): 3 partitions, replication 1"
    assert exit_code(again) == 0


def test_topics_create_reads_the_model_names_of_a_file_whose_models_it_does_not_load(tmp_path: Path) -> None:
    """``topics create`` runs where the model files are not (load_unscored): the per-model topics
    come from the names the file gives (config_file.model_names), the repository folder's too."""
    (tmp_path / "repository" / "globex").mkdir(parents=True)
    (tmp_path / "repository" / "globex" / "model.yaml").write_text("model: {version: '7'}\n")
    (tmp_path / "many.yaml").write_text(
        "kafka: {bootstrap.servers: 'fake:9092'}\n"
        "input: {topics: [in], group_id: g, format: json}\n"
        "models: {default: acme, repository: repository, named: {acme: {model: {path: gone.onnx, version: '1'}}}}\n"
        "output: {topic: out, topic_per_model: true}\n")
    path = tmp_path / "many.yaml"
    assert config_topics(load_unscored(path), model_names(path) or ()) == {
        "in": "input.topics[0]", "out.acme": "output.topic_per_model", "out.globex": "output.topic_per_model",
        "in.dlq": "processing.dead_letter_topic"}
