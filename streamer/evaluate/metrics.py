"""The figures of an evaluation: the metrics (the gate's and the JSON's names), their reasons when
missing, and the tables and curves the report draws.

The names are evaluate/figures.py's. scikit-learn is imported by evaluate/outcomes.py, only when
outcomes are given.
"""

from __future__ import annotations

import numpy as np

from streamer.evaluate.figures import (
    METRICS,
    OUTCOME_METRICS,
    SCORE_METRICS,
    SIDES,
    Confusion,
    Curve,
    Histogram,
    Summary,
    TimeBin,
)
from streamer.evaluate.observations import ModelTiming, Observations
from streamer.observe.drift import psi_of_shares

__all__ = ["METRICS", "Confusion", "Curve", "Histogram", "Summary", "TimeBin", "psi", "summarize"]

NO_OUTCOMES = "no outcomes: give --labels FIELD or --labels-from PATH"
HOUR_MS, DAY_MS = 3_600_000, 86_400_000
HOURLY_UP_TO_MS = 72 * HOUR_MS  # a longer span is binned by day: a week by hour is too many points to read
HISTOGRAM_BINS = 50


def summarize(obs: Observations, timings: tuple[ModelTiming, ModelTiming], threshold: float, *,
              bootstrap: int = 200, seed: int = 0, min_events: int = 100) -> Summary:
    """Every figure of an evaluation from its observations and each model's timing.

    A metric that cannot be computed is absent from ``metrics`` and named in ``missing`` with the
    reason: fewer than ``min_events`` rows compared (every score and outcome metric), no outcomes
    given, fewer than ``min_events`` labeled rows or one class only (the outcome metrics), a model
    without a decision score (the score metrics).
    """
    n = len(obs)
    metrics: dict[str, float] = {"events": float(n)}
    missing: dict[str, str] = {}
    too_few = f"{n} events compared, fewer than the {min_events} --min-events needs" if n < min_events else None
    scoreless = _scoreless(obs)
    delta = obs.candidate - obs.champion
    agree = _equal(obs.champion_label, obs.candidate_label)
    if too_few:
        missing.update(dict.fromkeys(SCORE_METRICS, too_few))
    else:
        metrics["agreement"] = float(agree.mean())
        if scoreless:
            missing.update(dict.fromkeys(SCORE_METRICS[1:], scoreless))
        else:
            absolute = np.abs(delta)
            metrics["mean_abs_delta"] = float(absolute.mean())
            metrics["p50_abs_delta"], metrics["p99_abs_delta"] = (float(v) for v in np.percentile(absolute, [50, 99]))
            metrics["max_abs_delta"] = float(absolute.max())
            metrics["psi"] = psi(obs.champion, obs.candidate)
    curves: dict[str, dict[str, Curve]] = {}
    if obs.outcome is None:
        missing.update(dict.fromkeys(OUTCOME_METRICS, NO_OUTCOMES))
    else:
        from streamer.evaluate import outcomes  # scikit-learn: only an evaluation with outcomes needs it

        found = outcomes.measure(obs, threshold, too_few or scoreless, bootstrap=bootstrap, seed=seed,
                                 min_events=min_events)
        metrics.update(found.metrics)
        missing.update(found.missing)
        curves = found.curves
    timing, why = _timing(timings)
    metrics.update(timing)
    missing.update(why)
    bin_ms = bin_width_ms(obs.event_time_ms)
    return Summary(
        metrics={name: metrics[name] for name in METRICS if name in metrics},
        missing={name: missing[name] for name in METRICS if name in missing},
        confusion=confusion(obs.champion_label, obs.candidate_label),
        over_time=over_time(obs.event_time_ms, agree, np.abs(delta), bin_ms),
        bin="hour" if bin_ms == HOUR_MS else "day",
        curves=curves,
        histograms={} if scoreless or n == 0 else _histograms(obs.champion, obs.candidate),
    )


def _scoreless(obs: Observations) -> str | None:
    """Why the score metrics cannot be computed, when a model has no score on some rows."""
    for side, scores in zip(SIDES, (obs.champion, obs.candidate)):
        absent = int(np.count_nonzero(~np.isfinite(scores)))
        if absent:
            return (f"the {side} has no decision score on {absent} of {len(scores)} events (a model "
                    "without a float output in outputs.decision_scores)")
    return None


def _equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise label equality, whatever the labels' type (numbers, strings, objects)."""
    return np.asarray(a == b, dtype=bool).reshape(len(a))


def psi(expected: np.ndarray, actual: np.ndarray) -> float:
    """The population stability index of ``actual`` (candidate) against ``expected`` (champion).

    The bins are cut at the champion's deciles (ten bins, fewer where deciles tie), so each holds
    about a tenth of the champion's scores. With e_i and a_i each side's fraction of scores in bin
    i, both floored at 1e-4 so an empty bin stays finite (the stream's drift gauges' PSI,
    observe/drift.py's :func:`~streamer.observe.drift.psi_of_shares`):

        PSI = sum_i (a_i - e_i) * ln(a_i / e_i)

    0 for equal distributions; above 0.2 is commonly read as a shift.
    """
    edges = np.unique(np.quantile(expected, np.linspace(0.1, 0.9, 9)))
    e = np.bincount(np.searchsorted(edges, expected, side="right"), minlength=len(edges) + 1) / len(expected)
    a = np.bincount(np.searchsorted(edges, actual, side="right"), minlength=len(edges) + 1) / len(actual)
    return float(psi_of_shares(e, a))


