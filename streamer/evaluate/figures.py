"""What an evaluation's figures are: the metric names (the gate's and the JSON's vocabulary) and
the records of a :class:`Summary` (confusion, agreement over time, curves, histograms).

Metric names (delta = candidate - champion):

- always: ``events``, ``agreement``, ``mean_abs_delta``, ``p50_abs_delta``, ``p99_abs_delta``,
  ``max_abs_delta``, ``psi``;
- with outcomes: ``labeled``, ``labeled_fraction``, and for each of auc, logloss, brier, precision
  and recall: ``champion_<m>``, ``candidate_<m>``, ``<m>_delta``, ``<m>_delta_low``,
  ``<m>_delta_high`` (a paired bootstrap 95% interval);
- timing, for each side: ``<side>_events_per_s``, ``<side>_p50_batch_ms``, ``<side>_p99_batch_ms``,
  ``<side>_cpu_us_per_event`` (the process's CPU time during its calls), ``<side>_failed`` (rows it
  failed on alone or scored with a number that is not finite: left out of the comparison); and
  ``speedup`` (candidate events/s over the champion's).

Nothing here needs scikit-learn: the gate reads this vocabulary before anything is scored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OUTCOME_NAMES = ("auc", "logloss", "brier", "precision", "recall")
SIDES = ("champion", "candidate")
SCORE_METRICS = ("agreement", "mean_abs_delta", "p50_abs_delta", "p99_abs_delta", "max_abs_delta", "psi")
OUTCOME_METRICS = ("labeled", "labeled_fraction") + tuple(
    name for m in OUTCOME_NAMES
    for name in (f"champion_{m}", f"candidate_{m}", f"{m}_delta", f"{m}_delta_low", f"{m}_delta_high"))
TIMING_METRICS = tuple(f"{side}_{m}" for side in SIDES
                       for m in ("events_per_s", "p50_batch_ms", "p99_batch_ms", "cpu_us_per_event", "failed")) \
    + ("speedup",)
METRICS = ("events",) + SCORE_METRICS + OUTCOME_METRICS + TIMING_METRICS


@dataclass(frozen=True, slots=True)
class Confusion:
    """Counts of each (champion label, candidate label) pair: ``counts[i][j]`` has the champion
    saying ``labels[i]`` and the candidate ``labels[j]``."""

    labels: tuple[str, ...]
    counts: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class TimeBin:
    """One hour or day of event time (UTC, aligned to the epoch)."""

    start_ms: int
    events: int
    agreement: float
    mean_abs_delta: float  # NaN where a model has no score


@dataclass(frozen=True, slots=True)
class Curve:
    """A curve's points, down-sampled to at most 200 (evaluate/outcomes.py), its ends kept."""

    x: tuple[float, ...]
    y: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Histogram:
    """Counts over shared bin edges, one series per name (``delta``; ``champion`` and ``candidate``)."""

    edges: tuple[float, ...]
    counts: dict[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Summary:
    """What ``metrics.summarize`` found: the metrics it could compute and why the others are missing."""

    metrics: dict[str, float]  # in :data:`METRICS` order
    missing: dict[str, str]  # metric name -> why it cannot be computed
    confusion: Confusion
    over_time: tuple[TimeBin, ...]
    bin: str  # "hour" or "day": the width of the over-time bins
    curves: dict[str, dict[str, Curve]] = field(default_factory=dict)  # roc/pr/calibration -> side -> curve
    histograms: dict[str, Histogram] = field(default_factory=dict)  # "delta", "scores"
