"""`streamer produce` refuses what its codecs would convert, file errors say file, line and field,
and `produce` and `tail` never open an ONNX Runtime session (commands/produce.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import onnxruntime
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from streamer.cli import main as cli
from streamer.commands import produce as produce_command
from streamer.commands.produce import prediction_decoder, produce_file, row_check, tail
from streamer.config import Config
from streamer.config_file import config_from_dict, load_config
from streamer.errors import EXIT_CONFIG, ConfigError, FileError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.configured import prediction_schema
from streamer.formats.confluent import ConfluentAvroCodec
from streamer.formats.json_events import JsonCodec
from streamer.model.runner import model_runner
from tests.conftest import ROOT

SCHEMA: dict[str, Any] = {
    "type": "record", "name": "Row", "namespace": "t", "fields": [
        {"name": "i", "type": "int"}, {"name": "l", "type": "long"}, {"name": "f", "type": "float"},
        {"name": "d", "type": "double"}, {"name": "b", "type": "boolean"}, {"name": "s", "type": "string"},
        {"name": "xs", "type": {"type": "array", "items": "long"}},
        {"name": "n", "type": ["null", "long"], "default": None},
        {"name": "items", "type": {"type": "array", "items": {
            "type": "record", "name": "Item", "fields": [{"name": "price", "type": "double"}]}}},
    ]}
GOOD: dict[str, Any] = {"i": 1, "l": 2, "f": 1.5, "d": 2.5, "b": True, "s": "x", "xs": [1, 2], "n": None,
                        "items": [{"price": 1.0}]}

# (field, value, the field path refused with the reason's fragment; None: taken as it is)
AVRO_CASES: list[tuple[str, Any, tuple[str, str] | None]] = [
    ("l", 4.5, ("l", "expected long, got number 4.5 (not a whole number)")),
    ("i", 4.5, ("i", "expected int, got number 4.5 (not a whole number)")),
    ("l", 4.0, ("l", "expected long, got number 4.0 (not a whole number)")),
    ("b", 1, ("b", "expected boolean, got integer 1")),
    ("b", 0.0, ("b", "expected boolean, got number 0.0")),
    ("l", True, ("l", "expected long, got boolean true")),
    ("d", False, ("d", "expected double, got boolean false")),
    ("l", "7", ("l", 'expected long, got string "7"')),
    ("d", "1.5", ("d", 'expected double, got string "1.5"')),
    ("s", 7, ("s", "expected string, got integer 7")),
    ("s", 1.5, ("s", "expected string, got number 1.5")),
    ("i", 2**31, ("i", "expected int, got 2147483648 (out of its range -2147483648..2147483647)")),
    ("i", -2**31 - 1, ("i", "out of its range")),
    ("l", 2**63, ("l", "out of its range")),
    ("xs", [1, 2.5], ("xs[1]", "expected long, got number 2.5 (not a whole number)")),
    ("xs", [1, "2"], ("xs[1]", 'expected long, got string "2"')),
    ("xs", 3, ("xs", "expected array, got integer 3")),
    ("items", [{"price": 1.0}, {"price": "9"}], ("items[1].price", 'expected double, got string "9"')),
    ("items", [{}], ("items[0].price", "is required but missing")),
    ("s", None, ("s", "expected string, got null (the field is not nullable)")),
    ("n", 1.5, ("n", "expected long, got number 1.5 (not a whole number)")),
    ("f", 2**24 + 1, ("f", "cannot hold this integer exactly")),
    ("d", 2**53 + 1, ("d", "cannot hold this integer exactly")),
    ("i", 2**31 - 1, None), ("i", -2**31, None), ("l", 2**63 - 1, None), ("d", 3, None), ("f", 3, None),
    ("d", 2**53, None), ("b", False, None), ("n", 5, None), ("n", None, None), ("xs", [], None),
]


def avro_config(tmp_path: Path, fmt: str) -> Config:
    (tmp_path / "row.avsc").write_text(json.dumps(SCHEMA))
    registry = {"registry": {"url": "http://127.0.0.1:1"}} if fmt == "avro-confluent" else {}
    return config_from_dict({
        "kafka": {"bootstrap.servers": "127.0.0.1:1"},
        "input": {"topics": ["rows"], "group_id": "g", "format": fmt, "schema": str(tmp_path / "row.avsc"),
                  "entity_field": "s", **registry},
        "model": {"path": "models/fraud_mlp.onnx", "name": "fraud", "version": "1"},
        "output": {"topic": "predictions"},
    }, base_dir=ROOT, env={})


def mock_registry() -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": "mock://produce"})


@pytest.mark.parametrize("fmt", ["avro", "avro-confluent"])
@pytest.mark.parametrize(("field", "value", "refused"), AVRO_CASES)
def test_avro_rows_are_taken_as_they_are_or_refused(tmp_path: Path, fmt: str, field: str, value: Any,
                                                     refused: tuple[str, str] | None) -> None:
    cfg = avro_config(tmp_path, fmt)
    row = {**GOOD, field: value}
    found = row_check(cfg)(row)
    if refused is not None:
        assert found is not None and found[0] == refused[0] and refused[1] in found[1], found
        return
    assert found is None
    schema = load_schema(tmp_path / "row.avsc")
    codec = AvroCodec(schema) if fmt == "avro" else ConfluentAvroCodec(mock_registry(), "rows-value", schema)
    assert dict(codec.decode(codec.encode(row))) == row  # written exactly: nothing converted


JSON_SCHEMA = {"type": "object", "required": ["id", "amount"], "properties": {
    "id": {"type": "string"}, "amount": {"type": "integer"}, "rate": {"type": "number"},
    "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "integer"}}}}

JSON_CASES: list[tuple[str, Any, tuple[str, str] | None]] = [
    ("amount", 4.5, ("amount", "4.5 is not of type 'integer'")),
    ("amount", True, ("amount", "True is not of type 'integer'")),
    ("amount", "7", ("amount", "'7' is not of type 'integer'")),
    ("rate", False, ("rate", "False is not of type 'number'")),
    ("ok", 1, ("ok", "1 is not of type 'boolean'")),
    ("id", 7, ("id", "7 is not of type 'string'")),
    ("tags", [1, 2.5], ("tags[1]", "2.5 is not of type 'integer'")),
    ("amount", None, ("amount", "None is not of type 'integer'")),
    ("rate", 3, None), ("amount", 3, None), ("ok", False, None), ("tags", [1, 2], None),
]


@pytest.mark.parametrize("fmt", ["json", "json-schema-confluent"])
@pytest.mark.parametrize(("field", "value", "refused"), JSON_CASES)
def test_json_rows_are_checked_against_input_json_schema(tmp_path: Path, fmt: str, field: str, value: Any,
                                                         refused: tuple[str, str] | None) -> None:
    (tmp_path / "row.schema.json").write_text(json.dumps(JSON_SCHEMA))
    registry = {"registry": {"url": "http://127.0.0.1:1"}} if fmt != "json" else {}
    cfg = config_from_dict({
        "kafka": {"bootstrap.servers": "127.0.0.1:1"},
        "input": {"topics": ["rows"], "group_id": "g", "format": fmt, "json_schema": str(tmp_path / "row.schema.json"),
                  "entity_field": "id", **registry},
        "model": {"path": "models/fraud_mlp.onnx", "name": "fraud", "version": "1"},
        "output": {"topic": "predictions"},
    }, base_dir=ROOT, env={})
    row = {"id": "a", "amount": 1, "rate": 0.5, "ok": True, "tags": [], field: value}
    found = row_check(cfg)(row)
    if refused is None:
        assert found is None
        assert json.loads(JsonCodec().encode(row)) == row
    else:
        assert found is not None and found[0] == refused[0] and refused[1] in found[1], found
    missing = row_check(cfg)({"id": "a"})
    assert missing is not None and "'amount' is a required property" in missing[1]


class NoSession:
    """Stands in for onnxruntime.InferenceSession: a command that does not score must not open one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("an ONNX Runtime session was opened")


