"""The Avro walk both columnar decoders share: a chunk of messages in one buffer, every field
stepped over for all rows at once, and the compile prelude that turns a writer schema into the
nodes the walk reads.

Exact or step aside: a step that cannot be certain to read a row as fastavro 1.13's reader does
(varints as read_long reads them, strict UTF-8, floats as their little-endian bits) marks that
row not ``ok``, and the decoder hands it to the reference path. Each step moves the vector of
positions (:class:`Walk`) of the rows it is given.

Worked example (a record {id: string, x: float}; two messages)::

    >>> fields = record_fields(schema)          # [('id', Node('string')), ('x', Node('fixed', 4, ...))]
    >>> w, sel = walk_chunk([b"\x02a\x00\x00\x80?", b"\x02"], 0, 1 << 20)
    >>> text(fields[0][1], w, sel)              # both ids read; the second message ends there
    >>> w.ok[sel].tolist()                      # after floats(): [True, False]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import fastavro
import numpy as np

from streamer.config import InputConfig
from streamer.formats.columnar.texts import Texts, ascii_texts
from streamer.formats.columnar.varints import long_varints

PAD = b"\0" * 16  # a 10-byte varint gather at a message's end stays inside the buffer
WIDTH = {"null": 0, "boolean": 1, "float": 4, "double": 8}


class Node(NamedTuple):
    """A compiled schema node: ``kind`` with its width, symbols, fields or union branches."""

    kind: str  # fixed (null, boolean, float, double, fixed), long, string, bytes, enum, array, items,
    #            map, record, union
    size: int = 0  # fixed: bytes; enum: symbols; array: item width
    branches: tuple[Node, ...] = ()  # union: its branches; record: its fields; items, map: (the item,)
    item: str = ""  # the primitive a fixed-width node is; for an array, its items' if float or double
    names: tuple[str, ...] = ()  # record: its field names; enum: its symbols


MAX_ITEMS = 64  # items of an array (not fixed-width) or map stepped over per row; more: the reference's


@dataclass(frozen=True, slots=True)
class DecodedColumns:
    """One chunk, decoded: ``rows`` index the input values; each column has one entry per row."""

    rows: np.ndarray  # intp, ascending: values proven to decode and validate as below
    features: np.ndarray  # float32 [len(rows), n_features]
    event_ids: Sequence[str]  # a Texts (bytes) for ASCII ids, else a list
    entity_ids: Sequence[str]
    event_times: np.ndarray  # int64 milliseconds
    fallback: np.ndarray  # intp, ascending: values the caller sends through the reference path
    passthrough: list[tuple[Any, ...]] | None = None  # output.include's values per row; None: none read


def byte_windows(buf: np.ndarray, width: int) -> np.ndarray:
    """Every ``width``-byte window of the uint8 array ``buf``, as rows of one strided view (no
    copy; writeable when ``buf`` is): what numpy's ``sliding_window_view`` gives, made directly,
    for ~1 us instead of its ~25 us of checks, paid several times per chunk and per batch."""
    return np.ndarray((max(0, len(buf) - width + 1), width), np.uint8, buf, 0, (1, 1))


class Walk:
    """The chunk's bytes and, per message, where the walk stands, where the message ends, and ok."""

    def __init__(self, raw: bytes, pos: np.ndarray, end: np.ndarray, ok: np.ndarray) -> None:
        self.raw, self.pos, self.end, self.ok = raw, pos, end, ok
        self.buf = np.frombuffer(raw, np.uint8)

    def take(self, at: np.ndarray, width: int) -> np.ndarray:
        """``width`` bytes from each position in ``at``, as rows: one strided gather, no index matrix."""
        return byte_windows(self.buf, width)[at]

    def advance(self, sel: np.ndarray, n: np.ndarray | int) -> np.ndarray:
        """Move ``sel`` past ``n`` bytes each; a row whose message is too short is no longer ok."""
        # Every ``sel`` is a subset of the chunk's rows in ascending order (flatnonzero, masks), so
        # one as long as the chunk is all of them (the usual case): slices, not gathers and scatters
        whole = len(sel) == len(self.pos)
        at = slice(None) if whole else sel
        p = self.pos.copy() if whole else self.pos[sel]
        fits = (n >= 0) & (n <= self.end[at] - p)  # no overflow: n is never added before it fits
        if fits.all():
            self.pos[at] = p + n
        else:
            self.ok[at] &= fits
            self.pos[at] = np.where(fits, p + np.where(fits, n, 0), p)
        return p


def varint(w: Walk, sel: np.ndarray) -> np.ndarray:
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
        value[long_], length[long_] = long_varints(w.take(p[long_], 10))
    w.advance(sel, length)
    return value


