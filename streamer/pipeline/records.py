"""What flows between the pipeline stages: consumed messages and decoded rows, as columns.

A chunk of consumed messages (:class:`Messages`) and the rows decoded from it (:class:`Rows`) are
held as columns, not as an object per row: the loop filters, batches, tracks offsets and encodes
them with a few numpy operations per chunk, whatever its size. Each row keeps its :class:`Origin`: a
consumed Kafka message, a table's row (lake/table.py) or an online request's row (online/served.py).
:class:`SourceRecord` is the one-row view that the per-row reference stages (the validator, the
reference encoder) work with. :class:`Scored` is a batch's result and :class:`Stamp` what every
prediction of it says of its scoring.

Worked example: three messages of partitions 0, 1, 0 (offsets 7, 3, 8)::

    >>> chunk = Messages.of(consumed)
    >>> chunk.by_partition()
    {('features', 0): array([7, 8]), ('features', 1): array([3])}
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from streamer.errors import InferenceError
from streamer.formats.columnar.texts import Texts
from streamer.model.prediction_schema import include_name
from streamer.model.signature import Columns

Partition = tuple[str, int]  # (topic, partition): a partition of a topic, or of a table source (its file)


class Origin(Protocol):
    """Where a row came from, as the stages read it: its coordinates (a topic's partition and
    offset; a table's file and row number; ``online``, 0 and the request's row), its key, its
    original bytes (what a dead letter or a reject keeps) and its timestamp, as
    ``confluent_kafka.Message`` answers them."""

    def topic(self) -> str: ...

    def partition(self) -> int: ...

    def offset(self) -> int: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def timestamp(self) -> tuple[int, int]: ...


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
    features: Any  # the model's values for this event: a float32 feature row, or each input's values by name
    passthrough: tuple[Any, ...] = ()  # the values of output.include, in its order


def _index(idx: np.ndarray | slice) -> np.ndarray | slice:
    return idx if isinstance(idx, slice) or idx.dtype != bool else np.flatnonzero(idx)


def _pick(items: Sequence[Any], idx: np.ndarray | slice) -> Any:
    if isinstance(idx, slice):
        return items[idx]
    if isinstance(items, Texts):
        return items[idx]  # its own fancy indexing, in numpy
    return [items[i] for i in idx.tolist()]


@dataclass(frozen=True, slots=True)
class Messages:
    """Consumed messages (or other origins of rows) with their coordinates as columns, in order."""

    items: list[Origin]  # confluent_kafka.Message objects, table rows, request rows
    topics: list[str]
    partitions: np.ndarray  # int64
    offsets: np.ndarray  # int64

    @classmethod
    def of(cls, messages: Sequence[Origin]) -> Messages:
        items = list(messages)
        return cls(items, [m.topic() for m in items], np.array([m.partition() for m in items], np.int64),
                   np.array([m.offset() for m in items], np.int64))

    def __len__(self) -> int:
        return len(self.items)

    def take(self, idx: np.ndarray | slice) -> Messages:
        """The messages at ``idx`` (indices, a boolean mask or a slice), in that order."""
        idx = _index(idx)
        return Messages(_pick(self.items, idx), _pick(self.topics, idx), self.partitions[idx], self.offsets[idx])

    def groups(self) -> dict[Partition, np.ndarray]:
        """Row indices of each partition, ascending (so its offsets stay in consumption order)."""
        n = len(self.items)
        if n == 0:
            return {}
        topic, parts = self.topics[0], self.partitions
        if self.topics.count(topic) == n:  # one topic: the usual case, all in numpy
            if (parts == parts[0]).all():
                return {(topic, int(parts[0])): np.arange(n)}
            order = np.argsort(parts, kind="stable")
            cuts = [0, *(np.flatnonzero(np.diff(parts[order])) + 1).tolist(), n]
            return {(topic, int(parts[order[a]])): order[a:b] for a, b in zip(cuts, cuts[1:])}
        out: dict[Partition, list[int]] = {}
        for i, tp in enumerate(zip(self.topics, parts.tolist())):
            out.setdefault(tp, []).append(i)
        return {tp: np.array(rows, np.intp) for tp, rows in out.items()}

    def by_partition(self) -> dict[Partition, np.ndarray]:
        """The offsets of each partition, in consumption order."""
        return {tp: self.offsets[idx] for tp, idx in self.groups().items()}

    def within(self, tps: Collection[Partition],
               past_end: Callable[[Partition, np.ndarray], np.ndarray] | None = None) -> Messages:
        """The messages of partitions in ``tps``, less those ``past_end`` says are past an end."""
        groups = self.groups()
        if past_end is None and all(tp in tps for tp in groups):
            return self
        keep = np.zeros(len(self.items), bool)
        for tp, idx in groups.items():
            if tp in tps:
                keep[idx] = True if past_end is None else ~past_end(tp, self.offsets[idx])
        return self if keep.all() else self.take(keep)

    def outside(self, tps: Collection[Partition]) -> np.ndarray:
        """A mask of the rows whose partition is not in ``tps``."""
        mask = np.ones(len(self.items), bool)
        for tp, idx in self.groups().items():
            if tp in tps:
                mask[idx] = False
        return mask


@dataclass(frozen=True, slots=True)
class Rows:
    """Decoded, validated rows as columns, each with the consumed message it came from."""

    source: Messages
    event_ids: Sequence[str]  # a list, or Texts: the ids' bytes as decoded (formats/columnar/texts.py)
    entity_ids: Sequence[str]
    event_times: np.ndarray  # int64 milliseconds: the event's own time
    features: Columns  # the model's inputs, by column
    passthrough: list[tuple[Any, ...]] | None = None  # output.include's values per row; None: none kept

    @classmethod
    def empty(cls, features: Columns) -> Rows:
        """No rows; ``features``: an empty batch of the contract's inputs."""
        return cls(Messages([], [], np.empty(0, np.int64), np.empty(0, np.int64)), [], [],
                   np.empty(0, np.int64), features)

    @classmethod
    def from_records(cls, records: Sequence[SourceRecord], source: Messages,
                     stack: Callable[[list[Any]], Columns]) -> Rows:
        """Rows from the reference path's records (one per message of ``source``); ``stack``
        (the contract's) turns their inputs into the batch's columns."""
        if not records:
            return cls.empty(stack([]))._replace_source(source)
        features = stack([r.features for r in records])
        kept = [r.passthrough for r in records] if records[0].passthrough else None
        return cls(source, [r.event_id for r in records], [r.entity_id for r in records],
                   np.array([r.event_time_ms for r in records], np.int64), features, kept)

    def _replace_source(self, source: Messages) -> Rows:
        return Rows(source, self.event_ids, self.entity_ids, self.event_times, self.features, self.passthrough)

    @staticmethod
    def join(parts: Sequence[Rows]) -> Rows:
        """One Rows of ``parts``, in order."""
        if len(parts) == 1:
            return parts[0]
        src = [p.source for p in parts]
        kept = None if parts[0].passthrough is None else [v for p in parts for v in p.passthrough or ()]
        return Rows(Messages([m for s in src for m in s.items], [t for s in src for t in s.topics],
                             np.concatenate([s.partitions for s in src]), np.concatenate([s.offsets for s in src])),
                    Texts.join([p.event_ids for p in parts]), Texts.join([p.entity_ids for p in parts]),
                    np.concatenate([p.event_times for p in parts]), Columns.join([p.features for p in parts]),
                    kept)

    def __len__(self) -> int:
        return len(self.event_ids)

    def __getitem__(self, idx: slice) -> Rows:
        return self.take(idx)

    def take(self, idx: np.ndarray | slice) -> Rows:
        """The rows at ``idx`` (indices, a boolean mask or a slice), in that order."""
        idx = _index(idx)
        return Rows(self.source.take(idx), _pick(self.event_ids, idx), _pick(self.entity_ids, idx),
                    self.event_times[idx], self.features[idx],
                    None if self.passthrough is None else _pick(self.passthrough, idx))

    def without(self, tps: Collection[Partition]) -> Rows:
        """These rows less those of partitions ``tps`` (revoked or lost)."""
        mask = self.source.outside(tps)
        return self if mask.all() else self.take(mask)

    def record(self, i: int) -> SourceRecord:
        """Row ``i`` as a record, for the per-row reference stages."""
        m = self.source.items[i]
        return SourceRecord(self.source.topics[i], int(self.source.partitions[i]), int(self.source.offsets[i]),
                            m.key(), self.event_ids[i], self.entity_ids[i], int(self.event_times[i]),
                            m.timestamp()[1], self.features[i],
                            () if self.passthrough is None else self.passthrough[i])


