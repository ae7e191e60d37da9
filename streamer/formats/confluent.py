"""Confluent's wire format: the framing (byte 0, the 4-byte big-endian schema id), schemas by
registry id (looked up once, a 404 held before it is believed), registration, and Avro in it.
JSON Schema and Protobuf in the same framing are formats/json_events.py's and protobuf.py's."""

from __future__ import annotations

import json
import re
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from streamer.config import Secret
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


def _not_found(exc: Exception) -> bool:
    """The registry's own "not found": a 404 with its error body (a bare 404 is some other server's)."""
    return isinstance(exc, SchemaRegistryError) and exc.http_status_code == 404 and exc.error_code > 0


_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def redact(text: str, secret: Secret | None = None) -> str:
    """``text`` without registry credentials: neither ``user:pass@`` in a URL nor ``secret``."""
    text = _USERINFO.sub("***@", text)
    return secret.hide_in(text) if secret is not None else text


class SchemaIds:
    """Schemas by registry id, each looked up once and built into what decoding needs (an Avro
    reader, a JSON Schema check, Protobuf classes), with refusals cached and a 404 held before
    it is believed.

    A 404 is not believed at once: a registry that restarts answers 404 for ids it holds while
    it loads (1-2 s for Confluent's, reading its ``_schemas`` topic). For ``not_found_retry_s``
    from an id's first 404, a 404 for it is a ``BrokerError`` (the processor holds the input and
    reads the same messages again after its back-off); after that its rows are dead letters
    (``DeserializeError``) and the id is remembered as refused for ``refused_ttl_s``, then asked
    again. Each id has its own hold, so no id is ever dead-lettered on another id's history.
    Worked example, ``not_found_retry_s`` 10: id 7 answers 404 at t=0 and t=0.5 (held), 200 at
    t=1.5: its rows are decoded, none dead-lettered. Id 99, never registered, answers 404 at
    t=100 (held) and at t=110: its rows are dead letters until t=410. The Avro fast path asks for
    every id of a chunk before it decodes any row, so the ids of one chunk are held together.

    Only a registry's own "not found" counts (a 404 with the registry's error body: Confluent's
    40403, Apicurio's and confluent-kafka's mock's alike); a 404 without one (a wrong URL path, a
    proxy) and any other failure (away, slow, 5xx, 401) is a ``BrokerError``, never cached.
    """

    def __init__(self, registry: SchemaRegistryClient, not_found_retry_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, refused_ttl_s: float = 300.0) -> None:
        self._registry = registry
        self._built: dict[int, Any] = {}
        self._refused: dict[int, tuple[str, float]] = {}  # negative cache: id -> (why, until when)
        self._first_not_found: dict[int, float] = {}  # ids answered 404, not yet believed
        self._not_found_retry_s, self._clock, self._refused_ttl_s = not_found_retry_s, clock, refused_ttl_s

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
            if _not_found(exc):
                since = self._first_not_found.setdefault(schema_id, now)
                if now - since < self._not_found_retry_s:
                    raise BrokerError(f"schema registry: schema id {schema_id} not found; asked again for "
                                      f"up to {self._not_found_retry_s:g}s (a registry that restarts "
                                      f"answers 404 while it loads)") from exc
                del self._first_not_found[schema_id]
                raise DeserializeError(self._refuse(schema_id, "is not in the schema registry")) from exc
            # Any other failure means the registry is unwell, not that the record is bad: no caching.
            raise BrokerError(redact(f"schema registry: lookup of schema id {schema_id} failed: {exc}")) from exc
        self._first_not_found.pop(schema_id, None)
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
        raise BrokerError(redact(f"schema registry: cannot register under {subject!r}: {exc}")) from exc


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
