"""Champion and candidate on the same batches: both predictions side by side, timed, observed.

Each batch is scored by the champion, then by the candidate, on the same feature columns (the
candidate has the champion's input signature, checked at start). A row either model fails on
alone is a reject for both, so every written row holds two predictions. The side-by-side row is
the prediction schema with each model's fields twice, ``champion_<field>`` and
``candidate_<field>`` (its outputs, ``model_name``, ``model_version``, ``model_digest``,
``scored_at``), and the shared ones once: the ids, the source coordinates, ``event_time``,
``run_id`` and the ``output.include`` fields.

Worked example: a model mapped to ``label`` and ``score`` gives the row ``event_id, entity_id,
champion_label, candidate_label, champion_score, candidate_score, champion_model_name, ...``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from streamer.errors import ConfigError
from streamer.evaluate.observations import ModelTiming, Observations
from streamer.formats.codec import Codec
from streamer.lake.columns import PredictionColumns, prediction_arrow_schema
from streamer.model.contract import field_value
from streamer.model.outputs import decision_scores
from streamer.model.signature import Columns
from streamer.pipeline.isolate import Scored
from streamer.pipeline.records import Rows, Stamp
from streamer.pipeline.serving import Serving
from streamer.pipeline.stages import Reject, poison_reject

SIDES = ("champion", "candidate")
_STAMPED = ("model_name", "model_version", "model_digest", "scored_at")
_DROPPED = ("degraded", "degraded_reason")  # an evaluation has no fallback: never degraded


class PairColumns:
    """The side-by-side record of a prediction schema whose model fields are ``outputs``: its Avro
    schema (a topic's records), its Arrow schema (a table's rows), and the table of two models'
    prediction tables."""

    def __init__(self, prediction: Mapping[str, Any], outputs: Sequence[str]) -> None:
        own = set(outputs) | set(_STAMPED)
        fields: list[dict[str, Any]] = []
        self._from: list[tuple[int, str]] = []  # per field: which model's table, which column
        for f in prediction["fields"]:
            if f["name"] in _DROPPED:
                continue
            if f["name"] in own:
                fields += [dict(_plain(f), name=f"{side}_{f['name']}") for side in SIDES]
                self._from += [(0, f["name"]), (1, f["name"])]
            else:
                fields.append(_plain(f))
                self._from.append((0, f["name"]))
        self.avro: dict[str, Any] = {
            "type": "record", "name": "Evaluation", "namespace": "streamer",
            "doc": "One event scored by a champion and a candidate model, their predictions side by side.",
            "fields": fields}
        self.schema: pa.Schema = prediction_arrow_schema(self.avro)

    def table(self, tables: Sequence[pa.Table]) -> pa.Table:
        """The side-by-side table of the champion's and the candidate's tables of the same rows."""
        return pa.Table.from_arrays([tables[side].column(name) for side, name in self._from], schema=self.schema)


def _plain(field: Mapping[str, Any]) -> dict[str, Any]:
    """A field as written in a schema file: fastavro's parsed extras (``__...``) left out."""
    return {k: v for k, v in field.items() if not k.startswith("__")}


class Outcomes:
    """Where a row's outcome is read while it is scored: a field of the event (``--labels FIELD``,
    a dotted path), read from the row's original message with the input codec; or nowhere
    (joined from a file afterwards, or none given)."""

    def __init__(self, codec: Codec | None = None, field: str | None = None) -> None:
        self.codec, self.field = codec, field

    @property
    def given(self) -> bool:
        return self.field is not None

    def of(self, rows: Rows) -> np.ndarray | None:
        if self.codec is None or self.field is None:
            return None
        out = np.empty(len(rows), np.float64)
        for i, message in enumerate(rows.source.items):
            value = field_value(self.codec.decode(message.value()), self.field)
            try:
                out[i] = outcome(value)
            except ValueError as exc:
                raise ConfigError("--labels", f"the event at {message.topic()}[{message.partition()}] offset "
                                              f"{message.offset()}: {exc}") from exc
        return out


def outcome(value: Any) -> float:
    """An outcome as 1.0 (positive), 0.0, or NaN (unknown): 0/1, true/false, as numbers or text."""
    if value is None:
        return np.nan
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and value in (0, 1):
        return float(value)
    text = str(value).strip().lower()
    if text in ("1", "true", "1.0"):
        return 1.0
    if text in ("0", "false", "0.0"):
        return 0.0
    if text == "" or (isinstance(value, float) and np.isnan(value)):
        return np.nan
    raise ValueError(f"an outcome is 0/1 or true/false, got {value!r}")


