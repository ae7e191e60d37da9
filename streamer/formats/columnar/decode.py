"""Columnar decode + validate of a chunk of Avro feature events: the fast path beside ``decode_batch``.

Exact or step aside: a row lands in ``DecodedColumns.rows`` only when its bytes take a shape whose
result is certain to equal ``AvroCodec.decode`` followed by ``EventValidator.to_record`` (fastavro
1.13's reader: varints as read_long reads them, strict UTF-8, floats as their little-endian bits).
Anything else, valid or not, goes to ``fallback`` for the reference path, which gives the same
record or the same dead-letter error as before. Every field is walked for all rows at once: the
messages are joined into one buffer, and each step moves a vector of positions along it.

Worked example (the shipped FeatureEvent, 2 features)::

    >>> dec = ColumnarDecoder.compile(schema, input_cfg, n_features=2)
    >>> cols = dec.decode([ok_bytes, None, ok_bytes[:-1]])
    >>> cols.rows.tolist(), cols.fallback.tolist()
    ([0], [1, 2])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import fastavro
import numpy as np

from streamer.config import InputConfig
from streamer.formats.columnar.texts import Texts, ascii_texts

_PAD = b"\0" * 16  # a 10-byte varint gather at a message's end stays inside the buffer
_WIDTH = {"null": 0, "boolean": 1, "float": 4, "double": 8}
_F32_MAX = 0x7F7FFFFF  # bits of the largest finite float32


class _T(NamedTuple):
    """A compiled schema node: ``kind`` with its width, symbol count or union branches."""

    kind: str  # fixed (null, boolean, float, double, fixed), long, string, bytes, enum, array, union
    size: int = 0  # fixed: bytes; enum: symbols; array: item width
    branches: tuple[_T, ...] = ()
    item: str = ""  # the primitive a fixed-width node is; for an array, its items' if float or double


@dataclass(frozen=True, slots=True)
class DecodedColumns:
    """One chunk, decoded: ``rows`` index the input values; each column has one entry per row."""

    rows: np.ndarray  # intp, ascending: values proven to decode and validate as below
    features: np.ndarray  # float32 [len(rows), n_features]
    event_ids: Sequence[str]  # a Texts (bytes) for ASCII ids, else a list
    entity_ids: Sequence[str]
    event_times: np.ndarray  # int64 milliseconds
    fallback: np.ndarray  # intp, ascending: values the caller sends through the reference path


def byte_windows(buf: np.ndarray, width: int) -> np.ndarray:
    """Every ``width``-byte window of the uint8 array ``buf``, as rows of one strided view (no
    copy; writeable when ``buf`` is): what numpy's ``sliding_window_view`` gives, made directly,
    for ~1 us instead of its ~25 us of checks, paid several times per chunk and per batch."""
    return np.ndarray((max(0, len(buf) - width + 1), width), np.uint8, buf, 0, (1, 1))


class _Walk:
    """The chunk's bytes and, per message, where the walk stands, where the message ends, and ok."""

    def __init__(self, raw: bytes, pos: np.ndarray, end: np.ndarray, ok: np.ndarray) -> None:
        self.raw, self.pos, self.end, self.ok = raw, pos, end, ok
        self.buf = np.frombuffer(raw, np.uint8)

    def take(self, at: np.ndarray, width: int) -> np.ndarray:
        """``width`` bytes from each position in ``at``, as rows: one strided gather, no index matrix."""
        return byte_windows(self.buf, width)[at]

    def advance(self, sel: np.ndarray, n: np.ndarray | int) -> np.ndarray:
        """Move ``sel`` past ``n`` bytes each; a row whose message is too short is no longer ok."""
        p = self.pos[sel]
        fits = (n >= 0) & (n <= self.end[sel] - p)  # no overflow: n is never added before it fits
        self.ok[sel] &= fits
        self.pos[sel] = np.where(fits, p + np.where(fits, n, 0), p)
        return p


def _varint(w: _Walk, sel: np.ndarray) -> np.ndarray:
    """Read one zigzag varint per row of ``sel`` as fastavro's read_long does; int64, aligned with sel.

    Refused (not ok): more than 10 bytes, a 10th byte that overflows 64 bits, a number running
    past its message. Non-minimal encodings (``80 00`` for 0) read as fastavro reads them.
    """
    p = w.pos[sel]
    first = w.buf[p].astype(np.int64)
    value = (first >> 1) ^ -(first & 1)
    length = np.ones(len(sel), np.int64)
    long_ = np.flatnonzero(first >= 0x80)
    if len(long_):
        lanes = w.take(p[long_], 10)
        last = np.full(len(long_), 10)  # index of the closing byte; 10: none in reach
        for j in range(9, -1, -1):
            last[lanes[:, j] < 0x80] = j
        u = np.zeros(len(long_), np.uint64)
        for j in range(int(np.minimum(last, 9).max()) + 1):
            u |= np.where(last >= j, lanes[:, j] & 0x7F, 0).astype(np.uint64) << np.uint64(7 * j)
        value[long_] = (u >> np.uint64(1)).view(np.int64) ^ -(u & np.uint64(1)).view(np.int64)
        bad = (last == 10) | ((last == 9) & (lanes[:, 9] > 1))  # past 64 bits: fastavro's shift wraps
        length[long_] = np.where(bad, -1, last + 1)
    w.advance(sel, length)
    return value


