"""Columnar decode of named fields: a chunk of Avro events read straight into the model's typed inputs.

The fast path beside the contract's per-row conversion (contract.py: ``AvroCodec.decode`` then
``EventValidator.to_record``), built on walk.py's Avro walk. Exact or step aside, as there:
a row lands in ``DecodedColumns.rows`` only when its values are certain to equal the reference's,
and the reference would accept it; anything else goes to ``fallback`` and the reference decides
(the same record, or the same dead letter).

Walked: top-level fields of float, double, int, long, boolean and string, and arrays of float or
double, each maybe in a union with null; the rest of the record as columnar_decode walks it. A
field in a nested record (a dotted path), an enum feeding a string input, or a pass-through field
(``output.include``) leaves the whole layout to the reference (``compile`` gives None).

Conversion follows the table in model/exact.py, with what steps aside (the reference then
dead-letters it): float32 from float/double (non-finite, or beyond float32's range), int/long
(|v| > 2**24) or boolean; float64 from float/double (non-finite), int/long (|v| > 2**53) or
boolean; int64 from int/long or boolean; int32 from int/long (outside its range) or boolean;
bool from boolean; string from string. A boolean is read as fastavro reads it (any byte but 0 is
true) and is 1 or 0 in a number input. A null takes the input's fill value, or steps aside (the
reference dead-letters it).

Worked example (``model.inputs: {x: [a, b]}``, x float32 [N, 2]; a double, b ["null", long])::

    >>> cols = FieldDecoder.compile(schema, input_cfg, contract).decode([m1, m2])
    >>> cols.features.arrays["x"]  # m2's b is null and x has no fill: m2 steps aside
    array([[0.5, 3.]], dtype=float32)
    >>> cols.fallback.tolist()
    [1]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamer.config import InputConfig
from streamer.formats.columnar.walk import (
    DecodedColumns,
    Node,
    Walk,
    array_end,
    branches,
    long,
    pick,
    record_fields,
    roles_readable,
    skip,
    text,
    texts,
    varint,
    walk_chunk,
)
from streamer.model.contract import Contract, InputPlan
from streamer.model.exact import EXACT_INT, F32_MAX, INT_RANGE, Source, takes
from streamer.model.signature import DTYPES, Columns

# A compiled node's primitive as a source type of the conversion table (exact.py): each input
# element takes on this path the kinds the table takes (int and long both compile to long).
_SOURCES: dict[str, Source] = {"float": "float", "double": "double", "long": "int", "boolean": "bool",
                               "string": "string"}
_TAKES = {element: {kind for kind, source in _SOURCES.items() if takes(source, element)} for element in DTYPES}


def _kind(t: Node) -> str:
    """The primitive a compiled node reads: float, double, boolean, long, string, array, or ''."""
    if t.kind == "fixed":
        return t.item if t.item in ("float", "double", "boolean") else ""
    if t.kind == "array":
        return "array" if t.item else ""
    return t.kind if t.kind in ("long", "string") else ""


def _value_kind(t: Node) -> str | None:
    """The one non-null kind of a field (a union with null allowed); None when there is not one."""
    kinds = {_kind(b) for b in branches(t) if b.kind != "null"}
    return kinds.pop() if len(kinds) == 1 and "" not in kinds else None


@dataclass(frozen=True, slots=True)
class _Read:
    """A field's values for the rows of ``sel``: ``values`` (float64, int64, bool or object), nulls."""

    values: np.ndarray
    null: np.ndarray


def _read(t: Node, w: Walk, sel: np.ndarray, width: int) -> _Read:
    """Read one field per row of ``sel`` (its union branch too); rows that fail are no longer ok."""
    if t.kind == "union":
        index = varint(w, sel)
        ok = w.ok[sel]
        w.ok[sel] &= (index >= 0) & (index < len(t.branches))
        null = np.zeros(len(sel), bool)
        values: np.ndarray | None = None
        for b, branch in enumerate(t.branches):
            mask = ok & (index == b)
            if not mask.any():
                continue
            if branch.kind == "null":
                null[mask] = True
                continue
            got = _read(branch, w, sel[mask], width).values
            if values is None:
                values = np.zeros((len(sel), *got.shape[1:]), got.dtype)
            values[mask] = got
        return _Read(np.zeros(len(sel)) if values is None else values, null)
    kind = _kind(t)
    if kind == "long":
        return _Read(varint(w, sel), np.zeros(len(sel), bool))
    if kind == "string":
        return _Read(np.array([*texts(w, sel), None], object)[:-1], np.zeros(len(sel), bool))
    if kind == "array":
        count = varint(w, sel)
        w.ok[sel] &= count == width
        start = array_end(w, sel, width, t.size)
        out = np.zeros((len(sel), width), np.float64)
        good = np.flatnonzero(w.ok[sel])
        if len(good):
            out[good] = w.take(start[good], width * t.size).view("<f4" if t.item == "float" else "<f8")
        return _Read(out, np.zeros(len(sel), bool))
    start = w.advance(sel, t.size)
    raw = w.take(start, t.size)
    if kind == "boolean":  # fastavro reads any byte but 0 as true
        return _Read(raw[:, 0] != 0, np.zeros(len(sel), bool))
    return _Read(raw.view("<f4" if kind == "float" else "<f8")[:, 0].astype(np.float64), np.zeros(len(sel), bool))


