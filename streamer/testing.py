"""Fakes for tests and demos: a controllable clock and in-memory model runners."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from streamer.errors import InferenceError
from streamer.model.contract import FEATURES, SCORES, Contract
from streamer.model.runner import ModelRunner
from streamer.model.signature import Columns, Signature, TensorSpec


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


def matrix_signature(n_features: int, n_outputs: int | None = None) -> Signature:
    """The signature of a model with one float32 ``[N, n_features]`` input and one float32 output
    (``n_outputs`` wide; None: not fixed), as a converter writes a plain regressor or MLP."""
    return Signature((TensorSpec("input", "float32", (None, n_features), "tensor(float)"),),
                     (TensorSpec("output", "float32", (None, n_outputs), "tensor(float)"),))


class FunctionRunner:
    """A ModelRunner that applies ``fn`` to each batch's feature matrix (the ``features`` column)
    and returns its result as the ``scores`` column; ``calls`` counts the batches."""

    def __init__(
        self, fn: Callable[[np.ndarray], np.ndarray], n_features: int, provider: str = "fake"
    ) -> None:
        self._fn = fn
        self._provider = provider
        self._signature = matrix_signature(n_features)
        self._contract = Contract.of(self._signature)
        self.calls = 0

    @property
    def signature(self) -> Signature:
        return self._signature

    @property
    def contract(self) -> Contract:
        return self._contract

    @property
    def provider(self) -> str:
        return self._provider

    def warm_up(self, rows: int) -> None:
        """Nothing to warm; not counted in ``calls``."""

    def run(self, features: Columns) -> Columns:
        self.calls += 1
        out = np.asarray(self._fn(features.arrays[FEATURES]), dtype=np.float32)
        return Columns({SCORES: out.reshape(len(out), -1) if out.ndim < 2 else out})


class PoisonRunner:
    """Wraps a runner and fails any batch holding a row whose first feature equals ``sentinel``.

    Useful to test that a failing batch is bisected down to the one poisoned record.
    """

    def __init__(self, inner: ModelRunner, sentinel: float) -> None:
        self._inner = inner
        self._sentinel = sentinel
        self.calls = 0

    @property
    def signature(self) -> Signature:
        return self._inner.signature

    @property
    def contract(self) -> Contract:
        return self._inner.contract

    @property
    def provider(self) -> str:
        return self._inner.provider

    def warm_up(self, rows: int) -> None:
        self._inner.warm_up(rows)

    def run(self, features: Columns) -> Columns:
        self.calls += 1
        first = next(iter(features.arrays.values()))
        poisoned = np.flatnonzero(first.reshape(len(first), -1)[:, 0] == self._sentinel)
        if poisoned.size:
            raise InferenceError(f"poisoned row(s) {poisoned.tolist()} in a batch of {len(features)}")
        return self._inner.run(features)


def score_matrix(runner: ModelRunner, features: np.ndarray) -> np.ndarray:
    """A one-input model's scores for a feature matrix: the ``features`` column in, ``scores`` out."""
    return runner.run(Columns({FEATURES: features})).arrays[SCORES]
