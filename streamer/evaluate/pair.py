"""Champion and candidate on the same batches: both predictions side by side, timed, observed.

Each batch is scored by both models, on the same feature columns (the candidate has the
champion's input signature, checked at start), each model first on every other batch. A row either model fails on
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

from streamer.errors import CandidateFailedError, ModelBrokenError
from streamer.evaluate.labels import Outcomes
from streamer.evaluate.observations import ModelTiming, Observations
from streamer.lake.columns import PredictionColumns, prediction_arrow_schema
from streamer.model.outputs import decision_scores
from streamer.model.signature import Columns
from streamer.pipeline.records import Rows, Scored, Stamp
from streamer.pipeline.serving import Serving
from streamer.pipeline.stages import Reject, without_poison

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


class PairScorer:
    """Scores each batch with both models into one side-by-side table; keeps what the report needs."""

    def __init__(self, champion: Serving, candidate: Serving, columns: PredictionColumns,
                 pair: PairColumns, run_id: str, threshold: float, outcomes: Outcomes, keep_ids: str | None = None,
                 clock: Callable[[], float] = time.perf_counter, cpu: Callable[[], float] = time.process_time) -> None:
        self.sides = (champion, candidate)
        self.columns, self.pair, self.run_id, self.threshold = columns, pair, run_id, threshold
        self.outcomes = outcomes
        self.timings = (ModelTiming("champion", champion.model.version), ModelTiming("candidate", candidate.model.version))
        self._clock, self._cpu = clock, cpu
        self._parts: list[tuple[np.ndarray, ...]] = []  # per batch: times, scores and labels of both
        self._outcomes: list[np.ndarray] = []  # per batch, with --labels FIELD
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
        for timing, out in zip(self.timings, outs, strict=True):
            timing.failed += len(out.poison)
        poison = {**outs[1].poison, **outs[0].poison}  # a row either model fails on alone: a reject of both
        kept, rows, champion, rejects = without_poison(rows, outs[0].scores, poison)
        scores = [champion, outs[1].scores[kept] if len(kept) < len(outs[1].scores) else outs[1].scores]
        now = int(time.time() * 1000)
        tables = [self.columns.table(rows, s, Stamp.of(out, now, self.run_id)) for s, out in zip(scores, outs, strict=True)]
        self._observe(rows, scores)
        return self.pair.table(tables), rejects

    def _timed(self, side: int, rows: Rows) -> Scored:
        wall, cpu = self._clock(), self._cpu()
        try:
            out = self.sides[side].score(rows)
        except ModelBrokenError as exc:  # the champion's: the run fails (exit 3); the candidate's: the gate does
            if side == 0:
                raise
            raise CandidateFailedError(f"the candidate cannot score the range: {exc}") from exc
        self.timings[side].add(len(rows), self._clock() - wall, self._cpu() - cpu)
        return out

    def _observe(self, rows: Rows, scores: list[Columns]) -> None:
        """Keep each row's scores, labels, time and outcome. A row with a score that is not a
        finite number (NaN, infinity) is counted as that model's failure and left out of the
        comparison; a model with no float output at all is compared on its labels only."""
        decisions = [decision_scores(s) for s in scores]
        labels = [self._label(s, d) for s, d in zip(scores, decisions, strict=True)]
        outcome = self.outcomes.of(rows)
        times = rows.event_times.astype(np.int64)
        ids = None
        if self.keep_ids is not None:
            ids = list(rows.event_ids if self.keep_ids == "event_id" else rows.entity_ids)
        if all(any(c.dtype.kind == "f" for c in s.arrays.values()) for s in scores):
            finite = [np.isfinite(d) for d in decisions]
            for timing, ok in zip(self.timings, finite, strict=True):
                timing.failed += int(len(ok) - np.count_nonzero(ok))
            both = finite[0] & finite[1]
            if not both.all():
                decisions, labels = [d[both] for d in decisions], [lab[both] for lab in labels]
                times, outcome = times[both], None if outcome is None else outcome[both]
                ids = None if ids is None else [i for i, ok in zip(ids, both.tolist(), strict=True) if ok]
        self._parts.append((times, decisions[0], decisions[1], labels[0], labels[1]))
        if outcome is not None:
            self._outcomes.append(outcome)
        if ids is not None:
            self.ids.extend(ids)

    def _label(self, scores: Columns, decision: np.ndarray) -> np.ndarray:
        """A model's label: its first label output (one value per row, not a float), else its
        decision score against the threshold (1 or 0)."""
        for col in scores.arrays.values():
            if col.ndim == 1 and col.dtype.kind != "f":
                return col
        return (decision >= self.threshold).astype(np.int8)

    def observations(self) -> Observations:
        """Every compared row, with the event field's outcomes when ``--labels FIELD`` gave them."""
        empty = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int8), np.zeros(0, np.int8))
        times, champion, candidate, mine, theirs = (np.concatenate(c) for c in zip(*(self._parts or [empty]),
                                                                                    strict=True))
        outcomes = None
        if self.outcomes.given:
            outcomes = np.concatenate(self._outcomes) if self._outcomes else np.zeros(0)
        return Observations(times, champion, candidate, mine, theirs, outcomes)
