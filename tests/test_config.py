"""Config loading: types, defaults, interpolation, and errors that name the key."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamer.config import (
    BatchingConfig,
    Config,
    InputConfig,
    ModelConfig,
    OutputConfig,
    Secret,
    redacted,
    with_overrides,
)
from streamer.config_file import config_from_dict, load_config
from streamer.errors import ConfigError
from streamer.kafka import clients

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "deploy" / "config" / "example.yaml"
DEPLOY = ROOT / "deploy" / "config" / "deploy.yaml"


def minimal() -> dict[str, Any]:
    return {
        "kafka": {"bootstrap.servers": "127.0.0.1:9092"},
        "input": {"topics": ["features"], "group_id": "g", "schema": "streamer/schemas/feature_event.avsc"},
        "model": {"path": "models/fraud_mlp.onnx", "name": "fraud", "version": "1"},
        "output": {"topic": "predictions"},
    }


def load(doc: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    return config_from_dict(doc, base_dir=ROOT, env=env or {})


def test_example_config_loads_with_defaults() -> None:
    cfg = load_config(EXAMPLE, env={})
    assert cfg.input.topics == ("features",)
    assert cfg.batching == BatchingConfig()  # the example states no default of its own
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


@pytest.mark.parametrize(("online", "says"), [
    ({"http_port": 0}, r"'online\.http_port': must be between 1 and 65535, got 0"),
    ({"grpc_port": 70_000}, r"'online\.grpc_port': must be between 0 \(no gRPC\) and 65535"),
    ({"http_port": 9000, "grpc_port": 9000}, r"'online\.grpc_port': is online\.http_port too \(9000\)"),
])
def test_online_ports_are_refused_naming_the_key(online: dict[str, int], says: str) -> None:
    doc = minimal()
    doc["online"] = online
    with pytest.raises(ConfigError, match=says):
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


# --- A config that exists is valid, however it was built -------------------------------------

@pytest.mark.parametrize(("section", "values", "message"), [
    ("batching", {"max_size": 1_000_000}, r"'batching\.max_size': must be between 1 and 65536, got 1000000"),
    ("batching", {"max_size": 0}, r"'batching\.max_size': must be between 1 and 65536, got 0"),
    ("batching", {"max_wait_ms": -1}, r"'batching\.max_wait_ms': must be >= 0, got -1"),
    ("input", {"topics": ()}, r"'input\.topics': needs at least one topic"),
    ("input", {"format": "protobuf"}, r"'input\.format': must be one of 'avro', 'avro-confluent', 'json'"),
    ("input", {"format": "avro-confluent"}, r"'input\.registry': is required for format 'avro-confluent'"),
    ("input", {"schema": None}, r"'input\.schema': is required for format 'avro'"),
    ("input", {"consume_timeout_ms": -1}, r"'input\.consume_timeout_ms': must be >= 0, got -1"),
    ("input", {"feature_min": 2.0, "feature_max": 1.0},
     r"'input\.feature_min': 2\.0 is above input\.feature_max"),
    ("model", {"path": ROOT / "models" / "nope.onnx"}, r"'model\.path': no model file at"),
    ("model", {"providers": ()}, r"'model\.providers': needs at least one"),
    ("model", {"intra_op_threads": -1}, r"'model\.intra_op_threads': must be >= 0, got -1"),
    ("model", {"path": ROOT / "models"}, r"'model\.path': no model file at"),  # a folder without versions
    ("model", {"fallback_scores": (0.0,), "fallback_path": ROOT / "models" / "fraud_mlp.onnx"},
     r"'model\.fallback_scores': set model\.fallback_path or model\.fallback_scores, not both"),
    ("model", {"fallback_scores": ()}, r"'model\.fallback_scores': needs at least one score"),
    ("model", {"fallback_path": ROOT / "nope.onnx"}, r"'model\.fallback_path': no fallback model file at"),
    ("model", {"breaker_failures": 0}, r"'model\.breaker_failures': must be >= 1, got 0"),
    ("model", {"breaker_probe_max_ms": 10}, r"'model\.breaker_probe_max_ms': 10 is below model\.breaker_probe_ms"),
    ("model", {"reload_check_ms": -1}, r"'model\.reload_check_ms': must be >= 0, got -1"),
    ("output", {"ack_timeout_ms": 0}, r"'output\.ack_timeout_ms': must be > 0, got 0"),
    ("output", {"schema": ROOT / "nope.avsc"}, r"'output\.schema': no schema file at"),
    ("processing", {"guarantee": "exactly-once"}, r"'processing\.guarantee': must be one of"),
    ("processing", {"commit_interval_ms": 0}, r"'processing\.commit_interval_ms': must be > 0, got 0"),
    ("processing", {"transaction_timeout_ms": 1000},
     r"'processing\.transaction_timeout_ms': must exceed processing\.commit_interval_ms \(1000\)"),
    ("processing", {"max_poison_fraction": 0.0}, r"'processing\.max_poison_fraction': must be in \(0, 1\]"),
    ("processing", {"retry_backoff_max_ms": 100},
     r"'processing\.retry_backoff_max_ms': must be >= processing\.retry_backoff_ms \(500\), got 100"),
    ("processing", {"max_redrives": -1}, r"'processing\.max_redrives': must be >= 0, got -1"),
    ("metrics", {"port": 65_536}, r"'metrics\.port': must be between 0 and 65535, got 65536"),
    ("metrics", {"port": -1}, r"'metrics\.port': must be between 0 and 65535, got -1"),
    ("metrics", {"stats_interval_ms": 0}, r"'metrics\.stats_interval_ms': must be > 0, got 0"),
    ("metrics", {"stall_timeout_ms": 0}, r"'metrics\.stall_timeout_ms': must be > 0, got 0"),
    ("metrics", {"enabled": "yes"}, r"'metrics\.enabled': expected true or false, got str 'yes'"),
])
def test_copies_are_validated_like_loaded_configs(section: str, values: dict[str, Any],
                                                  message: str) -> None:
    """``with_overrides`` (``dataclasses.replace``) and a YAML file refuse the same values."""
    cfg = load(minimal())
    with pytest.raises(ConfigError, match=message):
        with_overrides(cfg, **{section: values})
    doc = minimal()
    for key, value in values.items():
        if value is None:
            doc[section].pop(key)  # None in YAML: the key left out
        else:
            yaml_value = str(value) if isinstance(value, Path) else value
            doc.setdefault(section, {})[key] = list(value) if isinstance(value, tuple) else yaml_value
    with pytest.raises(ConfigError, match=message):
        load(doc)


def test_values_the_tests_and_configs_rely_on_stay_valid() -> None:
    cfg = load(minimal())
    with_overrides(cfg, metrics={"port": 0},  # any free port
                   batching={"max_size": 65_536, "max_wait_ms": 0},
                   processing={"max_redrives": 0, "retry_backoff_ms": 100},
                   input={"consume_timeout_ms": 0, "feature_max": 10})  # an int is a fine float


def test_direct_construction_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"'batching\.max_size': must be between 1 and 65536"):
        BatchingConfig(max_size=0)
    with pytest.raises(ConfigError, match=r"'input\.topics': expected a tuple, got list"):
        InputConfig(topics=["t"], group_id="g", format="json")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"'model\.path': expected a file path, got str"):
        ModelConfig(path="models/fraud_mlp.onnx", name="m", version="1")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"'kafka': must be a mapping with at least 'bootstrap\.servers'"):
        Config({}, InputConfig(("t",), "g", format="json"),
               ModelConfig(ROOT / "models" / "fraud_mlp.onnx", "m", "1"), OutputConfig("out"))


# --- One default per key, stated once ----------------------------------------------------------

REQUIRED = object()  # no default: the key must be given


def code_defaults(cls: type = Config, prefix: str = "") -> dict[str, Any]:
    """Every leaf key of the config dataclasses and its default (sections are walked into)."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        sections = [t for t in typing.get_args(hints[f.name]) or (hints[f.name],)
                    if dataclasses.is_dataclass(t) and t is not Secret]
        if sections:
            out.update(code_defaults(sections[0], f"{key}."))
        elif f.default is not dataclasses.MISSING:
            out[key] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # a mapping's: empty
            out[key] = f.default_factory()
        else:
            out[key] = REQUIRED
    return out


