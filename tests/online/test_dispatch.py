"""The online dispatcher: the stream's flush policy over requests, each answered with its own rows,
admission against the queue bound and the deadline, expiry while waiting, a draining stop."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from streamer.errors import Expired, InferenceError, Refused, Shed
from streamer.model.signature import Columns
from streamer.online.dispatch import Dispatcher
from streamer.pipeline.records import ModelId, Scored
from streamer.testing import FakeClock

WAIT_S = 5.0  # what a test waits for an answer at most


def scored(score: np.ndarray, poison: dict[int, InferenceError] | None = None) -> Scored:
    return Scored(Columns({"score": score}), poison or {}, model=ModelId("m", "1", "abc"))


class Model:
    """Doubles the features; records each call's row count; can be held to fill the queue."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls: list[int] = []
        self.ids: list[str] = []
        self.delay_s = delay_s
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, features: Columns, ids: list[str]) -> Scored:
        self.gate.wait(WAIT_S)
        if self.delay_s:
            time.sleep(self.delay_s)  # the model's own time, measured by the dispatcher
        self.calls.append(len(features))
        self.ids += ids
        return scored(features.arrays["x"][:, 0] * 2)


def rows(*values: float) -> Columns:
    return Columns({"x": np.array(values, np.float32).reshape(-1, 1)})


def far() -> float:
    return time.monotonic() + 60


def test_requests_within_the_wait_are_one_model_call_and_each_gets_its_own_rows() -> None:
    model = Model()
    model.gate.clear()  # hold the first call so that the others queue behind it
    d = Dispatcher(model, max_size=64, max_wait_ms=20, max_queue_rows=1000)
    d.start()
    first = d.submit(rows(0), far())
    futures = [d.submit(rows(i), far()) for i in range(1, 11)]
    model.gate.set()
    assert first.result(WAIT_S).outputs["score"].tolist() == [0.0]
    for i, f in enumerate(futures, start=1):
        answer = f.result(WAIT_S)
        assert answer.outputs["score"].tolist() == [2.0 * i] and answer.scored.model.version == "1"
    assert sum(model.calls) == 11 and len(model.calls) <= 3  # batched, not one call per request
    d.stop(WAIT_S)


def test_each_row_goes_to_the_model_with_its_requests_id() -> None:
    model = Model()
    d = Dispatcher(model, max_size=2, max_wait_ms=1, max_queue_rows=1000)
    d.start()
    d.submit(rows(1), far(), name="card-42").result(WAIT_S)
    d.submit(rows(1, 2, 3), far(), name="page-7").result(WAIT_S)  # cut over two calls
    d.submit(rows(4), far()).result(WAIT_S)
    assert model.ids[:4] == ["card-42", "page-7/0", "page-7/1", "page-7/2"]
    assert model.ids[4].startswith("online-") and len(model.ids) == 5
    d.stop(WAIT_S)


def test_a_request_larger_than_a_batch_is_cut_and_answered_whole() -> None:
    model = Model()
    d = Dispatcher(model, max_size=4, max_wait_ms=5, max_queue_rows=1000)
    d.start()
    answer = d.submit(rows(*range(10)), far()).result(WAIT_S)
    assert answer.outputs["score"].tolist() == [2.0 * i for i in range(10)]
    assert model.calls == [4, 4, 2]
    d.stop(WAIT_S)


def test_a_full_queue_and_an_unmeetable_deadline_are_refused_at_once() -> None:
    model = Model(delay_s=0.05)
    d = Dispatcher(model, max_size=8, max_wait_ms=1, max_queue_rows=10)
    d.start()
    d.submit(rows(1), far()).result(WAIT_S)  # the rate and call time are measured
    model.gate.clear()
    held = [d.submit(rows(*range(5)), far()) for _ in range(2)]
    with pytest.raises(Shed, match="the queue holds 10 rows, at most 10") as full:
        d.submit(rows(1), far())
    assert full.value.retry_after_s >= 1
    d.admission.max_queue_rows = 100
    with pytest.raises(Shed, match="deadline is"):
        d.submit(rows(1), time.monotonic() + 0.01)  # one call takes 50 ms: 10 ms cannot be met
    model.gate.set()
    assert all(len(f.result(WAIT_S).outputs["score"]) == 5 for f in held)
    assert d.admission.shed == 2 and d.admission.queued_rows == 0
    d.stop(WAIT_S)


def test_a_slow_rate_once_measured_never_refuses_a_request_into_an_empty_queue() -> None:
    model = Model()
    d = Dispatcher(model, max_size=8, max_wait_ms=1, max_queue_rows=100)
    d.admission.rows_per_s, d.admission.call_s = 2.0, 0.001  # as measured under a burst: 2 rows a second
    d.start()
    # nothing queued: one batch wait and one call answer it, whatever the last backlog's rate
    assert d.submit(rows(1, 2), time.monotonic() + 0.5).result(WAIT_S).outputs["score"].tolist() == [2.0, 4.0]
    model.gate.clear()
    d.submit(rows(1), far())  # one row ahead of the next: half a second at 2 rows a second
    with pytest.raises(Shed, match="an answer takes about 50[12] ms"):
        d.submit(rows(1), time.monotonic() + 0.3)
    model.gate.set()
    d.stop(WAIT_S)


