"""The pipeline's batch stages around the model: decode + validate, and encode.

Each stage takes a batch and returns ``(good, rejects)``: a reject is the :class:`RecordError`
that a row failed with, and the consumed message it stands for, for the loop to dead-letter.
A stage never dead-letters by itself and never calls back into the loop.

Two implementations stand behind :class:`Stages`. The per-row reference (the codec and
:class:`EventValidator` per message, fastavro per prediction) serves every format. The columnar
fast path takes Avro input (formats/columnar/decode.py; for avro-confluent, one decoder per writer schema
id, compiled the first time the id is seen), JSON input (formats/columnar/json_columns.py for the array
field, json_fields.py for named fields), protobuf-confluent input with named fields
(formats/columnar/protobuf_columns.py), and writes Avro predictions column by column: the shipped
layout (formats/columnar/encode.py), or any other with named outputs and ``output.include``
(formats/columnar/record.py), when their schemas compile; a row it cannot prove
identical to the reference goes through the reference, which raises the same dead-letter errors, so the two are one stage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np

from streamer.config import Config, InputConfig
from streamer.errors import DeserializeError, InferenceError, PoisonRowError, RecordError, detach
from streamer.formats.avro import AvroCodec
from streamer.formats.codec import Codec
from streamer.formats.columnar.decode import ColumnarDecoder
from streamer.formats.columnar.encode import PredictionEncoder
from streamer.formats.columnar.fields import FieldDecoder
from streamer.formats.columnar.json_columns import JsonColumns
from streamer.formats.columnar.json_fields import JsonFields
from streamer.formats.columnar.protobuf_columns import ProtobufColumns
from streamer.formats.columnar.record import ROW_FIELDS, RecordEncoder
from streamer.formats.columnar.walk import DecodedColumns
from streamer.formats.confluent import ConfluentAvroCodec
from streamer.formats.json_events import JsonCodec
from streamer.formats.protobuf import ConfluentProtobufCodec
from streamer.model.contract import FEATURES, SCORES, Contract
from streamer.model.prediction_schema import include_name
from streamer.model.runner import ModelRunner
from streamer.model.signature import Columns
from streamer.pipeline.records import Messages, Origin, Rows, SourceRecord, Stamp, prediction_fields
from streamer.pipeline.validate import EventValidator

Reject = tuple[RecordError, Origin]  # why a row failed, and where it came from (a consumed message, a table row)


class Stages:
    """Decode and encode for one processor: the fast path where it applies, else the reference."""

    def __init__(self, decoder: Codec, encoder: Codec, input_cfg: InputConfig, contract: Contract,
                 fast: bool = True, include: Sequence[str] = ()) -> None:
        if contract.feature_column is not None:  # the array field the model's row comes from
            input_cfg = replace(input_cfg, features_field=contract.features_field)
        self.decoder, self.encoder, self._cfg = decoder, encoder, input_cfg
        self.width = contract.feature_width  # the feature array's values per row (0: named inputs)
        self.validator = EventValidator(input_cfg, contract, include)
        self.include = tuple(include)
        named_in, named_out = contract.feature_column is None, contract.score_column is None
        self._contract = contract if named_in else None
        self._stack = contract.stack
        # The fast decoders of the array field give its float32 matrix: the one FEATURES column.
        self._columns: Callable[[Any], Columns] = ((lambda cols: cols) if named_in
                                                  else (lambda matrix: Columns({FEATURES: matrix})))
        # The columnar paths: Avro in (the feature array, or named fields and output.include:
        # formats/columnar/fields.py), JSON in (the feature array, or named fields:
        # formats/columnar/json_fields.py) and protobuf's named fields in
        # (formats/columnar/protobuf_columns.py) with nothing passed through; out, the shipped layout
        # (formats/columnar/encode.py), or any other with its outputs and output.include
        # (formats/columnar/record.py).
        fast_in = fast and (named_in or not include)
        self._fast = fast_in
        self.fast_decoder: ColumnarDecoder | FieldDecoder | JsonColumns | JsonFields | ProtobufColumns | None = None
        if fast_in and isinstance(decoder, AvroCodec):
            self.fast_decoder = self._compile(json.loads(decoder.schema_json))
        elif fast_in and isinstance(decoder, JsonCodec) and not include:
            self.fast_decoder = (JsonFields.compile(input_cfg, contract) if named_in
                                 else JsonColumns(input_cfg, self.width))
        elif fast_in and named_in and not include and isinstance(decoder, ConfluentProtobufCodec):
            self.fast_decoder = ProtobufColumns.compile(decoder, input_cfg, contract)
        self._by_schema_id: dict[bytes, ColumnarDecoder | FieldDecoder | None] = {}  # avro-confluent
        self.fast_encoder: PredictionEncoder | RecordEncoder | None = None
        if fast and isinstance(encoder, AvroCodec):
            out_schema = json.loads(encoder.schema_json)
            if not named_out and not include:
                self.fast_encoder = PredictionEncoder.compile(out_schema, encoder.prefix)
            if self.fast_encoder is None:
                self.fast_encoder = RecordEncoder.compile(
                    out_schema, [f["name"] for f in contract.avro_fields()],
                    [include_name(p) for p in include], encoder.prefix)
        # A user's output.schema may leave model_digest out (prediction_schema.check_schema): not written then.
        self._digest = not isinstance(encoder, AvroCodec) or "model_digest" in {
            f["name"] for f in json.loads(encoder.schema_json)["fields"]}
        self.empty = Rows.empty(self._stack([]))  # what a chunk that decoded to nothing gives

    @classmethod
    def serving(cls, decoder: Codec, encoder: Codec, cfg: Config, runner: ModelRunner) -> Stages:
        """The stages for ``runner``'s contract and ``output.include``."""
        return cls(decoder, encoder, cfg.input, runner.contract, include=cfg.output.include)

    def decode(self, chunk: Messages) -> tuple[Rows, list[Reject]]:
        """Decode and validate consumed messages; the rows keep the chunk's order."""
        parts = self._fast_parts(chunk.items)
        if not parts:
            good, records, rejects = decode_batch(chunk.items, self.decoder, self.validator)
            return Rows.from_records(records, chunk.take(np.array(good, np.intp)), self._stack), rejects
        fast: list[Rows] = []
        at: list[np.ndarray] = []
        for idx, cols in parts:
            rows = cols.rows if idx is None else idx[cols.rows]
            fast.append(Rows(chunk if len(rows) == len(chunk) else chunk.take(rows), cols.event_ids,
                             cols.entity_ids, cols.event_times, self._columns(cols.features), cols.passthrough))
            at.append(rows)
        left = np.ones(len(chunk), bool)
        for rows in at:
            left[rows] = False
        if not left.any() and len(fast) == 1:
            return fast[0], []
        slow = np.flatnonzero(left)
        good, records, rejects = decode_batch([chunk.items[i] for i in slow.tolist()], self.decoder, self.validator)
        at.append(slow[np.array(good, np.intp)])
        fast.append(Rows.from_records(records, chunk.take(at[-1]), self._stack))
        order = np.argsort(np.concatenate(at), kind="stable")
        return Rows.join(fast).take(order), rejects

    def _fast_parts(self, messages: Sequence[Any]) -> list[tuple[np.ndarray | None, DecodedColumns]]:
        """The fast path's columns: ``(indices into messages, or None for all, columns)`` per decoder."""
        if not messages or not self._fast or (self.fast_decoder is None
                                              and not isinstance(self.decoder, ConfluentAvroCodec)):
            return []
        values = [m.value() for m in messages]
        if self.fast_decoder is not None:
            return [(None, self.fast_decoder.decode(values))]
        heads = [v[:5] if v is not None else b"" for v in values]
        if heads.count(heads[0]) == len(heads):
            groups = {heads[0]: np.arange(len(values))}
        else:
            spread: dict[bytes, list[int]] = {}
            for i, head in enumerate(heads):
                spread.setdefault(head, []).append(i)
            groups = {head: np.array(idx, np.intp) for head, idx in spread.items()}
        parts: list[tuple[np.ndarray | None, DecodedColumns]] = []
        for head, idx in groups.items():
            decoder = self._schema_decoder(head)
            if decoder is not None:
                parts.append((idx, decoder.decode([values[i] for i in idx.tolist()], offset_of_payload=5)))
        return parts

    def _compile(self, writer_schema: dict[str, Any]) -> ColumnarDecoder | FieldDecoder | None:
        """The fast decoder of one writer schema for this contract (None: the reference's)."""
        if self._contract is not None:
            return FieldDecoder.compile(writer_schema, self._cfg, self._contract, self.include)
        return ColumnarDecoder.compile(writer_schema, self._cfg, self.width)

    def _schema_decoder(self, head: bytes) -> ColumnarDecoder | FieldDecoder | None:
        """avro-confluent: the fast decoder for a framing head (magic byte and schema id), compiled
        from the writer schema the first time the id is seen; None where the reference must go
        (the id is unknown, or its schema resolves to a different reader schema)."""
        if len(head) != 5 or head[0] != 0:
            return None  # bad framing: the reference says why
        if head not in self._by_schema_id:
            assert isinstance(self.decoder, ConfluentAvroCodec)
            try:
                writer = self.decoder.reader(int.from_bytes(head[1:], "big"))
            except Exception:  # noqa: BLE001 - unknown id or registry away: the reference raises it per row
                return None  # not cached: a registry that comes back serves the id later
            # A writer schema that resolves to a different reader schema goes to the reference,
            # which applies Avro's resolution rules; the fast path reads writer == reader only.
            self._by_schema_id[head] = None if writer.resolves else self._compile(json.loads(writer.schema_json))
        return self._by_schema_id[head]

    def encode(self, rows: Rows, scores: Columns, poison: dict[int, InferenceError],
                 stamp: Stamp) -> tuple[Rows, list[bytes], list[Reject]]:
        """Prediction values for the scored rows: ``(kept, values, rejects)``, where ``values[j]``
        is the prediction of row j of ``kept``; rows the model failed on alone are rejects.
        ``scores``: the prediction fields' columns."""
        if not self._digest:
            stamp = replace(stamp, with_digest=False)
        if self.fast_encoder is None:
            kept, values, rejects = encode_batch(rows, scores, poison, self.encoder, stamp, self.include)
            return (rows if len(kept) == len(rows) else rows.take(kept)), values, rejects
        return self._encode_fast(rows, scores, poison, stamp)

    def _encode_fast(self, rows: Rows, scores: Columns, poison: dict[int, InferenceError],
                     stamp: Stamp) -> tuple[Rows, list[bytes], list[Reject]]:
        """The columnar encoder; the rows it refuses (and the poison rows) one by one by the
        reference. The kept rows are taken once, for the encoder and for the caller."""
        kept, part, part_scores, poisoned = without_poison(rows, scores, poison)
        values = self._fast_values(part, part_scores, stamp)
        if None not in values:  # every kept row encoded: the poison rows are the only rejects
            return part, cast(list[bytes], values), poisoned
        out_rows: list[int] = []
        out_values: list[bytes] = []
        rejects: list[Reject] = []
        fast = dict(zip(kept.tolist(), values, strict=True))
        for i in range(len(rows)):
            value = fast.get(i)
            if value is None:  # poisoned, or the reference's to encode (or refuse)
                one = rows.take(np.array([i]))
                got, vals, bad = encode_batch(one, scores[i:i + 1], {0: poison[i]} if i in poison else {},
                                              self.encoder, stamp, self.include)
                rejects.extend(bad)
                if not len(got):
                    continue
                value = vals[0]
            out_rows.append(i)
            out_values.append(value)
        taken = rows if len(out_rows) == len(rows) else rows.take(np.array(out_rows, np.intp))
        return taken, out_values, rejects

    def _fast_values(self, part: Rows, scores: Columns, stamp: Stamp) -> list[bytes | None]:
        """The fast encoder's values of ``part``'s rows (None: the reference's to encode)."""
        src = part.source
        if isinstance(self.fast_encoder, PredictionEncoder):
            return self.fast_encoder.encode(part.event_ids, part.entity_ids, scores.arrays[SCORES], stamp.model_name,
                                            stamp.model_version, src.topics, src.partitions, src.offsets,
                                            part.event_times, stamp.scored_at_ms, stamp.run_id, stamp.degraded,
                                            stamp.model_digest)
        assert self.fast_encoder is not None
        return self.fast_encoder.encode(part.event_ids, part.entity_ids, scores.arrays, src.topics, src.partitions,
                                        src.offsets, part.event_times, part.passthrough, stamp_fields(stamp))