class PairScorer:
    """Scores each batch with both models into one side-by-side table; keeps what the report needs."""

    def __init__(self, champion: Serving, candidate: Serving, columns: PredictionColumns,
                 pair: PairColumns, run_id: str, threshold: float, outcomes: Outcomes, keep_ids: str | None = None,
                 clock: Callable[[], float] = time.perf_counter, cpu: Callable[[], float] = time.process_time) -> None:
        self.sides = (champion, candidate)
        self.columns, self.pair, self.run_id, self.threshold = columns, pair, run_id, threshold
        self.outcomes = outcomes
        self.timings = (ModelTiming("champion", champion.version), ModelTiming("candidate", candidate.version))
        self._clock, self._cpu = clock, cpu
        self._parts: list[tuple[np.ndarray, ...]] = []
        self._labels: list[tuple[np.ndarray, np.ndarray]] = []
        self.keep_ids = keep_ids  # event_id | entity_id: kept to join outcomes by afterwards; None: none kept
        self.ids: list[str] = []

    def warm_up(self) -> None:
        for serving in self.sides:
            serving.warm_up()

    def score(self, rows: Rows) -> tuple[pa.Table, list[Reject]]:
        # Each model goes first on every other batch: the first call pays for the batch's first
        # touch of its columns (memory, caches) and would look the slower of the two.
        order = (0, 1) if len(self.timings[0].call_seconds) % 2 == 0 else (1, 0)
        done = {side: self._timed(side, rows) for side in order}
        outs = [done[0], done[1]]
        poison = {**outs[1].poison, **outs[0].poison}
        keep = np.ones(len(rows), bool)
        keep[list(poison)] = False
        kept = np.flatnonzero(keep)
        rejects = [poison_reject(poison[i], rows.source.items[i]) for i in sorted(poison)]
        rows = rows.take(kept) if len(kept) < len(keep) else rows
        scores = [out.scores[kept] if len(kept) < len(keep) else out.scores for out in outs]
        now = int(time.time() * 1000)
        tables = [self.columns.table(rows, s, Stamp(out.model, out.version, now, self.run_id, None, out.digest))
                  for s, out in zip(scores, outs, strict=True)]
        self._observe(rows, scores)
        return self.pair.table(tables), rejects

    def _timed(self, side: int, rows: Rows) -> Scored:
        wall, cpu = self._clock(), self._cpu()
        out = self.sides[side].score(rows)  # ModelBrokenError: the evaluation fails
        self.timings[side].add(len(rows), self._clock() - wall, self._cpu() - cpu)
        return out

    def _observe(self, rows: Rows, scores: list[Columns]) -> None:
        decisions = [decision_scores(s) for s in scores]
        labels = [self._label(s, d) for s, d in zip(scores, decisions, strict=True)]
        out = self.outcomes.of(rows)
        self._parts.append((rows.event_times.astype(np.int64), *decisions,
                            out if out is not None else np.full(len(rows), np.nan)))
        self._labels.append((labels[0], labels[1]))
        if self.keep_ids is not None:
            self.ids.extend(rows.event_ids if self.keep_ids == "event_id" else rows.entity_ids)

    def _label(self, scores: Columns, decision: np.ndarray) -> np.ndarray:
        """A model's label: its first label output (one value per row, not a float), else its
        decision score against the threshold (1 or 0)."""
        for col in scores.arrays.values():
            if col.ndim == 1 and col.dtype.kind != "f":
                return col
        return (decision >= self.threshold).astype(np.int8)

    def observations(self, outcomes: np.ndarray | None = None) -> Observations:
        """Every compared row; ``outcomes`` (joined afterwards, in row order) replace the field's."""
        parts = self._parts or [(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0))]
        times, champion, candidate, field = (np.concatenate(c) for c in zip(*parts, strict=True))
        labels = self._labels or [(np.zeros(0, np.int8), np.zeros(0, np.int8))]
        mine, theirs = (np.concatenate(c) for c in zip(*labels, strict=True))
        if outcomes is None and self.outcomes.given:
            outcomes = field
        return Observations(times, champion, candidate, mine, theirs, outcomes)
