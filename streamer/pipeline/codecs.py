"""Codecs turn message bytes into event mappings and mappings into bytes: Avro, registry-framed Avro, JSON.

Decoding is bounded (``max_bytes``; Avro lengths and counts are checked before fastavro allocates), and
logical types are not applied: a ``timestamp-millis`` field decodes (and encodes) as int milliseconds.
"""

from __future__ import annotations

import io
import json
import operator
import struct
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol, cast

import fastavro
from fastavro.schema import to_parsing_canonical_form
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from streamer.errors import ConfigError, DeserializeError, SerializeError
from streamer.pipeline.schema_ids import SchemaIds, register

DEFAULT_MAX_BYTES = 1_048_576
_CONFLUENT_HEADER = struct.Struct(">bI")  # magic byte 0, then the 4-byte big-endian schema id
_FIXED_WIDTH = {"null": 0, "boolean": 1, "float": 4, "double": 8}
_TOLIST = operator.methodcaller("tolist")  # lets JSON encode numpy arrays and scalars
AvroSchema = dict[str, Any]
_Walk = Callable[[bytes, int], int]  # checks the Avro item at a position; returns the position after it


class _Compiled(NamedTuple):
    walk: _Walk
    min_width: int  # the fewest bytes one item can take: bounds declared item counts
    constant: bool  # every item takes exactly min_width bytes, so a block is skipped in one step


class Codec(Protocol):
    """Turns one Kafka message value into a mapping, and a mapping into a message value."""

    def decode(self, data: bytes) -> Mapping[str, Any]: ...

    def encode(self, record: Mapping[str, Any]) -> bytes: ...


def load_schema(path: str | Path, key: str = "schema") -> AvroSchema:
    """Read an ``.avsc`` file and parse it with fastavro; a bad file raises ``ConfigError(key, ...)``."""
    try:
        parsed = fastavro.parse_schema(json.loads(Path(path).read_text(encoding="utf-8")))
    except OSError as exc:
        raise ConfigError(key, f"cannot read Avro schema file {str(path)!r}: {exc.strerror or exc}") from exc
    except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(key, f"{str(path)!r} is not a valid Avro schema (JSON): {exc}") from exc
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise ConfigError(key, f"{str(path)!r} is not an Avro record schema")
    return parsed


def _clean(node: Any, logical: bool) -> Any:
    """Copy a parsed schema without fastavro's private ``__`` keys, and without logical types unless kept."""
    if isinstance(node, list):
        return [_clean(x, logical) for x in node]
    if not isinstance(node, dict):
        return node
    keep = [k for k in node if k[:2] != "__" and (logical or k != "logicalType")]
    return {k: node[k] if k == "default" else _clean(node[k], logical) for k in keep}


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    """Read one zigzag varint (at most 10 bytes, 64 bits); return (value, position after it)."""
    acc = shift = 0
    for byte in data[pos : pos + 10]:
        acc |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            if shift == 70 and byte > 1:
                raise DeserializeError(f"malformed Avro: the number at byte {pos} does not fit in 64 bits")
            return (acc >> 1) ^ -(acc & 1), pos + shift // 7
    raise DeserializeError(f"malformed or truncated Avro: no complete number of at most 10 bytes at byte {pos}")


def _take(data: bytes, pos: int, n: int, what: str) -> int:
    if n < 0 or n > len(data) - pos:
        raise DeserializeError(f"truncated or bad Avro: {what} needs {n} bytes, {len(data) - pos} left")
    return pos + n


def _string(data: bytes, pos: int) -> int:
    n, pos = _read_long(data, pos)
    return _take(data, pos, n, "string/bytes")


def _index(n: int, what: str, then: list[_Walk] | None = None) -> _Walk:
    def index(d: bytes, p: int) -> int:
        i, p = _read_long(d, p)
        if not 0 <= i < n:
            raise DeserializeError(f"malformed Avro: {what} index {i} is out of range 0..{n - 1}")
        return then[i](d, p) if then is not None else p

    return index


