"""What an evaluation keeps of each compared row and each model call: the inputs of the report.

One row per event both models scored: its event time, each model's decision score (a
probability of the positive class, or the one score) and label, and its outcome where one is
known. One :class:`ModelTiming` per model: the wall and CPU time of each of its calls, on the
same batches. The report (evaluate/metrics.py) reads these and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class Observations:
    """Per-row arrays of one evaluation, all of length n, in the order the rows were read."""

    event_time_ms: np.ndarray  # int64, the event's own time (ms since the epoch, UTC)
    champion: np.ndarray  # float64 decision score (outputs.decision_scores)
    candidate: np.ndarray  # float64
    champion_label: np.ndarray  # each model's label: its label output, else score >= threshold
    candidate_label: np.ndarray
    outcome: np.ndarray | None = None  # float64 0.0/1.0, NaN where no label is known; None: no labels given

    def __len__(self) -> int:
        return len(self.champion)


@dataclass(slots=True)
class ModelTiming:
    """One model's calls on the evaluation's batches: wall seconds per call, CPU seconds in all."""

    name: str
    version: str
    rows: int = 0
    call_seconds: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0
    failed: int = 0  # rows it failed on alone, or scored with a number that is not finite

    def add(self, rows: int, seconds: float, cpu_seconds: float) -> None:
        self.rows += rows
        self.call_seconds.append(seconds)
        self.cpu_seconds += cpu_seconds


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """Which model a side is: what its predictions carry, and the file it was read from."""

    name: str
    version: str
    digest: str
    path: str


@dataclass(frozen=True, slots=True)
class Run:
    """What an evaluation was: the models, the range, the outcomes' source, what was not compared."""

    run_id: str
    champion: ModelInfo
    candidate: ModelInfo
    range: str  # e.g. "features: 3 partitions, offsets [0, 1200) ..., event times 2026-12-01 .. 2026-12-02"
    threshold: float  # a decision is score >= threshold (shadow.flip_threshold, or --threshold)
    labels: str | None  # "field label" / "file labels.csv on event_id" / None
    rejects: int  # rows neither model scored (not decoded, not valid, poison for one)
    written_to: str | None  # where the side-by-side predictions went
    started_at: str  # ISO 8601 UTC
    seconds: float
    stopped: str | None = None  # why the run ended before its range did (the candidate failed, a signal)
