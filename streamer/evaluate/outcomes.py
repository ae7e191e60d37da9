"""The outcome metrics of both models on the labeled rows: scikit-learn's point values, the paired
bootstrap's intervals of each delta, and the ROC, PR and calibration curves."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.calibration import calibration_curve
from sklearn.metrics import (
    brier_score_loss,
    log_loss,
    precision_recall_curve,
    precision_score,
    recall_score,
    roc_auc_score,
    roc_curve,
)

from streamer.evaluate import bootstrap as paired
from streamer.evaluate.figures import OUTCOME_METRICS, SIDES, Curve
from streamer.evaluate.observations import Observations

CURVE_POINTS = 200  # a curve keeps at most this many points: enough to draw, small in the JSON
CALIBRATION_BINS = 10


@dataclass(frozen=True, slots=True)
class Found:
    """The outcome metrics computed, the reasons for the others, the curves."""

    metrics: dict[str, float]
    missing: dict[str, str]
    curves: dict[str, dict[str, Curve]]


def measure(obs: Observations, threshold: float, blocked: str | None, *, bootstrap: int, seed: int,
            min_events: int) -> Found:
    """Both models' outcome metrics on the rows whose outcome is known.

    ``blocked`` is a reason the scores cannot be measured at all (too few events, no score); the
    labeled count is reported regardless. Scores are probabilities of the positive class: log-loss
    clips them into [1e-15, 1 - 1e-15], Brier into [0, 1]; a decision is score >= ``threshold``.
    """
    assert obs.outcome is not None
    n = len(obs)
    known = np.isfinite(obs.outcome)
    labeled = int(known.sum())
    metrics = {"labeled": float(labeled)}
    if n:
        metrics["labeled_fraction"] = labeled / n
    y = obs.outcome[known]
    reason = blocked or _unmeasurable(y, labeled, min_events)
    if reason:
        rest = [name for name in OUTCOME_METRICS if name not in metrics]
        return Found(metrics, dict.fromkeys(rest, reason), {})
    scores = obs.champion[known], obs.candidate[known]
    for name in paired.NAMES:
        values = [_point(name, y, s, threshold) for s in scores]
        metrics[f"champion_{name}"], metrics[f"candidate_{name}"] = values
        metrics[f"{name}_delta"] = values[1] - values[0]
    missing: dict[str, str] = {}
    deltas = paired.paired_deltas(*scores, y, threshold, resamples=bootstrap, seed=seed) if bootstrap else {}
    for name in paired.NAMES:
        bounds = paired.interval(deltas[name]) if name in deltas else None
        if bounds is None:
            why = "no bootstrap resamples were asked for (bootstrap = 0)" if not deltas else "no resample held both classes"
            missing[f"{name}_delta_low"] = missing[f"{name}_delta_high"] = why
        else:
            metrics[f"{name}_delta_low"], metrics[f"{name}_delta_high"] = bounds
    return Found(metrics, missing, _curves(y, scores))


def _unmeasurable(y: np.ndarray, labeled: int, min_events: int) -> str | None:
    if labeled < min_events:
        return f"{labeled} labeled events, fewer than the {min_events} --min-events needs"
    classes = np.unique(y)
    if len(classes) < 2:
        return f"every labeled event has outcome {classes[0]:g}: these metrics need both outcomes"
    return None


def _point(name: str, y: np.ndarray, scores: np.ndarray, threshold: float) -> float:
    """One metric's value on all labeled rows, by scikit-learn."""
    if name == "auc":
        return float(roc_auc_score(y, scores))
    if name == "logloss":
        return float(log_loss(y, np.clip(scores, paired.EPSILON, 1 - paired.EPSILON), labels=[0.0, 1.0]))
    if name == "brier":
        return float(brier_score_loss(y, np.clip(scores, 0.0, 1.0)))
    decided = (scores >= threshold).astype(np.float64)
    score = precision_score if name == "precision" else recall_score
    return float(score(y, decided, zero_division=0))


def _curves(y: np.ndarray, scores: tuple[np.ndarray, np.ndarray]) -> dict[str, dict[str, Curve]]:
    """ROC (false against true positive rate), PR (recall against precision) and calibration (mean
    score against observed positive rate) per side."""
    out: dict[str, dict[str, Curve]] = {"roc": {}, "pr": {}, "calibration": {}}
    for side, s in zip(SIDES, scores):
        fpr, tpr, _ = roc_curve(y, s)
        precision, recall, _ = precision_recall_curve(y, s)
        observed, predicted = calibration_curve(y, np.clip(s, 0.0, 1.0), n_bins=CALIBRATION_BINS)
        out["roc"][side] = thin(fpr, tpr)
        out["pr"][side] = thin(recall, precision)
        out["calibration"][side] = thin(predicted, observed)
    return out


def thin(x: np.ndarray, y: np.ndarray, points: int = CURVE_POINTS) -> Curve:
    """At most ``points`` of a curve, evenly spaced along it, first and last kept."""
    if len(x) > points:
        keep = np.unique(np.linspace(0, len(x) - 1, points).round().astype(np.int64))
        x, y = x[keep], y[keep]
    return Curve(tuple(float(v) for v in x), tuple(float(v) for v in y))
