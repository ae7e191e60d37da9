"""Dead letters: the original record, byte for byte, plus headers saying where and why it failed."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from streamer.errors import RecordError, frames
from streamer.kafka.messages import Output
from streamer.pipeline.records import ModelId

Headers = list[tuple[str, bytes]]
HEADER_PREFIX = "streamer.dlq."
REDRIVE_HEADER = "streamer.redrive.count"  # set by `streamer dlq redrive` on the re-published row
MAX_TRACE_CHARS = 2000
TRUNCATED_BYTES = 1024  # what a dead letter too large for its topic keeps of the original value
log = logging.getLogger(__name__)


def headers_of(message: Any) -> Headers:
    """A consumed message's headers as (name, bytes) pairs (none: an empty list)."""
    return [(k, v if isinstance(v, bytes) else (v or "").encode()) for k, v in (message.headers() or [])]


def redrive_count(headers: Headers | None) -> int:
    """How often a record has been redriven already (0 when never), from its own headers."""
    for key, value in reversed(headers or []):
        if key == REDRIVE_HEADER:
            try:
                return int(value)
            except (TypeError, ValueError):
                return 0
    return 0


def header(headers: Headers | None, name: str) -> str | None:
    """The value of one of our dead-letter headers (``stage``, ``original.topic``, ...)."""
    for key, value in headers or []:
        if key == HEADER_PREFIX + name:
            return value.decode("utf-8", "replace") if value is not None else None
    return None


def original_headers(headers: Headers | None) -> Headers:
    """A dead letter's headers without ours: what the original record carried, byte for byte."""
    return [(k, v) for k, v in headers or [] if not k.startswith(HEADER_PREFIX)]


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
                model_name: str, model_version: str, model_digest: str = "") -> DeadLetter:
    """Build the dead letter for ``error``, whose coordinates and raw bytes must be set.

    ``attempt`` counts how often the record has failed: one more than its redrives so far.
    """
    assert error.topic is not None and error.partition is not None and error.offset is not None
    cause = error.__cause__ or error
    trace = stack_trace(cause)
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
        "model.digest": model_digest,
        "attempt": str(redrive_count(original_headers) + 1),
    }
    headers = list(original_headers or [])
    headers.extend((HEADER_PREFIX + k, v.encode("utf-8", "replace")) for k, v in ours.items())
    return DeadLetter(topic=dlq_topic, key=key, value=error.raw, headers=headers,
                      source_topic=error.topic, source_partition=error.partition,
                      source_offset=error.offset, stage=error.stage)


def stack_trace(exc: BaseException) -> str:
    """``exc``'s traceback as Python prints it, its chain of causes included, less the source
    lines: reading those (linecache) was most of a dead letter's cost, paid per row, and file and
    line say where to look."""
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        cause = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
        chain.append((link, _DIRECT if link.__cause__ is not None else _DURING))
        link = cause
    lines: list[str] = []
    for i, (link, joint) in enumerate(reversed(chain)):  # the first cause first, as Python prints
        if i:
            lines += ["", joint, ""]  # how this one came of the one above it
        lines.append("Traceback (most recent call last):")
        lines += [f'  File "{file}", line {line}, in {function}' for file, line, function in frames(link)]
        kind = type(link)
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        lines.append(f"{name}: {link}" if str(link) else name)
    return "\n".join(lines) + "\n"


_DIRECT = "The above exception was the direct cause of the following exception:"
_DURING = "During handling of the above exception, another exception occurred:"


def letter_for(error: RecordError, message: Any, *, dlq_topic: str, group_id: str, model: ModelId) -> Output:
    """The output that dead-letters consumed ``message`` for ``error`` (coordinates filled in),
    named by ``model``, the one that scored it (or serves, for a row refused before scoring)."""
    error.at(message.topic(), message.partition(), message.offset(), message.value())
    letter = dead_letter(error, dlq_topic=dlq_topic, key=message.key(), original_headers=message.headers(),
                         timestamp_ms=message.timestamp()[1], group_id=group_id,
                         model_name=model.name, model_version=model.version, model_digest=model.digest)
    log.debug("dead letter %s at %s: %s", error.stage, error.coordinates(), error)
    return Output(letter.topic, letter.key, letter.value, letter.headers, message, stage=letter.stage)


def cut_short(letter: Output) -> Output:
    """A dead letter its topic refused as too large, cut to fit: the original value's first
    ``TRUNCATED_BYTES`` bytes, our headers without the original record's own, and the original's
    size and SHA-256, so the record is still accounted for and can be found in the input topic
    (``original.topic/partition/offset``). ``streamer dlq redrive`` refuses it.
    """
    value = letter.value or b""
    ours = [(k, v) for k, v in letter.headers or [] if k.startswith(HEADER_PREFIX)]
    dropped = sum(len(k) + len(v or b"") for k, v in letter.headers or [] if not k.startswith(HEADER_PREFIX))
    ours += [(HEADER_PREFIX + k, v.encode()) for k, v in (
        ("truncated", "true"), ("original.size", str(len(value))),
        ("original.sha256", hashlib.sha256(value).hexdigest()), ("original.headers.bytes", str(dropped)))]
    log.warning("a dead letter of %d bytes is too large for %s: writing its first %d bytes and its digest",
                len(value), letter.topic, TRUNCATED_BYTES)
    return Output(letter.topic, letter.key, value[:TRUNCATED_BYTES], ours, letter.source, stage=letter.stage,
                  event_time_ms=letter.event_time_ms)


def is_cut_short(headers: Headers | None) -> bool:
    """Whether a dead letter holds only the start of the original value (see :func:`cut_short`)."""
    return header(headers, "truncated") == "true"
