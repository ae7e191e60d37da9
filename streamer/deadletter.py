"""Dead letters: the original record, byte for byte, plus headers saying where and why it failed."""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from streamer.errors import RecordError

Headers = list[tuple[str, bytes]]
HEADER_PREFIX = "streamer.dlq."
MAX_TRACE_CHARS = 2000


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """What goes to the dead-letter topic for one failed input record."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    source_topic: str
    source_partition: int
    source_offset: int
    stage: str


def dead_letter(error: RecordError, *, dlq_topic: str, key: bytes | None,
                original_headers: Headers | None, timestamp_ms: int, group_id: str,
                model_name: str, model_version: str, attempt: int = 1) -> DeadLetter:
    """Build the dead letter for ``error``, whose coordinates and raw bytes must be set."""
    assert error.topic is not None and error.partition is not None and error.offset is not None
    cause = error.__cause__ or error
    trace = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    ours = {
        "original.topic": error.topic,
        "original.partition": str(error.partition),
        "original.offset": str(error.offset),
        "original.timestamp": str(timestamp_ms),
        "consumer.group": group_id,
        "stage": error.stage,
        "exception.class": f"{type(cause).__module__}.{type(cause).__qualname__}",
        "exception.message": str(error),
        "exception.stacktrace": trace[-MAX_TRACE_CHARS:],
        "model.name": model_name,
        "model.version": model_version,
        "attempt": str(attempt),
    }
    headers = list(original_headers or [])
    headers.extend((HEADER_PREFIX + k, v.encode("utf-8", "replace")) for k, v in ours.items())
    return DeadLetter(topic=dlq_topic, key=key, value=error.raw, headers=headers,
                      source_topic=error.topic, source_partition=error.partition,
                      source_offset=error.offset, stage=error.stage)