def test_a_row_the_model_fails_on_fails_its_own_request_and_the_batch_answers_the_others() -> None:
    def poisoned(features: Columns, ids: list[str]) -> Scored:
        x = features.arrays["x"][:, 0]
        return scored(x * 2, {int(i): InferenceError("NaN in x") for i in np.flatnonzero(x < 0)})

    d = Dispatcher(poisoned, max_size=8, max_wait_ms=50, max_queue_rows=100)
    d.start()
    good, bad, other = d.submit(rows(1), far()), d.submit(rows(2, -1), far()), d.submit(rows(3), far())
    assert good.result(WAIT_S).outputs["score"].tolist() == [2.0]
    assert other.result(WAIT_S).outputs["score"].tolist() == [6.0]
    with pytest.raises(InferenceError, match="row 1 of the request: NaN in x"):
        bad.result(WAIT_S)
    assert d.admission.queued_rows == 0
    d.stop(WAIT_S)


def test_a_failure_between_batches_or_outside_the_model_call_answers_every_caller_and_serves_on() -> None:
    failures = iter([RuntimeError("a challenger's producer broke")])

    def between() -> None:
        for exc in failures:
            raise exc

    def wrong(features: Columns, ids: list[str]) -> Scored:
        return scored(features.arrays["x"][:1, 0])  # one row for any batch

    d = Dispatcher(Model(), max_size=1, max_wait_ms=0, max_queue_rows=100, between=between)
    d.start()
    assert [d.submit(rows(i), far()).result(WAIT_S).outputs["score"].tolist() for i in (1, 2)] == [[2.0], [4.0]]
    d.stop(WAIT_S)
    d = Dispatcher(wrong, max_size=4, max_wait_ms=20, max_queue_rows=100)
    d.start()
    with pytest.raises(InferenceError, match=r"answered \{'score': 1\} rows for a batch of 3"):
        d.submit(rows(1, 2, 3), far()).result(WAIT_S)
    d.stop(WAIT_S)
    d = Dispatcher(Model(), max_size=4, max_wait_ms=50, max_queue_rows=100)
    d.start()
    x, y = d.submit(rows(1), far()), d.submit(Columns({"y": np.zeros((1, 1), np.float32)}), far())
    for unjoinable in (x, y):  # two requests whose columns cannot make one batch: both answered, with the fault
        with pytest.raises(Exception):  # noqa: B017, PT011 - whatever joining raised
            unjoinable.result(WAIT_S)
    assert d.submit(rows(5), far()).result(WAIT_S).outputs["score"].tolist() == [10.0]
    assert d.admission.queued_rows == 0
    d.stop(WAIT_S)


def test_an_empty_request_or_one_larger_than_the_queue_is_refused_not_queued() -> None:
    d = Dispatcher(Model(), max_size=4, max_wait_ms=1, max_queue_rows=10)
    d.start()

    async def ask(features: Columns) -> None:
        await d.answer(features, far())

    with pytest.raises(Refused, match="no rows") as empty:
        asyncio.run(ask(Columns({"x": np.zeros((0, 1), np.float32)})))
    with pytest.raises(Refused, match="holds 11 rows; online.max_queue_rows is 10") as large:
        asyncio.run(ask(rows(*range(11))))
    assert (empty.value.status, large.value.status) == (400, 413) and d.admission.queued_rows == 0
    d.stop(WAIT_S)


def test_a_deadline_that_passes_while_waiting_is_answered_expired_not_scored() -> None:
    model, clock = Model(), FakeClock(100.0)
    model.gate.clear()
    d = Dispatcher(model, max_size=1, max_wait_ms=0, max_queue_rows=100, clock=clock)
    d.start()
    blocker = d.submit(rows(1), 1000.0)
    late = d.submit(rows(2), 100.05)
    clock.advance(0.1)  # the deadline passes while the model is held
    model.gate.set()
    blocker.result(WAIT_S)
    with pytest.raises(Expired, match="deadline passed"):
        late.result(WAIT_S)
    assert model.calls == [1]
    d.stop(WAIT_S)


def test_stop_answers_what_was_admitted_and_refuses_the_rest() -> None:
    model = Model()
    d = Dispatcher(model, max_size=64, max_wait_ms=10_000, max_queue_rows=100)
    d.start()
    admitted = d.submit(rows(3), far())
    d.stop(WAIT_S)
    assert admitted.result(WAIT_S).outputs["score"].tolist() == [6.0]
    with pytest.raises(Shed, match="stopping"):
        d.submit(rows(1), far())
