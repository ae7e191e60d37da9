"""Predictions and rejects as Arrow tables: the prediction schema's fields, each with its own type.

The Arrow schema is read from the prediction's Avro schema (the one contract a topic's consumers
read), so a table holds the same fields as the topic: ids, each model output (a label, a list of
probabilities, named scores), the ``output.include`` fields, the model and the run, the source
coordinates, and ``event_time`` / ``scored_at`` as UTC timestamps in microseconds (Iceberg's
``timestamptz``). Values come from the batch's columns, never a Python object per row where numpy
has them: a batch of 4,096 rows is a few Arrow calls.

Worked example: the Avro field ``{"name": "scores", "type": {"type": "array", "items": "float"}}``
becomes ``scores: list<float>``; a model output column of shape (n, 2) fills it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from streamer.formats.columnar.texts import Texts
from streamer.model.prediction_schema import include_name
from streamer.model.signature import Columns
from streamer.pipeline.records import Rows, Stamp

TIMESTAMP = pa.timestamp("us", tz="UTC")
_PRIMITIVE = {"string": pa.string(), "long": pa.int64(), "int": pa.int32(), "float": pa.float32(),
              "double": pa.float64(), "boolean": pa.bool_(), "bytes": pa.binary()}
_TIMESTAMPS = ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros")

# Why a row is in a rejects table, with what it was: one row per dead letter.
REJECTS = pa.schema([
    pa.field("run_id", pa.string()), pa.field("source_topic", pa.string(), nullable=False),
    pa.field("source_partition", pa.int32(), nullable=False), pa.field("source_offset", pa.int64(), nullable=False),
    pa.field("error", pa.string(), nullable=False), pa.field("reason", pa.string(), nullable=False),
    pa.field("original", pa.binary()), pa.field("rejected_at", TIMESTAMP, nullable=False),
])


def arrow_type(avro: Any, named: Mapping[str, Any]) -> tuple[pa.DataType, bool]:
    """The Arrow type of an Avro type, and whether it takes null."""
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) > 1 and all(isinstance(b, str) and b in _PRIMITIVE for b in branches):
            return pa.string(), True  # a JSON event's pass-through field, any primitive: kept as its JSON text
        if len(branches) != 1:
            raise ValueError(f"a union of {branches} has no single column type")
        return arrow_type(branches[0], named)[0], True
    if isinstance(avro, str):
        if avro in _PRIMITIVE:
            return _PRIMITIVE[avro], False
        return arrow_type(named[avro], named)
    kind = avro.get("type")
    if avro.get("logicalType") in _TIMESTAMPS and kind == "long":
        return TIMESTAMP, False
    if kind == "array":
        item, _ = arrow_type(avro["items"], named)
        return pa.list_(item), False
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(avro["values"], named)[0]), False
    if kind == "enum":
        return pa.string(), False
    if kind == "fixed":
        return pa.binary(), False
    if kind == "record":
        return pa.struct([pa.field(f["name"], *arrow_type(f["type"], named)) for f in avro["fields"]]), False
    return arrow_type(kind, named)


def prediction_arrow_schema(avro_schema: Mapping[str, Any]) -> pa.Schema:
    """The table schema of a prediction Avro record schema (fastavro-parsed or plain)."""
    named = avro_schema.get("__named_schemas", {})
    return pa.schema([pa.field(f["name"], *arrow_type(f["type"], named)) for f in avro_schema["fields"]])


class PredictionColumns:
    """Builds a batch's predictions as an Arrow table of :func:`prediction_arrow_schema`."""

    def __init__(self, schema: pa.Schema, include: Sequence[str] = ()) -> None:
        self.schema = schema
        self._include = {include_name(p): n for n, p in enumerate(include)}

    def table(self, rows: Rows, scores: Columns, stamp: Stamp) -> pa.Table:
        """The predictions of ``rows`` (every row scored, in order) by ``scores``' columns."""
        n, src = len(rows), rows.source
        values: dict[str, Any] = {
            "event_id": _texts(rows.event_ids), "entity_id": _texts(rows.entity_ids),
            "source_topic": src.topics, "source_partition": src.partitions, "source_offset": src.offsets,
            "event_time": rows.event_times * 1000, "scored_at": np.full(n, stamp.scored_at_ms * 1000, np.int64),
            "model_name": stamp.model_name, "model_version": stamp.model_version,
            "model_digest": stamp.model_digest or "", "run_id": stamp.run_id,
            "degraded": stamp.degraded is not None, "degraded_reason": stamp.degraded,
        }
        arrays = []
        for field in self.schema:
            name = field.name
            if name in scores.arrays:
                arrays.append(_column(scores.arrays[name], field.type))
            elif name in self._include:
                j = self._include[name]
                passed = [row[j] for row in rows.passthrough or ()]
                if field.type == pa.string():
                    passed = [v if v is None or isinstance(v, str) else json.dumps(v) for v in passed]
                arrays.append(pa.array(passed, field.type))
            elif name in values:
                arrays.append(_column(values[name], field.type, n))
            else:  # a field of a user's schema the prediction leaves to its default
                arrays.append(pa.nulls(n, field.type))
        return pa.Table.from_arrays(arrays, schema=self.schema)


