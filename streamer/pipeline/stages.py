"""The pipeline's batch stages around the model: decode + validate, and encode.

Each stage takes a batch and returns ``(good, rejects)``: a reject is the :class:`RecordError`
that a row failed with, and the consumed message it stands for, for the loop to dead-letter.
A stage never dead-letters by itself and never calls back into the loop.

Two implementations stand behind :class:`Stages`. The per-row reference (fastavro and
:class:`EventValidator` per message, fastavro per prediction) serves every format. The columnar
fast path (columnar_decode.py, columnar_encode.py) takes plain Avro input and the shipped
prediction layout when their schemas compile; a row it cannot prove identical to the reference
goes through the reference, which raises the same dead-letter errors, so the two are one stage.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from streamer.config import InputConfig
from streamer.errors import DeserializeError, InferenceError, PoisonRowError, RecordError
from streamer.pipeline.codecs import AvroCodec, Codec
from streamer.pipeline.columnar_decode import ColumnarDecoder
from streamer.pipeline.columnar_encode import PredictionEncoder
from streamer.pipeline.records import SourceRecord, prediction_fields
from streamer.pipeline.validate import EventValidator

Row = tuple[SourceRecord, Any]  # a validated row and the consumed message it came from
Reject = tuple[RecordError, Any]  # why a row failed, and the consumed message it came from


class Stages:
    """Decode and encode for one processor: the fast path where it applies, else the reference."""

    def __init__(self, decoder: Codec, encoder: Codec, input_cfg: InputConfig, n_features: int,
                 fast: bool = True) -> None:
        self.decoder, self.encoder = decoder, encoder
        self.validator = EventValidator(input_cfg, n_features)
        self.fast_decoder = (ColumnarDecoder.compile(json.loads(decoder.schema_json), input_cfg, n_features)
                             if fast and isinstance(decoder, AvroCodec) else None)
        self.fast_encoder = (PredictionEncoder.compile(json.loads(encoder.schema_json))
                             if fast and isinstance(encoder, AvroCodec) else None)

    def decode(self, messages: Sequence[Any]) -> tuple[list[Row], list[Reject]]:
        """Decode and validate consumed messages, in order."""
        if self.fast_decoder is None or not messages:
            return decode_batch(messages, self.decoder, self.validator)
        cols = self.fast_decoder.decode([m.value() for m in messages])
        rows: list[Row | None] = [None] * len(messages)
        for j, i in enumerate(cols.rows.tolist()):
            m = messages[i]
            rows[i] = (SourceRecord(m.topic(), m.partition(), m.offset(), m.key(), cols.event_ids[j],
                                    cols.entity_ids[j], int(cols.event_times[j]), m.timestamp()[1],
                                    cols.features[j]), m)
        rejects: list[Reject] = []
        for i in cols.fallback.tolist():
            good, bad = decode_batch([messages[i]], self.decoder, self.validator)
            rows[i] = good[0] if good else None
            rejects.extend(bad)
        return [r for r in rows if r is not None], rejects

    def encode(self, rows: Sequence[Row], scores: np.ndarray, poison: dict[int, InferenceError],
               model_name: str, model_version: str, scored_at_ms: int,
               run_id: str | None = None) -> tuple[list[tuple[bytes, Row]], list[Reject]]:
        """Prediction values for the scored rows; rows the model failed on alone are rejects."""
        if self.fast_encoder is None:
            return encode_batch(rows, scores, poison, self.encoder, model_name, model_version,
                                scored_at_ms, run_id)
        keep = [i for i in range(len(rows)) if i not in poison]
        records = [rows[i][0] for i in keep]
        values = self.fast_encoder.encode(
            [r.event_id for r in records], [r.entity_id for r in records], scores[keep], model_name,
            model_version, [r.topic for r in records], [r.partition for r in records],
            [r.offset for r in records], [r.event_time_ms for r in records], scored_at_ms, run_id)
        fast = dict(zip(keep, values, strict=True))
        good: list[tuple[bytes, Row]] = []
        rejects: list[Reject] = []
        for i, row in enumerate(rows):
            value = fast.get(i)
            if value is not None:
                good.append((value, row))
                continue  # else poisoned, or the reference's to encode (or refuse)
            g, r = encode_batch([row], scores[i:i + 1], {0: poison[i]} if i in poison else {}, self.encoder,
                                model_name, model_version, scored_at_ms, run_id)
            good.extend(g)
            rejects.extend(r)
        return good, rejects


def decode_batch(messages: Sequence[Any], decoder: Codec,
                 validator: EventValidator) -> tuple[list[Row], list[Reject]]:
    """The reference: decode and validate consumed messages one by one, in order."""
    rows: list[Row] = []
    rejects: list[Reject] = []
    for m in messages:
        value = m.value()
        try:
            if value is None:
                raise DeserializeError("tombstone (null value): nothing to score")
            payload = decoder.decode(value)
            record = validator.to_record(payload, m.topic(), m.partition(), m.offset(), m.key(),
                                         m.timestamp()[1])
        except RecordError as exc:
            rejects.append((exc, m))
            continue
        rows.append((record, m))
    return rows, rejects


def features_of(rows: Sequence[Row]) -> np.ndarray:
    """The batch's feature matrix, ``[rows, n_features]`` float32."""
    return np.stack([record.features for record, _ in rows])


def encode_batch(rows: Sequence[Row], scores: np.ndarray, poison: dict[int, InferenceError],
                 encoder: Codec, model_name: str, model_version: str, scored_at_ms: int,
                 run_id: str | None = None) -> tuple[list[tuple[bytes, Row]], list[Reject]]:
    """The reference: prediction values one by one; rows the model failed on alone are rejects."""
    good: list[tuple[bytes, Row]] = []
    rejects: list[Reject] = []
    for i, (row, score_row) in enumerate(zip(rows, scores, strict=True)):
        record, message = row
        if i in poison:
            error = PoisonRowError(f"the model fails on this row: {poison[i]}")
            error.__cause__ = poison[i]
            rejects.append((error, message))
            continue
        try:
            value = encoder.encode(prediction_fields(record, score_row, model_name, model_version,
                                                     scored_at_ms, run_id))
        except RecordError as exc:
            rejects.append((exc, message))
            continue
        good.append((value, row))
    return good, rejects