def _convert(read: _Read, element: str, fill: Any) -> tuple[np.ndarray, np.ndarray]:
    """The values as ``element`` and a mask of the rows that must step aside; nulls take ``fill``
    (or step aside without one). The checks look at the values as read, before any fill."""
    v, null = read.values, read.null
    aside = null.copy() if fill is None else np.zeros(len(v), bool)
    bad: Any = False
    if element in ("float32", "float64"):
        if v.dtype.kind == "i":
            bad = np.abs(v) > EXACT_INT[element]  # the reference checks whether it is exact
        elif v.dtype.kind == "f":
            bad = ~np.isfinite(v) | (np.abs(v) > F32_MAX if element == "float32" else False)
    elif element == "int32":
        bad = (v < INT_RANGE["int32"][0]) | (v > INT_RANGE["int32"][1])
    if isinstance(bad, np.ndarray):
        aside |= (bad if bad.ndim == 1 else bad.any(axis=1)) & ~null
    if element == "string":
        out = v.astype(object)  # (all nulls read as zeros)
    else:
        dtype = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
                 "bool": np.bool_}[element]
        out = np.where(aside if v.ndim == 1 else aside[:, None], 0, v).astype(dtype)
    if fill is not None and null.any():
        out[null] = fill
    return out, aside


class FieldDecoder:
    """Decodes chunks of one writer schema into the contract's input columns."""

    def __init__(self, fields: list[tuple[str, Node]], cfg: InputConfig, inputs: tuple[InputPlan, ...]) -> None:
        self._fields, self._cfg, self._inputs = fields, cfg, inputs
        self._entity = cfg.entity_field in dict(fields)
        self._widths = {f: (p.width if not p.source.stacked else 1) for p in inputs for f in p.source.fields}
        self._runs = self._find_runs()

    def _find_runs(self) -> dict[int, tuple[int, int, str]]:
        """Runs of two or more adjacent fields, each a plain float (or each a plain double) feeding one
        column: field index -> (how many, bytes each, dtype). A run is read as one block per row
        (32 named float features: one gather instead of 32), the same bytes field by field."""
        runs: dict[int, tuple[int, int, str]] = {}
        i = 0
        while i < len(self._fields):
            t = self._fields[i][1]
            j = i
            if t.kind == "fixed" and t.item in ("float", "double"):
                while (j < len(self._fields) and self._widths.get(self._fields[j][0]) == 1
                       and self._fields[j][1].kind == "fixed" and self._fields[j][1].item == t.item):
                    j += 1
            if j - i >= 2:
                runs[i] = (j - i, t.size, "<f4" if t.item == "float" else "<f8")
            i = max(j, i + 1)
        return runs

    @classmethod
    def compile(cls, writer_schema: dict[str, Any], input_cfg: InputConfig, contract: Contract) -> FieldDecoder | None:
        """A decoder for ``writer_schema`` and ``contract``'s inputs, or None where it does not walk."""
        cfg = input_cfg
        fields = record_fields(writer_schema)
        if fields is None:
            return None
        types = dict(fields)
        roles = (cfg.time_field, cfg.id_field, cfg.entity_field)
        if not {cfg.time_field, cfg.id_field} <= types.keys() or len(set(roles)) < 3:
            return None  # an id or time that defaults to the message's coordinates: the reference
        if not roles_readable(types, cfg):
            return None
        for plan in contract.inputs:
            for path in plan.source.fields:
                t = types.get(path)
                if t is None or path in roles:
                    return None  # a dotted path, a missing field (its null), a role: the reference
                kind = _value_kind(t)
                if kind == "array" and (plan.source.stacked or plan.spec.element not in ("float32", "float64")):
                    return None  # an array feeds one input whole
                if kind != "array" and (kind not in _TAKES[plan.spec.element]
                                        or not plan.source.stacked and plan.width != 1):
                    return None  # a number feeds one column
        return cls(fields, cfg, contract.inputs)

    def decode(self, values: Sequence[bytes | None], offset_of_payload: int = 0) -> DecodedColumns:
        """Decode ``values``; the Avro body of each starts ``offset_of_payload`` bytes in."""
        cfg, k = self._cfg, len(values)
        w, sel = walk_chunk(values, offset_of_payload, cfg.max_message_bytes)
        got: dict[str, tuple[np.ndarray, Any]] = {}
        blocks: dict[str, tuple[np.ndarray, int]] = {}  # a run's field -> (the run's block, its column)
        skip_to = 0
        for i, (name, t) in enumerate(self._fields):
            if i < skip_to:
                continue  # read with its run
            sel = sel[w.ok[sel]]
            if i in self._runs:
                count, size, dtype = self._runs[i]
                block = _block(w, sel, count, size, dtype)
                for j, (member, _) in enumerate(self._fields[i:i + count]):
                    got[member] = sel, _Read(block[:, j], np.zeros(len(sel), bool))
                    blocks[member] = block, j
                skip_to = i + count
            elif name in self._widths:
                got[name] = sel, _read(t, w, sel, self._widths[name])
            elif name == cfg.time_field:
                got[name] = sel, long(t, w, sel)
            elif name in (cfg.id_field, cfg.entity_field):
                got[name] = sel, text(t, w, sel)
            else:
                skip(t, w, sel)
        at = sel[w.ok[sel] & (w.pos[sel] == w.end[sel])]  # trailing bytes: the codec refuses them
        good = np.ones(len(at), bool)
        columns: dict[str, np.ndarray] = {}
        for plan in self._inputs:
            parts = []
            whole = _one_block(plan.source.fields, blocks)
            if whole is not None:  # the input is one run's columns, in order: converted at once
                block, first = whole
                idx = np.searchsorted(got[plan.source.fields[0]][0], at)
                width = len(plan.source.fields)
                col, aside = _convert(_Read(block[idx, first:first + width], np.zeros(len(at), bool)),
                                      plan.spec.element, plan.fill)
                good &= ~aside
                columns[plan.spec.name] = col[:, 0] if len(plan.spec.shape) == 1 else col
                continue
            for path in plan.source.fields:
                field_at, read = got[path]
                idx = np.searchsorted(field_at, at)
                col, aside = _convert(_Read(read.values[idx], read.null[idx]), plan.spec.element, plan.fill)
                good &= ~aside
                parts.append(col.reshape(len(at), self._widths[path]))
            matrix = parts[0] if len(parts) == 1 else np.hstack(parts)
            columns[plan.spec.name] = matrix[:, 0] if len(plan.spec.shape) == 1 else matrix
        keep = np.flatnonzero(good)
        rows = at[keep]
        feats = Columns(columns)[keep]
        entities = pick(got[cfg.entity_field], rows) if self._entity else [""] * len(rows)
        rest = np.ones(k, bool)
        rest[rows] = False
        return DecodedColumns(rows, feats, pick(got[cfg.id_field], rows), entities,  # type: ignore[arg-type]
                              pick(got[cfg.time_field], rows), np.flatnonzero(rest))


def _block(w: Walk, sel: np.ndarray, count: int, size: int, dtype: str) -> np.ndarray:
    """``count`` adjacent fixed-size numbers per row of ``sel`` as float64 [len(sel), count]; a
    row too short for them is no longer ok (its numbers stay 0)."""
    start = w.advance(sel, count * size)
    fits = w.ok[sel]
    if len(sel) and fits.all():
        return w.take(start, count * size).view(dtype).astype(np.float64)
    block = np.zeros((len(sel), count), np.float64)  # only rows that fit are gathered: the pad is short
    if fits.any():
        block[fits] = w.take(start[fits], count * size).view(dtype)
    return block


def _one_block(paths: Sequence[str], blocks: dict[str, tuple[np.ndarray, int]]) -> tuple[np.ndarray, int] | None:
    """(block, first column) when ``paths`` are adjacent columns of one run's block, in order."""
    if len(paths) < 2 or any(p not in blocks for p in paths):
        return None
    block, first = blocks[paths[0]]
    if all(blocks[p][0] is block and blocks[p][1] == first + n for n, p in enumerate(paths)):
        return block, first
    return None
