"""Feature drift (streamer/observe/drift.py): PSI against a reference profile, over a window."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from streamer.errors import ConfigError
from streamer.observe.drift import DriftMonitor, Profile, psi_of_shares, write_profile

SHIFTED = [3, 7]


def reference(tmp_path: Path, n_features: int = 12) -> Profile:
    sample = np.random.default_rng(1).normal(size=(50_000, n_features))
    return write_profile(sample, tmp_path / "profile.json", bins=10)


def live(rows: int, n_features: int = 12, shift: float = 0.0, seed: int = 2) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(rows, n_features)).astype(np.float32)
    if shift:
        x[:, SHIFTED] += shift
    return x


def test_a_stream_drawn_from_the_reference_has_low_psi(tmp_path: Path) -> None:
    monitor = DriftMonitor(reference(tmp_path), window_rows=20_000)
    for k in range(40):
        monitor.add(live(512, seed=k))
    assert monitor.psi().max() < 0.02, monitor.psi()
    assert monitor.outside_share().max() < 0.001


def test_a_shifted_stream_has_high_psi_on_the_shifted_features_only(tmp_path: Path) -> None:
    monitor = DriftMonitor(reference(tmp_path), window_rows=20_000)
    for k in range(40):
        monitor.add(live(512, shift=2.5, seed=k))
    psi = monitor.psi()
    assert (psi[SHIFTED] > 0.25).all(), psi
    assert np.delete(psi, SHIFTED).max() < 0.02, psi
    outside = monitor.outside_share()
    assert (outside[SHIFTED] > 0.01).all() and np.delete(outside, SHIFTED).max() < 0.001


def test_the_window_forgets_old_rows(tmp_path: Path) -> None:
    monitor = DriftMonitor(reference(tmp_path), window_rows=5_000)
    for k in range(20):
        monitor.add(live(500, shift=2.0, seed=k))
    assert monitor.psi()[SHIFTED].min() > 1
    for k in range(20, 40):  # twice the window of reference rows: the shifted ones are gone
        monitor.add(live(500, seed=k))
    assert 5_000 <= monitor.rows < 5_500
    assert monitor.psi().max() < 0.05, monitor.psi()


def test_psi_matches_its_formula(tmp_path: Path) -> None:
    profile = reference(tmp_path, n_features=1)
    monitor = DriftMonitor(profile, window_rows=10_000)
    x = live(8_000, n_features=1, seed=5) * 1.5
    monitor.add(x)
    a = np.bincount(np.searchsorted(profile.edges[0], x[:, 0]), minlength=10) / len(x)
    e = profile.proportions[0]
    expected = np.sum((np.maximum(a, 1e-4) - e) * np.log(np.maximum(a, 1e-4) / e))
    assert monitor.psi()[0] == pytest.approx(expected)


def test_psi_of_shares_worked_example() -> None:
    """The docstring's example: a shift between two bins, and an empty bin floored at 1e-4."""
    assert float(psi_of_shares(np.array([0.5, 0.5]), np.array([0.25, 0.75]))) == pytest.approx(
        0.25 * np.log(2) + 0.25 * np.log(1.5))
    assert float(psi_of_shares(np.array([0.5, 0.5]), np.array([0.25, 0.75]))) == pytest.approx(0.2747, abs=1e-4)
    assert float(psi_of_shares(np.array([0.5, 0.5]), np.array([1.0, 0.0]))) == pytest.approx(4.6043, abs=1e-4)
    assert float(psi_of_shares(np.array([0.3, 0.7]), np.array([0.3, 0.7]))) == 0.0
    # a row per feature, padded with bins empty on both sides: a PSI per row, the padding adds 0
    both = psi_of_shares(np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]), np.array([[0.25, 0.75, 0.0], [0.2, 0.3, 0.5]]))
    assert both.shape == (2,) and both[0] == pytest.approx(0.2747, abs=1e-4) and both[1] == 0.0


def test_a_profile_for_another_model_is_a_config_error(tmp_path: Path) -> None:
    reference(tmp_path, n_features=12)
    with pytest.raises(ConfigError, match="model.drift_profile.*12 features; the model takes 32"):
        Profile.load(tmp_path / "profile.json", 32)
    (tmp_path / "bad.json").write_text('{"edges": [[1, 0]], "proportions": [[0.5, 0.5]], "range": [[0, 1]]}')
    with pytest.raises(ConfigError, match="increasing edges"):
        Profile.load(tmp_path / "bad.json", 1)


def test_the_profile_script_writes_a_profile_from_a_sample(tmp_path: Path) -> None:
    from streamer.observe.drift import main

    np.save(tmp_path / "sample.npy", np.random.default_rng(3).normal(size=(5_000, 4)))
    assert main([str(tmp_path / "sample.npy"), str(tmp_path / "p.json"), "5"]) == 0
    profile = Profile.load(tmp_path / "p.json", 4)
    assert [len(e) for e in profile.edges] == [4, 4, 4, 4]
    assert all(abs(p.sum() - 1) < 1e-9 for p in profile.proportions)
    assert main([]) == 2