def _blocks(item: _Compiled, what: str) -> _Compiled:
    """Walk an array or a map: blocks of items, each led by its count, ending with a zero count."""
    walk, width, constant = item
    per_item = max(width, 1)  # zero-width items (null, empty records) count as 1 byte; no real schema minds

    def blocks(d: bytes, p: int) -> int:
        while True:
            count, p = _read_long(d, p)
            if count == 0:
                return p
            size = -1
            if count < 0:  # a negative count is followed by the block's size in bytes
                count, (size, p) = -count, _read_long(d, p)
                _take(d, p, size, f"{what} block")
            if count * per_item > len(d) - p:
                raise DeserializeError(f"bad Avro: {what} block of {count} items, {len(d) - p} bytes left")
            start = p
            if constant:
                p += count * width
            else:
                for _ in range(count):
                    p = walk(d, p)
            if size >= 0 and p - start != size:
                raise DeserializeError(f"malformed Avro: {what} block size {size} != {p - start} bytes read")

    return _Compiled(blocks, 1, False)


def _compile(node: Any, named: dict[str, _Compiled]) -> _Compiled:
    """Compile a parsed, cleaned schema node into a walker; ``named`` collects named types by full name."""
    if isinstance(node, list):
        return _Compiled(_index(len(node), "union", [_compile(b, named).walk for b in node]), 1, False)
    if isinstance(node, str):
        if node in named:
            return named[node]
        if node in _FIXED_WIDTH:
            width = _FIXED_WIDTH[node]
            return _Compiled(lambda d, p: _take(d, p, width, node), width, True)
        if node in ("int", "long"):
            return _Compiled(lambda d, p: _read_long(d, p)[1], 1, False)
        if node in ("string", "bytes"):
            return _Compiled(_string, 1, False)
        raise ValueError(f"cannot walk unknown Avro type {node!r}")
    kind = node["type"]
    if kind in ("record", "error"):
        walks: list[_Walk] = []

        def record(d: bytes, p: int) -> int:
            for walk in walks:
                p = walk(d, p)
            return p

        named[node["name"]] = _Compiled(record, 0, False)  # before the fields, so recursive types find it
        fields = [_compile(f["type"], named) for f in node["fields"]]
        walks.extend(f.walk for f in fields)
        named[node["name"]] = _Compiled(record, sum(f.min_width for f in fields), False)
    elif kind == "fixed":
        size = int(node["size"])
        named[node["name"]] = _Compiled(lambda d, p: _take(d, p, size, "fixed"), size, True)
    elif kind == "enum":
        named[node["name"]] = _Compiled(_index(len(node["symbols"]), "enum"), 1, False)
    elif kind == "array":
        return _blocks(_compile(node["items"], named), "array")
    elif kind == "map":  # an entry is a string key, then the value
        value = _compile(node["values"], named)
        entry = _Compiled(lambda d, p: value.walk(d, _string(d, p)), 1 + value.min_width, False)
        return _blocks(entry, "map")
    else:
        return _compile(kind, named)
    return named[node["name"]]


def confluent_header(schema_id: int) -> bytes:
    """The 5 bytes that lead a Confluent-framed value: magic byte 0, the schema id (big-endian)."""
    return _CONFLUENT_HEADER.pack(0, schema_id)


def _check_size(data: bytes, max_bytes: int) -> None:
    if len(data) > max_bytes:
        raise DeserializeError(f"message is {len(data)} bytes, over the {max_bytes}-byte limit")