def decode_batch(messages: Sequence[Any], decoder: Codec,
                 validator: EventValidator) -> tuple[list[int], list[SourceRecord], list[Reject]]:
    """The reference: decode and validate consumed messages one by one, in order.

    Returns the indices of the good messages, their records, and the rejects.
    """
    good: list[int] = []
    records: list[SourceRecord] = []
    rejects: list[Reject] = []
    for i, m in enumerate(messages):
        value = m.value()
        try:
            if value is None:
                raise DeserializeError("tombstone (null value): nothing to score")
            payload = decoder.decode(value)
            record = validator.to_record(payload, m.topic(), m.partition(), m.offset(), m.key(),
                                         m.timestamp()[1])
        except RecordError as exc:
            rejects.append((detach(exc), m))  # kept: without the frames (errors.detach)
            continue
        good.append(i)
        records.append(record)
    return good, records, rejects


def stamp_fields(stamp: Stamp) -> dict[str, Any]:
    """The prediction record's fields that every row of a batch shares, as ``prediction_fields``
    writes them (the stamp's, and what it leaves out)."""
    record = SourceRecord("", 0, 0, None, "", "", 0, 0, None)
    return {k: v for k, v in prediction_fields(record, {}, stamp).items() if k not in ROW_FIELDS}


def without_poison(rows: Rows, scores: Columns,
                   poison: dict[int, InferenceError]) -> tuple[np.ndarray, Rows, Columns, list[Reject]]:
    """The rows the model scored (their indices, the rows and their scores, taken once) and a
    reject for each row it failed on alone, in row order."""
    keep = np.ones(len(rows), bool)
    keep[list(poison)] = False
    kept = np.flatnonzero(keep)
    if len(kept) == len(rows):
        return kept, rows, scores, []
    items = rows.source.items
    return kept, rows.take(kept), scores[kept], [poison_reject(poison[i], items[i]) for i in sorted(poison)]


