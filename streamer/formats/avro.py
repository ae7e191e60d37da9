"""Avro: schemaless binary records of one schema, the schema files, and a bounded walk.

Decoding is bounded (``max_bytes``; Avro lengths and counts are checked before fastavro allocates),
and logical types are not applied: a ``timestamp-millis`` field decodes (and encodes) as int
milliseconds. Confluent's framing of Avro is formats/confluent.py's.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import math
import struct
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, cast

import fastavro
from fastavro.schema import to_parsing_canonical_form

from streamer.errors import ConfigError, DeserializeError, SerializeError
from streamer.formats.codec import DEFAULT_MAX_BYTES, check_size
from streamer.formats.varint import read_zigzag

_FIXED_WIDTH = {"null": 0, "boolean": 1, "float": 4, "double": 8}
AvroSchema = dict[str, Any]
_Walk = Callable[[bytes, int], int]  # checks the Avro item at a position; returns the position after it


class _Compiled(NamedTuple):
    walk: _Walk
    min_width: int  # the fewest bytes one item can take: bounds declared item counts
    constant: bool  # every item takes exactly min_width bytes, so a block is skipped in one step


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


def _take(data: bytes, pos: int, n: int, what: str) -> int:
    if n < 0 or n > len(data) - pos:
        raise DeserializeError(f"truncated or bad Avro: {what} needs {n} bytes, {len(data) - pos} left")
    return pos + n


def _string(data: bytes, pos: int) -> int:
    n, pos = read_zigzag(data, pos)
    return _take(data, pos, n, "string/bytes")


def _index(n: int, what: str, then: list[_Walk] | None = None) -> _Walk:
    def index(d: bytes, p: int) -> int:
        i, p = read_zigzag(d, p)
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
            count, p = read_zigzag(d, p)
            if count == 0:
                return p
            size = -1
            if count < 0:  # a negative count is followed by the block's size in bytes
                count, (size, p) = -count, read_zigzag(d, p)
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
            return _Compiled(lambda d, p: read_zigzag(d, p)[1], 1, False)
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


class AvroCodec:
    """Schemaless binary Avro with one record schema, no framing; ``encode`` wants exactly its fields.

    With ``reader`` (a record schema other than ``schema``), decoding resolves each message from
    ``schema`` (the writer's) to ``reader`` by Avro's schema resolution rules (fastavro's): fields
    the writer lacks take the reader's defaults, fields the reader lacks are dropped, numbers are
    promoted; a message that cannot resolve is a :class:`DeserializeError`. ``resolves`` says
    whether that happens (False when the two schemas have the same canonical form).

    ``prefix``: bytes written before each value and expected before each decoded one; the
    avro-confluent output's framing (formats/confluent.py: the registered schema's id).
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
        check_size(data, self._max_bytes)
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


# Python types fastavro's logical writers take in place of the underlying type's values.
_LOGICAL: dict[str, tuple[type, ...]] = {
    "timestamp-millis": (dt.datetime,), "timestamp-micros": (dt.datetime,),
    "local-timestamp-millis": (dt.datetime,), "local-timestamp-micros": (dt.datetime,),
    "date": (dt.date,), "time-millis": (dt.time,), "time-micros": (dt.time,),
    "decimal": (decimal.Decimal,), "uuid": (uuid.UUID,),
}
_RANGE = {"int": (-2**31, 2**31 - 1), "long": (-2**63, 2**63 - 1)}
_FLOAT32_MAX = 3.4028234663852886e38
Mismatch = tuple[str, str]  # (field path, reason)


def mismatch(schema: AvroSchema, record: Mapping[str, Any]) -> Mismatch | None:
    """Where and why ``record`` does not fit ``schema`` as it is, without conversion: ``(field, reason)``
    with the field as a dotted path (``items[2].price``); None when it fits.

    fastavro's writer converts what it is given: 4.5 into a long is written as 4, 1 into a boolean
    as true, ``True`` into a long as 1. This check refuses each of those, a string into a number
    and a number into a string, an int out of its 32-bit range, a missing field without a default,
    a field the schema lacks, and a null into a field that is not nullable. An integer into a
    float or a double is taken when the float holds it exactly. A logical type also takes the
    Python value fastavro writes for it (a ``datetime`` for ``timestamp-millis``).

    Worked example: a long ``amount`` given 4.5 gives
    ``('amount', 'expected long, got number 4.5 (not a whole number)')``.
    """
    parsed = cast(AvroSchema, fastavro.parse_schema(dict(schema)))
    return _mismatch(parsed, record, "", parsed.get("__named_schemas", {}))


def _mismatch(node: Any, value: Any, path: str, named: Mapping[str, Any]) -> Mismatch | None:
    if isinstance(node, list):  # a union: the value fits a branch as it is
        if any(_mismatch(b, value, path, named) is None for b in node):
            return None
        others = [b for b in node if b != "null"]
        if len(others) == 1:  # a nullable type: say why the one real branch refuses it
            return _mismatch(others[0], value, path, named)
        return path, f"expected one of {_name(node)}, got {_shown(value)}"
    if isinstance(node, str):
        return _mismatch(named[node], value, path, named) if node in named else _primitive(node, value, path)
    kind = node["type"]
    logical = node.get("logicalType")
    if logical in _LOGICAL and isinstance(value, _LOGICAL[logical]):
        return None
    if value is None and kind != "null":
        return path, f"expected {_name(node)}, got null (the field is not nullable)"
    if kind in ("record", "error"):
        if not isinstance(value, Mapping):
            return path, f"expected record {node['name']}, got {_shown(value)}"
        names = [f["name"] for f in node["fields"]]
        for f in node["fields"]:
            inner = f"{path}.{f['name']}" if path else f["name"]
            if f["name"] not in value:
                if "default" in f:
                    continue
                return inner, "is required but missing"
            found = _mismatch(f["type"], value[f["name"]], inner, named)
            if found is not None:
                return found
        extra = [k for k in value if k not in names]
        return None if not extra else (f"{path}.{extra[0]}" if path else str(extra[0]),
                                       f"is not a field of {node['name']} (its fields: {', '.join(names)})")
    if kind == "array":
        if not isinstance(value, (list, tuple)):
            return path, f"expected array, got {_shown(value)}"
        for n, item in enumerate(value):
            found = _mismatch(node["items"], item, f"{path}[{n}]", named)
            if found is not None:
                return found
        return None
    if kind == "map":
        if not isinstance(value, Mapping):
            return path, f"expected map, got {_shown(value)}"
        for k, item in value.items():
            if not isinstance(k, str):
                return path, f"a map's keys are strings, got {_shown(k)}"
            found = _mismatch(node["values"], item, f"{path}.{k}", named)
            if found is not None:
                return found
        return None
    if kind == "enum":
        if not isinstance(value, str) or value not in node["symbols"]:
            return path, f"expected one of the symbols {', '.join(node['symbols'])}, got {_shown(value)}"
        return None
    if kind == "fixed":
        if not isinstance(value, (bytes, bytearray)) or len(value) != node["size"]:
            return path, f"expected {node['size']} bytes (fixed {node['name']}), got {_shown(value)}"
        return None
    return _primitive(kind, value, path)


def _primitive(kind: str, value: Any, path: str) -> Mismatch | None:
    if kind == "null":
        return None if value is None else (path, f"expected null, got {_shown(value)}")
    if value is None:
        return path, f"expected {kind}, got null (the field is not nullable)"
    if kind == "boolean":
        return None if isinstance(value, bool) else (path, f"expected boolean, got {_shown(value)}")
    if kind in ("string", "bytes"):
        wanted = str if kind == "string" else (bytes, bytearray)
        return None if isinstance(value, wanted) else (path, f"expected {kind}, got {_shown(value)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):  # bool is an int to Python
        return path, f"expected {kind}, got {_shown(value)}"
    if kind in _RANGE:
        if isinstance(value, float):
            return path, f"expected {kind}, got {_shown(value)} (not a whole number)"
        lo, hi = _RANGE[kind]
        if not lo <= value <= hi:
            return path, f"expected {kind}, got {value} (out of its range {lo}..{hi})"
        return None
    if isinstance(value, int):
        if kind == "double":
            written = float(value) if abs(value) < 2**1024 else math.inf
        else:
            written = struct.unpack("<f", struct.pack("<f", float(value)))[0] if abs(value) <= _FLOAT32_MAX else math.inf
        if written != value:  # a float keeps an integer only up to its mantissa's width
            return path, f"expected {kind}, got {value} (a {kind} cannot hold this integer exactly)"
    elif kind == "float" and math.isfinite(value) and abs(value) > _FLOAT32_MAX:
        return path, f"expected float, got {value} (out of a 32-bit float's range)"
    return None


def _name(node: Any) -> str:
    if isinstance(node, list):
        return ", ".join(_name(b) for b in node)
    if isinstance(node, dict):
        return str(node.get("name") or node["type"])
    return str(node)


def _shown(value: Any) -> str:
    """A value as a row shows it: its JSON kind, then itself, cut short."""
    kinds = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), ((bytes, bytearray), "bytes"),
             (Mapping, "object"), ((list, tuple), "array"))
    kind = "null" if value is None else next((k for t, k in kinds if isinstance(value, t)), type(value).__name__)
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return f"{kind} {text[:60]}{'...' if len(text) > 60 else ''}"