def _texts(column: Sequence[str]) -> Any:
    if isinstance(column, Texts):
        blob, sizes = column.blob()
        offsets = np.zeros(len(sizes) + 1, np.int32)
        np.cumsum(sizes, out=offsets[1:])
        return pa.StringArray.from_buffers(len(sizes), pa.py_buffer(offsets), pa.py_buffer(blob))
    return column


def _column(value: Any, kind: pa.DataType, n: int = 0) -> pa.Array:
    """One column of ``kind``: an array (numpy, list, Arrow) of the batch's values, or one value for every row."""
    if isinstance(value, pa.Array):
        return value if value.type == kind else value.cast(kind)
    if isinstance(value, np.ndarray):
        if value.ndim == 2 and pa.types.is_list(kind):
            flat = pa.array(np.ascontiguousarray(value).ravel(), kind.value_type)
            return pa.FixedSizeListArray.from_arrays(flat, value.shape[1]).cast(kind)
        if kind == TIMESTAMP:
            return pa.array(value.astype(np.int64, copy=False), pa.int64()).cast(kind)
        if value.dtype == object:
            return pa.array(value.tolist(), kind)
        return pa.array(value, kind) if value.dtype.kind != "f" or pa.types.is_floating(kind) else pa.array(
            value.tolist(), kind)
    if isinstance(value, list):
        return pa.array(value, kind)
    return pa.repeat(pa.scalar(value, kind), n) if value is not None else pa.nulls(n, kind)


def rejects_table(run_id: str | None, rejects: Sequence[tuple[BaseException, Any]]) -> pa.Table:
    """A rejects table's rows for dead letters: the error's class, its reason and the original value."""
    now = int(time.time() * 1_000_000)
    items = [(m.topic(), m.partition(), m.offset(), type(e).__name__, str(e), m.value()) for e, m in rejects]
    cols = list(zip(*items, strict=True)) if items else [()] * 6
    return pa.Table.from_arrays([
        pa.array([run_id] * len(items), pa.string()), pa.array(cols[0], pa.string()), pa.array(cols[1], pa.int32()),
        pa.array(cols[2], pa.int64()), pa.array(cols[3], pa.string()), pa.array(cols[4], pa.string()),
        pa.array(cols[5], pa.binary()), pa.array([now] * len(items), pa.int64()).cast(TIMESTAMP)], schema=REJECTS)


def describe(schema: pa.Schema) -> str:
    """A schema in one line, for messages: ``event_id: string, scores: list<float>, ...``."""
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def as_json(value: Any) -> bytes:
    """An original row, as the rejects table keeps it when it was not bytes (a table's row)."""
    return json.dumps(value, default=str, sort_keys=True).encode()
