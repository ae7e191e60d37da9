"""Columnar decode of a table's Arrow batch into the model's inputs: the fast path of ``streamer score``.

The fast path beside the reference (each row as a dict through ``EventValidator.to_record``),
with the rules of the JSON fast path (formats/columnar/json_fields.py): exact or step aside. A row
lands in ``DecodedColumns.rows`` only when its record is certain to equal the reference's; any
other row goes to ``fallback``, where the reference gives the same record or the same reject.

Numeric columns feeding float inputs are converted in numpy, with convert.py's bounds (an integer
into float32 up to 2^24, a double into float32 finite and within its range); a list column
feeding an ``[N, k]`` input is flattened whole when every row holds k values. Any other column
goes through convert.py's per-value conversion of its Python values, built one column at a time.

Steps aside besides: an id that is missing, null or not a string (the reference makes one or
prints it), an entity that is null or not a string, a time that is null or not an integer (the
caller turns timestamps into milliseconds first).

Before the first row, :func:`check_schema` refuses what would reject every row, with the stream's
words for its Avro schema (contract.check_fields): an input's column that the table lacks, or
whose Arrow type the conversion table refuses (a string or a decimal into a number), and a
column mapped without ``fill`` that holds nulls (each would be a reject). Arrow types as the
table's source types: boolean is bool; integers and timestamps (read as milliseconds) int;
float16 and float32 float; float64 double; text and dictionaries of text string; a list, its
items'. Any other (decimal, date, binary, struct) is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamer.config import InputConfig
from streamer.errors import ConfigError
from streamer.formats.columnar.convert import convert, convert_arrays
from streamer.formats.columnar.walk import DecodedColumns
from streamer.model.contract import Contract, InputPlan, check_kinds, no_field, no_fill
from streamer.model.exact import EXACT_INT, F32_MAX, Source
from streamer.model.signature import DTYPES, Columns


class ArrowFields:
    """Decodes Arrow batches for one input config and contract."""

    def __init__(self, cfg: InputConfig, contract: Contract, include: Sequence[str]) -> None:
        self._cfg, self._inputs, self._include = cfg, contract.inputs, tuple(include)
        self._column_of = contract.feature_column  # FEATURES: the one matrix column of the array field

    @classmethod
    def compile(cls, cfg: InputConfig, contract: Contract, include: Sequence[str] = ()) -> ArrowFields | None:
        """A decoder, or None where the reference must go (roles that share a field; bounds on the
        feature array, which only the reference checks)."""
        if len({cfg.time_field, cfg.id_field, cfg.entity_field}) < 3:
            return None
        if contract.feature_column is not None and (cfg.feature_min is not None or cfg.feature_max is not None):
            return None
        return cls(cfg, contract, include)

    def decode(self, batch: pa.RecordBatch) -> DecodedColumns:
        cfg, n = self._cfg, batch.num_rows
        names = set(batch.schema.names)
        ok = np.ones(n, bool)
        ids: list[Any] = [None] * n
        if cfg.id_field in names and pa.types.is_string(batch.schema.field(cfg.id_field).type):
            ids = batch.column(cfg.id_field).to_pylist()
            ok &= batch.column(cfg.id_field).is_valid().to_numpy(zero_copy_only=False)
        else:
            ok[:] = False
        entities: list[Any] = [""] * n
        if cfg.entity_field in names:
            col = batch.column(cfg.entity_field)
            if pa.types.is_string(col.type):
                entities = col.to_pylist()
                ok &= col.is_valid().to_numpy(zero_copy_only=False)
            else:
                ok[:] = False
        times = np.zeros(n, np.int64)
        if cfg.time_field in names:
            col = batch.column(cfg.time_field)
            if pa.types.is_integer(col.type) and col.type != pa.uint64():
                ok &= col.is_valid().to_numpy(zero_copy_only=False)
                times = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            else:
                ok[:] = False
        columns: dict[str, np.ndarray] = {}
        for plan in self._inputs:
            col, aside = self._column(plan, batch, names)
            ok &= ~aside
            columns[self._column_of or plan.spec.name] = col
        keep = np.flatnonzero(ok)
        klist = keep.tolist()
        passthrough = None
        if self._include:
            values = [self._values(path, batch, names) for path in self._include]
            passthrough = [tuple(v[j] for v in values) for j in klist]
        return DecodedColumns(keep, Columns(columns)[keep],  # type: ignore[arg-type]
                              [ids[j] for j in klist], [entities[j] for j in klist], times[keep],
                              np.flatnonzero(~ok), passthrough)

    def _column(self, plan: InputPlan, batch: pa.RecordBatch, names: set[str]) -> tuple[np.ndarray, np.ndarray]:
        """One input's tensor, and the mask of rows that step aside."""
        n = batch.num_rows
        element = plan.spec.element
        if not plan.source.stacked and plan.width != 1:
            (path,) = plan.source.fields
            fast = self._list_fast(path, batch, names, plan.width, element)
            col, aside = fast if fast is not None else convert_arrays(
                self._values(path, batch, names), plan.width, element, plan.fill)
        else:
            parts = []
            aside = np.zeros(n, bool)
            for path in plan.source.fields:
                fast = self._scalar_fast(path, batch, names, element, plan.fill)
                part, more = fast if fast is not None else convert(self._values(path, batch, names), element,
                                                                    plan.fill)
                parts.append(part)
                aside |= more
            col = parts[0][:, None] if len(parts) == 1 else np.stack(parts, axis=1)
        if self._column_of is not None:
            return col, aside
        return (col[:, 0] if len(plan.spec.shape) == 1 else col), aside

    @staticmethod
    def _numbers(values: np.ndarray, kind: pa.DataType, element: str) -> tuple[np.ndarray, np.ndarray]:
        """Numeric values into a float element, and the rows whose value it does not take exactly."""
        if pa.types.is_floating(kind):
            wide = values.astype(np.float64, copy=False)
            bad = ~np.isfinite(wide)
            if element == "float32":
                bad |= np.abs(np.where(bad, 0.0, wide)) > F32_MAX
        elif pa.types.is_integer(kind):  # compared as integers: a float64 would round past 2^53
            limit = EXACT_INT[element]
            bad = values > limit
            if pa.types.is_signed_integer(kind):
                bad |= values < -limit
            wide = values.astype(np.float64)
        else:  # bool: 1 or 0
            wide = values.astype(np.float64)
            bad = np.zeros(len(values), bool)
        out = np.where(bad, 0.0, wide).astype(DTYPES[element])
        return out, bad

    def _scalar_fast(self, path: str, batch: pa.RecordBatch, names: set[str], element: str,
                     fill: Any) -> tuple[np.ndarray, np.ndarray] | None:
        if element not in EXACT_INT or path not in names:
            return None
        col = batch.column(path)
        kind = col.type
        if not (pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind)):
            return None
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        raw = col.fill_null(False if pa.types.is_boolean(kind) else 0).to_numpy(zero_copy_only=False)
        out, bad = self._numbers(raw, kind, element)
        if not valid.all():
            if fill is None:
                bad |= ~valid
            else:
                filled, aside = convert([fill], element, fill)
                out[~valid] = filled[0]
                bad |= ~valid & aside[0]
        return out, bad

    def _list_fast(self, path: str, batch: pa.RecordBatch, names: set[str], width: int,
                   element: str) -> tuple[np.ndarray, np.ndarray] | None:
        if element not in EXACT_INT or path not in names:
            return None
        col = batch.column(path)
        if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) or col.null_count:
            return None
        kind = col.type.value_type
        if not (pa.types.is_floating(kind) or pa.types.is_integer(kind)):
            return None
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(col)
        if (lengths != width).any() or flat.null_count:
            return None
        out, bad = self._numbers(flat.to_numpy(zero_copy_only=False), kind, element)
        return out.reshape(len(col), width), np.asarray(bad.reshape(len(col), width).any(axis=1))

    @staticmethod
    def _values(path: str, batch: pa.RecordBatch, names: set[str]) -> list[Any]:
        """The value at a dotted path per row, None where it or a record above it is null or
        missing (contract.field_value)."""
        top, *rest = path.split(".")
        if top not in names:
            return [None] * batch.num_rows
        values = batch.column(top).to_pylist()
        for part in rest:
            values = [v.get(part) if type(v) is dict else None for v in values]
        return values