def string_spans(w: Walk, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Skip a length-prefixed string or bytes; returns its (start, stop) per row of ``sel``."""
    n = varint(w, sel)
    start = w.advance(sel, n)
    return start, start + n


def texts(w: Walk, sel: np.ndarray) -> Sequence[Any]:
    """Strict UTF-8, string by string as fastavro decodes; a row that fails is no longer ok. All
    ASCII (the usual ids): kept as bytes (:class:`Texts`), never made into ``str`` here."""
    start, stop = string_spans(w, sel)
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


def union(t: Node, w: Walk, sel: np.ndarray, each: Callable[[Node, np.ndarray], Any | None],
           merge: Callable[[np.ndarray, Any], None]) -> None:
    """Read the branch index, then ``each(branch, rows)``; a None result refuses those rows."""
    index = varint(w, sel)
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


def skip(t: Node, w: Walk, sel: np.ndarray) -> None:
    """Step over one value of ``t`` per row of ``sel``, checking it as fastavro would read it."""
    if t.kind in ("fixed", "null"):
        w.advance(sel, t.size)
    elif t.kind == "long":
        varint(w, sel)
    elif t.kind == "string":
        texts(w, sel)  # decoded only to refuse what fastavro's strict decode would refuse
    elif t.kind == "bytes":
        string_spans(w, sel)
    elif t.kind == "enum":
        i = varint(w, sel)
        w.ok[sel] &= (i >= 0) & (i < t.size)
    elif t.kind == "array":  # one block of fixed-width items, or none
        count = varint(w, sel)
        w.ok[sel] &= count >= 0
        array_end(w, sel, count, t.size)
    elif t.kind == "record":
        for field in t.branches:
            skip(field, w, sel[w.ok[sel]])
    elif t.kind in ("items", "map"):
        blocks(t, w, sel)
    else:
        def branch(b: Node, rows: np.ndarray) -> bool:
            skip(b, w, rows)
            return True

        union(t, w, sel, branch, lambda m, got: None)


def blocks(t: Node, w: Walk, sel: np.ndarray) -> None:
    """Step over an array (of items not fixed-width) or a map: one block of at most MAX_ITEMS,
    then the closing zero count. The items are walked one position at a time across the rows: a
    row's item starts where its previous one ends. A negative count (a block with its byte
    size), a second block, or a count beyond the bytes left is the reference's."""
    count = varint(w, sel)
    room = w.end[sel] - w.pos[sel]  # the codec's walker refuses more items than bytes left
    w.ok[sel] &= (count >= 0) & (count <= MAX_ITEMS) & (count <= room)
    kept = w.ok[sel]
    sel, count = sel[kept], count[kept]
    item = t.branches[0]
    for j in range(int(count.max(initial=0))):
        rows = sel[(count > j) & w.ok[sel]]
        if t.kind == "map":
            texts(w, rows)  # the key: fastavro decodes it strictly
            rows = rows[w.ok[rows]]
        skip(item, w, rows)
    more = sel[w.ok[sel] & (count > 0)]
    w.ok[more] &= w.buf[w.pos[more]] == 0  # a second block (or a long-form zero) is left to fastavro
    w.advance(more, 1)


def array_end(w: Walk, sel: np.ndarray, count: np.ndarray | int, width: int) -> np.ndarray:
    """Step over ``count`` items and the closing zero count; returns where the items start."""
    room = (w.end[sel] - w.pos[sel]) // width  # checked before multiplying: a huge count must not wrap
    count = np.broadcast_to(count, sel.shape)
    start = w.advance(sel, np.where((count >= 0) & (count <= room), count, -1) * width)
    more = w.ok[sel] & (count > 0)
    rows = sel[more]
    w.ok[rows] &= w.buf[w.pos[rows]] == 0  # a second block (or a long-form zero) is left to fastavro
    w.advance(rows, 1)
    return start


def text(t: Node, w: Walk, sel: np.ndarray, null: str = "None") -> Sequence[Any]:
    """The text the reference makes of the field, per row of ``sel`` (None where not ok): a
    string as it is, a long in decimal, a null as ``null`` (an entity's: '', an id's: 'None')."""
    if t.kind == "string":
        return texts(w, sel)
    if t.kind == "long":
        return [str(v) for v in varint(w, sel).tolist()]
    if t.kind == "null":
        return [null] * len(sel)
    out: list[Any] = [None] * len(sel)

    def merge(mask: np.ndarray, got: list[Any]) -> None:
        for i, v in zip(np.flatnonzero(mask).tolist(), got):
            out[i] = v

    union(t, w, sel, lambda b, rows: text(b, w, rows, null), merge)
    return out


def long(t: Node, w: Walk, sel: np.ndarray) -> np.ndarray | None:
    """An int/long field's value per row of ``sel``; None when the type gives no integer."""
    if t.kind == "long":
        return varint(w, sel)
    if t.kind != "union":
        return None
    out = np.zeros(len(sel), np.int64)
    union(t, w, sel, lambda b, rows: long(b, w, rows), lambda m, got: out.__setitem__(m, got))
    return out


