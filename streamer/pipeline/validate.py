"""Turning a decoded payload into a validated row of model inputs (the ``validate`` stage)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from streamer.config import InputConfig
from streamer.errors import ValidationError
from streamer.model.contract import Contract, field_value
from streamer.model.exact import EXACT_INT
from streamer.pipeline.records import SourceRecord

_NUMBERS = {int, float, bool}  # exact types (numpy would read "1.5" as a number too)
_EXACT = EXACT_INT["float32"]  # model/exact.py's table: an integer into float32 up to 2^24, a bool as 1 or 0

class EventValidator:
    """Checks a decoded event against the model's inputs and builds its SourceRecord.

    A contract fed the feature array takes the float array ``features_field`` as the model's row;
    one of named inputs converts each model input's fields (contract.py). ``include``: the
    pass-through fields the record keeps for its prediction (output.include).
    """

    def __init__(self, cfg: InputConfig, contract: Contract, include: Sequence[str] = ()) -> None:
        if contract.feature_column is not None and contract.features_field != cfg.features_field:
            cfg = replace(cfg, features_field=contract.features_field)
        self._cfg = cfg
        self.width = contract.feature_width  # the feature array's values per row
        self._contract = None if contract.feature_column is not None else contract
        self._include = tuple(include)

    def to_record(self, payload: Mapping[str, Any], topic: str, partition: int, offset: int,
                  key: bytes | None, timestamp_ms: int) -> SourceRecord:
        """Raises :class:`ValidationError` (without coordinates) when the event cannot be scored."""
        cfg = self._cfg
        features = self._features(payload) if self._contract is None else self._contract.row(payload)
        event_time = payload.get(cfg.time_field, timestamp_ms)
        if isinstance(event_time, bool) or not isinstance(event_time, int):
            raise ValidationError(f"field '{cfg.time_field}' is not an integer of milliseconds")
        return SourceRecord(
            topic=topic, partition=partition, offset=offset, key=key,
            event_id=str(payload.get(cfg.id_field, f"{topic}-{partition}-{offset}")),
            entity_id=_text(payload.get(cfg.entity_field), ""),
            event_time_ms=event_time, timestamp_ms=timestamp_ms, features=features,
            passthrough=tuple(field_value(payload, p) for p in self._include),
        )

    def _features(self, payload: Mapping[str, Any]) -> np.ndarray:
        cfg = self._cfg
        raw_features = payload.get(cfg.features_field)
        if raw_features is None:
            raise ValidationError(f"missing field '{cfg.features_field}'")
        # numpy would read "1.5" as a number: JSON events must send numbers as numbers
        kinds = set(map(type, raw_features)) if isinstance(raw_features, list) else set()
        if not kinds <= _NUMBERS:
            odd = next(v for v in raw_features if type(v) not in _NUMBERS)
            raise ValidationError(f"field '{cfg.features_field}' holds {odd!r} ({type(odd).__name__}), "
                                  f"not a number")
        if int in kinds:
            big = next((v for v in raw_features if type(v) is int and not -_EXACT <= v <= _EXACT), None)
            if big is not None:
                raise ValidationError(f"field '{cfg.features_field}' holds the integer {big}, beyond 2^24: "
                                      f"float32 holds integers exactly up to 2^24")
        try:
            features = np.asarray(raw_features, dtype=np.float32)
        except (TypeError, ValueError, OverflowError) as exc:  # Overflow: an integer past a double
            raise ValidationError(f"field '{cfg.features_field}' is not a list of numbers") from exc
        if features.shape != (self.width,):
            raise ValidationError(f"field '{cfg.features_field}' has {features.size} values, "
                                  f"the model takes {self.width}")
        if not np.isfinite(features).all():
            raise ValidationError(f"field '{cfg.features_field}' holds NaN or infinity")
        if cfg.feature_min is not None and features.min() < cfg.feature_min:
            raise ValidationError(f"field '{cfg.features_field}' holds {features.min():g}, "
                                  f"below input.feature_min {cfg.feature_min:g}")
        if cfg.feature_max is not None and features.max() > cfg.feature_max:
            raise ValidationError(f"field '{cfg.features_field}' holds {features.max():g}, "
                                  f"above input.feature_max {cfg.feature_max:g}")
        return features


def _text(value: Any, missing: str) -> str:
    """A field's text; ``missing`` when the field is missing or null (never the text 'None')."""
    return missing if value is None else str(value)
