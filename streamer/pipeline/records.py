"""Small frozen records that flow between the pipeline stages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def prediction_fields(source: SourceRecord, scores: np.ndarray, model_name: str, model_version: str,
                      scored_at_ms: int, run_id: str | None = None) -> dict[str, Any]:
    """The prediction record (schemas/prediction.avsc) for one scored source record."""
    return {
        "event_id": source.event_id, "entity_id": source.entity_id, "scores": scores.tolist(),
        "model_name": model_name, "model_version": model_version, "source_topic": source.topic,
        "source_partition": source.partition, "source_offset": source.offset,
        "event_time": source.event_time_ms, "scored_at": scored_at_ms, "run_id": run_id,
    }
