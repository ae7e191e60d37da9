"""Columnar decode of named fields: a chunk of Avro events read straight into the model's typed inputs.

The fast path beside the contract's per-row conversion (contract.py: ``AvroCodec.decode`` then
``EventValidator.to_record``), built on walk.py's Avro walk and leaves.py's reads. Exact or step
aside, as there: a row lands in ``DecodedColumns.rows`` only when its values are certain to equal
the reference's, and the reference would accept it; anything else goes to ``fallback`` and the
reference decides (the same record, or the same dead letter).

Read: the fields the model's inputs name and the pass-through fields (``output.include``), at the
top of the record or in nested records by dotted path (a record above a field may be in a union
with null: a null record gives a null field). An input's field is an int, long, float, double,
boolean, string or enum (its symbol, into a string input), maybe in a union with null in any
order (a union of float and double too), or an array of float or double. A pass-through field is
any of those but the array, or bytes, fixed, null, or a union of several of them; its value is
the one the reference's record dict holds. Every other field is stepped over, checked as fastavro
reads it but never made into values: strings, bytes, enums, fixed, arrays, maps, nested records.
Compile gives None (the whole layout goes to the reference) for a field that is missing, a
dotted path through a map, a pass-through record, array or map, and a recursive record.

Conversion follows the table in model/exact.py, with what steps aside (the reference then
dead-letters it): float32 from float/double (non-finite, or beyond float32's range), int/long
(|v| > 2**24) or boolean; float64 from float/double (non-finite), int/long (|v| > 2**53) or
boolean; int64 from int/long or boolean; int32 from int/long (outside its range) or boolean;
bool from boolean; string from string or enum (its symbol). A boolean is read as fastavro reads
it (any byte but 0 is true) and is 1 or 0 in a number input. A null takes the input's fill value,
or steps aside (the reference dead-letters it). A pass-through float that is NaN steps aside (its
bits are the reference's to carry).

Worked example (``model.inputs: {x: [a, card.b]}``, x float32 [N, 2]; a double, card a record
whose b is ["null", long])::

    >>> cols = FieldDecoder.compile(schema, input_cfg, contract).decode([m1, m2])
    >>> cols.features.arrays["x"]  # m2's card.b is null and x has no fill: m2 steps aside
    array([[0.5, 3.]], dtype=float32)
    >>> cols.fallback.tolist()
    [1]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from streamer.config import InputConfig
from streamer.formats.columnar.leaves import Column, Read, kind, read, resolve, value_kinds
from streamer.formats.columnar.walk import (
    DecodedColumns,
    Node,
    Walk,
    branches,
    long,
    pick,
    record_fields,
    roles_readable,
    skip,
    text,
    varint,
    walk_chunk,
)
from streamer.model.contract import Contract, InputPlan
from streamer.model.exact import EXACT_INT, F32_MAX, INT_RANGE, Source, takes
from streamer.model.signature import DTYPES, Columns

# A compiled leaf's kind (leaves.kind) as a source type of the conversion table (exact.py): each
# input element takes on this path the kinds the table takes (int and long both read as long).
_SOURCES: dict[str, Source] = {"float": "float", "double": "double", "long": "int", "boolean": "bool",
                               "string": "string", "enum": "enum"}
_TAKES = {element: {kind for kind, source in _SOURCES.items() if takes(source, element)} for element in DTYPES}
# What a pass-through field may be: a value the reference's record dict holds as a scalar.
_PASSED = {"float", "double", "boolean", "long", "string", "bytes", "enum", "fixed", "null"}


def _feeds(t: Node, plan: InputPlan) -> bool:
    """Whether this path reads ``t`` into ``plan``'s input: one kind (or float and double), that
    the element takes; an array of float or double feeds a float input whole."""
    kinds = value_kinds(t)
    if kinds == {"array"}:
        return not plan.source.stacked and plan.spec.element in ("float32", "float64")
    one = len(kinds) == 1 or kinds == {"float", "double"}
    return bool(kinds) and one and kinds <= _TAKES[plan.spec.element] and (plan.source.stacked or plan.width == 1)


def _convert(got: Read, element: str, fill: Any) -> tuple[np.ndarray, np.ndarray]:
    """The values as ``element`` and a mask of the rows that must step aside; nulls take ``fill``
    (or step aside without one). The checks look at the values as read, before any fill."""
    v, null = got.values, got.null
    aside = null.copy() if fill is None else np.zeros(len(v), bool)
    bad: Any = False
    if element in ("float32", "float64"):
        if v.dtype.kind == "i":
            limit = EXACT_INT[element]  # the reference checks whether it is exact; not abs(): -2**63 has none
            bad = (v < -limit) | (v > limit)
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
    """Decodes chunks of one writer schema into the contract's input columns (and pass-through values)."""

    def __init__(self, fields: list[tuple[str, Node]], cfg: InputConfig, inputs: tuple[InputPlan, ...],
                 include: tuple[str, ...], inner: set[str], nan_aside: set[str]) -> None:
        self._fields, self._cfg, self._inputs, self._include = fields, cfg, inputs, include
        self._entity = cfg.entity_field in dict(fields)
        self._widths = {f: (p.width if not p.source.stacked else 1) for p in inputs for f in p.source.fields}
        self._leaves = {**{p: 1 for p in include}, **self._widths}  # path -> values per row
        self._inner, self._nan_aside = inner, nan_aside  # records to walk into; float pass-throughs
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
    def compile(cls, writer_schema: dict[str, Any], input_cfg: InputConfig, contract: Contract,
                include: Sequence[str] = ()) -> FieldDecoder | None:
        """A decoder for ``writer_schema``, ``contract``'s inputs and the pass-through paths
        ``include``, or None where it does not walk."""
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
        inner: set[str] = set()
        for plan in contract.inputs:
            for path in plan.source.fields:
                found = resolve(fields, path)
                if found is None or path in roles or not _feeds(found[0], plan):
                    return None  # a missing field (its null), a role, a value this input does not take
                inner.update(found[1])
        nan_aside: set[str] = set()
        for path in include:
            found = resolve(fields, path)
            if found is None or path in roles or not {kind(b) for b in branches(found[0])} <= _PASSED:
                return None  # a record, array or map passed through: the reference's dict
            inner.update(found[1])
            if "float" in value_kinds(found[0]):
                nan_aside.add(path)
        return cls(fields, cfg, contract.inputs, tuple(include), inner, nan_aside)

    def decode(self, values: Sequence[bytes | None], offset_of_payload: int = 0) -> DecodedColumns:
        """Decode ``values``; the Avro body of each starts ``offset_of_payload`` bytes in."""
        cfg, k = self._cfg, len(values)
        w, sel = walk_chunk(values, offset_of_payload, cfg.max_message_bytes)
        got: dict[str, Column] = {p: Column(k) for p in self._leaves}
        roles: dict[str, tuple[np.ndarray, Any]] = {}
        blocks: dict[str, tuple[np.ndarray, np.ndarray, int]] = {}  # a run's field -> (rows, block, column)
        skip_to = 0
        for i, (name, t) in enumerate(self._fields):
            if i < skip_to:
                continue  # read with its run
            sel = sel[w.ok[sel]]
            if i in self._runs:
                count, size, dtype = self._runs[i]
                block = _block(w, sel, count, size, dtype)
                for j, (member, _) in enumerate(self._fields[i:i + count]):
                    blocks[member] = sel, block, j
                skip_to = i + count
            elif name == cfg.time_field:
                roles[name] = sel, long(t, w, sel)
            elif name in (cfg.id_field, cfg.entity_field):  # a null entity is '', as the reference has it
                roles[name] = sel, text(t, w, sel, "" if name == cfg.entity_field else "None")
            else:
                self._field(name, t, w, sel, got)
        at = np.flatnonzero(w.ok & (w.pos == w.end))  # trailing bytes: the codec refuses them

        def leaf(path: str) -> Read:
            if path in blocks:
                rows, block, j = blocks[path]
                return Read(block[np.searchsorted(rows, at), j], np.zeros(len(at), bool))
            return got[path].at(at)

        good = np.ones(len(at), bool)
        columns: dict[str, np.ndarray] = {}
        for plan in self._inputs:
            whole = _one_block(plan.source.fields, blocks)
            if whole is not None:  # the input is one run's columns, in order: converted at once
                rows, block, first = whole
                width = len(plan.source.fields)
                col, aside = _convert(Read(block[np.searchsorted(rows, at), first:first + width],
                                           np.zeros(len(at), bool)), plan.spec.element, plan.fill)
                good &= ~aside
                columns[plan.spec.name] = col[:, 0] if len(plan.spec.shape) == 1 else col
                continue
            parts = []
            for path in plan.source.fields:
                col, aside = _convert(leaf(path), plan.spec.element, plan.fill)
                good &= ~aside
                parts.append(col.reshape(len(at), self._widths[path]))
            matrix = parts[0] if len(parts) == 1 else np.hstack(parts)
            columns[plan.spec.name] = matrix[:, 0] if len(plan.spec.shape) == 1 else matrix
        passed = [leaf(path) for path in self._include]
        for path, got_ in zip(self._include, passed):
            if path in self._nan_aside and got_.values.dtype.kind == "f":
                good &= ~(np.isnan(got_.values) & ~got_.null)
        keep = np.flatnonzero(good)
        rows = at[keep]
        feats = Columns(columns)[keep]
        entities = pick(roles[cfg.entity_field], rows) if self._entity else [""] * len(rows)
        rest = np.ones(k, bool)
        rest[rows] = False
        return DecodedColumns(rows, feats, pick(roles[cfg.id_field], rows), entities,  # type: ignore[arg-type]
                              pick(roles[cfg.time_field], rows), np.flatnonzero(rest),
                              _passthrough([Read(p.values[keep], p.null[keep]) for p in passed], len(keep))
                              if self._include else None)

    def _field(self, path: str, t: Node, w: Walk, sel: np.ndarray, got: dict[str, Column]) -> None:
        """Read a leaf, walk into a record that holds one, or step over the field."""
        if path in self._leaves:
            got[path].put(sel, read(t, w, sel, self._leaves[path]))
        elif path not in self._inner:
            skip(t, w, sel)
        elif t.kind == "record":
            self._record(path, t, w, sel, got)
        else:  # a union holding the record: its other branches leave the leaves below null
            index = varint(w, sel)
            ok = w.ok[sel]
            w.ok[sel] &= (index >= 0) & (index < len(t.branches))
            for b, branch in enumerate(t.branches):
                rows = sel[ok & (index == b)]
                if len(rows):
                    self._record(path, branch, w, rows, got) if branch.kind == "record" else skip(branch, w, rows)

    def _record(self, path: str, t: Node, w: Walk, sel: np.ndarray, got: dict[str, Column]) -> None:
        for name, field in zip(t.names, t.branches):
            self._field(f"{path}.{name}", field, w, sel[w.ok[sel]], got)


def _passthrough(passed: list[Read], rows: int) -> list[tuple[Any, ...]]:
    """Each row's pass-through values, in ``output.include``'s order: the Python values the
    reference's record dict holds (None for a null)."""
    columns = []
    for got in passed:
        values = got.values.tolist()
        if got.null.any():
            values = [None if n else v for v, n in zip(values, got.null.tolist())]
        columns.append(values)
    return list(zip(*columns)) if columns else [()] * rows


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


def _one_block(paths: Sequence[str], blocks: dict[str, tuple[np.ndarray, np.ndarray, int]]
               ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(rows, block, first column) when ``paths`` are adjacent columns of one run's block, in order."""
    if len(paths) < 2 or any(p not in blocks for p in paths):
        return None
    rows, block, first = blocks[paths[0]]
    if all(blocks[p][1] is block and blocks[p][2] == first + n for n, p in enumerate(paths)):
        return rows, block, first
    return None
