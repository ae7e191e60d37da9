"""Confluent's wire format: the framing (byte 0, the 4-byte big-endian schema id), schemas by
registry id (looked up once, a 404 held before it is believed), registration, and Avro in it.
JSON Schema and Protobuf in the same framing are formats/json_events.py's and protobuf.py's."""

from __future__ import annotations

import json
import math
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from streamer.errors import BrokerError, DeserializeError, SerializeError
from streamer.formats.avro import AvroCodec, AvroSchema
from streamer.formats.codec import DEFAULT_MAX_BYTES, check_size

_HEADER = struct.Struct(">bI")  # magic byte 0, then the 4-byte big-endian schema id
HEADER_SIZE = _HEADER.size
_T = TypeVar("_T")


def confluent_header(schema_id: int) -> bytes:
    """The 5 bytes that lead a Confluent-framed value: magic byte 0, the schema id (big-endian)."""
    return _HEADER.pack(0, schema_id)


def framed_id(data: bytes, max_bytes: int) -> int:
    """The schema id of a Confluent-framed value (its size and magic byte checked)."""
    check_size(data, max_bytes)
    if len(data) < _HEADER.size:
        raise DeserializeError(f"message is {len(data)} bytes; Confluent framing needs at least 5")
    if data[0] != 0:
        raise DeserializeError(f"wrong magic byte {data[0]:#04x}; Confluent framing starts with 0x00")
    return int(_HEADER.unpack_from(data)[1])


class SchemaIds:
    """Schemas by registry id, each looked up once and built into what decoding needs (an Avro
    reader, a JSON Schema check), with refusals cached and a 404 held before it is believed.

    A 404 is not believed at once: a registry that restarts answers 404 for ids it holds while
    it loads (1-2 s for Confluent's, reading its ``_schemas`` topic). A 404 opens a suspect spell;
    for ``not_found_retry_s`` from its start a 404 is a ``BrokerError`` (the processor holds the
    input and reads the same messages again after its back-off), after that a ``DeserializeError``
    for the row, the id remembered as refused for ``refused_ttl_s``. Any id found ends the spell;
    so do ``quiet_s`` with no 404 (longer than the processor's longest back-off, so its own
    re-reads do not restart the spell). Worked example, ``not_found_retry_s`` 10: id 7 answers
    404 at t=0 and t=0.5 (held), 200 at t=1.5: its rows are decoded, none dead-lettered. Id 99,
    never registered, answers 404 at t=100 (a new spell: held) and at t=110: its rows are dead
    letters; id 98 answers 404 at t=112, inside the spell: dead letters at once (a stream of
    made-up ids costs one hold, not one per id). Any other failure (the registry away, slow,
    5xx, 401) is a ``BrokerError`` and is not cached.
    """

    def __init__(self, registry: SchemaRegistryClient, not_found_retry_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, refused_ttl_s: float = 300.0,
                 quiet_s: float = 60.0) -> None:
        self._registry = registry
        self._built: dict[int, Any] = {}
        self._refused: dict[int, tuple[str, float]] = {}  # negative cache: id -> (why, until when)
        self._suspect_since: float | None = None  # the start of the spell of 404s (see above)
        self._last_not_found = -math.inf
        self._not_found_retry_s, self._clock, self._refused_ttl_s = not_found_retry_s, clock, refused_ttl_s
        self._quiet_s = max(quiet_s, not_found_retry_s)

    def get(self, schema_id: int, build: Callable[[Any], _T]) -> _T:
        """What ``build`` makes of the registered schema ``schema_id`` (a ``RegisteredSchema``),
        built once; ``build`` raises ``DeserializeError(reason)`` for a schema it cannot use."""
        if schema_id in self._built:
            return cast(_T, self._built[schema_id])
        now = self._clock()
        if schema_id in self._refused:
            why, until = self._refused[schema_id]
            if now < until:
                raise DeserializeError(why)
            del self._refused[schema_id]
        try:
            registered = self._registry.get_schema(schema_id)
        except Exception as exc:
            if isinstance(exc, SchemaRegistryError) and exc.http_status_code == 404:
                if self._suspect_since is None or now - self._last_not_found > self._quiet_s:
                    self._suspect_since = now
                self._last_not_found = now
                if now - self._suspect_since < self._not_found_retry_s:
                    raise BrokerError(f"schema registry: schema id {schema_id} not found; asked again for "
                                      f"up to {self._not_found_retry_s:g}s (a registry that restarts "
                                      f"answers 404 while it loads)") from exc
                raise DeserializeError(self._refuse(schema_id, "is not in the schema registry")) from exc
            # Any other failure means the registry is unwell, not that the record is bad: no caching.
            raise BrokerError(f"schema registry: lookup of schema id {schema_id} failed: {exc}") from exc
        self._suspect_since = None
        try:
            built = build(registered)
        except DeserializeError as exc:  # an unusable schema never becomes usable: cache the refusal
            raise DeserializeError(self._refuse(schema_id, str(exc))) from exc
        self._built[schema_id] = built
        return built

    def _refuse(self, schema_id: int, reason: str) -> str:
        message = f"schema id {schema_id} {reason}"
        self._refused[schema_id] = (message, self._clock() + self._refused_ttl_s)
        return message


