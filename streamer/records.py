"""Small frozen records that flow between the pipeline stages."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One consumed Kafka message, decoded into a feature row.

    ``timestamp_ms`` is the Kafka message timestamp; ``event_time_ms`` the event's own time
    (from the payload when present, else the message timestamp).
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    event_id: str
    entity_id: str
    event_time_ms: int
    timestamp_ms: int
    features: np.ndarray  # float32, shape (n_features,)


@dataclass(frozen=True, slots=True)
class Prediction:
    """The model's output row for one source record, ready to encode."""

    source: SourceRecord
    scores: np.ndarray  # float32, shape (n_outputs,)
    scored_at_ms: int
