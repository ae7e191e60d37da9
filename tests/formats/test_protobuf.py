"""formats/protobuf.py: Protobuf events in Confluent's framing, read as confluent-kafka's own
ProtobufSerializer writes them and as its ProtobufDeserializer reads them: the same messages,
message indexes for nested types, hostile bytes as deserialize errors."""

from __future__ import annotations

import random

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from streamer.errors import DeserializeError, SerializeError
from streamer.formats.protobuf import ConfluentProtobufCodec, as_mapping, message_indexes

T = descriptor_pb2.FieldDescriptorProto
CONTEXT = SerializationContext("purchases", MessageField.VALUE)
NO_DEPRECATED = {"use.deprecated.format": False}


def purchase_file() -> descriptor_pb2.FileDescriptorProto:
    """shop.proto: Header, then Purchase with a nested Card, an enum, a map, repeated floats."""
    fd = descriptor_pb2.FileDescriptorProto(name="shop.proto", package="shop", syntax="proto3")
    header = fd.message_type.add(name="Header")
    header.field.add(name="source", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    p = fd.message_type.add(name="Purchase")
    card = p.nested_type.add(name="Card")
    card.field.add(name="country", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    card.field.add(name="issuer", number=2, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL)
    channel = p.enum_type.add(name="Channel")
    for i, name in enumerate(["WEB", "APP", "POS"]):
        channel.value.add(name=name, number=i)
    entry = p.nested_type.add(name="TagsEntry", options=descriptor_pb2.MessageOptions(map_entry=True))
    entry.field.add(name="key", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    for number, (name, kind) in enumerate([("event_id", T.TYPE_STRING), ("entity_id", T.TYPE_STRING),
                                           ("event_time", T.TYPE_INT64), ("amount", T.TYPE_DOUBLE),
                                           ("is_new", T.TYPE_BOOL)], 1):
        p.field.add(name=name, number=number, type=kind, label=T.LABEL_OPTIONAL)
    p.field.add(name="features", number=6, type=T.TYPE_FLOAT, label=T.LABEL_REPEATED)
    p.field.add(name="card", number=7, type=T.TYPE_MESSAGE, type_name=".shop.Purchase.Card", label=T.LABEL_OPTIONAL)
    p.field.add(name="channel", number=8, type=T.TYPE_ENUM, type_name=".shop.Purchase.Channel", label=T.LABEL_OPTIONAL)
    p.field.add(name="tags", number=9, type=T.TYPE_MESSAGE, type_name=".shop.Purchase.TagsEntry",
                label=T.LABEL_REPEATED)
    return fd


POOL = descriptor_pool.DescriptorPool()
POOL.Add(purchase_file())
Purchase = message_factory.GetMessageClass(POOL.FindMessageTypeByName("shop.Purchase"))
Card = message_factory.GetMessageClass(POOL.FindMessageTypeByName("shop.Purchase.Card"))
Header = message_factory.GetMessageClass(POOL.FindMessageTypeByName("shop.Header"))


def registry(name: str) -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": f"mock://{name}"})


def test_messages_read_as_confluents_deserializer_reads_them() -> None:
    reg = registry("pb-read")
    write = ProtobufSerializer(Purchase, reg, NO_DEPRECATED)
    read = ProtobufDeserializer(Purchase, NO_DEPRECATED, reg)
    codec = ConfluentProtobufCodec(reg)
    full = Purchase(event_id="e1", entity_id="a9", event_time=1764417600123, amount=12.5, is_new=True,
                    features=[0.5, -1.25], card=Card(country="DE", issuer=7), channel=2, tags={"x": 1.5})
    for message in (full, Purchase(event_id="e2")):
        data = write(message, CONTEXT)
        got = codec.decode(data)
        assert got == as_mapping(read(data, CONTEXT))
    assert codec.decode(write(full, CONTEXT)) == {
        "event_id": "e1", "entity_id": "a9", "event_time": 1764417600123, "amount": 12.5, "is_new": True,
        "features": [0.5, -1.25], "card": {"country": "DE", "issuer": 7}, "channel": "POS", "tags": {"x": 1.5}}
    empty = codec.decode(write(Purchase(event_id="e2"), CONTEXT))
    assert empty["card"] is None and empty["event_time"] == 0 and empty["features"] == []


def test_message_indexes_pick_the_type_in_the_file() -> None:
    assert message_indexes(b"\0\0\0\0\1\0") == ((0,), 6)
    assert message_indexes(b"\0\0\0\0\1\x04\x02\x00") == ((1, 0), 8)  # count 2 (zigzag 4), then 1, 0
    reg = registry("pb-index")
    data = ProtobufSerializer(Header, reg, NO_DEPRECATED)(Header(source="pos-7"), CONTEXT)
    assert ConfluentProtobufCodec(reg).decode(data) == {"source": "pos-7"}
    purchase = ProtobufSerializer(Purchase, reg, NO_DEPRECATED)(Purchase(event_id="e"), CONTEXT)
    assert message_indexes(purchase)[0] == (1,)  # Purchase is the file's second message


def test_hostile_bytes_are_deserialize_errors() -> None:
    reg = registry("pb-hostile")
    data = ProtobufSerializer(Purchase, reg, NO_DEPRECATED)(Purchase(event_id="e1", features=[1.0] * 8), CONTEXT)
    codec = ConfluentProtobufCodec(reg)
    rng = random.Random(3)
    outcomes: set[str] = set()
    for _ in range(300):
        bad = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            bad[rng.randrange(6, len(bad))] = rng.randrange(256)
        cut = bytes(bad[:rng.randint(6, len(bad))]) if rng.random() < 0.5 else bytes(bad)
        try:
            codec.decode(cut)
            outcomes.add("decoded")
        except DeserializeError:
            outcomes.add("refused")
    assert outcomes == {"decoded", "refused"}  # no other exception escapes
    for framing in (b"\x01" + data[1:], data[:3], data[:5] + b"\x05\x02"):
        with pytest.raises(DeserializeError):
            codec.decode(framing)
    with pytest.raises(DeserializeError, match="index"):
        codec.decode(data[:5] + b"\x02\x09" + data[6:])  # [-5]: no such message
    with pytest.raises(SerializeError, match="ProtobufSerializer"):
        codec.encode({"event_id": "e"})


def test_an_avro_id_is_not_a_protobuf_schema() -> None:
    reg = registry("pb-avro")
    avro = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}'
    avro_id = reg.register_schema("x-value", Schema(avro, "AVRO"))
    with pytest.raises(DeserializeError, match=f"schema id {avro_id} is a AVRO schema, not Protobuf"):
        ConfluentProtobufCodec(reg).decode(b"\0" + avro_id.to_bytes(4, "big") + b"\0\x08\x01")


def test_a_registry_that_answers_proto_source_is_asked_for_the_serialized_form() -> None:
    """Confluent's registry gives ``.proto`` text back by default; the descriptor is then asked
    for with format=serialized (Apicurio gives the registered base64 back as it is)."""
    import base64
    from types import SimpleNamespace

    from streamer.formats.protobuf import _schema

    source = SimpleNamespace(schema_type="PROTOBUF", references=[],
                             schema_str='syntax = "proto3";\npackage shop;\nmessage Header { string source = 1; }\n')
    asked: list[str] = []

    def serialized() -> SimpleNamespace:
        asked.append("serialized")
        return SimpleNamespace(schema_str=base64.b64encode(purchase_file().SerializeToString()).decode())

    schema = _schema(source, serialized)
    assert asked == ["serialized"] and schema.message_class((1, 0))().DESCRIPTOR.full_name == "shop.Purchase.Card"


def test_a_schema_that_imports_well_known_types_is_read() -> None:
    """google/protobuf/timestamp.proto, and type.proto (which imports any.proto and
    source_context.proto in turn), as a schema written by ProtobufSerializer imports them."""
    fd = descriptor_pb2.FileDescriptorProto(name="stamped.proto", package="shop", syntax="proto3",
                                            dependency=["google/protobuf/timestamp.proto",
                                                        "google/protobuf/type.proto"])
    m = fd.message_type.add(name="Stamped")
    m.field.add(name="event_id", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    m.field.add(name="at", number=2, type=T.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp",
                label=T.LABEL_OPTIONAL)
    m.field.add(name="kind", number=3, type=T.TYPE_MESSAGE, type_name=".google.protobuf.Type",
                label=T.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    for name in ("google/protobuf/any.proto", "google/protobuf/source_context.proto",
                 "google/protobuf/type.proto", "google/protobuf/timestamp.proto"):
        known = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(name).CopyToProto(known)
        pool.Add(known)
    pool.Add(fd)
    stamped = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Stamped"))
    reg = registry("pb-known")
    message = stamped(event_id="e1")
    message.at.seconds, message.at.nanos = 1764417600, 123000000
    message.kind.name = "purchase"
    data = ProtobufSerializer(stamped, reg, NO_DEPRECATED)(message, CONTEXT)
    got = ConfluentProtobufCodec(reg).decode(data)
    assert got["event_id"] == "e1" and got["at"] == {"seconds": 1764417600, "nanos": 123000000}
    assert got["kind"]["name"] == "purchase"


def test_a_field_that_tracks_presence_and_was_not_sent_is_none_and_a_sent_zero_is_zero() -> None:
    """proto3 ``optional`` and ``oneof`` scalars not sent read as null (so a fill stands in); a
    plain proto3 scalar not sent reads as its default."""
    fd = descriptor_pb2.FileDescriptorProto(name="opt.proto", package="opt", syntax="proto3")
    m = fd.message_type.add(name="Order")
    m.oneof_decl.add(name="payment")
    m.oneof_decl.add(name="_n_orders")  # the synthetic oneof protoc writes for proto3 `optional`, last
    m.field.add(name="n_orders", number=1, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL, oneof_index=1,
                proto3_optional=True)
    m.field.add(name="card", number=2, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL, oneof_index=0)
    m.field.add(name="cash", number=3, type=T.TYPE_BOOL, label=T.LABEL_OPTIONAL, oneof_index=0)
    m.field.add(name="plain", number=4, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("opt.Order"))
    assert as_mapping(order()) == {"n_orders": None, "card": None, "cash": None, "plain": 0}
    assert as_mapping(order(n_orders=0, cash=False)) == {"n_orders": 0, "card": None, "cash": False, "plain": 0}
    sent = order.FromString(order(n_orders=7, card="visa").SerializeToString())
    assert as_mapping(sent) == {"n_orders": 7, "card": "visa", "cash": None, "plain": 0}
