"""Columnar encode of any prediction layout: named outputs, pass-through fields, a user's own schema.

Each value equals ``AvroCodec(schema).encode(prediction_fields(...))`` for its row, byte for byte,
or is None and the caller encodes that row with the reference. The schema's fields are written in
its order, a column at a time for all rows (formats/columnar/values.py): the event's ids and
coordinates, each model output column, each ``output.include`` column; the fields that are the
same in every row of a batch (the stamp: model name, version, digest, scored-at, run id, degraded;
a field the record leaves to its default) are written once by fastavro and copied into every row.
The shipped layout alone has its own, faster encoder (encode.py).

Worked example (``label: long, fraud: float`` in place of ``scores``, ``amount: ["null",
"double"]`` passed through): ``RecordEncoder.compile(schema, outputs=("label", "fraud"),
include=("amount",))`` writes each row as ids, ``label`` as a varint, ``fraud`` as 4 bytes, the
stamp's block, coordinates, then ``amount``'s branch index and 8 bytes (or the null branch's 0).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import fastavro
import numpy as np

from streamer.formats.columnar.values import Piece, Type, column, compile_type, constant, cut, join

# The fields every record has from its row, beside the outputs and the included ones.
ROW_FIELDS = ("event_id", "entity_id", "source_topic", "source_partition", "source_offset", "event_time")


class RecordEncoder:
    """Encodes a batch's predictions with one record schema, column by column."""

    def __init__(self, schema: dict[str, Any], fields: list[tuple[str, Type | None]], prefix: bytes,
                 outputs: tuple[str, ...], include: tuple[str, ...]) -> None:
        self._schema = schema  # parsed: a field's constant is written by fastavro with it
        self._fields = fields  # (name, compiled type; None for a field only ever constant)
        self.prefix = prefix
        self._outputs, self._include = outputs, include
        self._known: dict[tuple[str, Any], bytes | None] = {}  # constants written so far

    @classmethod
    def compile(cls, output_schema: dict[str, Any], outputs: Sequence[str], include: Sequence[str] = (),
                prefix: bytes = b"") -> RecordEncoder | None:
        """An encoder, or None when ``output_schema`` is not a record whose every row-dependent
        field (ids, coordinates, ``outputs``, ``include``: the prediction field names) has a type
        written here; ``prefix`` leads every value (avro-confluent's framing)."""
        try:
            parsed: Any = fastavro.parse_schema(output_schema)
        except Exception:  # noqa: BLE001 - not a schema fastavro takes: no fast path
            return None
        if not isinstance(parsed, dict) or parsed.get("type") != "record":
            return None
        named = parsed.get("__named_schemas", {})
        varying = {*ROW_FIELDS, *outputs, *include}
        fields: list[tuple[str, Type | None]] = []
        for f in parsed["fields"]:
            t = compile_type(f["type"], named)
            if f["name"] in varying and t is None:
                return None
            fields.append((f["name"], t))
        return cls(parsed, fields, prefix, tuple(outputs), tuple(include))

    def encode(self, event_ids: Sequence[str], entity_ids: Sequence[str], outputs: Mapping[str, np.ndarray],
               source_topic: str | Sequence[str], source_partitions: Sequence[int] | np.ndarray,
               source_offsets: Sequence[int] | np.ndarray, event_times: Sequence[int] | np.ndarray,
               passthrough: Sequence[Sequence[Any]] | None, stamp_fields: Mapping[str, Any]) -> list[bytes | None]:
        """One prediction value per row; None where the row needs the reference encoder.

        Args:
            outputs: each output field's column ([rows] or [rows, n]), as the reference's
                ``tolist()`` gives its values.
            source_topic: one topic for every row, or one per row.
            passthrough: each row's ``output.include`` values in its order (None: nothing included).
            stamp_fields: the record's fields that are the same for every row, exactly as
                ``prediction_fields`` has them (a field it leaves out is left out here).

        Raises:
            ValueError: the columns do not all have one entry per row.
        """
        k = len(event_ids)
        topics = None if isinstance(source_topic, str) else list(source_topic)
        if topics is not None and len(topics) == k and k and topics.count(topics[0]) == k:
            source_topic, topics = topics[0], None  # one topic (the usual case): a constant part
        if any(len(c) != k for c in (entity_ids, source_partitions, source_offsets, event_times,
                                     *outputs.values(), topics or event_ids, passthrough or event_ids)):
            raise ValueError(f"columns of unequal length for {k} rows")
        if k == 0:
            return []
        names = {name for name, _ in self._fields}
        given = {*ROW_FIELDS, *outputs, *self._include, *stamp_fields}
        if not given <= names or set(outputs) != set(self._outputs):
            return [None] * k  # a field the schema lacks: the reference refuses the record
        if self._include and passthrough is None:
            return [None] * k  # the values are not at hand: the reference raises for them
        passed = list(zip(*passthrough)) if passthrough is not None and self._include else []
        columns: dict[str, Any] = {
            "event_id": event_ids, "entity_id": entity_ids, "source_partition": source_partitions,
            "source_offset": source_offsets, "event_time": event_times, **outputs,
            **dict(zip(self._include, passed, strict=True))}
        consts = dict(stamp_fields)
        if topics is None:
            consts["source_topic"] = source_topic
        else:
            columns["source_topic"] = topics
        ok = np.ones(k, bool)
        pieces: list[Piece] = []
        head = b""  # constant bytes not yet made a piece: adjacent constants are one piece
        for name, t in self._fields:
            if name in columns:
                if head:
                    pieces.append(constant(head, k))
                    head = b""
                pieces.append(column(t, columns[name], ok))
                continue
            data = self._constant(name, consts)
            if data is None:
                return [None] * k  # the reference refuses this constant, so every row
            head += data
        if head:
            pieces.append(constant(head, k))
        return cut(join(pieces, k), ok, self.prefix)

    def _constant(self, name: str, consts: Mapping[str, Any]) -> bytes | None:
        """Field ``name``'s bytes for the record's value in ``consts`` (its default when it has none),
        written by fastavro as the reference writes the field; None when fastavro refuses it."""
        value = consts.get(name, _ABSENT)
        key = (name, (type(value), value))
        if key in self._known:
            return self._known[key]
        field = next(f for f in self._schema["fields"] if f["name"] == name)
        buf = io.BytesIO()
        try:  # the parsed schema with this field alone: fastavro takes it as parsed, named types and all
            fastavro.schemaless_writer(buf, {**self._schema, "fields": [field]},
                                       {} if value is _ABSENT else {name: value}, strict_allow_default=True)
            data: bytes | None = buf.getvalue()
        except Exception:  # noqa: BLE001 - the writer's ValueError, TypeError, OverflowError: the reference's too
            data = None
        if len(self._known) > 256:
            self._known.clear()
        self._known[key] = data
        return data


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()

