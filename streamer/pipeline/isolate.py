"""Scoring a batch so that one poison row cannot sink it: bisect failures down to single rows.

A failing batch is split in halves and each half retried, recursively, until the failing rows
stand alone; every other row is scored as usual. One poison row in a batch of n costs at most
2*log2(n) extra model calls. A failure that looks transient (out of memory, a timeout) is retried
with back-off first, and on smaller halves after that; a single row that still runs out of a
resource holds the batch (:class:`ModelBrokenError`) rather than being called poison.

A broken model is not a poison row: when more than ``max_poison_fraction`` of a batch of two or
more rows fails, bisection stops and :class:`ModelBrokenError` is raised, so that the processor
holds the batch and retries instead of flooding the dead-letter topic.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamer.errors import InferenceError, ModelBrokenError, TransientInferenceError
from streamer.pipeline.runner import Batch, ModelRunner, blank_batch
from streamer.pipeline.signature import Columns


@dataclass(slots=True)
class Scored:
    """One scored batch: the results of the good rows, an error for each poison row, and (set by
    serving.py) the model that scored it; ``degraded`` is the reason the fallback did instead."""

    scores: Any  # float32 [rows, n_outputs], or Columns by prediction field; poison rows hold NaN (or 0, '')
    poison: dict[int, InferenceError] = field(default_factory=dict)
    calls: int = 0  # model calls made, the first one included
    bisections: int = 0  # batches split in two
    model: str = ""  # the name of the model that scored it (the fallback's, when it did)
    version: str = ""  # of the model that scored it
    provider: str = ""  # its execution provider, or 'fallback'
    degraded: str | None = None


@dataclass(frozen=True, slots=True)
class IsolationPolicy:
    max_poison_fraction: float = 0.5
    transient_retries: int = 2
    transient_backoff_s: float = 0.05


def score_isolating(runner: ModelRunner, features: Batch,
                    policy: IsolationPolicy = IsolationPolicy(),
                    sleep: Callable[[float], None] = time.sleep) -> Scored:
    """Score ``features`` [rows, n_features]; isolate failing rows; raise if the model is broken.

    Raises:
        ModelBrokenError: both halves of the batch fail and the model cannot score the warm-up
            input either, or more than ``max_poison_fraction`` of the rows fail.
    """
    n = len(features)
    limit = int(policy.max_poison_fraction * n) if n >= 2 else n
    result = Scored(scores=np.empty((0, 0), np.float32))
    outputs: dict[int, Any] = {}

    def attempt(lo: int, hi: int) -> Any:
        for k in range(policy.transient_retries + 1):
            result.calls += 1
            try:
                return runner.run(features[lo:hi])
            except TransientInferenceError as exc:
                if k == policy.transient_retries:
                    return exc  # still failing: smaller halves next
                sleep(policy.transient_backoff_s * 2 ** k)
            except InferenceError as exc:
                return exc
        raise AssertionError("unreachable")

    def settle(lo: int, hi: int, got: Any) -> None:
        if not isinstance(got, InferenceError):
            outputs[lo] = got
        elif hi - lo == 1 and isinstance(got, TransientInferenceError):
            # Out of device memory even for one row: the device, not the row. Hold the batch
            # (the loop retries it later); never dead-letter a row for it.
            raise ModelBrokenError(f"one row still fails for want of a resource: {got}") from got
        elif hi - lo == 1:
            result.poison[lo] = got
            if len(result.poison) > limit:
                raise ModelBrokenError(f"{len(result.poison)} of {n} rows fail: the model is "
                                       f"failing, not the rows (last error: {got})") from got
        else:
            split(lo, hi, got)

    def split(lo: int, hi: int, failure: InferenceError) -> None:
        result.bisections += 1
        mid = (lo + hi) // 2
        left = attempt(lo, mid)
        if not isinstance(left, InferenceError) and not isinstance(failure, TransientInferenceError):
            # The whole failed and its left half did not: the right half holds the culprit.
            # (Not so after running out of memory: the halves may both be fine.)
            right: Any = failure
        else:
            right = attempt(mid, hi)
            if (lo, hi) == (0, n) and isinstance(right, InferenceError) and not model_answers(runner):
                result.calls += 1
                raise ModelBrokenError(f"both halves of a batch of {n} fail and so does the warm-up "
                                       f"input: the model is failing, not the rows ({failure})") from failure
        settle(lo, mid, left)
        settle(mid, hi, right)

    settle(0, n, attempt(0, n))
    if len(outputs) == 1 and 0 in outputs and len(outputs[0]) == n:
        result.scores = outputs[0]  # the usual case: one call scored the whole batch
        return result
    first = next(iter(outputs.values()), None)
    if isinstance(first, Columns):
        scores: Any = first.blank(n)
        for lo, block in outputs.items():
            scores.put(lo, block)
    else:
        width = first.shape[1] if first is not None else 1
        scores = np.full((n, width), np.nan, dtype=np.float32)
        for lo, block in outputs.items():
            scores[lo:lo + len(block)] = block
    result.scores = scores
    return result


def model_answers(runner: ModelRunner) -> bool:
    """Does the model score one row of zeros (the warm-up input)? Tells poison from a broken model."""
    try:
        runner.run(blank_batch(runner, 1))
    except InferenceError:
        return False
    return True


class BatchScorer:
    """Scores batch after batch, telling a broken model from poison rows across batches too.

    Besides what :func:`score_isolating` sees within one batch, a run of
    ``broken_after_failed_batches`` batches failing entirely, while the warm-up input fails as
    well, means the model is broken: :class:`ModelBrokenError`, nothing dead-lettered.
    """

    def __init__(self, runner: ModelRunner, policy: IsolationPolicy, broken_after_failed_batches: int) -> None:
        self.runner, self.policy, self.broken_after = runner, policy, broken_after_failed_batches
        self.failed_batches = 0  # whole batches failing in a row

    def score(self, features: Batch) -> Scored:
        scored = score_isolating(self.runner, features, self.policy)
        if len(scored.poison) < len(features):
            self.failed_batches = 0
            return scored
        self.failed_batches += 1
        if self.failed_batches >= self.broken_after and not model_answers(self.runner):
            raise ModelBrokenError(f"{self.failed_batches} batches in a row failed entirely")
        return scored