def poison_reject(failure: InferenceError, message: Any) -> Reject:
    """The dead letter's error for a row the model failed on alone (its cause: the model's error)."""
    error = PoisonRowError(f"the model fails on this row: {failure}")
    error.__cause__ = failure
    return error, message


def encode_batch(rows: Rows, scores: Columns, poison: dict[int, InferenceError], encoder: Codec, stamp: Stamp,
                 include: Sequence[str] = ()) -> tuple[np.ndarray, list[bytes], list[Reject]]:
    """The reference: prediction values one by one; rows the model failed on alone are rejects.
    ``scores``: the prediction fields' columns."""
    names, lists = list(scores.arrays), [v.tolist() for v in scores.arrays.values()]  # Python values, once
    fields = [dict(zip(names, row, strict=True)) for row in zip(*lists, strict=True)] if lists else []
    kept: list[int] = []
    values: list[bytes] = []
    rejects: list[Reject] = []
    for i in range(len(rows)):
        message = rows.source.items[i]
        if i in poison:
            rejects.append(poison_reject(poison[i], message))
            continue
        try:
            value = encoder.encode(prediction_fields(rows.record(i), fields[i], stamp, include))
        except RecordError as exc:
            rejects.append((detach(exc), message))
            continue
        kept.append(i)
        values.append(value)
    return np.array(kept, np.intp), values, rejects
