"""Protobuf events in Confluent's framing (``input.format: protobuf-confluent``), read with the
schema each message's id names.

The value is byte 0, the 4-byte big-endian schema id, the message indexes, then the Protobuf
binary encoding of one message. The indexes say which message of the schema's file it is: a
zigzag varint count, then that many zigzag varints, each an index into the message types at that
depth (``[1, 0]``: the first type nested in the file's second message); the single byte ``00``
stands for ``[0]``, the file's first message (Confluent's serializers write it so). The schema is
a FileDescriptorProto in base64 (as Confluent's clients register it and Apicurio returns it; from
a registry that returns ``.proto`` source, as Confluent's does, it is asked for again with
``format=serialized``), built once per id into message classes; schemas that import others (references) are refused, the well-known types
(``google/protobuf/*.proto``) excepted.

A decoded message is a mapping as an Avro record is: every field of the message by its name,
scalars as Python values (proto3's defaults for plain fields not sent: 0, "", false), ``int64``
as int (not a JSON string), enums as their symbol name, repeated fields as lists, nested
messages as mappings, maps as dicts. A field that tracks presence and was not sent (a nested
message, a proto3 ``optional`` scalar, a ``oneof`` member) is None, as a null is in Avro, so a
``fill`` stands in for it. Values then go into model inputs by the conversion table
(model/exact.py): bool, int, double (``float`` fields too) and string, an enum as its symbol.
Bytes that do not parse are a ``deserialize`` dead letter.

Worked example: ``00 00 00 00 01 00 0a 02 65 31 18 05`` is schema id 1, indexes ``[0]`` (the
``00``), then ``event_id: "e1"`` (field 1, length 2) and ``event_time: 5`` (field 3):
``{"event_id": "e1", "entity_id": "", "event_time": 5, "features": []}``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from google.protobuf import (  # the well-known types' modules put their files in the default pool
    any_pb2,
    api_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    message_factory,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from streamer.errors import BrokerError, DeserializeError, SerializeError
from streamer.formats.codec import DEFAULT_MAX_BYTES
from streamer.formats.confluent import SchemaIds, framed_id, redact
from streamer.formats.varint import read_zigzag

_WELL_KNOWN = "google/protobuf/"
_KNOWN_MODULES = (any_pb2, api_pb2, duration_pb2, empty_pb2, field_mask_pb2, source_context_pb2, struct_pb2,
                  timestamp_pb2, type_pb2, wrappers_pb2)  # imported for their files, used by name


class ProtobufSchema:
    """One registered Protobuf schema's file, its message classes by index path."""

    def __init__(self, file: descriptor_pb2.FileDescriptorProto) -> None:
        pool = descriptor_pool.DescriptorPool()
        added: set[str] = set()
        for dependency in file.dependency:  # the well-known types, from the runtime's own pool
            _add_known(pool, dependency, added)
        self.file = pool.Add(file)
        self._classes: dict[tuple[int, ...], type[Message]] = {}

    def message_class(self, path: tuple[int, ...]) -> type[Message]:
        if path not in self._classes:
            types = list(self.file.message_types_by_name.values())
            descriptor: Descriptor | None = None
            for depth, i in enumerate(path):
                if not 0 <= i < len(types):
                    raise DeserializeError(f"message index {list(path)} does not name a message of "
                                           f"{self.file.name} (no index {i} at depth {depth})")
                descriptor = types[i]
                types = list(descriptor.nested_types)
            assert descriptor is not None
            self._classes[path] = message_factory.GetMessageClass(descriptor)
        return self._classes[path]


def _add_known(pool: descriptor_pool.DescriptorPool, name: str, added: set[str]) -> None:
    """Add the well-known file ``name`` and, first, what it imports (type.proto imports any.proto
    and source_context.proto)."""
    if name in added:
        return
    try:
        known = descriptor_pool.Default().FindFileByName(name)
    except KeyError as exc:
        raise DeserializeError(f"imports {name}, which is not one of the well-known types") from exc
    for dependency in known.dependencies:
        _add_known(pool, dependency.name, added)
    proto = descriptor_pb2.FileDescriptorProto()
    known.CopyToProto(proto)
    pool.Add(proto)
    added.add(name)