def floats(t: Node, w: Walk, sel: np.ndarray, n: int) -> np.ndarray | None:
    """Exactly ``n`` float or double items in one block, per row; float32 [len(sel), n]."""
    out = np.zeros((len(sel), n), np.float32)
    if t.kind == "union":
        union(t, w, sel, lambda b, rows: floats(b, w, rows, n), lambda m, got: out.__setitem__(m, got))
        return out
    if t.kind != "array" or not t.item:
        return None
    count = varint(w, sel)
    w.ok[sel] &= count == n
    start = array_end(w, sel, n, t.size)
    good = np.flatnonzero(w.ok[sel])
    if len(good):
        with np.errstate(over="ignore"):  # a double beyond float32 becomes inf, as np.asarray makes it
            out[good] = w.take(start[good], n * t.size).view("<f4" if t.item == "float" else "<f8")
    return out


def node(t: Any, named: dict[str, Node | None]) -> Node | None:
    """Compile a parsed schema node; None for a shape this module does not walk (a recursive record)."""
    if isinstance(t, list):
        branches = [node(b, named) for b in t]
        return None if None in branches else Node("union", branches=tuple(b for b in branches if b))
    if isinstance(t, str):
        if t in WIDTH:
            return Node("null") if t == "null" else Node("fixed", WIDTH[t], item=t)
        return Node("long") if t in ("int", "long") else Node(t) if t in ("string", "bytes") else named.get(t)
    if not isinstance(t, dict) or not isinstance(t.get("type"), str):
        return None
    kind = t["type"]
    if kind in ("fixed", "enum"):
        symbols = tuple(t["symbols"]) if kind == "enum" else ()
        named[t["name"]] = Node(kind, int(t["size"]) if kind == "fixed" else len(symbols), names=symbols)
        return named[t["name"]]
    if kind in ("record", "error"):
        named[t["name"]] = None  # a field of its own type (a recursive record) does not compile
        fields = [node(f["type"], named) for f in t["fields"]]
        if None in fields:
            return None
        named[t["name"]] = Node("record", branches=tuple(f for f in fields if f),
                                names=tuple(f["name"] for f in t["fields"]))
        return named[t["name"]]
    if kind in ("array", "map"):
        item = node(t["items"] if kind == "array" else t["values"], named)
        if item is None:
            return None
        if kind == "array" and item.kind == "fixed" and item.size:  # one block of bytes per row
            return Node("array", item.size, item=item.item if item.item in ("float", "double") else "")
        return Node("items" if kind == "array" else "map", branches=(item,))
    return node(kind, named)  # a primitive with attributes (a logical type reads as its base type)


def branches(t: Node) -> tuple[Node, ...]:
    return t.branches if t.kind == "union" else (t,)


def record_fields(writer_schema: dict[str, Any]) -> list[tuple[str, Node]] | None:
    """The compiled fields of a record writer schema, in order; None when fastavro refuses it,
    it is not a record, a field has a shape the walk does not read, or a name repeats."""
    try:
        parsed = fastavro.parse_schema(writer_schema)
    except Exception:  # noqa: BLE001 - a schema fastavro refuses is the reference's to report
        return None
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        return None
    named: dict[str, Node | None] = {}
    fields: list[tuple[str, Node]] = []
    for f in parsed["fields"]:
        compiled = node(f["type"], named)
        if compiled is None or f["name"] in dict(fields):
            return None
        fields.append((f["name"], compiled))
    return fields


def roles_readable(types: dict[str, Node], cfg: InputConfig) -> bool:
    """The id and entity fields are strings or ints (or unions of those with null), the time field
    an int (or a union holding one): what both decoders read for every event."""
    texts_ = [types[cfg.id_field]] + ([types[cfg.entity_field]] if cfg.entity_field in types else [])
    return (all(b.kind in ("string", "long", "null") for t in texts_ for b in branches(t))
            and any(b.kind == "long" for b in branches(types[cfg.time_field])))


def walk_chunk(values: Sequence[bytes | None], offset_of_payload: int,
               max_message_bytes: int) -> tuple[Walk, np.ndarray]:
    """The messages in one buffer, each row's walk starting ``offset_of_payload`` bytes in, and the
    rows to walk (a tombstone, a message shorter than the offset or over ``max_message_bytes``:
    not ok)."""
    k = len(values)
    try:
        sizes = np.fromiter(map(len, cast("Sequence[bytes]", values)), np.int64, k)
        raw = b"".join(cast("Sequence[bytes]", values))  # no tombstone: joined as they are
    except TypeError:  # a tombstone among them
        sizes = np.fromiter((-1 if v is None else len(v) for v in values), np.int64, k)
        raw = b"".join([b"" if v is None else v for v in values])
    lengths = sizes.clip(0)
    ends = np.cumsum(lengths)
    ok = (sizes >= offset_of_payload) & (sizes >= 0) & (sizes <= max_message_bytes)
    w = Walk(raw + PAD, np.where(ok, ends - lengths + offset_of_payload, 0), ends, ok)
    return w, np.flatnonzero(ok)


def pick(column: tuple[np.ndarray, Any], rows: np.ndarray) -> Any:
    """The entries of ``column`` (values for the rows ``at``) for ``rows``, a subset of ``at``."""
    at, values = column
    if len(at) == len(rows):
        return values
    idx = np.searchsorted(at, rows)
    return values[idx] if isinstance(values, (np.ndarray, Texts)) else [values[i] for i in idx.tolist()]
