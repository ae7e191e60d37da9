"""The schemas and codecs a config chooses: the input's for ``input.format`` (``input.schema`` read once), the prediction schema, and the predictions' codec for ``output.format``."""

from __future__ import annotations

from streamer.config import Config, InputConfig, OutputConfig
from streamer.formats.avro import AvroCodec, AvroSchema, load_schema
from streamer.formats.codec import Codec
from streamer.formats.confluent import ConfluentAvroCodec, SchemaIds
from streamer.formats.json_events import CheckedJsonCodec, ConfluentJsonCodec, JsonCodec, JsonSchemaCheck
from streamer.formats.protobuf import ConfluentProtobufCodec
from streamer.formats.subjects import confluent_output_codec, registry_client
from streamer.model.contract import Contract
from streamer.model.prediction_schema import check_schema, made_schema
from streamer.schemas import bundled


def input_schema(i: InputConfig) -> AvroSchema | None:
    """``input.schema`` when the input is Avro with one (None for JSON and Protobuf: their fields
    are not declared in an Avro schema)."""
    if i.format not in ("avro", "avro-confluent") or i.schema is None:
        return None
    return load_schema(i.schema, key="input.schema")


def input_codec(i: InputConfig, schema: AvroSchema | None = None) -> Codec:
    """The events' codec for ``input.format``. ``schema``: ``input.schema`` as :func:`input_schema`
    read it (None: read here, where the format has one)."""
    check = JsonSchemaCheck.from_file(i.json_schema) if i.json_schema is not None else None
    if i.format == "json":
        return JsonCodec(i.max_message_bytes) if check is None else CheckedJsonCodec(check, i.max_message_bytes)
    schema = schema if schema is not None else input_schema(i)
    if i.format == "avro":
        assert schema is not None  # checked when the config was loaded
        return AvroCodec(schema, i.max_message_bytes)
    registry = i.registry  # every other format is Confluent-framed: a registry, checked when loaded
    assert registry is not None
    client = registry_client(registry)
    retry_s = registry.not_found_retry_ms / 1000.0
    # Decoding reads each message's writer schema by its id; the schema and the subject serve only
    # streamer's own producers of input (streamer produce, the demo, the tests).
    subject = registry.subject or f"{i.topics[0]}-value"
    if i.format == "protobuf-confluent":
        return ConfluentProtobufCodec(client, i.max_message_bytes, SchemaIds(client, retry_s),
                                      fresh=lambda: registry_client(registry))
    if i.format == "json-schema-confluent":
        return ConfluentJsonCodec(client, subject, check, i.max_message_bytes, SchemaIds(client, retry_s))
    return ConfluentAvroCodec(client, subject, schema, i.max_message_bytes, not_found_retry_s=retry_s)


def prediction_schema(o: OutputConfig, contract: Contract | None, schema_in: AvroSchema | None) -> AvroSchema:
    """The prediction schema: ``output.schema`` (checked against what the model's ``contract``
    and ``output.include`` write), else the bundled one or, with named outputs or pass-through
    fields, one made from them (``schema_in``: the input's Avro schema, the pass-through fields'
    types). ``contract`` None: no model to check against (the bundled layout)."""
    shipped = load_schema(bundled("prediction.avsc"), key="output.schema")
    made = shipped
    if contract is not None and (contract.score_column is None or o.include):
        made = made_schema(shipped, contract, o.include, schema_in)
    if o.schema is None:
        return made
    user = load_schema(o.schema, key="output.schema")
    if contract is not None:
        check_schema(user, made)
    return user


def output_codec(cfg: Config, schema: AvroSchema | None = None) -> Codec:
    """The predictions' codec for ``output.format`` and the prediction ``schema`` (None: the one
    of no model, :func:`prediction_schema` without a contract): plain Avro, Avro framed with the
    id the schema has in the registry (registered or looked up, its compatibility checked,
    formats/subjects.py), or JSON objects with the schema's fields."""
    schema = schema if schema is not None else prediction_schema(cfg.output, None, None)
    if cfg.output.format == "json":
        return JsonCodec()
    if cfg.output.format == "avro-confluent":
        return confluent_output_codec(cfg, schema)
    return AvroCodec(schema)