def register(registry: SchemaRegistryClient, subject: str, schema: Schema) -> int:
    """Register ``schema`` under ``subject`` (its id if it is there already); BrokerError if not."""
    try:
        return int(registry.register_schema(subject, schema))
    except Exception as exc:  # SchemaRegistryError or a transport error
        raise BrokerError(f"schema registry: cannot register under {subject!r}: {exc}") from exc


class ConfluentAvroCodec:
    """Avro in Confluent Schema Registry framing: byte 0, a 4-byte big-endian schema id, the Avro body.

    Decoding uses the writer schema the id names, looked up once per id by :class:`SchemaIds`
    (which holds a 404 before believing it), resolved to ``schema`` when one is given (the reader
    schema: schema evolution resolves to it; see :class:`AvroCodec`); encoding needs ``schema``,
    registered under ``subject`` once. Registry outages raise ``BrokerError``: the record is not
    at fault.
    """

    def __init__(
        self,
        registry: SchemaRegistryClient,
        subject: str,
        schema: AvroSchema | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        not_found_retry_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self._subject = subject
        self._writer = AvroCodec(schema, max_bytes) if schema is not None else None
        self._reader_schema = schema
        self._writer_id: int | None = None
        self._max_bytes = max_bytes
        self._ids = SchemaIds(registry, not_found_retry_s, clock)

    def decode(self, data: bytes) -> Mapping[str, Any]:
        return self.reader(framed_id(data, self._max_bytes)).decode(data[_HEADER.size :])

    def encode(self, record: Mapping[str, Any]) -> bytes:
        if self._writer is None:
            raise SerializeError(f"the codec for subject {self._subject!r} has no schema to encode with")
        body = self._writer.encode(record)
        if self._writer_id is None:
            self._writer_id = register(self._registry, self._subject, Schema(self._writer.schema_json, "AVRO"))
        return confluent_header(self._writer_id) + body

    def reader(self, schema_id: int) -> AvroCodec:
        """The codec of writer schema ``schema_id`` (looked up once); raises as ``decode`` does."""
        return self._ids.get(schema_id, self._avro_reader)

    def _avro_reader(self, registered: Any) -> AvroCodec:
        if (registered.schema_type or "AVRO") != "AVRO" or registered.references:
            raise DeserializeError("is not a plain Avro schema (no references)")
        try:
            return AvroCodec(json.loads(registered.schema_str or ""), self._max_bytes, reader=self._reader_schema)
        except Exception as exc:
            raise DeserializeError(f"is not a usable Avro schema: {exc}") from exc
