"""The scoring queue: inline and pipelined give the same batches in the same order, whatever disturbs them."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from streamer.errors import InferenceError
from streamer.model.contract import Contract
from streamer.model.signature import Columns
from streamer.pipeline.batcher import Batch
from streamer.pipeline.inference import DEPTH, Inference, Inferred
from streamer.pipeline.records import Rows
from streamer.testing import FakeClock, FunctionRunner, matrix_signature
from tests.pipeline.test_serving import N, config, rows
from tests.support.fakes import serving_of

MODEL = Path(__file__).resolve().parents[2] / "models" / "fraud_mlp.onnx"


class Gated:
    """A model whose calls wait for the test to open them one at a time, and can be made to fail."""

    def __init__(self) -> None:
        self.provider = "test"
        self.signature = matrix_signature(N, 1)
        self.contract = Contract.of(self.signature)
        self.opened = threading.Semaphore(0)
        self.failing = False
        self.calls: list[float] = []

    def warm_up(self, rows: int) -> None:
        pass

    def run(self, features: Columns) -> Columns:
        assert self.opened.acquire(timeout=10), "a call was never let through"
        x = features.arrays["features"]
        self.calls.append(float(x[0, 0]))
        if self.failing:
            raise InferenceError("the device went away")
        return Columns({"scores": x[:, :1] * 10})


def batch(first: int, n: int = 4, partition: int = 0) -> Batch[Rows]:
    f = np.zeros((n, N), np.float32)
    f[:, 0] = np.arange(first, first + n)
    r = rows(f)
    r.source.partitions[:] = partition
    return Batch(r, "size", 0.0)


def inference(runner: object, pipelined: bool | None) -> Inference:
    serving = serving_of(config(MODEL), runner, FakeClock())  # type: ignore[arg-type]
    inf = Inference(serving, pipelined, rows=8)
    inf.start()
    return inf


def collect(inf: Inference, until: int, may_run: bool = True) -> list[Inferred]:
    """Take results as the loop does, waiting as a drain does, until ``until`` arrived."""
    got: list[Inferred] = []
    deadline = time.monotonic() + 10
    while len(got) < until:
        got.extend(inf.ready(lambda: may_run))
        if got and got[-1].error is not None:
            return got
        inf.wait(0.05)
        assert time.monotonic() < deadline, f"only {len(got)} of {until} results"
    return got


def firsts(done: list[Inferred]) -> list[int]:
    return [int(d.batch.rows.features.arrays["features"][0, 0]) for d in done]


def test_pipelined_results_come_back_in_order_while_the_loop_goes_on() -> None:
    model = Gated()
    inf = inference(model, pipelined=True)
    inf.add([batch(0), batch(4), batch(8)])
    assert list(inf.ready(lambda: True)) == []  # two handed out, both waiting on the model
    assert len(inf) == 3
    for _ in range(3):
        model.opened.release()
    done = collect(inf, 3)
    assert firsts(done) == [0, 4, 8] and len(inf) == 0
    assert all(d.error is None and d.out is not None for d in done)
    assert np.array_equal(done[1].out.scores.arrays["scores"][:, 0], np.arange(40, 80, 10))  # type: ignore[union-attr]
    inf.close()


def test_at_most_depth_batches_are_handed_out() -> None:
    model = Gated()
    inf = inference(model, pipelined=True)
    inf.add([batch(i * 4) for i in range(5)])
    list(inf.ready(lambda: True))
    assert inf._inflight.__len__() == DEPTH and len(inf._pending) == 5 - DEPTH
    for _ in range(5):
        model.opened.release()
    assert firsts(collect(inf, 5)) == [0, 4, 8, 12, 16]
    inf.close()


def test_a_batch_the_model_cannot_take_goes_back_with_everything_behind_it() -> None:
    model = Gated()
    inf = inference(model, pipelined=True)
    inf.add([batch(0), batch(4), batch(8)])
    model.failing = True
    for _ in range(40):  # the first batch fails (bisection and all); the second may run meanwhile
        model.opened.release()
    done = collect(inf, 1)
    assert done[-1].error is not None and firsts(done) == [0]
    assert len(inf) == 3 and firsts([Inferred(b, None) for b in inf._pending]) == [0, 4, 8]
    model.failing = False
    done = collect(inf, 3)
    assert firsts(done) == [0, 4, 8] and all(d.error is None for d in done)  # each once, in order
    inf.close()


def test_a_rebalance_drops_the_revoked_rows_even_from_batches_in_flight() -> None:
    model = Gated()
    inf = inference(model, pipelined=True)
    inf.add([batch(0, partition=0), batch(4, partition=1), batch(8, partition=0)])
    list(inf.ready(lambda: True))  # 0 and 4 in flight
    inf.keep(lambda r: r.without({("in", 1)}))
    for _ in range(10):
        model.opened.release()
    done = collect(inf, 2)
    assert firsts(done) == [0, 8]  # batch 4 (partition 1 only) is gone; its result was dropped
    inf.close()


@pytest.mark.parametrize("pipelined", [False, True])
def test_inline_and_pipelined_give_the_same_results(pipelined: bool) -> None:
    inf = inference(FunctionRunner(lambda x: x[:, :1] + 1, N), pipelined)
    inf.add([batch(i * 4, partition=i % 3) for i in range(10)])
    done = collect(inf, 10)
    assert firsts(done) == list(range(0, 40, 4))
    assert [float(d.out.scores.arrays["scores"][0, 0]) for d in done] == [i * 4 + 1.0 for i in range(10)]  # type: ignore[union-attr]
    inf.close()


def test_auto_pipelines_a_heavy_model_only_after_timing_its_first_full_batches() -> None:
    light = inference(FunctionRunner(lambda x: x[:, :1], N), None)
    light.add([batch(i * 8, n=8) for i in range(5)])
    assert firsts(collect(light, 5)) == [0, 8, 16, 24, 32] and not light.pipelined

    def heavy(x: np.ndarray) -> np.ndarray:
        time.sleep(0.002)  # a model that takes 2 ms a batch
        return x[:, :1]

    slow = inference(FunctionRunner(heavy, N), None)
    assert not slow.pipelined  # no model call of its own at start
    slow.add([batch(0, n=1)] + [batch(i * 8, n=8) for i in range(1, 7)])  # a trickle batch is not timed
    done = collect(slow, 7)
    assert firsts(done) == [0, 8, 16, 24, 32, 40, 48] and slow.pipelined
    slow.close()


def test_auto_does_not_time_batches_searched_for_poison_rows() -> None:
    """A poison search's many calls are Python that holds the GIL: a thread gains nothing from
    them, so only batches scored in one call are timed (these take 2 ms searched, 0.4 ms clean)."""
    def light_but_poisoned(x: np.ndarray) -> np.ndarray:
        time.sleep(0.0004)
        if (x[:, 0] % 8 == 3).any():  # row 3 of every batch below
            raise InferenceError("poison")
        return x[:, :1]

    inf = inference(FunctionRunner(light_but_poisoned, N), None)
    inf.add([batch(i * 8, n=8) for i in range(5)])
    done = collect(inf, 5)
    assert [sorted(d.out.poison) for d in done] == [[3]] * 5  # type: ignore[union-attr]
    assert all(d.seconds * 1000 >= 1.0 for d in done)  # heavy, timed whole
    assert not inf.pipelined
    inf.close()
