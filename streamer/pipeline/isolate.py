"""Scoring a batch so that a few poison rows cannot sink it: group tests find them cheaply.

A batch that fails is searched with generalized binary splitting (Hwang's group testing): with d
poison rows expected among the r rows not yet settled (d = the poison rate times r, at least
one), the next r / d-ish rows (a power of two) are tried as one call; a call that succeeds scores
all its rows, one that fails is halved until its first poison row stands alone, and the search
goes on after it. Every good row is scored once, by whichever call succeeded with it; the cost is
the calls, about d * log2(n / d) + 2d. At 1% poison in batches of 512 that is 44 calls a batch
against plain bisection's 54 (the information bound, log2 C(512, 5), is 38): each poison row
costs about eight calls however the search goes. ``poison_rate`` comes from the batches before
(:class:`BatchScorer`, a moving average); with none, one poison row is assumed. A failure that
looks transient (out of memory, a timeout) is retried with back-off first, and bisected on
smaller halves after that (both halves tried: they may both be fine); a single row that still
runs out of a resource holds the batch (:class:`ModelBrokenError`) rather than being called
poison.

A broken model is not a poison row: when the first call inside the search fails too and the
model cannot score the warm-up input, or when more than ``max_poison_fraction`` of a batch of two
or more rows fails, the search stops and :class:`ModelBrokenError` is raised, so that the
processor holds the batch and retries instead of flooding the dead-letter topic.

Worked example (n = 16, poison rate 2/16, poison rows 5 and 12): the whole fails; it is halved
from the front: 0-7 fails (and, the first part failing too, one warm-up row checks the model
answers), 0-3 ok, 4-5 fails, 4 ok: 5 is poison. Ten rows left, d = 1.25: try 6-9 (2^floor(log2(
7.8)) = 4): ok. Six left, d < 1: try 10-15: fails: 10-12 fails, 10 ok, 11 ok: 12 is poison; 13-15
ok. Twelve calls with the warm-up; each good row scored once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamer.errors import InferenceError, ModelBrokenError, TransientInferenceError, detach
from streamer.model.runner import ModelRunner
from streamer.model.signature import Columns
from streamer.pipeline.records import Scored


@dataclass(frozen=True, slots=True)
class IsolationPolicy:
    max_poison_fraction: float = 0.5
    transient_retries: int = 2
    transient_backoff_s: float = 0.05


def score_isolating(runner: ModelRunner, features: Columns,
                    policy: IsolationPolicy = IsolationPolicy(),
                    sleep: Callable[[float], None] = time.sleep, poison_rate: float = 0.0) -> Scored:
    """Score ``features`` (the model's input columns); isolate failing rows; raise if the model is broken.
    ``poison_rate``: the share of poison rows to expect (the search's d per row).

    Raises:
        ModelBrokenError: the first call inside the search fails and the model cannot score the
            warm-up input either, or more than ``max_poison_fraction`` of the rows fail, or one
            row alone still runs out of a resource.
    """
    return _Search(runner, features, policy, sleep, poison_rate).run()


class _Search:
    """One batch's scoring and, when it fails, its search. An object, not closures over the call:
    closures that call each other (and ``bisect`` itself) are a reference cycle per batch, which
    held the batch's features and results until the garbage collector came by."""

    def __init__(self, runner: ModelRunner, features: Columns, policy: IsolationPolicy,
                 sleep: Callable[[float], None], poison_rate: float) -> None:
        self.runner, self.features, self.policy, self.sleep = runner, features, policy, sleep
        self.poison_rate = poison_rate
        self.n = n = len(features)
        self.limit = int(policy.max_poison_fraction * n) if n >= 2 else n
        self.calls = self.bisections = 0
        self.poisoned: dict[int, InferenceError] = {}
        self.outputs: dict[int, Columns] = {}  # scored blocks by their first row

    def run(self) -> Scored:
        n, outputs = self.n, self.outputs
        whole = self.attempt(0, n)
        if not isinstance(whole, InferenceError):  # the usual case: one call scored the whole batch
            return Scored(whole, calls=self.calls)
        if n == 1 or isinstance(whole, TransientInferenceError):
            self.bisect(0, n, whole)
        else:
            self.search(whole)
        first = next(iter(outputs.values()), None)
        scores = self.runner.contract.blank_result(n) if first is None else first.blank(n)
        for lo, block in outputs.items():
            scores.put(lo, block)
        return Scored(scores, self.poisoned, self.calls, self.bisections)

    def attempt(self, lo: int, hi: int) -> Any:
        """Rows [lo, hi) in one call: the result, or the error (transient ones retried first),
        detached from its traceback (errors.detach: the search keeps failures in its locals)."""
        policy = self.policy
        for k in range(policy.transient_retries + 1):
            self.calls += 1
            try:
                return self.runner.run(self.features[lo:hi])
            except TransientInferenceError as exc:
                if k == policy.transient_retries:
                    return detach(exc)  # still failing: smaller halves next
                self.sleep(policy.transient_backoff_s * 2 ** k)
            except InferenceError as exc:
                return detach(exc)
        raise AssertionError("unreachable")

    def poison(self, row: int, got: InferenceError) -> None:
        if isinstance(got, TransientInferenceError):
            # Out of device memory even for one row: the device, not the row. Hold the batch
            # (the loop retries it later); never dead-letter a row for it.
            raise ModelBrokenError(f"one row still fails for want of a resource: {got}") from got
        poison = self.poisoned
        poison[row] = got
        if len(poison) > self.limit:
            raise ModelBrokenError(f"{len(poison)} of {self.n} rows fail: the model is "
                                   f"failing, not the rows (last error: {got})") from got

    def bisect(self, lo: int, hi: int, got: Any) -> None:
        """A transient failure: halves, both tried (out of memory, both may be fine)."""
        if not isinstance(got, InferenceError):
            self.outputs[lo] = got
        elif hi - lo == 1:
            self.poison(lo, got)
        else:
            self.bisections += 1
            mid = (lo + hi) // 2
            left, right = self.attempt(lo, mid), self.attempt(mid, hi)
            all_rows = (lo, hi) == (0, self.n)
            if all_rows and isinstance(left, InferenceError) and isinstance(right, InferenceError):
                self.broken_check(got)  # both halves of the whole batch fail too: the model, or the rows?
            self.bisect(lo, mid, left)
            self.bisect(mid, hi, right)

    def broken_check(self, failure: InferenceError) -> None:
        """The whole batch and the first call inside it failed: a broken model, or poison?"""
        self.calls += 1
        if not model_answers(self.runner):
            raise ModelBrokenError(f"a batch of {self.n} and its first part fail, and so does the warm-up "
                                   f"input: the model is failing, not the rows ({failure})") from failure

    def search(self, whole: InferenceError) -> None:
        """Generalized binary splitting over rows [0, n), known to fail as a whole (``whole``)."""
        n, outputs, attempt = self.n, self.outputs, self.attempt
        known: tuple[int, int, InferenceError] | None = (0, n, whole)
        p, checked = 0, False
        while p < n:
            if known is not None:  # [lo, hi) starts at p and fails: find its first poison row
                (lo, hi, failure), known = known, None
            else:
                r = n - p
                d = self.poison_rate * r  # poison rows expected among the r left
                size = r if d <= 1 else 1 << max(0, int(math.log2(max(1.0, (r - d + 1) / d))))
                hi = p + min(size, r)
                got = attempt(p, hi)
                if not isinstance(got, InferenceError):
                    outputs[p] = got
                    p = hi
                    continue
                if isinstance(got, TransientInferenceError):
                    self.bisect(p, hi, got)
                    p = hi
                    continue
                lo, failure = p, got
            while hi - lo > 1:  # halve [lo, hi): the first half, if it fails, else the second
                self.bisections += 1
                mid = (lo + hi) // 2
                left = attempt(lo, mid)
                if not checked:
                    checked = True
                    if isinstance(left, InferenceError) and not isinstance(left, TransientInferenceError):
                        self.broken_check(failure)
                if not isinstance(left, InferenceError):
                    outputs[lo] = left
                    lo = mid
                elif isinstance(left, TransientInferenceError):
                    self.bisect(lo, mid, left)
                    lo = hi = mid  # the rest, [mid, hi), is untested again
                    break
                else:
                    hi, failure = mid, left
            if hi - lo == 1:
                self.poison(lo, failure)
                p = lo + 1
            else:
                p = lo


def model_answers(runner: ModelRunner) -> bool:
    """Does the model score one row of zeros (the warm-up input)? Tells poison from a broken model."""
    try:
        runner.run(runner.contract.blank(1))
    except InferenceError:
        return False
    return True


POISON_RATE_WEIGHT = 0.2  # of the latest batch in the moving average


class BatchScorer:
    """Scores batch after batch, telling a broken model from poison rows across batches too.

    Besides what :func:`score_isolating` sees within one batch, a run of
    ``broken_after_failed_batches`` batches failing entirely, while the warm-up input fails as
    well, means the model is broken: :class:`ModelBrokenError`, nothing dead-lettered.
    """

    def __init__(self, runner: ModelRunner, policy: IsolationPolicy, broken_after_failed_batches: int) -> None:
        self.runner, self.policy, self.broken_after = runner, policy, broken_after_failed_batches
        self.failed_batches = 0  # whole batches failing in a row
        self.poison_rate = 0.0  # a moving average of the share of poison rows: the search's d

    def score(self, features: Columns) -> Scored:
        scored = score_isolating(self.runner, features, self.policy, poison_rate=self.poison_rate)
        if len(features):
            self.poison_rate += POISON_RATE_WEIGHT * (len(scored.poison) / len(features) - self.poison_rate)
        if len(scored.poison) < len(features):
            self.failed_batches = 0
            return scored
        self.failed_batches += 1
        if self.failed_batches >= self.broken_after and not model_answers(self.runner):
            raise ModelBrokenError(f"{self.failed_batches} batches in a row failed entirely")
        return scored
