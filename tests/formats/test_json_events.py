"""formats/json_events.py: JSON events checked against a JSON Schema, from a file or by the id
in Confluent's framing, with confluent-kafka's own JSONSerializer and JSONDeserializer as the
reference for the bytes and the decoded objects; and numbers sent as strings or booleans refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from streamer.errors import ConfigError, DeserializeError, SerializeError, ValidationError
from streamer.formats.configured import input_codec
from streamer.formats.json_events import CheckedJsonCodec, ConfluentJsonCodec, JsonCodec, JsonSchemaCheck
from streamer.model.contract import Contract
from streamer.testing import matrix_signature

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "streamer" / "schemas" / "feature_event.schema.json").read_text())
EVENT = {"event_id": "e-1", "entity_id": "a-9", "event_time": 1764417600123, "features": [0.5, -1.0]}


def test_a_violation_is_a_validate_error_naming_the_path() -> None:
    check = JsonSchemaCheck(SCHEMA)
    check.check(EVENT)
    for bad, where in [({**EVENT, "features": [0.5, "1.5"]}, "$.features[1]"),
                       ({**EVENT, "features": [True]}, "$.features[0]"),
                       ({**EVENT, "event_time": "yesterday"}, "$.event_time"),
                       ({k: v for k, v in EVENT.items() if k != "event_id"}, "$")]:
        with pytest.raises(ValidationError) as caught:
            check.check(bad)
        assert caught.value.stage == "validate" and str(caught.value).startswith(f"JSON Schema: {where}:")


def test_a_schema_file_that_is_not_a_json_schema_is_refused_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"type": "no-such-type"}))
    with pytest.raises(ConfigError) as caught:
        JsonSchemaCheck.from_file(tmp_path / "bad.json")
    assert caught.value.key == "input.json_schema" and "not a valid JSON Schema" in str(caught.value)
    with pytest.raises(ConfigError, match="cannot read"):
        JsonSchemaCheck.from_file(tmp_path / "missing.json")


def test_a_checked_json_codec_reads_json_as_json_does_and_refuses_violations() -> None:
    codec = CheckedJsonCodec(JsonSchemaCheck(SCHEMA))
    data = JsonCodec().encode(EVENT)
    assert codec.decode(data) == JsonCodec().decode(data) == EVENT
    assert codec.encode(EVENT) == data
    with pytest.raises(ValidationError):
        codec.decode(JsonCodec().encode({**EVENT, "features": ["x"]}))
    with pytest.raises(SerializeError):
        codec.encode({**EVENT, "features": ["x"]})
    with pytest.raises(DeserializeError):
        codec.decode(b"{not json")


def test_confluent_json_framing_equals_confluents_serializer_and_deserializer() -> None:
    registry = SchemaRegistryClient.new_client({"url": "mock://json-schema"})
    ours = ConfluentJsonCodec(registry, "features-value", JsonSchemaCheck(SCHEMA))
    context = SerializationContext("features", MessageField.VALUE)
    theirs = JSONSerializer(json.dumps(SCHEMA), registry)(EVENT, context)
    framed = ours.encode(EVENT)
    assert framed[:5] == theirs[:5]  # magic byte and the same registered id
    assert json.loads(framed[5:]) == json.loads(theirs[5:])
    reader = JSONDeserializer(None, schema_registry_client=registry)
    for data in (framed, theirs):
        assert ours.decode(data) == reader(data, context) == EVENT
    bad = theirs[:5] + json.dumps({**EVENT, "features": ["1"]}).encode()
    with pytest.raises(ValidationError, match=r"\$\.features\[0\]"):
        ours.decode(bad)
    with pytest.raises(DeserializeError, match="magic byte"):
        ours.decode(b"\x01" + theirs[1:])


def test_an_avro_id_is_not_a_json_schema(feature_avro: Any = None) -> None:
    registry = SchemaRegistryClient.new_client({"url": "mock://json-avro"})
    from confluent_kafka.schema_registry import Schema

    avro_id = registry.register_schema("x-value", Schema((ROOT / "streamer" / "schemas" / "feature_event.avsc").read_text(), "AVRO"))
    codec = ConfluentJsonCodec(registry, "x-value")
    with pytest.raises(DeserializeError, match=f"schema id {avro_id} is not a plain JSON Schema"):
        codec.decode(b"\0" + avro_id.to_bytes(4, "big") + JsonCodec().encode(EVENT))


def test_json_input_with_a_schema_file_is_checked_and_keeps_off_the_unchecked_fast_path() -> None:
    from streamer.config import with_overrides
    from streamer.config_file import load_config
    from streamer.pipeline.stages import Stages

    cfg = load_config(ROOT / "deploy" / "config" / "example.yaml", env={})
    cfg = with_overrides(cfg, input={"format": "json", "schema": None,
                                     "json_schema": ROOT / "streamer" / "schemas" / "feature_event.schema.json"})
    codec = input_codec(cfg.input)
    assert isinstance(codec, CheckedJsonCodec)
    from streamer.model.contract import Contract
    from streamer.testing import matrix_signature

    assert Stages(codec, JsonCodec(), cfg.input, Contract.of(matrix_signature(2))).fast_decoder is None
    with pytest.raises(ConfigError, match="input.json_schema"):
        with_overrides(cfg, input={"format": "avro", "schema": ROOT / "streamer" / "schemas" / "feature_event.avsc"})


def test_feature_arrays_follow_the_conversion_table_without_a_schema_too() -> None:
    """A string is refused, a bool is 1 or 0, an integer past 2^24 is refused (float32 would round
    it): the reference decides each, and the fast path leaves each of them to it."""
    from streamer.config import InputConfig
    from streamer.formats.columnar.json_columns import JsonColumns
    from streamer.pipeline.validate import EventValidator

    cfg = InputConfig(topics=("t",), group_id="g", format="json")
    validator = EventValidator(cfg, Contract.of(matrix_signature(2)))
    for odd, refusal in (("1.5", "not a number"), (2**24 + 1, "the integer 16777217, beyond 2\\^24")):
        payload = {**EVENT, "features": [0.5, odd]}
        with pytest.raises(ValidationError, match=refusal):
            validator.to_record(payload, "t", 0, 0, None, 0)
        cols = JsonColumns(cfg, 2).decode([json.dumps(payload).encode()])
        assert cols.fallback.tolist() == [0]  # left to the reference, which refuses it
    taken = {**EVENT, "features": [True, 2**24]}
    assert validator.to_record(taken, "t", 0, 0, None, 0).features.tolist() == [1.0, 2.0**24]
    assert JsonColumns(cfg, 2).decode([json.dumps(taken).encode()]).fallback.tolist() == [0]  # the bool
    assert validator.to_record(EVENT, "t", 0, 0, None, 0).features.tolist() == [0.5, -1.0]


def test_a_schema_whose_ref_cannot_be_resolved_dead_letters_rows_instead_of_crashing() -> None:
    check = JsonSchemaCheck({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}})
    check.check({"y": 1})  # the $ref is not reached
    with pytest.raises(DeserializeError, match="cannot be applied"):
        check.check({"x": 1})


def test_an_integer_past_a_doubles_range_is_a_validate_error_not_a_crash() -> None:
    from streamer.config import InputConfig
    from streamer.model.contract import exact
    from streamer.pipeline.validate import EventValidator

    huge = 10 ** 400
    validator = EventValidator(InputConfig(topics=("t",), group_id="g", format="json"), Contract.of(matrix_signature(2)))
    with pytest.raises(ValidationError):
        validator.to_record({**EVENT, "features": [0.5, huge]}, "t", 0, 0, None, 0)
    with pytest.raises(ValueError, match=r"beyond 2\^24"):
        exact(huge, "float32")
