"""The paired bootstrap of the outcome metrics: weighted AUC, log-loss, Brier, precision and recall.

A resample is a weight per labeled row (how often the row was drawn), shared by both models, so
each delta is paired. Nothing is copied per resample: the rows are sorted by each model's score
once, and every metric of a resample is a weighted sum (AUC through cumulative sums over groups of
tied scores). A million rows by 200 resamples takes seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamer.evaluate.figures import OUTCOME_NAMES as NAMES

EPSILON = 1e-15  # log-loss clips scores into [EPSILON, 1 - EPSILON]: a wrong certainty is a large, finite loss
CHUNK = 8  # resamples whose weights are summed in one matrix product (8 x 1M doubles: 64 MB)


@dataclass(frozen=True, slots=True)
class Ranked:
    """One model's scores on the labeled rows, sorted once: what the weighted AUC needs."""

    order: np.ndarray  # row indices by ascending score
    positive: np.ndarray  # outcome (0.0/1.0) in that order
    starts: np.ndarray | None  # the first index of each group of tied scores; None: no ties

    @classmethod
    def of(cls, scores: np.ndarray, outcome: np.ndarray) -> Ranked:
        order = np.argsort(scores, kind="stable")
        ranked = scores[order]
        starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
        return cls(order, outcome[order].astype(np.float64), None if len(starts) == len(ranked) else starts)


def weighted_auc(ranked: Ranked, weights: np.ndarray) -> float:
    """The area under the ROC curve with a weight per row (a row drawn twice counts twice).

    Each positive scores one per lower-scored negative and one half per tied negative, so with
    P and N the weighted totals and, per group of tied scores, p_g and n_g its weighted positives
    and negatives: AUC = sum_g p_g * (negatives below g + n_g / 2) / (P * N). With every weight 1
    this is scikit-learn's ``roc_auc_score``, ties included. NaN when a class has no weight.
    """
    w = weights[ranked.order].astype(np.float64, copy=False)
    pos = w * ranked.positive
    neg = w - pos
    if ranked.starts is not None:
        pos, neg = np.add.reduceat(pos, ranked.starts), np.add.reduceat(neg, ranked.starts)
    total_pos, total_neg = pos.sum(), neg.sum()
    if total_pos <= 0 or total_neg <= 0:
        return float("nan")
    below = np.cumsum(neg) - neg
    return float(pos @ (below + 0.5 * neg) / (total_pos * total_neg))


def per_row(scores: np.ndarray, outcome: np.ndarray, threshold: float) -> np.ndarray:
    """The columns every other metric is a weighted sum of, one row per labeled row:
    log-loss, squared error, decided positive, true positive, positive."""
    p = np.clip(scores, EPSILON, 1 - EPSILON)
    decided = (scores >= threshold).astype(np.float64)
    return np.column_stack([
        -(outcome * np.log(p) + (1 - outcome) * np.log1p(-p)),
        (np.clip(scores, 0.0, 1.0) - outcome) ** 2,
        decided,
        decided * outcome,
        outcome,
    ])


def from_sums(sums: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Log-loss, Brier, precision and recall per resample from its weighted column sums (k x 5)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        logloss = sums[:, 0] / total
        brier = sums[:, 1] / total
        precision = np.where(sums[:, 2] > 0, sums[:, 3] / np.where(sums[:, 2] > 0, sums[:, 2], 1), 0.0)
        recall = np.where(sums[:, 4] > 0, sums[:, 3] / np.where(sums[:, 4] > 0, sums[:, 4], 1), 0.0)
    return np.column_stack([logloss, brier, precision, recall])


def paired_deltas(champion: np.ndarray, candidate: np.ndarray, outcome: np.ndarray, threshold: float,
                  *, resamples: int, seed: int) -> dict[str, np.ndarray]:
    """Each metric's candidate - champion on ``resamples`` bootstrap resamples of the labeled rows.

    A resample draws n rows with replacement (``seed`` makes it repeatable); a row's weight is how
    often it was drawn. Returns metric name -> array of ``resamples`` deltas (NaN where a resample
    holds one class only, which the interval ignores).
    """
    n = len(outcome)
    rng = np.random.default_rng(seed)
    ranked = Ranked.of(champion, outcome), Ranked.of(candidate, outcome)
    columns = np.hstack([per_row(champion, outcome, threshold), per_row(candidate, outcome, threshold)])
    out = np.empty((resamples, len(NAMES)))
    for first in range(0, resamples, CHUNK):
        count = min(CHUNK, resamples - first)
        weights = np.empty((count, n))
        for i in range(count):
            weights[i] = np.bincount(rng.integers(0, n, n), minlength=n)
            aucs = [weighted_auc(r, weights[i]) for r in ranked]
            out[first + i, 0] = aucs[1] - aucs[0]
        sums = weights @ columns  # count x 10: both models' five sums
        total = np.full(count, float(n))  # a resample draws n rows
        out[first:first + count, 1:] = from_sums(sums[:, 5:], total) - from_sums(sums[:, :5], total)
    return {name: out[:, i] for i, name in enumerate(NAMES)}


def interval(deltas: np.ndarray) -> tuple[float, float] | None:
    """The percentile 95% interval of the deltas; None when no resample gave a value."""
    kept = deltas[np.isfinite(deltas)]
    if len(kept) == 0:
        return None
    low, high = np.percentile(kept, [2.5, 97.5])
    return float(low), float(high)