def _string(w: _Walk, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Skip a length-prefixed string or bytes; returns its (start, stop) per row of ``sel``."""
    n = _varint(w, sel)
    start = w.advance(sel, n)
    return start, start + n


def _texts(w: _Walk, sel: np.ndarray) -> Sequence[Any]:
    """Strict UTF-8, string by string as fastavro decodes; a row that fails is no longer ok. All
    ASCII (the usual ids): kept as bytes (:class:`Texts`), never made into ``str`` here."""
    start, stop = _string(w, sel)
    raw, ok = w.raw, w.ok[sel]
    if ok.all():
        column = ascii_texts(w.buf, start, stop)
        if column is not None:
            return column
        try:
            return [raw[a:b].decode() for a, b in zip(start.tolist(), stop.tolist())]
        except UnicodeDecodeError:
            pass
    spans = list(zip(start.tolist(), stop.tolist(), ok.tolist()))
    try:
        return [raw[a:b].decode() if good else None for a, b, good in spans]
    except UnicodeDecodeError:
        out: list[Any] = []
        for i, (a, b, good) in enumerate(spans):
            try:
                out.append(raw[a:b].decode() if good else None)
            except UnicodeDecodeError:
                out.append(None)
                w.ok[sel[i]] = False
        return out


def _union(t: _T, w: _Walk, sel: np.ndarray, each: Callable[[_T, np.ndarray], Any | None],
           merge: Callable[[np.ndarray, Any], None]) -> None:
    """Read the branch index, then ``each(branch, rows)``; a None result refuses those rows."""
    index = _varint(w, sel)
    ok = w.ok[sel]
    w.ok[sel] &= (index >= 0) & (index < len(t.branches))  # fastavro would wrap a negative index
    for b, branch in enumerate(t.branches):
        mask = ok & (index == b)
        if mask.any():
            got = each(branch, sel[mask])
            if got is None:
                w.ok[sel[mask]] = False
            else:
                merge(mask, got)


def _skip(t: _T, w: _Walk, sel: np.ndarray) -> None:
    if t.kind in ("fixed", "null"):
        w.advance(sel, t.size)
    elif t.kind == "long":
        _varint(w, sel)
    elif t.kind == "string":
        _texts(w, sel)  # decoded only to refuse what fastavro's strict decode would refuse
    elif t.kind == "bytes":
        _string(w, sel)
    elif t.kind == "enum":
        i = _varint(w, sel)
        w.ok[sel] &= (i >= 0) & (i < t.size)
    elif t.kind == "array":  # one block of fixed-width items, or none
        count = _varint(w, sel)
        w.ok[sel] &= count >= 0
        _array_end(w, sel, count, t.size)
    else:
        def branch(b: _T, rows: np.ndarray) -> bool:
            _skip(b, w, rows)
            return True

        _union(t, w, sel, branch, lambda m, got: None)


def _array_end(w: _Walk, sel: np.ndarray, count: np.ndarray | int, width: int) -> np.ndarray:
    """Step over ``count`` items and the closing zero count; returns where the items start."""
    room = (w.end[sel] - w.pos[sel]) // width  # checked before multiplying: a huge count must not wrap
    count = np.broadcast_to(count, sel.shape)
    start = w.advance(sel, np.where((count >= 0) & (count <= room), count, -1) * width)
    more = w.ok[sel] & (count > 0)
    rows = sel[more]
    w.ok[rows] &= w.buf[w.pos[rows]] == 0  # a second block (or a long-form zero) is left to fastavro
    w.advance(rows, 1)
    return start


def _text(t: _T, w: _Walk, sel: np.ndarray) -> Sequence[Any]:
    """The value ``str(payload[field])`` gives, per row of ``sel`` (None where not ok)."""
    if t.kind == "string":
        return _texts(w, sel)
    if t.kind == "long":
        return [str(v) for v in _varint(w, sel).tolist()]
    if t.kind == "null":  # str(None)
        return ["None"] * len(sel)
    out: list[Any] = [None] * len(sel)

    def merge(mask: np.ndarray, got: list[Any]) -> None:
        for i, v in zip(np.flatnonzero(mask).tolist(), got):
            out[i] = v

    _union(t, w, sel, lambda b, rows: _text(b, w, rows), merge)
    return out


def _long(t: _T, w: _Walk, sel: np.ndarray) -> np.ndarray | None:
    """An int/long field's value per row of ``sel``; None when the type gives no integer."""
    if t.kind == "long":
        return _varint(w, sel)
    if t.kind != "union":
        return None
    out = np.zeros(len(sel), np.int64)
    _union(t, w, sel, lambda b, rows: _long(b, w, rows), lambda m, got: out.__setitem__(m, got))
    return out


def _floats(t: _T, w: _Walk, sel: np.ndarray, n: int) -> np.ndarray | None:
    """Exactly ``n`` float or double items in one block, per row; float32 [len(sel), n]."""
    out = np.zeros((len(sel), n), np.float32)
    if t.kind == "union":
        _union(t, w, sel, lambda b, rows: _floats(b, w, rows, n), lambda m, got: out.__setitem__(m, got))
        return out
    if t.kind != "array" or not t.item:
        return None
    count = _varint(w, sel)
    w.ok[sel] &= count == n
    start = _array_end(w, sel, n, t.size)
    good = np.flatnonzero(w.ok[sel])
    if len(good):
        with np.errstate(over="ignore"):  # a double beyond float32 becomes inf, as np.asarray makes it
            out[good] = w.take(start[good], n * t.size).view("<f4" if t.item == "float" else "<f8")
    return out


def _node(t: Any, named: dict[str, _T]) -> _T | None:
    """Compile a parsed schema node; None for a shape this module does not walk (records, maps)."""
    if isinstance(t, list):
        branches = [_node(b, named) for b in t]
        return None if None in branches else _T("union", branches=tuple(b for b in branches if b))
    if isinstance(t, str):
        if t in _WIDTH:
            return _T("null") if t == "null" else _T("fixed", _WIDTH[t], item=t)
        return _T("long") if t in ("int", "long") else _T(t) if t in ("string", "bytes") else named.get(t)
    if not isinstance(t, dict) or not isinstance(t.get("type"), str):
        return None
    kind = t["type"]
    if kind in ("fixed", "enum"):
        named[t["name"]] = _T(kind, int(t["size"]) if kind == "fixed" else len(t["symbols"]))
        return named[t["name"]]
    if kind == "array":
        item = _node(t["items"], named)
        if item is None or item.kind != "fixed" or item.size == 0:
            return None  # zero-width items are the codec's bounded walker's business
        return _T("array", item.size, item=item.item if item.item in ("float", "double") else "")
    if kind in ("record", "error", "map"):
        return None
    return _node(kind, named)  # a primitive with attributes (a logical type reads as its base type)


def _branches(t: _T) -> tuple[_T, ...]:
    return t.branches if t.kind == "union" else (t,)


def _bound(pred: Callable[[Any], Any], lowest_first: bool) -> np.float32:
    """The float32 threshold at which ``pred`` (the validator's own comparison) flips.

    ``pred(x)`` is monotone over finite float32 x (false above / below some point), so a binary
    search over the ordered bit patterns finds the first x where it is false: exact, whatever
    NumPy's promotion rule for a float32 against a Python number is.
    """
    def at(k: int) -> np.float32:  # k orders the finite float32 values: -max .. -0 .. +max
        bits = k if k >= 0 else 0x80000000 | -k
        return np.array([bits], np.uint32).view(np.float32)[0]

    lo, hi = -_F32_MAX, _F32_MAX
    if lowest_first:  # pred true low, false high: the first false
        if bool(pred(at(hi))):
            return np.float32(math.inf)
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if bool(pred(at(mid))) else (lo, mid)
    else:  # pred false low, true high: the last false
        if bool(pred(at(lo))):
            return np.float32(-math.inf)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (lo, mid - 1) if bool(pred(at(mid))) else (mid, hi)
    return at(lo)


class ColumnarDecoder:
    """Decodes and validates a chunk of messages of one writer schema, as columns."""

    def __init__(self, fields: list[tuple[str, _T]], cfg: InputConfig, n_features: int,
                 low: np.float32, high: np.float32) -> None:
        self._fields, self._cfg, self._n = fields, cfg, n_features
        self._low, self._high = low, high
        self._entity = cfg.entity_field in dict(fields)

    @classmethod
    def compile(cls, writer_schema: dict[str, Any], input_cfg: InputConfig,
                n_features: int) -> ColumnarDecoder | None:
        """A decoder for ``writer_schema``, or None when its layout is not one this walks.

        Walked: a record of strings, int/long, float, double, boolean, null, bytes, enum, fixed,
        arrays of fixed-width items and unions of these. The features field is an array of float
        or double (or a union holding one); the time field int/long (or a union holding one); the
        id and entity fields string, int/long, or unions of these with null; the entity field may
        be absent (it defaults to ""), the others may not (their defaults need the message).
        """
        cfg = input_cfg
        try:
            parsed = fastavro.parse_schema(writer_schema)
            low = _bound(lambda x: cfg.feature_min is not None and x < cfg.feature_min, True)
            high = _bound(lambda x: cfg.feature_max is not None and x > cfg.feature_max, False)
        except Exception:  # noqa: BLE001 - a schema fastavro refuses, a bound NumPy cannot compare
            return None
        if not isinstance(parsed, dict) or parsed.get("type") != "record" or n_features < 1:
            return None
        named: dict[str, _T] = {}
        fields: list[tuple[str, _T]] = []
        for f in parsed["fields"]:
            node = _node(f["type"], named)
            if node is None or f["name"] in dict(fields):
                return None
            fields.append((f["name"], node))
        types = dict(fields)
        names = (cfg.features_field, cfg.time_field, cfg.id_field)
        if len(set(names)) < 3 or cfg.entity_field in names[:2] or not set(names) <= types.keys():
            return None  # a field in two roles, or an id or time that defaults to the message's coordinates
        texts = [types[cfg.id_field]] + ([types[cfg.entity_field]] if cfg.entity_field in types else [])
        if (any(b.kind not in ("string", "long", "null") for t in texts for b in _branches(t))
                or not any(b.kind == "array" and b.item for b in _branches(types[cfg.features_field]))
                or not any(b.kind == "long" for b in _branches(types[cfg.time_field]))):
            return None
        return cls(fields, cfg, n_features, low, high)

    def decode(self, values: Sequence[bytes | None], offset_of_payload: int = 0) -> DecodedColumns:
        """Decode and validate ``values``; the Avro body of each starts ``offset_of_payload`` bytes in.

        The caller checks any framing before that offset (the Confluent magic byte and schema id).
        """
        if offset_of_payload < 0:
            raise ValueError(f"offset_of_payload must be >= 0, got {offset_of_payload}")
        cfg, k = self._cfg, len(values)
        try:
            sizes = np.fromiter(map(len, cast("Sequence[bytes]", values)), np.int64, k)
        except TypeError:  # a tombstone among them
            sizes = np.fromiter((-1 if v is None else len(v) for v in values), np.int64, k)
        ends = np.cumsum(sizes.clip(0))
        ok = (sizes >= offset_of_payload) & (sizes >= 0) & (sizes <= cfg.max_message_bytes)
        w = _Walk(b"".join([b"" if v is None else v for v in values]) + _PAD,
                  np.where(ok, ends - sizes.clip(0) + offset_of_payload, 0), ends, ok)
        sel = np.flatnonzero(ok)
        got: dict[str, tuple[np.ndarray, Any]] = {}
        for name, t in self._fields:
            sel = sel[w.ok[sel]]
            if name == cfg.features_field:
                got[name] = sel, _floats(t, w, sel, self._n)
            elif name == cfg.time_field:
                got[name] = sel, _long(t, w, sel)
            elif name in (cfg.id_field, cfg.entity_field):
                got[name] = sel, _text(t, w, sel)
            else:
                _skip(t, w, sel)
        at, feats = got[cfg.features_field]
        # NaN propagates through min and max, and -inf / +inf are below / above any bound (the bounds
        # are finite or refuse all), so these two tests are the validator's finite test too.
        good = ((w.ok & (w.pos == w.end))[at]  # trailing bytes: the codec refuses them
                & (feats.min(axis=1, initial=np.inf) >= self._low)
                & (feats.max(axis=1, initial=-np.inf) <= self._high))
        keep = np.flatnonzero(good)
        if len(keep) < len(at):
            feats = feats[keep]
        rows = at[keep]
        entities = _pick(got[cfg.entity_field], rows) if self._entity else [""] * len(rows)
        rest = np.ones(k, bool)
        rest[rows] = False
        return DecodedColumns(rows, feats, _pick(got[cfg.id_field], rows), entities,
                              _pick(got[cfg.time_field], rows), np.flatnonzero(rest))


def _pick(column: tuple[np.ndarray, Any], rows: np.ndarray) -> Any:
    """The entries of ``column`` (values for the rows ``at``) for ``rows``, a subset of ``at``."""
    at, values = column
    if len(at) == len(rows):
        return values
    idx = np.searchsorted(at, rows)
    return values[idx] if isinstance(values, (np.ndarray, Texts)) else [values[i] for i in idx.tolist()]