@dataclass(frozen=True, slots=True)
class ModelId:
    """Which model scored: its name (a fallback's is ``<model.name>-fallback``), its version label
    and the digest of its file (onnx_file.file_digest; "": none, a fallback or a runner not from a file)."""

    name: str
    version: str
    digest: str = ""


NO_MODEL = ModelId("", "")  # a batch not yet named by the serving that scored it


@dataclass(frozen=True, slots=True)
class Scored:
    """One scored batch, the one shape every mode hands on: the results of the good rows, an
    error for each poison row, the model that scored it (the serving names it), and ``degraded``,
    the reason the fallback scored instead."""

    scores: Columns  # by prediction field; poison rows hold NaN (or 0, '')
    poison: dict[int, InferenceError] = field(default_factory=dict)
    calls: int = 0  # model calls made, the first one included
    bisections: int = 0  # batches split in two
    model: ModelId = NO_MODEL
    provider: str = ""  # its execution provider, or 'fallback'
    degraded: str | None = None

    def __len__(self) -> int:
        return len(self.scores)

    def rows(self, lo: int, hi: int) -> Scored:
        """Rows ``[lo, hi)`` of the batch, their poison rows numbered from ``lo``: one request's
        share of an online batch."""
        poison = {i - lo: e for i, e in self.poison.items() if lo <= i < hi}
        return replace(self, scores=self.scores[lo:hi], poison=poison)


