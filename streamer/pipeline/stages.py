"""The pipeline's batch stages around the model: decode + validate, and encode.

Each stage takes a batch and returns ``(good, rejects)``: a reject is the :class:`RecordError`
that a row failed with, and the consumed message it stands for, for the loop to dead-letter.
A stage never dead-letters by itself and never calls back into the loop. This is the per-row
reference implementation; a faster one must keep the same interface and give the same answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from streamer.errors import DeserializeError, InferenceError, PoisonRowError, RecordError
from streamer.pipeline.codecs import Codec
from streamer.pipeline.records import SourceRecord, prediction_fields
from streamer.pipeline.validate import EventValidator

Row = tuple[SourceRecord, Any]  # a validated row and the consumed message it came from
Reject = tuple[RecordError, Any]  # why a row failed, and the consumed message it came from


def decode_batch(messages: Sequence[Any], decoder: Codec,
                 validator: EventValidator) -> tuple[list[Row], list[Reject]]:
    """Decode and validate consumed messages, in order."""
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
    """Prediction values for the scored rows; rows the model failed on alone are rejects."""
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