def check_schema(schema: pa.Schema, contract: Contract, where: str, holds_nulls: Callable[[str], bool]) -> None:
    """Refuse (ConfigError naming ``model.inputs.<input>`` and the column) what ``where``'s schema
    cannot feed: see the module docstring. ``holds_nulls(path)``: whether the data has a null there
    (a nullable column without one, as pandas and pyarrow write every column, is taken)."""
    for plan, key, path in contract.fields():
        check_kinds(plan, key, path, _kinds(_walk(schema, path, key, where)[-1].type), where)

    def nullable(path: str, key: str) -> bool:  # the column, or a struct above it, may be null, and is
        return any(f.nullable for f in _walk(schema, path, key, where)) and holds_nulls(path)

    for _, key, path in contract.unfilled(nullable):
        raise ConfigError(key, no_fill(path, key, f"holds nulls in {where}", "a null would be a reject", "column"))


def _walk(schema: pa.Schema, path: str, key: str, where: str) -> list[pa.Field]:
    """The fields from the schema's top down to the column at the dotted ``path`` (through
    structs); the column, or a struct above it, that is not there is refused on ``key``."""
    fields: Sequence[pa.Field] = list(schema)
    walked: list[pa.Field] = []
    for part in path.split("."):
        found = next((f for f in fields if f.name == part), None)
        if found is None:
            raise no_field(key, path, part, where, [f.name for f in fields])
        walked.append(found)
        fields = list(found.type) if pa.types.is_struct(found.type) else []
    return walked


def _kinds(kind: pa.DataType) -> dict[str, Source | None]:
    """An Arrow type's names, each with the conversion table's source type (None: none)."""
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _kinds(kind.value_type)
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    source: Source | None = None
    if pa.types.is_boolean(kind):
        source = "bool"
    elif pa.types.is_integer(kind) or pa.types.is_timestamp(kind):
        source = "int"
    elif pa.types.is_float16(kind) or pa.types.is_float32(kind):
        source = "float"
    elif pa.types.is_float64(kind):
        source = "double"
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        source = "string"
    return {str(kind): source}