def test_a_bad_file_is_refused_with_file_line_and_field_before_anything_is_sent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnxruntime, "InferenceSession", NoSession)
    monkeypatch.setattr(produce_command, "Producer", NoSession)  # nothing may reach a producer
    cfg = avro_config(tmp_path, "avro")
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps({**GOOD, "items": [{"price": 1}, {"price": True}]}) + "\n")
    with pytest.raises(FileError) as refused:
        produce_file(cfg, path)
    assert str(refused.value) == (f"file '{path}', line 3, field 'items[1].price': "
                                  "expected double, got boolean true")
    assert isinstance(refused.value, ConfigError)  # exit code 2
    (tmp_path / "events.csv").write_text("i,l\n3,x\n1,2\n")  # the first bad line in the file's order
    with pytest.raises(FileError, match=r"^file '.*events\.csv', line 2, field 'l': expected long: invalid literal"):
        produce_file(cfg, tmp_path / "events.csv")
    (tmp_path / "events.txt").write_text("")
    with pytest.raises(FileError, match=r"^file '.*events\.txt': is neither JSON Lines"):
        produce_file(cfg, tmp_path / "events.txt")
    (tmp_path / "broken.jsonl").write_text(json.dumps(GOOD) + "\n[1]\n")
    with pytest.raises(FileError, match=r"^file '.*broken\.jsonl', line 2: not a JSON object but list$"):
        produce_file(cfg, tmp_path / "broken.jsonl")


