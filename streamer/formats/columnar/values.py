"""Avro bytes of one column of values, for all rows at once: each type's writer, byte for byte as fastavro's.

A column is encoded into a :data:`Piece`: every row's bytes back to back in one uint8 buffer,
and each row's size. A record is the pieces of its fields joined row by row (:func:`join`), so
a union, an array or a whole record is pieces of pieces. Types: null, boolean, int, long,
float, double, string, bytes, enum, fixed, arrays of those (from a numpy matrix), and unions of
the scalar ones, with the branch fastavro's writer picks for each value (the first branch whose
validator takes it; 'double' over an earlier 'float').

Exact or step aside: a value fastavro would write otherwise than the plain rule, or refuse (a
string with a lone surrogate, an integer outside its type's range, a bool into a number), marks
its row not ``ok`` and the caller encodes that row with the reference. NaN and infinities are
written as their bits, as fastavro does; a float column is rounded double -> float32 as
fastavro's C cast rounds it.

Worked example: the column ``[None, 2.5]`` of ``["null", "double"]`` is the piece
``(00 02 00 00 00 00 00 00 04 40, sizes [1, 9])``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from streamer.formats.columnar.encode import _INT64, _ints, _texts, _varints
from streamer.formats.columnar.texts import Texts

Piece = tuple[np.ndarray, np.ndarray]  # (uint8 bytes of every row back to back, int64 size per row)
Type = Any  # a compiled type: a primitive's name, ("enum", symbols), ("fixed", size), ("array", item), ("union", branches)
_INT32 = (-(1 << 31), 1 << 31)
_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "string", "bytes")


def compile_type(t: Any, named: dict[str, Any], in_union: bool = False) -> Type | None:
    """A parsed Avro type (fastavro's ``parse_schema``) as a :data:`Type`; None where no writer here
    is proven (records, maps, nested unions, logical types other than timestamp-millis)."""
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return t
        return compile_type(named[t], named, in_union) if t in named else None
    if isinstance(t, list):
        branches = [compile_type(b, named, True) for b in t]
        if in_union or any(b is None or (isinstance(b, tuple) and b[0] == "array") for b in branches):
            return None
        return ("union", tuple(branches))
    if not isinstance(t, dict):
        return None
    kind, logical = t.get("type"), t.get("logicalType")
    if logical is not None:
        return "long" if logical == "timestamp-millis" and kind == "long" else None
    if kind == "enum":
        return ("enum", tuple(t["symbols"]))
    if kind == "fixed":
        return ("fixed", int(t["size"]))
    if kind == "array":
        item = compile_type(t["items"], named, True)
        return None if item is None or isinstance(item, tuple) and item[0] in ("union", "array") else ("array", item)
    return compile_type(kind, named, in_union) if isinstance(kind, str) and kind in _PRIMITIVES else None


def constant(data: bytes, rows: int) -> Piece:
    """The same bytes in every row."""
    return np.tile(np.frombuffer(data, np.uint8), rows), np.full(rows, len(data), np.int64)


def join(pieces: Sequence[Piece], rows: int) -> Piece:
    """Each row's bytes of ``pieces``, one after the other: ``rows`` rows in one piece."""
    if not pieces:
        return np.empty(0, np.uint8), np.zeros(rows, np.int64)
    if len(pieces) == 1:
        return pieces[0]
    sizes = np.zeros(rows, np.int64)
    for _, size in pieces:
        sizes += size
    out = np.empty(int(sizes.sum()), np.uint8)
    at = np.cumsum(sizes) - sizes  # where each row's next piece goes
    for blob, size in pieces:
        if len(blob):
            out[np.repeat(at - (np.cumsum(size) - size), size) + np.arange(len(blob))] = blob
        at += size
    return out, sizes


def _windows(data: np.ndarray, length: np.ndarray) -> Piece:
    """Rows of ``data`` of which only the first ``length`` bytes count (varints)."""
    keep = np.arange(data.shape[1]) < length[:, None]
    return data[keep], length


def _fixed(data: np.ndarray) -> Piece:
    """Rows of ``data``, all of them, uint8 [rows, width]."""
    return np.ascontiguousarray(data).reshape(-1), np.full(len(data), data.shape[1], np.int64)


def _floats(values: Sequence[Any] | np.ndarray, ok: np.ndarray) -> np.ndarray:
    """``values`` as float64, as fastavro's ``float(value)`` makes them; a bool or a non-number is refused."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
        return values.astype(np.float64)
    vals = values.tolist() if isinstance(values, np.ndarray) else list(values)
    good = [type(v) in (float, int) for v in vals]
    if all(good):
        try:
            return np.array(vals, np.float64)
        except OverflowError:  # an int past a double's range: found one by one below
            pass
    out = np.zeros(len(vals), np.float64)
    for i, v in enumerate(vals):
        try:
            out[i] = float(v) if good[i] else 0.0
        except OverflowError:
            good[i] = False
    ok &= np.array(good, bool)
    return out


def column(t: Type, values: Sequence[Any] | np.ndarray, ok: np.ndarray) -> Piece:
    """The bytes of ``values`` (one per row) written as type ``t``; ``ok`` loses the rows that step aside."""
    k = len(values)
    if t == "null":
        return np.empty(0, np.uint8), np.zeros(k, np.int64)
    if t == "boolean":
        if isinstance(values, np.ndarray) and values.dtype.kind == "b":
            return values.astype(np.uint8), np.ones(k, np.int64)
        vals = values.tolist() if isinstance(values, np.ndarray) else values
        good = np.array([type(v) is bool for v in vals], bool)
        ok &= good
        return np.array([v is True for v in vals], np.uint8), np.ones(k, np.int64)
    if t in ("int", "long"):
        if not isinstance(values, np.ndarray) or values.dtype.kind not in "iu":
            vals = values.tolist() if isinstance(values, np.ndarray) else values
            ok &= np.array([type(v) is int for v in vals], bool)  # a bool or a float: the reference's
            values = [v if type(v) is int else 0 for v in vals]
        ints = _ints(values, ok)
        if t == "int":
            ok &= (ints >= _INT32[0]) & (ints < _INT32[1])
        return _windows(*_varints(ints))
    if t in ("float", "double"):
        doubles = _floats(values, ok)
        with np.errstate(invalid="ignore", over="ignore"):  # double -> float, as fastavro's C cast
            data = doubles.astype("<f4" if t == "float" else "<f8")
        return _fixed(data.view(np.uint8).reshape(k, -1))
    if t == "string":
        return _strings(values, ok)
    if t == "bytes" or (isinstance(t, tuple) and t[0] == "fixed"):
        return _bytes(t, values, ok)
    if t[0] == "enum":
        where = {s: i for i, s in enumerate(t[1])}
        index = np.array([where.get(v, -1) if type(v) is str else -1 for v in values], np.int64)
        ok &= index >= 0
        return _windows(*_varints(np.maximum(index, 0)))
    if t[0] == "array":
        return _array(t[1], values, ok)
    return _union(t[1], values, ok)


def _strings(values: Sequence[Any] | np.ndarray, ok: np.ndarray) -> Piece:
    vals: Sequence[Any] = values.tolist() if isinstance(values, np.ndarray) else values
    if not isinstance(vals, Texts):  # a Texts column is ASCII strings already
        good = [type(v) is str for v in vals]
        if not all(good):
            ok &= np.array(good, bool)
            vals = [v if g else "" for v, g in zip(vals, good)]
    blob, sizes = _texts(vals, ok)
    return join([_windows(*_varints(sizes)), (np.frombuffer(blob, np.uint8), sizes)], len(sizes))


def _bytes(t: Type, values: Sequence[Any] | np.ndarray, ok: np.ndarray) -> Piece:
    size = t[1] if isinstance(t, tuple) else None
    vals = values.tolist() if isinstance(values, np.ndarray) else values
    good = [type(v) in (bytes, bytearray) and (size is None or len(v) == size) for v in vals]
    ok &= np.array(good, bool)
    parts = [bytes(v) if g else b"" for v, g in zip(vals, good)]
    sizes = np.fromiter(map(len, parts), np.int64, len(parts))
    raw = np.frombuffer(b"".join(parts), np.uint8)
    if size is not None:
        return raw, sizes
    return join([_windows(*_varints(sizes)), (raw, sizes)], len(sizes))


def _array(item: Type, values: Sequence[Any] | np.ndarray, ok: np.ndarray) -> Piece:
    """An array per row, from a [rows, n] matrix: one block of n items, then the closing zero count."""
    matrix = np.asarray(values)
    k = len(matrix)
    if matrix.ndim != 2:
        ok[:] = False
        return np.empty(0, np.uint8), np.zeros(k, np.int64)
    n = matrix.shape[1]
    end = constant(b"\0", k)
    if n == 0:
        return end
    flat = matrix.reshape(-1)
    item_ok = np.ones(len(flat), bool)
    blob, item_sizes = column(item, flat if flat.dtype != object else flat.tolist(), item_ok)
    ok &= item_ok.reshape(k, n).all(axis=1)
    count = constant(bytes(_windows(*_varints(np.array([n], np.int64)))[0]), k)
    return join([count, (blob, item_sizes.reshape(k, n).sum(axis=1)), end], k)


def _valid(v: Any, t: Type) -> bool:
    """fastavro's validator of a union branch, for the types here."""
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t in ("int", "long"):
        lo, hi = _INT32 if t == "int" else _INT64
        return isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi
    if t in ("float", "double"):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    if t == "bytes":
        return isinstance(v, (bytes, bytearray))
    if t[0] == "enum":
        return isinstance(v, str) and v in t[1]
    return isinstance(v, bytes) and len(v) == t[1]  # fixed


def branch(v: Any, branches: Sequence[Type]) -> int:
    """The branch fastavro's writer picks for ``v``: the first that validates it, but a 'double'
    after a 'float' that does; -1 when none does (the writer refuses it)."""
    floating = -1
    for i, t in enumerate(branches):
        if floating >= 0:
            if t == "double":
                return i
        elif _valid(v, t):
            if t != "float":
                return i
            floating = i
    return floating


def _union(branches: Sequence[Type], values: Sequence[Any] | np.ndarray, ok: np.ndarray) -> Piece:
    vals = values.tolist() if isinstance(values, np.ndarray) else list(values)
    by_type = not any(isinstance(b, tuple) or b in ("int", "long") for b in branches)  # a value's type decides
    known: dict[type, int] = {}
    picks = []
    for v in vals:
        if by_type:
            kind = type(v)
            if kind not in known:
                known[kind] = branch(v, branches)
            picks.append(known[kind])
        else:
            picks.append(branch(v, branches))
    index = np.array(picks, np.int64)
    ok &= index >= 0
    pieces = [_windows(*_varints(np.maximum(index, 0)))]
    for b, t in enumerate(branches):
        rows = np.flatnonzero(index == b)
        if not len(rows):
            continue
        sub_ok = np.ones(len(rows), bool)
        blob, sub = column(t, [vals[i] for i in rows.tolist()], sub_ok)
        ok[rows[~sub_ok]] = False
        sizes = np.zeros(len(vals), np.int64)
        sizes[rows] = sub
        pieces.append((blob, sizes))
    return join(pieces, len(vals))


def cut(piece: Piece, ok: np.ndarray, prefix: bytes = b"") -> list[bytes | None]:
    """Each row's bytes (after ``prefix``), or None where the row steps aside."""
    blob, sizes = piece
    raw = blob.tobytes()
    stops = np.cumsum(sizes).tolist()
    starts = [0, *stops[:-1]]
    if prefix:
        out: list[bytes | None] = [prefix + raw[a:b] for a, b in zip(starts, stops)]
    else:
        out = [raw[a:b] for a, b in zip(starts, stops)]
    if not ok.all():
        for i in np.flatnonzero(~ok).tolist():
            out[i] = None
    return out