def bin_width_ms(event_time_ms: np.ndarray) -> int:
    """One hour when the events span at most 72 hours, else one day."""
    if len(event_time_ms) == 0:
        return HOUR_MS
    return HOUR_MS if int(event_time_ms.max()) - int(event_time_ms.min()) <= HOURLY_UP_TO_MS else DAY_MS


def over_time(event_time_ms: np.ndarray, agree: np.ndarray, abs_delta: np.ndarray, bin_ms: int) -> tuple[TimeBin, ...]:
    """Agreement and mean |delta| per bin of event time; bins without events are left out."""
    if len(event_time_ms) == 0:
        return ()
    starts, index = np.unique(np.asarray(event_time_ms, dtype=np.int64) // bin_ms, return_inverse=True)
    events = np.bincount(index)
    agreed = np.bincount(index, weights=agree.astype(np.float64))
    delta = np.bincount(index, weights=abs_delta)  # NaN scores make their bin's mean NaN
    return tuple(TimeBin(int(s) * bin_ms, int(c), float(g / c), float(d / c))
                 for s, c, g, d in zip(starts, events, agreed, delta))


def confusion(champion: np.ndarray, candidate: np.ndarray) -> Confusion:
    """The champion label x candidate label counts, labels as text in sorted order."""
    (a_labels, a), (b_labels, b) = _codes(champion), _codes(candidate)
    labels = tuple(sorted(set(a_labels) | set(b_labels)))
    at = {label: i for i, label in enumerate(labels)}
    rows = np.asarray([at[v] for v in a_labels], dtype=np.int64)[a]
    columns = np.asarray([at[v] for v in b_labels], dtype=np.int64)[b]
    counts = np.zeros((len(labels), len(labels)), dtype=np.int64)
    np.add.at(counts, (rows, columns), 1)
    return Confusion(labels, tuple(tuple(int(c) for c in row) for row in counts))


def _codes(labels: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The distinct labels as text and each row's index into them."""
    try:
        distinct, index = np.unique(labels, return_inverse=True)
    except TypeError:  # labels of mixed types do not sort: compare their text
        distinct, index = np.unique(np.asarray([str(v) for v in labels]), return_inverse=True)
    return [str(v) for v in distinct], np.asarray(index, dtype=np.int64).reshape(len(labels))


def _histograms(champion: np.ndarray, candidate: np.ndarray) -> dict[str, Histogram]:
    """The signed delta's histogram and both score distributions over shared edges."""
    delta = candidate - champion
    counts, edges = np.histogram(delta, bins=_edges(float(delta.min()), float(delta.max())))
    shared = _edges(float(min(champion.min(), candidate.min())), float(max(champion.max(), candidate.max())))
    return {
        "delta": Histogram(tuple(float(e) for e in edges), {"delta": tuple(int(c) for c in counts)}),
        "scores": Histogram(tuple(float(e) for e in shared), {
            side: tuple(int(c) for c in np.histogram(scores, bins=shared)[0])
            for side, scores in zip(SIDES, (champion, candidate))}),
    }


def _edges(low: float, high: float) -> np.ndarray:
    """:data:`HISTOGRAM_BINS` equal bins from low to high, widened around a range too narrow to
    split (a constant delta of 0.01 has max - min at rounding's scale)."""
    floor = 1e-6 * max(1.0, abs(low), abs(high))
    if high - low < floor:
        middle = (low + high) / 2
        low, high = middle - floor / 2, middle + floor / 2
    return np.linspace(low, high, HISTOGRAM_BINS + 1)


def _timing(timings: tuple[ModelTiming, ModelTiming]) -> tuple[dict[str, float], dict[str, str]]:
    """Each side's throughput, batch latency and CPU per event on the same batches."""
    found: dict[str, float] = {}
    missing: dict[str, str] = {}
    for side, t in zip(SIDES, timings):
        found[f"{side}_failed"] = float(t.failed)
        seconds = float(sum(t.call_seconds))
        if not t.call_seconds or seconds <= 0 or t.rows <= 0:
            for m in ("events_per_s", "p50_batch_ms", "p99_batch_ms", "cpu_us_per_event"):  # not failed: counted
                missing[f"{side}_{m}"] = f"the {side} made no timed call"
            continue
        found[f"{side}_events_per_s"] = t.rows / seconds
        p50, p99 = np.percentile(np.asarray(t.call_seconds) * 1000.0, [50, 99])
        found[f"{side}_p50_batch_ms"], found[f"{side}_p99_batch_ms"] = float(p50), float(p99)
        found[f"{side}_cpu_us_per_event"] = t.cpu_seconds / t.rows * 1e6
    if "champion_events_per_s" in found and "candidate_events_per_s" in found:
        found["speedup"] = found["candidate_events_per_s"] / found["champion_events_per_s"]
    else:
        missing["speedup"] = missing.get("champion_events_per_s") or missing["candidate_events_per_s"]
    return found, missing
