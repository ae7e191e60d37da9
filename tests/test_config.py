"""Config loading: types, defaults, interpolation, and errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from streamer.kafka import clients
from streamer.config import Secret, config_from_dict, load_config, redacted
from streamer.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "deploy" / "config" / "example.yaml"


def minimal() -> dict[str, Any]:
    return {
        "kafka": {"bootstrap.servers": "127.0.0.1:9092"},
        "input": {"topics": ["features"], "group_id": "g", "schema": "schemas/feature_event.avsc"},
        "model": {"path": "models/fraud_mlp.onnx", "name": "fraud", "version": "1"},
        "output": {"topic": "predictions"},
    }


def load(doc: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    return config_from_dict(doc, base_dir=ROOT, env=env or {})


def test_example_config_loads_with_defaults() -> None:
    cfg = load_config(EXAMPLE, env={})
    assert cfg.input.topics == ("features",)
    assert cfg.batching.max_size == 512 and cfg.batching.max_wait_ms == 20
    assert cfg.model.providers == ("cuda", "cpu")
    assert cfg.model.path == ROOT / "models" / "fraud_mlp.onnx"
    assert cfg.kafka["bootstrap.servers"] == "127.0.0.1:9092"


def test_environment_interpolation_with_types_and_defaults() -> None:
    cfg = load_config(EXAMPLE, env={"KAFKA_BOOTSTRAP": "b:1", "MAX_BATCH_SIZE": "64",
                                    "INPUT_TOPIC": "clicks"})
    assert cfg.kafka["bootstrap.servers"] == "b:1"
    assert cfg.batching.max_size == 64
    assert cfg.input.topics == ("clicks",)


def test_missing_key_is_named() -> None:
    doc = minimal()
    del doc["model"]["version"]
    with pytest.raises(ConfigError, match=r"'model\.version': is required but missing"):
        load(doc)


def test_wrong_type_is_named() -> None:
    doc = minimal()
    doc["batching"] = {"max_size": "lots"}
    with pytest.raises(ConfigError, match=r"'batching\.max_size': expected an integer, got str 'lots'"):
        load(doc)


def test_oversized_batch_is_refused() -> None:
    doc = minimal()
    doc["batching"] = {"max_size": 1_000_000}
    with pytest.raises(ConfigError, match=r"'batching\.max_size': must be between 1 and 65536"):
        load(doc)


def test_unknown_key_and_bad_enum_are_named() -> None:
    doc = minimal()
    doc["batching"] = {"max_sise": 8}
    with pytest.raises(ConfigError, match=r"'batching\.max_sise': unknown key"):
        load(doc)
    doc = minimal()
    doc["input"]["format"] = "protobuf"
    with pytest.raises(ConfigError,
                       match=r"'input\.format': must be one of 'avro', 'avro-confluent', 'json'"):
        load(doc)


def test_unset_variable_is_named() -> None:
    doc = minimal()
    doc["output"]["topic"] = "${OUT_TOPIC}"
    with pytest.raises(ConfigError, match=r"'output\.topic': environment variable OUT_TOPIC is not set"):
        load(doc)


def test_missing_model_file_is_named() -> None:
    doc = minimal()
    doc["model"]["path"] = "models/nope.onnx"
    with pytest.raises(ConfigError, match=r"'model\.path': no model file"):
        load(doc)


def test_bad_yaml_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kafka: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_secrets_never_print() -> None:
    doc = minimal()
    doc["kafka"]["sasl.password"] = "${SASL_PASSWORD}"
    cfg = load(doc, env={"SASL_PASSWORD": "hunter2-s3cret"})
    assert isinstance(cfg.kafka["sasl.password"], Secret)
    for text in (repr(cfg), str(cfg), repr(redacted(cfg)), str(cfg.kafka)):
        assert "hunter2-s3cret" not in text
    assert clients.producer_config(cfg)["sasl.password"] == "hunter2-s3cret"


def test_safety_settings_cannot_be_turned_off() -> None:
    doc = minimal()
    doc["kafka"]["enable.auto.commit"] = True
    with pytest.raises(ConfigError, match=r"'kafka\.enable\.auto\.commit': must be false"):
        clients.consumer_config(load(doc))
    conf = clients.consumer_config(load(minimal()))
    assert conf["enable.auto.offset.store"] == "false"
    assert conf["partition.assignment.strategy"] == "cooperative-sticky"
    assert clients.producer_config(load(minimal()))["enable.idempotence"] == "true"


def test_round_trip_of_example_through_yaml() -> None:
    """The example is valid YAML whose every section the loader knows."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    assert set(doc) <= {"kafka", "input", "model", "batching", "output", "processing", "metrics"}
