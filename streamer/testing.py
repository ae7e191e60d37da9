"""Fakes for tests and demos: a controllable clock and in-memory model runners."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from streamer.errors import InferenceError
from streamer.model.runner import ModelRunner


class FakeClock:
    """A clock to inject where ``time.monotonic`` is expected; it moves only when told to.

    Time is kept in whole nanoseconds, so a hundred ``advance(0.010)`` calls read exactly 1.0,
    not the 1.0000000000000007 that adding floats drifts to.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._ns = round(start * 1e9)

    def __call__(self) -> float:
        return self._ns / 1e9

    def advance(self, seconds: float) -> None:
        self._ns += round(seconds * 1e9)


class FunctionRunner:
    """A ModelRunner that applies ``fn`` to each batch; ``calls`` counts the batches."""

    def __init__(
        self, fn: Callable[[np.ndarray], np.ndarray], n_features: int, provider: str = "fake"
    ) -> None:
        self._fn = fn
        self._n_features = n_features
        self._provider = provider
        self.calls = 0

    @property
    def n_features(self) -> int:
        return self._n_features

    @property
    def provider(self) -> str:
        return self._provider

    def warm_up(self, rows: int) -> None:
        """Nothing to warm; not counted in ``calls``."""

    def run(self, features: np.ndarray) -> np.ndarray:
        self.calls += 1
        return np.asarray(self._fn(features), dtype=np.float32)


class PoisonRunner:
    """Wraps a runner and fails any batch holding a row whose first feature equals ``sentinel``.

    Useful to test that a failing batch is bisected down to the one poisoned record.
    """

    def __init__(self, inner: ModelRunner, sentinel: float) -> None:
        self._inner = inner
        self._sentinel = sentinel
        self.calls = 0

    @property
    def n_features(self) -> int:
        return self._inner.n_features

    @property
    def provider(self) -> str:
        return self._inner.provider

    def warm_up(self, rows: int) -> None:
        self._inner.warm_up(rows)

    def run(self, features: np.ndarray) -> np.ndarray:
        self.calls += 1
        poisoned = np.flatnonzero(features[:, 0] == self._sentinel)
        if poisoned.size:
            raise InferenceError(f"poisoned row(s) {poisoned.tolist()} in a batch of {len(features)}")
        return self._inner.run(features)