@pytest.mark.parametrize(("path", "deliberate"), [
    (EXAMPLE, set()),
    (DEPLOY, {"metrics.enabled", "metrics.host", "online.host"}),  # served in a container network
])
def test_shipped_configs_state_no_default_of_their_own(path: Path, deliberate: set[str]) -> None:
    """A key a shipped config sets with its ``${VAR:-default}`` or a plain value has the code's
    default there, so that the dataclass default is the one default a reader meets."""
    cfg, doc, code = load_config(path, env={}), yaml.safe_load(path.read_text()), code_defaults()
    differ = {}
    for section, values in doc.items():
        for name in values if section != "kafka" else ():
            key, value = f"{section}.{name}", getattr(getattr(cfg, section), name)
            if code[key] not in (REQUIRED, None) and key not in deliberate and value != code[key]:
                differ[key] = (value, code[key])
    assert differ == {}, f"{path.name} restates a default differently (key: (file, code))"


@pytest.mark.parametrize(("key", "value", "says"), [
    ("bogus.property", 1, "No such configuration property"),
    ("linger.ms", "soon", "Invalid value"),  # librdkafka names its alias queue.buffering.max.ms
    ("security.protocol", "carrier-pigeon", "Invalid value"),
])
def test_librdkafka_refusals_name_the_kafka_key_at_load(key: str, value: object, says: str) -> None:
    doc = minimal()
    doc["kafka"][key] = value
    with pytest.raises(ConfigError, match=rf"'kafka\.{re.escape(key)}': librdkafka refuses it: {says}"):
        load(doc)


def test_a_refusal_never_quotes_a_secret() -> None:
    doc = minimal()
    doc["kafka"].update({"sasl.password": "hunter2-s3cret", "security.protocol": "hunter2-s3cret"})
    with pytest.raises(ConfigError) as caught:  # the refused value happens to be the password too
        load(doc)
    assert "kafka.security.protocol" in str(caught.value) and "hunter2" not in str(caught.value)