class AvroCodec:
    """Schemaless binary Avro with one record schema, no framing; ``encode`` wants exactly its fields.

    With ``reader`` (a record schema other than ``schema``), decoding resolves each message from
    ``schema`` (the writer's) to ``reader`` by Avro's schema resolution rules (fastavro's): fields
    the writer lacks take the reader's defaults, fields the reader lacks are dropped, numbers are
    promoted; a message that cannot resolve is a :class:`DeserializeError`. ``resolves`` says
    whether that happens (False when the two schemas have the same canonical form).

    ``prefix``: bytes written before each value and expected before each decoded one; the
    avro-confluent output's framing (:func:`confluent_header` of the registered schema's id).
    """

    def __init__(self, schema: AvroSchema, max_bytes: int = DEFAULT_MAX_BYTES,
                 reader: AvroSchema | None = None, prefix: bytes = b"") -> None:
        if not isinstance(schema, Mapping) or schema.get("type") != "record":
            raise ConfigError("schema", "the Avro schema must be a record")
        self.name = str(schema["name"])
        self.prefix = prefix
        self._max_bytes = max_bytes
        self._write_schema = fastavro.parse_schema(dict(schema))
        self._plain = fastavro.parse_schema(_clean(self._write_schema, logical=False))
        self._reader: Any = None
        if reader is not None:
            resolved = fastavro.parse_schema(_clean(fastavro.parse_schema(dict(reader)), logical=False))
            if to_parsing_canonical_form(resolved) != to_parsing_canonical_form(self._plain):
                self._reader = resolved
        self.resolves = self._reader is not None
        # Every message is walked before fastavro reads it: fastavro takes varints of any length
        # (an 11-byte event_time read as -2**63), tiny messages that declare huge lists of
        # zero-width items, and nesting deep enough to overflow its C stack. The walker refuses
        # all three with a DeserializeError. The columnar fast path does not need it.
        self._walk: _Walk = _compile(self._plain, {}).walk
        self.schema_json = json.dumps(_clean(self._write_schema, logical=True), separators=(",", ":"))

    def decode(self, data: bytes) -> Mapping[str, Any]:
        _check_size(data, self._max_bytes)
        if self.prefix:
            if data[:len(self.prefix)] != self.prefix:
                raise DeserializeError(f"the value does not start with {self.prefix.hex()} (its framing)")
            data = data[len(self.prefix):]
        try:
            end = self._walk(data, 0)  # refuses what fastavro would misread, before it allocates
            if end == len(data):
                return cast(Mapping[str, Any], fastavro.schemaless_reader(io.BytesIO(data), self._plain,
                                                                          self._reader))
        except DeserializeError:
            raise
        except Exception as exc:  # fastavro raises a wide, undocumented set on bad bytes (RecursionError too)
            raise DeserializeError(f"bad Avro for {self.name}: {exc!r}") from exc
        raise DeserializeError(f"bad Avro for {self.name}: {len(data) - end} bytes after the record")

    def encode(self, record: Mapping[str, Any]) -> bytes:
        buf = io.BytesIO()
        try:
            fastavro.schemaless_writer(buf, self._write_schema, dict(record), strict_allow_default=True)
        except Exception as exc:  # the writer raises ValueError, TypeError, struct.error, ... on a bad record
            raise SerializeError(f"record does not fit Avro schema {self.name}: {exc!r}") from exc
        return self.prefix + buf.getvalue() if self.prefix else buf.getvalue()


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
        return self.reader(_framed_id(data, self._max_bytes)).decode(data[_CONFLUENT_HEADER.size :])

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


def _framed_id(data: bytes, max_bytes: int) -> int:
    """The schema id of a Confluent-framed value (its size and magic byte checked)."""
    _check_size(data, max_bytes)
    if len(data) < _CONFLUENT_HEADER.size:
        raise DeserializeError(f"message is {len(data)} bytes; Confluent framing needs at least 5")
    if data[0] != 0:
        raise DeserializeError(f"wrong magic byte {data[0]:#04x}; Confluent framing starts with 0x00")
    return int(_CONFLUENT_HEADER.unpack_from(data)[1])


class JsonCodec:
    """One UTF-8 JSON object per message; encoding writes compact JSON (numpy arrays become lists)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._max_bytes = max_bytes

    def decode(self, data: bytes) -> Mapping[str, Any]:
        _check_size(data, self._max_bytes)
        try:
            value = json.loads(data.decode("utf-8"))  # NaN and Infinity pass here; validation refuses them
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise DeserializeError(f"invalid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise DeserializeError(f"JSON message is a {type(value).__name__}, not an object")
        return value

    def encode(self, record: Mapping[str, Any]) -> bytes:
        try:
            return json.dumps(record, separators=(",", ":"), allow_nan=False, default=_TOLIST).encode("utf-8")
        except (TypeError, ValueError, AttributeError, RecursionError) as exc:  # AttributeError: no .tolist()
            raise SerializeError(f"record cannot be written as JSON: {exc}") from exc