@dataclass(frozen=True, slots=True)
class Stamp:
    """What every prediction of a batch says about its scoring: the model that scored it (a
    fallback's predictions name the fallback and are flagged ``degraded`` with the reason), when,
    and the run (None: live scoring). ``with_digest``: the output schema has a ``model_digest``
    field (a user's may leave it out)."""

    model: ModelId
    scored_at_ms: int
    run_id: str | None = None
    degraded: str | None = None
    with_digest: bool = True

    @classmethod
    def of(cls, scored: Scored, scored_at_ms: int, run_id: str | None = None) -> Stamp:
        """The stamp of a scored batch: the one way every mode (the stream, the lake, evaluate,
        online, the challengers) names what scored its predictions."""
        return cls(scored.model, scored_at_ms, run_id, scored.degraded)

    @property
    def model_name(self) -> str:
        return self.model.name

    @property
    def model_version(self) -> str:
        return self.model.version

    @property
    def model_digest(self) -> str | None:
        """The digest written, None where the output schema has no field for it."""
        return self.model.digest if self.with_digest else None


def prediction_fields(source: SourceRecord, outputs: Mapping[str, Any], stamp: Stamp,
                      include: Sequence[str] = ()) -> dict[str, Any]:
    """The prediction record for one scored source record: ``outputs`` are its prediction
    fields' values (``scores``, the row of streamer/schemas/prediction.avsc, or the named
    outputs); ``include`` names the pass-through fields (output.include) whose values the record
    carries. The degraded fields are left to their defaults unless the stamp says degraded, so an
    output schema from before them still takes the record; ``model_digest`` is left out when the
    stamp has None for it (an output schema without the field)."""
    fields = {
        "event_id": source.event_id, "entity_id": source.entity_id, **outputs,
        "model_name": stamp.model_name, "model_version": stamp.model_version, "model_digest": stamp.model_digest,
        "source_topic": source.topic, "source_partition": source.partition, "source_offset": source.offset,
        "event_time": source.event_time_ms, "scored_at": stamp.scored_at_ms, "run_id": stamp.run_id,
    }
    if stamp.model_digest is None:
        del fields["model_digest"]
    if stamp.degraded is not None:
        fields.update(degraded=True, degraded_reason=stamp.degraded)
    fields.update(zip((include_name(p) for p in include), source.passthrough, strict=True))
    return fields

