"""One field's value per event of a chunk, read without decoding the events: what the route stage looks up.

Avro (plain, and avro-confluent per writer schema id) by walk.py's walk: the fields before it are
stepped over for all rows at once, the field (a string, an int or long, maybe in a union with
null, at the top or in nested records by dotted path) read as text, and the walk stops there.
JSON by msgspec, each message decoded into a type that holds only the field (the rest is
checked and stepped over, never made into objects).
A row either format cannot read for certain (a walk step not ok, a message msgspec refuses, an
unknown schema id) is left to the caller's reference (the codec's decode); so is every row of a
layout this module does not compile (another field type, a path through a union or a map), and
every other format.

A value is the text ``route.map`` names it by: a string as it is, a number as Python's ``str``
writes it, a boolean (JSON) ``true`` or ``false``; a null or a missing field is None.

Worked example (JSON, ``tenant``)::

    >>> field_reader(JsonCodec(), ["tenant"]).read([b'{"tenant":"acme","x":1}', b'{"tenant":7}', b"{oops"])
    (['acme', '7', None], array([ True,  True, False]))
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

import msgspec
import numpy as np

from streamer.formats.avro import AvroCodec
from streamer.formats.codec import Codec
from streamer.formats.columnar.walk import Node, branches, record_fields, skip, text, walk_chunk
from streamer.formats.confluent import ConfluentAvroCodec
from streamer.formats.json_events import JsonCodec

Read = tuple[list[str | None], np.ndarray]  # each row's text (None: no value), and the rows read for certain
_NULL = "\0null"  # text()'s mark of a null branch
_ANY_SIZE = 1 << 40  # the size check is the decode stage's


def as_text(value: Any) -> str | None:
    """A field's value as ``route.map`` names it (None: no value)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class FieldReader(Protocol):
    """Reads one field's text from each of a chunk's message values."""

    def read(self, values: Sequence[bytes | None]) -> Read: ...


class JsonField:
    """A field of JSON objects, by msgspec: a struct holding only it (nested for a dotted path)."""

    def __init__(self, path: Sequence[str]) -> None:
        inner: Any = Any
        for depth, name in reversed(list(enumerate(path))):
            inner = msgspec.defstruct(f"Field{depth}", [(name, inner | None, None)])
        self._path = tuple(path)
        self._one = msgspec.json.Decoder(inner)

    def _text(self, got: Any) -> str | None:
        for name in self._path:
            if got is None:
                return None
            got = getattr(got, name)
        return got if type(got) is str else as_text(got)

    def read(self, values: Sequence[bytes | None]) -> Read:
        """Message by message (joining the chunk into one array to decode costs more: a fresh
        buffer of the chunk's size each time)."""
        n = len(values)
        texts: list[str | None] = [None] * n
        ok = np.zeros(n, bool)
        for i, value in enumerate(values):
            if value is None:
                continue
            try:
                texts[i] = self._text(self._one.decode(value))
                ok[i] = True
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass  # the reference's: a dead letter, or a value msgspec does not read (NaN)
        return texts, ok


class AvroField:
    """A field of one Avro writer schema, by the columnar walk (``offset`` bytes of framing first)."""

    def __init__(self, levels: list[tuple[list[Node], Node]], offset: int) -> None:
        self._levels, self._offset = levels, offset  # per level: the fields before it, and it
        self._nullable = any(b.kind == "null" for b in branches(levels[-1][1]))

    @classmethod
    def compile(cls, writer_schema: dict[str, Any], path: Sequence[str], offset: int = 0) -> AvroField | None:
        """None for a layout the walk does not read for this field (the reference's then)."""
        fields = record_fields(writer_schema)
        levels: list[tuple[list[Node], Node]] = []
        for depth, name in enumerate(path):
            names = [f for f, _ in fields or ()]
            if fields is None or name not in names:
                return None
            at = names.index(name)
            node = fields[at][1]
            levels.append(([t for _, t in fields[:at]], node))
            if depth < len(path) - 1:
                fields = list(zip(node.names, node.branches, strict=True)) if node.kind == "record" else None
        leaf = levels[-1][1]
        if not all(b.kind in ("string", "long", "null") for b in branches(leaf)):
            return None
        return cls(levels, offset)

    def read(self, values: Sequence[bytes | None]) -> Read:
        n = len(values)
        w, sel = walk_chunk(values, self._offset, _ANY_SIZE)
        for before, node in self._levels:
            for t in before:
                skip(t, w, sel)
                sel = sel[w.ok[sel]]
        got = text(self._levels[-1][1], w, sel, null=_NULL)
        ok = np.zeros(n, bool)
        ok[sel] = w.ok[sel]
        texts: list[str | None] = [None] * n
        if len(sel) == n and ok.all():
            texts = [None if t == _NULL else t for t in got] if self._nullable else list(got)
        else:
            for i, t, good in zip(sel.tolist(), got, w.ok[sel].tolist(), strict=True):
                texts[i] = None if not good or t == _NULL else t
        return texts, ok


class ConfluentAvroField:
    """A field of avro-confluent messages: one :class:`AvroField` per writer schema id, compiled
    the first time the id is seen (an id the registry does not give, or whose schema resolves to
    a different reader schema: the reference's)."""

    def __init__(self, decoder: ConfluentAvroCodec, path: Sequence[str]) -> None:
        self._decoder, self._path = decoder, tuple(path)
        self._by_head: dict[bytes, AvroField | None] = {}

    def _field(self, head: bytes) -> AvroField | None:
        if len(head) != 5 or head[0] != 0:
            return None
        if head not in self._by_head:
            try:
                writer = self._decoder.reader(int.from_bytes(head[1:], "big"))
            except Exception:  # noqa: BLE001 - unknown id or registry away: the reference raises it per row
                return None
            self._by_head[head] = None if writer.resolves else AvroField.compile(
                json.loads(writer.schema_json), self._path, offset=5)
        return self._by_head[head]

    def read(self, values: Sequence[bytes | None]) -> Read:
        n = len(values)
        texts: list[str | None] = [None] * n
        ok = np.zeros(n, bool)
        groups: dict[bytes, list[int]] = {}
        for i, v in enumerate(values):
            groups.setdefault(v[:5] if v is not None else b"", []).append(i)
        for head, rows in groups.items():
            field = self._field(head)
            if field is None:
                continue
            got, good = field.read([values[i] for i in rows])
            if len(rows) == n:
                return got, good
            for j, i in enumerate(rows):
                texts[i], ok[i] = got[j], good[j]
        return texts, ok


def field_reader(decoder: Codec, path: Sequence[str]) -> FieldReader | None:
    """The fast reader of the field at ``path`` for ``decoder``'s format; None: the reference reads it."""
    if type(decoder) is JsonCodec:
        return JsonField(path)
    if isinstance(decoder, AvroCodec):
        return AvroField.compile(json.loads(decoder.schema_json), path)
    if isinstance(decoder, ConfluentAvroCodec):
        return ConfluentAvroField(decoder, path)
    return None