def test_the_cli_says_file_not_config_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["produce", "--config", str(tmp_path / "absent.yaml"), "events.jsonl"]) == EXIT_CONFIG
    assert capsys.readouterr().err == (f"streamer: file '{tmp_path / 'absent.yaml'}': "
                                       "cannot read it: No such file or directory\n")
    (tmp_path / "bad.yaml").write_text("kafka:\n  a: [1\nb: 2\n")
    with pytest.raises(FileError) as bad:
        load_config(tmp_path / "bad.yaml")
    assert str(bad.value).startswith(f"file '{tmp_path / 'bad.yaml'}', line 3: not valid YAML: ")
    assert bad.value.line == 3 and "config key" not in str(bad.value)


def test_tail_decodes_plain_avro_predictions_without_an_onnx_runtime_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    cfg = avro_config(tmp_path, "avro")
    expected = prediction_schema(cfg.output, model_runner(cfg).contract, None)  # with the model loaded, before the patch
    monkeypatch.setattr(onnxruntime, "InferenceSession", NoSession)
    decoder = prediction_decoder(cfg)
    assert isinstance(decoder, AvroCodec)
    assert decoder.schema_json == AvroCodec(expected).schema_json

    class OneMessage:
        def __init__(self, value: bytes) -> None:
            self._value = value

        def value(self) -> bytes:
            return self._value

    prediction = {"event_id": "e1", "entity_id": "a", "scores": [0.5], "model_name": "fraud", "model_version": "1",
                  "source_topic": "rows", "source_partition": 0, "source_offset": 7, "event_time": 1, "scored_at": 2}
    read: list[str] = []

    def read_to_end(consumer: Any, topic: str, from_committed: bool) -> Any:
        read.append(topic)
        return iter([OneMessage(decoder.encode(prediction))])

    monkeypatch.setattr(produce_command, "Consumer", lambda config: type("C", (), {"close": lambda self: None})())
    monkeypatch.setattr(produce_command.clients, "read_to_end", read_to_end)
    out = io.StringIO()
    assert tail(cfg, out, topic="predictions.backfill") == 1
    assert read == ["predictions.backfill"]
    assert json.loads(out.getvalue())["event_id"] == "e1"
