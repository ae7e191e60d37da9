"""The figures of an evaluation against scikit-learn on synthetic data with known answers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, log_loss, precision_score, recall_score, roc_auc_score

from streamer.evaluate.bootstrap import Ranked, weighted_auc
from streamer.evaluate.figures import METRICS, OUTCOME_METRICS, SCORE_METRICS
from streamer.evaluate.metrics import DAY_MS, HOUR_MS, NO_OUTCOMES, psi, summarize
from streamer.evaluate.observations import ModelTiming
from tests.evaluate.conftest import THRESHOLD, informative, observations, timings

N = 3000


@pytest.mark.parametrize("decimals", [1, 2, 12])
def test_the_weighted_auc_with_every_weight_one_is_scikit_learns(decimals: int) -> None:
    """Rounded scores make large groups of ties: the half-credit for a tied pair must match."""
    y, scores = informative(2000, seed=3)
    scores = scores.round(decimals)
    assert weighted_auc(Ranked.of(scores, y), np.ones(len(y))) == pytest.approx(roc_auc_score(y, scores), abs=1e-12)


def test_a_weight_counts_a_row_that_many_times() -> None:
    y, scores = informative(500, seed=4)
    weights = np.random.default_rng(5).integers(0, 4, len(y))
    repeated = np.repeat(np.arange(len(y)), weights)
    assert weighted_auc(Ranked.of(scores, y), weights) == pytest.approx(
        roc_auc_score(y[repeated], scores[repeated]), abs=1e-12)


def test_the_point_values_are_scikit_learns_and_a_perfect_candidate_wins() -> None:
    y, champion = informative(N)
    candidate = np.where(y == 1, 0.9, 0.1)
    s = summarize(observations(champion, candidate, y), timings(N), THRESHOLD)
    m = s.metrics
    assert m["champion_auc"] == pytest.approx(roc_auc_score(y, champion))
    assert m["champion_logloss"] == pytest.approx(log_loss(y, champion.clip(1e-15, 1 - 1e-15)))
    assert m["champion_brier"] == pytest.approx(brier_score_loss(y, champion))
    assert m["champion_precision"] == pytest.approx(precision_score(y, champion >= THRESHOLD, zero_division=0))
    assert m["champion_recall"] == pytest.approx(recall_score(y, champion >= THRESHOLD, zero_division=0))
    assert m["candidate_auc"] == 1.0 and m["candidate_precision"] == 1.0 and m["candidate_recall"] == 1.0
    assert m["auc_delta"] == pytest.approx(1.0 - m["champion_auc"])
    assert 0 < m["auc_delta_low"] <= m["auc_delta"] <= m["auc_delta_high"]
    assert m["brier_delta_high"] < 0  # the perfect candidate is surely better calibrated
    assert s.missing == {}
    assert list(m) == [name for name in METRICS if name in m]  # the vocabulary's order, for the JSON
    assert set(s.curves) == {"roc", "pr", "calibration"}
    assert all(len(c.x) <= 200 and len(c.x) == len(c.y) for side in s.curves.values() for c in side.values())


def test_a_shuffled_candidate_scores_chance_and_its_interval_excludes_zero() -> None:
    y, champion = informative(N)
    candidate = np.random.default_rng(9).permutation(champion)
    m = summarize(observations(champion, candidate, y), timings(N), THRESHOLD).metrics
    assert m["candidate_auc"] == pytest.approx(0.5, abs=0.04)
    assert m["auc_delta_low"] < m["auc_delta"] < m["auc_delta_high"] < 0
    assert m["psi"] < 0.01  # the same scores, in another order: the distributions agree
    assert m["agreement"] < 0.9


def test_identical_models_differ_by_nothing_not_even_in_the_interval() -> None:
    y, scores = informative(N)
    m = summarize(observations(scores, scores.copy(), y), timings(N), THRESHOLD).metrics
    assert m["agreement"] == 1.0
    assert m["mean_abs_delta"] == m["p99_abs_delta"] == m["max_abs_delta"] == 0.0
    assert m["psi"] == pytest.approx(0.0, abs=1e-12)
    for name in ("auc", "logloss", "brier", "precision", "recall"):
        assert (m[f"{name}_delta"], m[f"{name}_delta_low"], m[f"{name}_delta_high"]) == (0.0, 0.0, 0.0), name


def test_the_bootstrap_repeats_with_its_seed_and_varies_without() -> None:
    y, champion = informative(1000)
    candidate = np.random.default_rng(2).permutation(champion)
    obs = observations(champion, candidate, y)
    a, b, c = (summarize(obs, timings(1000), THRESHOLD, bootstrap=50, seed=s).metrics for s in (1, 1, 2))
    assert a["auc_delta_low"] == b["auc_delta_low"] != c["auc_delta_low"]


def test_metrics_are_on_the_labeled_rows_only() -> None:
    y, champion = informative(N)
    candidate = np.random.default_rng(1).permutation(champion)
    outcome = y.copy()
    outcome[np.random.default_rng(2).permutation(N)[: int(N * 0.4)]] = np.nan
    m = summarize(observations(champion, candidate, outcome), timings(N), THRESHOLD).metrics
    known = ~np.isnan(outcome)
    assert (m["labeled"], m["labeled_fraction"]) == (N * 0.6, 0.6)
    assert m["champion_auc"] == pytest.approx(roc_auc_score(y[known], champion[known]))
    assert m["events"] == N and m["agreement"] == np.mean((champion >= 0.5) == (candidate >= 0.5))


def test_psi_is_near_zero_for_one_distribution_and_large_for_a_shift() -> None:
    rng = np.random.default_rng(0)
    assert psi(rng.normal(0.5, 0.1, 20_000), rng.normal(0.5, 0.1, 20_000)) < 0.01
    assert psi(rng.normal(0.5, 0.1, 20_000), rng.normal(0.6, 0.1, 20_000)) > 0.2


def test_the_delta_statistics_are_of_the_absolute_difference() -> None:
    champion = np.linspace(0, 1, 1000)
    candidate = champion + np.where(np.arange(1000) % 2 == 0, 0.01, -0.03)
    m = summarize(observations(champion, candidate, None), timings(1000), THRESHOLD).metrics
    assert m["mean_abs_delta"] == pytest.approx(0.02)
    assert m["p50_abs_delta"] == pytest.approx(0.02)
    assert (m["p99_abs_delta"], m["max_abs_delta"]) == (pytest.approx(0.03), pytest.approx(0.03))


@pytest.mark.parametrize(("span_h", "bin_ms", "name"), [(72, HOUR_MS, "hour"), (73, DAY_MS, "day")])
def test_agreement_over_time_is_hourly_up_to_three_days_then_daily(span_h: int, bin_ms: int, name: str) -> None:
    y, scores = informative(2000)
    obs = observations(scores, np.where(np.arange(2000) < 1000, scores, 1 - scores), None, span_ms=span_h * HOUR_MS)
    s = summarize(obs, timings(2000), THRESHOLD)
    assert s.bin == name
    assert all(b.start_ms % bin_ms == 0 for b in s.over_time)
    assert [b.start_ms for b in s.over_time] == sorted({int(t) // bin_ms * bin_ms for t in obs.event_time_ms})
    assert sum(b.events for b in s.over_time) == 2000
    assert s.over_time[0].agreement == 1.0 and s.over_time[-1].agreement < 0.5  # the drift shows where it starts


def test_too_few_events_make_every_score_and_outcome_metric_missing() -> None:
    y, scores = informative(12)
    s = summarize(observations(scores, scores, y), timings(12), THRESHOLD)
    why = "12 events compared, fewer than the 100 --min-events needs"
    assert s.metrics["events"] == 12
    assert {k: s.missing[k] for k in SCORE_METRICS} == dict.fromkeys(SCORE_METRICS, why)
    assert s.missing["auc_delta"] == why and s.missing["champion_recall"] == why
    assert s.metrics["labeled"] == 12  # a count is always known
    assert "candidate_events_per_s" in s.metrics


def test_without_labels_every_outcome_metric_says_how_to_give_them() -> None:
    _, scores = informative(500)
    s = summarize(observations(scores, scores, None), timings(500), THRESHOLD)
    assert NO_OUTCOMES == "no outcomes: give --labels FIELD or --labels-from PATH"
    assert {k: s.missing[k] for k in OUTCOME_METRICS} == dict.fromkeys(OUTCOME_METRICS, NO_OUTCOMES)
    assert set(s.metrics).isdisjoint(OUTCOME_METRICS) and s.curves == {}
    assert set(s.missing) == set(OUTCOME_METRICS)


def test_too_few_labeled_rows_or_one_class_only_is_the_outcome_metrics_reason() -> None:
    y, scores = informative(500)
    few = np.full(500, np.nan)
    few[:40] = y[:40]
    s = summarize(observations(scores, scores, few), timings(500), THRESHOLD)
    assert s.missing["auc_delta"] == "40 labeled events, fewer than the 100 --min-events needs"
    assert s.metrics["labeled_fraction"] == 0.08 and "agreement" in s.metrics
    s = summarize(observations(scores, scores, np.zeros(500)), timings(500), THRESHOLD)
    assert s.missing["champion_auc"] == "every labeled event has outcome 0: these metrics need both outcomes"


def test_a_model_without_a_score_makes_the_score_metrics_missing() -> None:
    y, scores = informative(500)
    candidate = scores.copy()
    candidate[:5] = np.nan
    obs = observations(scores, candidate, y)
    s = summarize(obs, timings(500), THRESHOLD)
    assert s.missing["p99_abs_delta"] == ("the candidate has no decision score on 5 of 500 events (a model without "
                                          "a float output in outputs.decision_scores)")
    assert s.missing["psi"] == s.missing["auc_delta"] == s.missing["p99_abs_delta"]
    assert "agreement" in s.metrics  # the labels still compare


def test_the_confusion_counts_each_pair_of_labels_as_text() -> None:
    champion, candidate = np.array([0.1, 0.9, 0.9, 0.2]), np.array([0.1, 0.2, 0.9, 0.8])
    obs = observations(champion, candidate, None)
    obs = replace(obs, champion_label=np.array(["ok", "fraud", "fraud", "ok"]),
                  candidate_label=np.array(["ok", "ok", "fraud", "fraud"]))
    c = summarize(obs, timings(4), THRESHOLD, min_events=1).confusion
    assert c.labels == ("fraud", "ok")
    assert c.counts == ((1, 1), (1, 1))


def test_timing_is_rows_over_call_seconds_and_cpu_per_row() -> None:
    champion, candidate = ModelTiming("m", "1"), ModelTiming("m", "2")
    for seconds in (0.01, 0.02, 0.03, 0.04):
        champion.add(100, seconds, seconds * 2)
        candidate.add(100, seconds / 4, seconds / 4)
    _, scores = informative(400)
    m = summarize(observations(scores, scores, None), (champion, candidate), THRESHOLD).metrics
    assert m["champion_events_per_s"] == pytest.approx(400 / 0.1)
    assert m["champion_p50_batch_ms"] == pytest.approx(25.0)
    assert m["champion_cpu_us_per_event"] == pytest.approx(0.2 / 400 * 1e6)
    assert m["speedup"] == pytest.approx(4.0)
    s = summarize(observations(scores, scores, None), (champion, ModelTiming("m", "2")), THRESHOLD)
    assert s.missing["speedup"] == "the candidate made no timed call" and "speedup" not in s.metrics


@pytest.mark.parametrize("short", [0, 1])
def test_exactly_min_events_labeled_events_pass_the_minimum_and_one_fewer_refuses(short: int) -> None:
    """150 events compared, 120 of them labeled: --min-events 120 measures the outcome metrics and a
    gate on them judges the value; 121 leaves them out with the reason, and the gate fails on it.
    The same boundary for the events compared: 150 measures the score metrics, 151 does not."""
    from streamer.evaluate.require import check, parse_require

    y, champion = informative(150, seed=5)
    y[120:] = np.nan  # unlabeled
    obs = observations(champion, champion[::-1].copy(), y)
    labeled = summarize(obs, timings(150), THRESHOLD, bootstrap=20, min_events=120 + short)
    (verdict,) = check(parse_require("champion_auc >= 0"), labeled)
    if short:
        assert "champion_auc" not in labeled.metrics and verdict.value is None and not verdict.passed
        assert labeled.missing["champion_auc"] == "120 labeled events, fewer than the 121 --min-events needs"
    else:
        assert labeled.metrics["champion_auc"] == pytest.approx(roc_auc_score(y[:120], champion[:120]))
        assert verdict.passed and "champion_auc" not in labeled.missing
    compared = summarize(obs, timings(150), THRESHOLD, bootstrap=20, min_events=150 + short)
    assert ("agreement" in compared.metrics) is not bool(short)
    if short:
        assert compared.missing["agreement"] == "150 events compared, fewer than the 151 --min-events needs"
