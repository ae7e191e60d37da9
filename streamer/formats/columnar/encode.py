"""Columnar encode of prediction records: the fast path beside ``encode_batch``, byte for byte.

Each value equals ``AvroCodec(prediction schema).encode(prediction_fields(...))`` for its row. The
rows are laid out side by side in one byte matrix, one row per prediction, and written a field at
a time for all rows at once; each value is then one slice of that matrix. A row whose inputs the
reference would refuse (a string that is not valid Unicode, an integer outside 64 bits) is None:
the caller encodes it with the reference, which raises the same ``SerializeError``. So
is a row with a string over 4 KiB, which the reference encodes.

Worked example: ``PredictionEncoder.compile(schema).encode(["evt-1"], ["acct-42"],
np.array([[0.5]], np.float32), "m", "1", "t", [0], [7], [1000], 2000, None)`` gives one value,
``0a 65 76 74 2d 31 0e ... 00`` (event id, entity id, scores, ... run_id's null branch).

The model's name, version and digest are one constant head per batch, written into every row
as one block: the digest costs no work per row.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import fastavro
import numpy as np

from streamer.formats.columnar.texts import Texts
from streamer.formats.columnar.walk import byte_windows
from streamer.formats.varint import avro_string, zigzag

_INT64 = (-(1 << 63), 1 << 63)
_LONGEST = 4096  # bytes: a longer string (id, entity, topic) or constant part is left to the reference
# The shipped Prediction layout: field names and their types (a timestamp-millis long is a long).
_LAYOUT = (("event_id", "string"), ("entity_id", "string"), ("scores", ("array", "float")),
           ("model_name", "string"), ("model_version", "string"), ("model_digest", "string"),
           ("source_topic", "string"), ("source_partition", "int"), ("source_offset", "long"),
           ("event_time", "long"), ("scored_at", "long"), ("run_id", ("null", "string")),
           ("degraded", "boolean"), ("degraded_reason", ("null", "string")))
_DIGEST = ("model_digest", "string")
_DEGRADED = _LAYOUT[-2:]


def _layouts() -> dict[tuple[Any, ...], tuple[bool, bool]]:
    """The layouts encoded, each with (digest field, degraded fields): the shipped one, and a user's
    copy of an older one without ``model_digest`` or without the degraded fields (fastavro leaves
    those out, and so does the fast path)."""
    out = {}
    for digest in (True, False):
        for degraded in (True, False):
            out[tuple(f for f in _LAYOUT if (digest or f != _DIGEST) and (degraded or f not in _DEGRADED))] = (
                digest, degraded)
    return out


_LAYOUTS = _layouts()


def _varints(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints of int64 ``v``: the bytes, [len(v), widest] left-aligned, and each one's length."""
    u = ((v << 1) ^ (v >> 63)).view(np.uint64)
    widest = max(1, -(-int(u.max(initial=0)).bit_length() // 7))
    if widest == 1:  # every value under 64 (partitions, small counts): one byte each, as is
        return u.astype(np.uint8).reshape(-1, 1), np.ones(len(v), np.int64)
    shifts = np.arange(widest, dtype=np.uint64) * np.uint64(7)  # all of a row's groups at once
    groups = u[:, None] >> shifts
    more = (groups >> np.uint64(7)) != 0  # a group with more after it carries the high bit
    out = ((groups & np.uint64(0x7F)) | (more.astype(np.uint64) << np.uint64(7))).astype(np.uint8)
    return out, more.sum(axis=1, dtype=np.int64) + 1


def _type(t: Any) -> Any:
    """A parsed field type, reduced to what decides its bytes."""
    if isinstance(t, list):
        return tuple(_type(b) for b in t)
    if isinstance(t, dict):
        if t.get("type") == "array":
            return ("array", _type(t["items"]))
        if t.get("logicalType") not in (None, "timestamp-millis") or not isinstance(t.get("type"), str):
            return None
        return t["type"]
    return t


class _Rows:
    """The prediction rows under construction: a byte matrix, and each row's length so far."""

    def __init__(self, k: int, width: int) -> None:
        self.matrix = np.zeros((k, width + 16), np.uint8)  # window writes may spill up to 15 bytes
        self.flat = self.matrix.reshape(-1)
        self.base = np.arange(k, dtype=np.int64) * self.matrix.shape[1]
        self.length = np.zeros(k, np.int64)

    def window(self, data: np.ndarray, length: np.ndarray | int) -> None:
        """Write each row of ``data`` at each row's end; only ``length`` bytes of it count.

        Any bytes beyond ``length`` land where the next field goes and are overwritten by it, or
        past the row's end, where no slice reaches.
        """
        byte_windows(self.flat, data.shape[1])[self.base + self.length] = data
        self.length += length

    def text(self, blob: bytes, size: np.ndarray) -> None:
        """Append each row's ``size`` bytes, taken in turn from ``blob``, after its length varint."""
        self.window(*_varints(size))
        start = np.cumsum(size) - size
        at = np.repeat(self.base + self.length - start, size) + np.arange(len(blob))
        self.flat[at] = np.frombuffer(blob, np.uint8)
        self.length += size


def _texts(values: Sequence[str], ok: np.ndarray) -> tuple[bytes, np.ndarray]:
    """UTF-8 bytes of ``values`` joined, and each one's size; a row that cannot be encoded is refused.

    So is a row with a string over ``_LONGEST`` bytes: every row of the matrix is as wide as the
    widest, and one huge id must not make the whole batch's matrix huge.
    """
    if isinstance(values, Texts) and values.sizes.max(initial=0) <= _LONGEST:
        return values.blob()  # ASCII bytes as decoded: no str made or encoded
    joined = "".join(values)
    sizes = np.fromiter(map(len, values), np.int64, len(values))
    if joined.isascii() and sizes.max(initial=0) <= _LONGEST:
        return joined.encode(), sizes
    parts = []
    for i, s in enumerate(values):
        try:
            b = s.encode()
        except UnicodeEncodeError:  # a lone surrogate (possible from JSON input): fastavro refuses it
            b = b""
            ok[i] = False
        if len(b) > _LONGEST:
            b = b""
            ok[i] = False
        parts.append(b)
    return b"".join(parts), np.fromiter(map(len, parts), np.int64, len(parts))


def _ints(values: Sequence[int] | np.ndarray, ok: np.ndarray) -> np.ndarray:
    """``values`` as int64; a value that is no integer or does not fit 64 bits is refused."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "i":
        return values.astype(np.int64)
    if not isinstance(values, np.ndarray) and set(map(type, values)) <= {int}:
        try:
            return np.array(values, np.int64)
        except OverflowError:  # some are too big: found one by one below
            pass
    out = np.zeros(len(values), np.int64)
    for i, v in enumerate(values.tolist() if isinstance(values, np.ndarray) else values):
        try:
            v = operator.index(v)
        except TypeError:
            v = None
        if v is not None and _INT64[0] <= v < _INT64[1]:
            out[i] = v
        else:
            ok[i] = False
    return out


class PredictionEncoder:
    """Encodes the predictions of a batch with the shipped Prediction schema, for all rows at once."""

    def __init__(self, degraded_fields: bool = True, prefix: bytes = b"", digest_field: bool = True) -> None:
        self.degraded_fields = degraded_fields  # the schema ends with degraded, degraded_reason
        self.digest_field = digest_field  # model_digest follows model_version
        self.prefix = prefix  # before every value: avro-confluent's magic byte and schema id

    @classmethod
    def compile(cls, output_schema: dict[str, Any], prefix: bytes = b"") -> PredictionEncoder | None:
        """An encoder, or None unless ``output_schema`` has exactly the shipped Prediction layout
        (or an older one, without ``model_digest`` or without the degraded fields); ``prefix``
        leads every value (as ``AvroCodec(schema, prefix=prefix)`` writes it)."""
        try:
            parsed: Any = fastavro.parse_schema(output_schema)
            fields = tuple((f["name"], _type(f["type"])) for f in parsed["fields"])
        except Exception:  # noqa: BLE001 - not a record schema fastavro takes: no fast path
            return None
        if parsed.get("type") != "record" or fields not in _LAYOUTS:
            return None
        digest, degraded = _LAYOUTS[fields]
        return cls(degraded_fields=degraded, prefix=prefix, digest_field=digest)

    def encode(self, event_ids: Sequence[str], entity_ids: Sequence[str], scores: np.ndarray,
               model_name: str, model_version: str, source_topic: str | Sequence[str],
               source_partitions: Sequence[int] | np.ndarray, source_offsets: Sequence[int] | np.ndarray,
               event_times: Sequence[int] | np.ndarray, scored_at_ms: int,
               run_id: str | None = None, degraded: str | None = None,
               model_digest: str | None = "") -> list[bytes | None]:
        """One prediction value per row; None where the row needs the reference encoder.

        That is a row the reference refuses (a string with a lone surrogate, an integer outside
        64 bits: it raises ``SerializeError`` for it), or one with a string over 4 KiB.
        ``model_digest`` as ``Stamp.model_digest``: None writes the field's default, "", and is
        what a schema without the field takes (a digest for it is refused, as by the reference).

        Args:
            scores: float32 (or float64) [rows, n_out]; stored as float32 exactly as fastavro
                stores each Python float of ``scores.tolist()`` (a signalling NaN comes out quiet).
            source_topic: one topic for every row, or one per row.

        Raises:
            ValueError: the columns do not all have one entry per row, or scores are not floats.
        """
        k = len(event_ids)
        scores = np.asarray(scores)
        topics = None if isinstance(source_topic, str) else list(source_topic)
        if scores.ndim != 2 or scores.shape[0] != k or scores.dtype.kind != "f" or any(
                len(c) != k for c in (entity_ids, source_partitions, source_offsets, event_times,
                                      topics or event_ids)):
            raise ValueError(f"columns of unequal length or bad scores {scores.dtype} {scores.shape} "
                             f"for {k} rows")
        if k == 0:
            return []
        if topics is not None and isinstance(topics[0], str) and topics.count(topics[0]) == k:
            source_topic, topics = topics[0], None  # one topic (the usual case): a constant part
        ok = np.ones(k, bool)
        try:
            head = avro_string(model_name) + avro_string(model_version)
            if self.digest_field:
                head += avro_string(model_digest or "")
            elif model_digest is not None:
                raise TypeError("the schema has no model_digest field")  # the reference refuses it too
            topic = avro_string(source_topic) if isinstance(source_topic, str) else b""
            scored_at = operator.index(scored_at_ms)
            if not _INT64[0] <= scored_at < _INT64[1]:
                raise OverflowError(scored_at)
            tail = zigzag(scored_at) + (b"\0" if run_id is None else b"\2" + avro_string(run_id))
            if self.degraded_fields:
                tail += b"\0\0" if degraded is None else b"\1\2" + avro_string(degraded)
            elif degraded is not None:
                raise TypeError("the schema has no degraded fields")  # the reference refuses it too
            if len(self.prefix) + len(head) + len(topic) + len(tail) > _LONGEST:
                raise OverflowError("constant parts too long for the matrix")
        except (UnicodeEncodeError, TypeError, OverflowError):
            return [None] * k  # a constant the reference refuses (so every row fails), or too long
        ids, id_sizes = _texts(event_ids, ok)
        entities, entity_sizes = _texts(entity_ids, ok)
        topic_blob, topic_sizes = _texts(topics, ok) if topics is not None else (b"", None)
        numbers = [_varints(_ints(c, ok)) for c in (source_partitions, source_offsets, event_times)]

        n_out = scores.shape[1]
        with np.errstate(invalid="ignore", over="ignore"):  # float -> double -> float, as fastavro does
            block = scores.astype(np.float64).astype("<f4").view(np.uint8).reshape(k, 4 * n_out)
        if n_out:  # one block of n_out items, then the closing zero count; an empty array is just the zero
            prefix = np.frombuffer(zigzag(n_out), np.uint8)
            block = np.hstack([np.broadcast_to(prefix, (k, len(prefix))), block, np.zeros((k, 1), np.uint8)])
        else:
            block = np.zeros((k, 1), np.uint8)
        const = np.frombuffer(head + topic, np.uint8)

        # Every varint is at most 10 bytes: two string lengths, then partition, offset and event time.
        width = (int((id_sizes + entity_sizes).max(initial=0)) + 50 + block.shape[1] + len(const) + len(tail)
                 + len(self.prefix))
        if topic_sizes is not None:
            width += int(topic_sizes.max(initial=0)) + 10
        rows = _Rows(k, width)
        if self.prefix:
            rows.window(np.broadcast_to(np.frombuffer(self.prefix, np.uint8), (k, len(self.prefix))),
                        len(self.prefix))
        rows.text(ids, id_sizes)
        rows.text(entities, entity_sizes)
        rows.window(block, block.shape[1])
        rows.window(np.broadcast_to(const, (k, len(const))), len(const))
        if topic_sizes is not None:
            rows.text(topic_blob, topic_sizes)
        for data, length in numbers:
            rows.window(data, length)
        rows.window(np.broadcast_to(np.frombuffer(tail, np.uint8), (k, len(tail))), len(tail))

        blob = rows.matrix.tobytes()
        start = rows.base.tolist()
        stop = (rows.base + rows.length).tolist()
        if ok.all():
            return [blob[a:b] for a, b in zip(start, stop)]
        return [blob[a:b] if good else None for a, b, good in zip(start, stop, ok.tolist())]
