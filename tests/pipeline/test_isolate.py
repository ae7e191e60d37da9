"""The search of failing batches: poison rows isolated cheaply, a broken model recognised."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamer.errors import InferenceError, ModelBrokenError, TransientInferenceError
from streamer.model.signature import Columns
from streamer.pipeline.isolate import BatchScorer, IsolationPolicy, score_isolating
from streamer.testing import FunctionRunner, PoisonRunner

SENTINEL = 777.0


def healthy() -> FunctionRunner:
    return FunctionRunner(lambda x: x.sum(axis=1, keepdims=True) * 2, n_features=4)


def batch(n: int, poison: tuple[int, ...] = (), plus: float = 0.0) -> Columns:
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4) / 100 + plus
    for i in poison:
        x[i, 0] = SENTINEL
    return Columns({"features": x})


def scores_of(features: Columns) -> np.ndarray:
    """What the healthy model gives these rows."""
    return healthy().run(features).arrays["scores"]


def test_one_poison_row_in_256_costs_at_most_2_log2_n_extra_calls() -> None:
    runner = PoisonRunner(healthy(), SENTINEL)
    x = batch(256, poison=(137,))
    scored = score_isolating(runner, x)
    assert set(scored.poison) == {137}
    extra = scored.calls - 1
    assert extra <= 2 * math.log2(256), extra
    good = np.delete(np.arange(256), 137)
    np.testing.assert_allclose(scored.scores.arrays["scores"][good], scores_of(x[good]))
    assert np.isnan(scored.scores.arrays["scores"][137]).all()


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), data=st.data())
def test_exactly_the_poison_rows_are_found_and_every_other_row_is_scored(n: int, data: st.DataObject) -> None:
    rows = data.draw(st.sets(st.integers(0, n - 1), max_size=max(0, n // 2 - 1) if n >= 2 else 1))
    rate = data.draw(st.floats(0.0, 0.5))
    x = batch(n, poison=tuple(rows))
    scored = score_isolating(PoisonRunner(healthy(), SENTINEL), x, poison_rate=rate)
    assert set(scored.poison) == rows
    good = np.array(sorted(set(range(n)) - rows), dtype=np.int64)
    np.testing.assert_allclose(scored.scores.arrays["scores"][good], scores_of(x[good]), rtol=1e-6)
    assert np.isnan(scored.scores.arrays["scores"][sorted(rows)]).all()


def test_1pct_poison_costs_fewer_calls_than_bisection_did() -> None:
    """Seeded batches of 512 at 1% poison (about 5 rows each), scored one after another by a
    BatchScorer (which learns the rate): plain bisection made 53.7 calls a batch on these."""
    rng = np.random.default_rng(1)
    scorer = BatchScorer(PoisonRunner(healthy(), SENTINEL), IsolationPolicy(), broken_after_failed_batches=3)
    calls = []
    for _ in range(200):
        rows = rng.choice(512, rng.binomial(512, 0.01), replace=False)
        scored = scorer.score(batch(512, poison=tuple(rows.tolist())))
        assert set(scored.poison) == set(rows.tolist())
        calls.append(scored.calls)
    assert np.mean(calls) < 0.9 * 53.7, np.mean(calls)
    assert 0.005 < scorer.poison_rate < 0.02


def test_several_poison_rows_are_all_found() -> None:
    runner = PoisonRunner(healthy(), SENTINEL)
    scored = score_isolating(runner, batch(64, poison=(0, 31, 32, 63)))
    assert set(scored.poison) == {0, 31, 32, 63}
    assert all(isinstance(e, InferenceError) for e in scored.poison.values())


def test_a_model_failing_everything_is_broken_not_poison() -> None:
    def fail(x: np.ndarray) -> np.ndarray:
        raise InferenceError("model is broken")

    runner = FunctionRunner(fail, n_features=4)
    with pytest.raises(ModelBrokenError, match="the model is failing"):
        score_isolating(runner, batch(256))
    assert runner.calls == 3  # the batch, its first half, the warm-up input: not 511 calls


def test_a_model_failing_on_real_rows_only_is_broken_past_the_poison_fraction() -> None:
    def fails_unless_zero(x: np.ndarray) -> np.ndarray:
        if not (x == 0).all():
            raise InferenceError("bad scaling")
        return x[:, :1]

    runner = FunctionRunner(fails_unless_zero, n_features=4)
    with pytest.raises(ModelBrokenError, match="33 of 64 rows fail"):
        score_isolating(runner, batch(64, plus=1))


def test_single_failing_row_is_poison_not_broken() -> None:
    scored = score_isolating(PoisonRunner(healthy(), SENTINEL), batch(1, poison=(0,)))
    assert set(scored.poison) == {0}


def test_transient_failure_is_retried_with_backoff_before_anything_is_poison() -> None:
    failures = [2]

    def flaky(x: np.ndarray) -> np.ndarray:
        if failures[0]:
            failures[0] -= 1
            raise TransientInferenceError("CUDA out of memory")
        return x[:, :1]

    sleeps: list[float] = []
    scored = score_isolating(FunctionRunner(flaky, 4), batch(32), IsolationPolicy(), sleeps.append)
    assert scored.poison == {} and scored.calls == 3
    assert sleeps == [0.05, 0.1]


def test_out_of_memory_on_big_batches_falls_back_to_smaller_ones() -> None:
    def small_only(x: np.ndarray) -> np.ndarray:
        if len(x) > 64:
            raise TransientInferenceError("Failed to allocate memory")
        return x[:, :1]

    scored = score_isolating(FunctionRunner(small_only, 4), batch(256), IsolationPolicy(),
                             lambda s: None)
    assert scored.poison == {}
    np.testing.assert_allclose(scored.scores.arrays["scores"], batch(256).arrays["features"][:, :1])


def test_out_of_memory_down_to_one_row_holds_the_batch_and_dead_letters_nothing() -> None:
    """The device, not the rows: a batch whose every split runs out of memory is held (the
    processor retries it later), never bisected into dead letters."""
    def no_memory(x: np.ndarray) -> np.ndarray:
        raise TransientInferenceError("CUDA failure 2: out of memory")

    with pytest.raises(ModelBrokenError):
        score_isolating(FunctionRunner(no_memory, 4), batch(8), IsolationPolicy(), lambda s: None)
    with pytest.raises(ModelBrokenError, match="for want of a resource"):  # one row alone
        score_isolating(FunctionRunner(no_memory, 4), batch(1), IsolationPolicy(), lambda s: None)


def test_a_model_out_of_memory_on_big_batches_and_failing_on_the_rest_is_broken_at_once() -> None:
    """The whole batch runs out of memory, its halves fail outright, and so does the warm-up
    input: a broken model after four calls (with the retries), not a search through 512 rows."""
    def broken(x: np.ndarray) -> np.ndarray:
        if len(x) > 256:
            raise TransientInferenceError("CUDA out of memory")
        raise InferenceError("the device went away")

    runner = FunctionRunner(broken, 4)
    with pytest.raises(ModelBrokenError, match="the model is failing"):
        score_isolating(runner, batch(512), IsolationPolicy(), lambda s: None)
    assert runner.calls == 3 + 2 + 1  # the whole (and its 2 retries), the halves, the warm-up


def test_a_searched_batch_is_freed_by_reference_counting_alone() -> None:
    """No reference cycle outlives the search: the poison rows' errors are kept without the
    frames that held them (errors.detach), and the search is an object, not closures calling
    each other. Held by a cycle, the batch waited for the garbage collector (the benchmark's 1%
    poison run: a generation-1 collection walking ~60,000 objects per 100,000 events)."""
    import gc
    import weakref

    x = batch(512, poison=(3, 100, 101, 400))
    freed = weakref.ref(x.arrays["features"])
    gc.disable()
    try:
        scored = score_isolating(PoisonRunner(healthy(), SENTINEL), x, poison_rate=0.01)
        assert set(scored.poison) == {3, 100, 101, 400}
        assert all(e.__traceback__ is None for e in scored.poison.values())
        del x, scored
        assert freed() is None
    finally:
        gc.enable()


def test_a_poison_rows_error_still_says_where_the_model_failed() -> None:
    from streamer.kafka.deadletter import stack_trace

    scored = score_isolating(PoisonRunner(healthy(), SENTINEL), batch(8, poison=(5,)))
    trace = stack_trace(scored.poison[5])
    assert 'testing.py", line' in trace and trace.rstrip().endswith(str(scored.poison[5])), trace
