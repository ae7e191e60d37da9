"""Synthetic evaluations: observations with known answers, and the run facts a report heads with."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.evaluate.observations import ModelInfo, ModelTiming, Observations, Run

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
THRESHOLD = 0.5


def observations(champion: np.ndarray, candidate: np.ndarray, outcome: np.ndarray | None,
                 span_ms: int = 6 * 3_600_000, seed: int = 0) -> Observations:
    """Rows spread over ``span_ms`` of event time, each model's label its score >= THRESHOLD."""
    rng = np.random.default_rng(seed)
    times = START_MS + np.sort(rng.integers(0, span_ms + 1, len(champion)))
    return Observations(times.astype(np.int64), champion, candidate, (champion >= THRESHOLD).astype(np.int64),
                        (candidate >= THRESHOLD).astype(np.int64), outcome)


def informative(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Outcomes (30% positive) and a score that ranks them well but not perfectly."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.float64)
    return y, np.clip(0.3 + 0.35 * (y - 0.3) + rng.normal(0, 0.15, n), 0.0, 1.0)


def timings(rows: int) -> tuple[ModelTiming, ModelTiming]:
    champion, candidate = ModelTiming("fraud", "1"), ModelTiming("fraud", "2")
    for _ in range(10):
        champion.add(rows // 10, 0.02, 0.03)
        candidate.add(rows // 10, 0.01, 0.015)
    return champion, candidate


@pytest.fixture
def run() -> Run:
    return Run(
        run_id="eval-<1>", champion=ModelInfo("fraud", "1", "sha256:aa11", "models/fraud-1.onnx"),
        candidate=ModelInfo("fraud", "2", "sha256:bb22", "models/fraud-2.onnx"),
        range="features: 3 partitions, event times 2026-01-01 .. 2026-01-01", threshold=THRESHOLD,
        labels="field label", rejects=2, written_to=None, started_at="2026-01-02T00:00:00Z", seconds=4.2)