def _file(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """A base64 FileDescriptorProto (what Confluent's clients register, and what Apicurio gives
    back); None for anything else (``.proto`` source, as Confluent's registry gives it back)."""
    try:
        return descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (ValueError, DecodeError):
        return None


def _schema(registered: Any, serialized: Callable[[], Any]) -> ProtobufSchema:
    """The file of a registered schema (``serialized()`` asks for it as a descriptor when the
    registry gave ``.proto`` source); a schema that is not plain Protobuf is refused for good."""
    if (registered.schema_type or "AVRO") != "PROTOBUF":
        raise DeserializeError(f"is a {registered.schema_type or 'AVRO'} schema, not Protobuf")
    file = _file(registered.schema_str or "")
    if file is None:
        try:
            file = _file(serialized().schema_str or "")
        except Exception as exc:  # the registry failed: not the record's fault, not cached
            raise BrokerError(redact(f"schema registry: the serialized form of a Protobuf schema: {exc}")) from exc
    if file is None:
        raise DeserializeError("is not a Protobuf schema this reader can build (no file descriptor)")
    if registered.references or any(not d.startswith(_WELL_KNOWN) for d in file.dependency):
        raise DeserializeError("imports other schemas (references), which are not read")
    try:
        return ProtobufSchema(file)
    except (TypeError, KeyError, ValueError) as exc:  # the pool refuses a malformed file
        raise DeserializeError(f"is not a usable Protobuf schema: {exc}") from exc


def message_indexes(data: bytes, pos: int = 5) -> tuple[tuple[int, ...], int]:
    """The message index path at ``pos`` and the position of the message bytes after it."""
    count, pos = read_zigzag(data, pos)
    if count == 0:
        return (0,), pos
    if not 0 < count <= 32:
        raise DeserializeError(f"{count} message indexes: not a message path")
    path = []
    for _ in range(count):
        i, pos = read_zigzag(data, pos)
        path.append(i)
    return tuple(path), pos


class ConfluentProtobufCodec:
    """Protobuf in Confluent framing (see the module docstring); decode only."""

    def __init__(self, registry: SchemaRegistryClient, max_bytes: int = DEFAULT_MAX_BYTES,
                 ids: SchemaIds | None = None,
                 fresh: Callable[[], SchemaRegistryClient] | None = None) -> None:
        self._registry = registry
        # confluent-kafka caches get_schema by id whatever the format asked: the serialized form
        # is asked through a client of its own
        self._fresh = fresh or (lambda: registry)
        self._ids = ids or SchemaIds(registry)
        self._max_bytes = max_bytes

    def decode(self, data: bytes) -> Mapping[str, Any]:
        schema = self.schema(framed_id(data, self._max_bytes))
        path, pos = message_indexes(data)
        message = schema.message_class(path)()
        try:
            message.ParseFromString(data[pos:])
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise DeserializeError(f"bad Protobuf for {message.DESCRIPTOR.full_name}: {exc}") from exc
        return as_mapping(message)

    def schema(self, schema_id: int) -> ProtobufSchema:
        """The schema ``schema_id`` names (looked up once); raises DeserializeError or BrokerError."""
        return self._ids.get(schema_id, partial(self._build, schema_id))

    def _build(self, schema_id: int, registered: Any) -> ProtobufSchema:
        return _schema(registered, lambda: self._fresh().get_schema(schema_id, fmt="serialized"))

    def encode(self, record: Mapping[str, Any]) -> bytes:
        raise SerializeError("protobuf-confluent events are written by your own generated classes "
                             "(confluent-kafka's ProtobufSerializer); streamer only reads them")


def as_mapping(message: Message) -> dict[str, Any]:
    """Every field of ``message`` by name (see the module docstring)."""
    return {f.name: _value(message, f) for f in message.DESCRIPTOR.fields}


def _value(message: Message, f: FieldDescriptor) -> Any:
    value = getattr(message, f.name)
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        item = f.message_type.fields_by_name["value"]
        return {k: _item(v, item) for k, v in value.items()}
    if f.is_repeated:
        return [_item(v, f) for v in value]
    if f.has_presence and not message.HasField(f.name):  # not sent: a null, not the type's default
        return None
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        return as_mapping(value)
    return _item(value, f)


def _item(value: Any, f: FieldDescriptor) -> Any:
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        return as_mapping(value)
    if f.type == FieldDescriptor.TYPE_ENUM:
        symbol = f.enum_type.values_by_number.get(value)
        return symbol.name if symbol is not None else value
    return value
