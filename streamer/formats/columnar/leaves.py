"""One field's values for a chunk: the leaf reads of the named-field decoder, and dotted paths.

A leaf is a field whose values the decoder keeps: a model input's field or a pass-through field
(``output.include``), at the top of the record or inside nested records (``card.country``). Its
values are read for all rows at once on walk.py's :class:`Walk`, as the reference's record dict
holds them: an int or long as int64, a float or double as float64 (a float's bits widened), a
boolean as bool (any byte but 0 is true, as fastavro reads it), a string as ``str`` (strict
UTF-8), bytes and fixed as ``bytes``, an enum as its symbol; a null, or a record above the leaf
that is null (or another branch of its union), as null, which ``field_value`` gives as None.

Worked example (``card: ["null", {country: string}]``, path ``card.country``)::

    >>> resolve(fields, "card.country")      # Node('string'), and the record above it: {'card'}
    >>> # rows whose card is null hold a null country: Column.null is True there
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamer.formats.columnar.walk import Node, Walk, array_end, branches, string_spans, texts, varint

# What a leaf node reads as; '' where it is not a leaf this module reads (a record, a map, an
# array of anything but float or double).
LEAF_KINDS = {"float", "double", "boolean", "long", "string", "bytes", "enum", "fixed", "null"}


def kind(t: Node) -> str:
    """The value a compiled node reads: a LEAF_KINDS member, 'array' (of float or double), or ''."""
    if t.kind == "fixed":
        return t.item if t.item in ("float", "double", "boolean") else "fixed"
    if t.kind == "array":
        return "array" if t.item else ""
    return t.kind if t.kind in LEAF_KINDS else ""


def value_kinds(t: Node) -> set[str]:
    """The kinds a field's non-null branches read (a union's, or its own)."""
    return {kind(b) for b in branches(t) if b.kind != "null"}


@dataclass(frozen=True, slots=True)
class Read:
    """A field's values for the rows of a selection: ``values`` (float64, int64, bool or object), nulls."""

    values: np.ndarray
    null: np.ndarray


def read(t: Node, w: Walk, sel: np.ndarray, width: int) -> Read:
    """Read one field per row of ``sel`` (its union branch too); rows that fail are marked not ok."""
    n = len(sel)
    if t.kind == "union":
        index = varint(w, sel)
        ok = w.ok[sel]
        w.ok[sel] &= (index >= 0) & (index < len(t.branches))
        null = np.zeros(n, bool)
        values: np.ndarray | None = None
        for b, branch in enumerate(t.branches):
            mask = ok & (index == b)
            if not mask.any():
                continue
            if branch.kind == "null":
                null[mask] = True
                continue
            got = read(branch, w, sel[mask], width).values
            if values is None:
                values = np.zeros((n, *got.shape[1:]), got.dtype)
            elif values.dtype != got.dtype:  # branches of different kinds (a pass-through field's)
                values, got = values.astype(object), got.astype(object)
            values[mask] = got
        return Read(np.zeros(n) if values is None else values, null)
    what = kind(t)
    no_null = np.zeros(n, bool)
    if what == "null":
        return Read(np.zeros(n), np.ones(n, bool))
    if what == "long":
        return Read(varint(w, sel), no_null)
    if what == "string":
        return Read(_objects(texts(w, sel)), no_null)
    if what == "bytes":
        start, stop = string_spans(w, sel)
        raw = w.raw
        return Read(_objects([raw[a:b] for a, b in zip(start.tolist(), stop.tolist())]), no_null)
    if what == "enum":
        index = varint(w, sel)
        w.ok[sel] &= (index >= 0) & (index < t.size)
        symbols = np.array([*t.names, None], object)[:-1]
        return Read(symbols[np.where(w.ok[sel], index, 0)] if t.size else np.full(n, None), no_null)
    if what == "array":
        count = varint(w, sel)
        w.ok[sel] &= count == width
        start = array_end(w, sel, width, t.size)
        out = np.zeros((n, width), np.float64)
        good = np.flatnonzero(w.ok[sel])
        if len(good):
            out[good] = w.take(start[good], width * t.size).view("<f4" if t.item == "float" else "<f8")
        return Read(out, no_null)
    start = w.advance(sel, t.size)
    if what == "fixed":
        raw = w.raw
        return Read(_objects([raw[a:a + t.size] for a in start.tolist()]), no_null)
    got = w.take(start, t.size)
    if what == "boolean":  # fastavro reads any byte but 0 as true
        return Read(got[:, 0] != 0, no_null)
    return Read(got.view("<f4" if what == "float" else "<f8")[:, 0].astype(np.float64), no_null)


def _objects(items: Iterable[Any]) -> np.ndarray:
    """A 1-D object array of ``items`` (numpy would make bytes or equal-length lists 2-D)."""
    listed = list(items)
    out = np.empty(len(listed), np.object_)
    out[:] = listed
    return out


class Column:
    """A leaf's values for every row of a chunk, filled as the walk reaches it: a row it never
    reaches (a null record above it, a row that failed earlier) stays null."""

    __slots__ = ("null", "values")

    def __init__(self, rows: int) -> None:
        self.values: np.ndarray | None = None
        self.null = np.ones(rows, bool)

    def put(self, sel: np.ndarray, got: Read) -> None:
        if self.values is None:
            self.values = np.zeros((len(self.null), *got.values.shape[1:]), got.values.dtype)
        elif self.values.dtype != got.values.dtype:
            self.values = self.values.astype(object)
        self.values[sel] = got.values
        self.null[sel] = got.null

    def at(self, rows: np.ndarray) -> Read:
        values = np.zeros(len(rows)) if self.values is None else self.values[rows]
        return Read(values, self.null[rows])


def resolve(fields: list[tuple[str, Node]], path: str) -> tuple[Node, list[str]] | None:
    """The node at a dotted ``path`` and the record paths above it (``a``, ``a.b`` for ``a.b.c``);
    None when a part is missing, or a node above is not a record (or a union holding one record,
    its other branches null or any type but a map, read as a null record, as ``field_value`` does)."""
    parts = path.split(".")
    inner: list[str] = []
    node: Node | None = None
    level = fields
    for depth, part in enumerate(parts):
        node = dict(level).get(part)
        if node is None:
            return None
        if depth == len(parts) - 1:
            break
        record = inner_record(node)
        if record is None:
            return None
        inner.append(".".join(parts[:depth + 1]))
        level = list(zip(record.names, record.branches))
    assert node is not None
    return node, inner


def inner_record(t: Node) -> Node | None:
    """The record a node is, or the one record among its union's branches (none a map)."""
    if t.kind == "record":
        return t
    records = [b for b in branches(t) if b.kind == "record"]
    if t.kind != "union" or len(records) != 1 or any(b.kind == "map" for b in t.branches):
        return None
    return records[0]
