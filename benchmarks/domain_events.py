"""The domain-event figures' inputs: for (i), (j), (n) and (o), a topic filled and the config that reads it.

(i) is (c)'s 32 features as named fields; (j) a mixed 12-field event into a ColumnTransformer
model; (n) and (o) are (j)'s events as JSON and as protobuf-confluent (throughput.py's docstring
describes each figure). It imports nothing from benchmarks/, so tests import its schemas and
events as ``benchmarks.domain_events``.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from streamer.commands.demo import encoded_events, produce_events
from streamer.config import Config, InputSource, OutputTarget, RegistryConfig
from streamer.formats.configured import input_codec
from streamer.kafka.topics import create_topics

CONVERTER_MODELS = Path(__file__).resolve().parent.parent / "models" / "build_converter_models.py"

NAMED = {"type": "record", "name": "NamedFeatures", "namespace": "bench", "fields": [
    {"name": "event_id", "type": "string"}, {"name": "entity_id", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    *({"name": f"f{k}", "type": "float"} for k in range(32))]}
MIXED = {"type": "record", "name": "Order", "namespace": "bench", "fields": [
    {"name": "event_id", "type": "string"}, {"name": "entity_id", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "country", "type": "string"}, {"name": "channel", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "age_days", "type": ["null", "float"], "default": None},
    {"name": "n_items", "type": "long"}, {"name": "merchant", "type": "string"},
    {"name": "device", "type": {"type": "enum", "name": "Device", "symbols": ["ios", "android", "web"]}},
    {"name": "is_new", "type": "boolean"}, {"name": "hint", "type": "double"}]}


def named_inputs(base: Config, bootstrap: str, events: list[dict[str, object]], folder: Path) -> Config:
    """(i): the events' 32 features as fields f0..f31 in their own topic, stacked into the model's input."""
    schema = folder / "named.avsc"
    schema.write_text(json.dumps(NAMED))
    topic = f"{base.input.topics[0]}-named"
    create_topics(bootstrap, {topic: 3})
    cfg = replace(base, input=replace(base.input, topics=(topic,), schema=schema),
                  model=replace(base.model, inputs={"features": InputSource(tuple(f"f{k}" for k in range(32)),
                                                                           stacked=True)}))
    named = ({**{k: e[k] for k in ("event_id", "entity_id", "event_time")},
              **{f"f{k}": float(v) for k, v in enumerate(e["features"])}} for e in events)  # type: ignore[arg-type]
    produce_events(bootstrap, topic, encoded_events(input_codec(cfg.input), list(named)))
    return cfg


def mixed_inputs(base: Config, bootstrap: str, n: int, folder: Path) -> Config:
    """(j): mixed 12-field events into the ColumnTransformer model of build_converter_models.py."""
    spec = importlib.util.spec_from_file_location("bcm", CONVERTER_MODELS)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.write_models(folder / "models")
    schema = folder / "mixed.avsc"
    schema.write_text(json.dumps(MIXED))
    topic = f"{base.input.topics[0]}-mixed"
    create_topics(bootstrap, {topic: 3})
    cfg = replace(base, input=replace(base.input, topics=(topic,), schema=schema),
                  output=replace(base.output, schema=None),
                  model=replace(base.model, path=folder / "models" / "column_transformer.onnx",
                                inputs={k: InputSource((k,), fill=0.0 if k == "age_days" else None)
                                        for k in ("country", "channel", "amount", "age_days", "n_items")},
                                outputs={"label": OutputTarget("label"),
                                         "fraud": OutputTarget("probabilities", column=1)}))
    produce_events(bootstrap, topic, encoded_events(input_codec(cfg.input), mixed_rows(n)))
    return cfg


def mixed_rows(n: int) -> list[dict[str, Any]]:
    """(j)'s events, the same for (n) and (o): one in ten has no age_days (the input's fill)."""
    rng = np.random.default_rng(11)
    return [{"event_id": f"m{i}", "entity_id": f"c{i % 97}", "event_time": 1_700_000_000_000 + i,
             "country": ["US", "DE", "FR", "BR"][i % 4], "channel": ["web", "app", "pos"][i % 3],
             "amount": float(rng.lognormal(3, 1)), "age_days": None if i % 10 == 0 else float(i % 2000),
             "n_items": i % 9 + 1, "merchant": f"shop-{i % 50}", "device": ["ios", "android", "web"][i % 3],
             "is_new": i % 7 == 0, "hint": 0.5} for i in range(n)]


def json_inputs(mixed: Config, bootstrap: str, n: int) -> Config:
    """(n): (j)'s events as named-field JSON (input.format json, no schema) in their own topic: the
    processor's JSON named-field path (formats/columnar/json_fields.py), (j)'s model and outputs."""
    topic = f"{mixed.input.topics[0]}-json"
    create_topics(bootstrap, {topic: 3})
    cfg = replace(mixed, input=replace(mixed.input, topics=(topic,), format="json", schema=None))
    produce_events(bootstrap, topic, encoded_events(input_codec(cfg.input), mixed_rows(n)))
    return cfg


def order_class() -> Any:
    """order.proto: (j)'s event as a proto3 message, ``age_days`` an ``optional float`` (a null is
    the field not sent), ``device`` an enum."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    t = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="order.proto", package="bench", syntax="proto3")
    device = fd.enum_type.add(name="Device")
    for number, name in enumerate(["ios", "android", "web"]):
        device.value.add(name=name, number=number)
    m = fd.message_type.add(name="Order")
    m.oneof_decl.add(name="_age_days")  # the synthetic oneof protoc writes for `optional`
    fields = [("event_id", t.TYPE_STRING), ("entity_id", t.TYPE_STRING), ("event_time", t.TYPE_INT64),
              ("country", t.TYPE_STRING), ("channel", t.TYPE_STRING), ("amount", t.TYPE_DOUBLE),
              ("age_days", t.TYPE_FLOAT), ("n_items", t.TYPE_INT64), ("merchant", t.TYPE_STRING),
              ("device", t.TYPE_ENUM), ("is_new", t.TYPE_BOOL), ("hint", t.TYPE_DOUBLE)]  # MIXED's order
    for number, (name, kind) in enumerate(fields, 1):
        field = m.field.add(name=name, number=number, type=kind, label=t.LABEL_OPTIONAL)
        if name == "age_days":
            field.oneof_index, field.proto3_optional = 0, True
        if kind == t.TYPE_ENUM:
            field.type_name = ".bench.Device"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Order"))


def protobuf_inputs(mixed: Config, bootstrap: str, n: int, registry_url: str) -> Config:
    """(o): (j)'s events as protobuf-confluent, written by Confluent's ProtobufSerializer (the schema
    registered with the test registry, tests/support/schema_registry.py), in their own topic."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = f"{mixed.input.topics[0]}-protobuf"
    create_topics(bootstrap, {topic: 3})
    cfg = replace(mixed, input=replace(mixed.input, topics=(topic,), format="protobuf-confluent", schema=None,
                                       registry=RegistryConfig(url=registry_url)))
    message = order_class()
    serializer = ProtobufSerializer(message, SchemaRegistryClient({"url": registry_url, "timeout": 10}),
                                    {"use.deprecated.format": False})
    context = SerializationContext(topic, MessageField.VALUE)
    produce_events(bootstrap, topic, ((str(e["entity_id"]).encode(),
                                       serializer(message(**{k: v for k, v in e.items() if v is not None}), context))
                                      for e in mixed_rows(n)))
    return cfg
