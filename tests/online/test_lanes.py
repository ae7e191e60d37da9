"""The models' lanes without a server: a load slower than a request's deadline answers it expired
and goes on for the next request, a failed load is UNAVAILABLE with its reason and tried again,
pinned models count toward ``max_loaded`` and are never unloaded, and a stuck model holds its own
requests only."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from streamer.errors import ConfigError, Refused
from streamer.model.signature import Columns
from streamer.online.dispatch import Dispatcher
from streamer.online.lanes import Lanes, Loaded
from streamer.online.meters import OnlineMetrics
from streamer.online.plane import InferRequest
from streamer.pipeline.records import Scored
from tests.online.doubler import TIMEOUT_S, Doubler, doubled, plane


class Builds:
    """Loads of doublers named as asked: gated by ``gate``, failing while ``failing``."""

    def __init__(self) -> None:
        self.gate, self.failing, self.built, self.closed = threading.Event(), False, [], []
        self.gate.set()

    def __call__(self, name: str, metrics: OnlineMetrics) -> Loaded:
        assert self.gate.wait(TIMEOUT_S)
        if self.failing:
            raise ConfigError(f"models.named.{name}.model.path", "no model file")
        self.built.append(name)
        model = Doubler()
        model.name = name
        return Loaded(model, Dispatcher(doubled, 8, 1, 100, metrics=metrics), lambda: self.closed.append(name))


def lanes(builds: Builds, max_loaded: int = 0) -> Lanes:
    return Lanes({n: "1" for n in ("d", "a", "b", "c")}, builds, max_loaded=max_loaded)


def test_a_load_past_the_deadline_answers_expired_and_the_next_request_gets_the_model() -> None:
    builds = Builds()
    lanes_ = lanes(builds)
    builds.gate.clear()

    async def ask(wait_s: float) -> Loaded:
        return await lanes_.ready_lane("a", time.monotonic() + wait_s)

    with pytest.raises(Refused, match="expired: model 'a' was still loading") as refused:
        asyncio.run(ask(0.05))
    assert (refused.value.status, refused.value.why) == (503, "expired")
    assert lanes_.index()[0] == {"name": "a", "version": "1", "state": "LOADING", "reason": "loading"}
    builds.gate.set()
    assert asyncio.run(ask(TIMEOUT_S)).model.name == "a" and builds.built == ["a"]  # one load, awaited twice
    lanes_.stop()


def test_a_failed_load_is_unavailable_with_its_reason_and_tried_again() -> None:
    builds = Builds()
    builds.failing = True
    lanes_ = lanes(builds)
    with pytest.raises(Refused, match="model 'b' cannot be loaded: .*no model file") as refused:
        asyncio.run(lanes_.ready_lane("b", time.monotonic() + TIMEOUT_S))
    assert refused.value.status == 503
    (entry,) = [e for e in lanes_.index() if e["name"] == "b"]
    assert entry["state"] == "UNAVAILABLE" and "load failed" in entry["reason"] and "no model file" in entry["reason"]
    builds.failing = False
    assert asyncio.run(lanes_.ready_lane("b", time.monotonic() + TIMEOUT_S)).model.name == "b"
    lanes_.stop()


def test_pinned_models_count_toward_the_bound_and_stay_loaded() -> None:
    builds = Builds()
    lanes_ = lanes(builds, max_loaded=2)
    lanes_.pin("d", builds("d", OnlineMetrics()))
    for name in ("a", "b", "c", "a"):
        asyncio.run(lanes_.ready_lane(name, time.monotonic() + TIMEOUT_S))
        assert lanes_.loaded() == sorted({"d", name})
    assert builds.closed == ["a", "b", "c"]  # each unloaded for the next; d never
    with pytest.raises(Refused, match="stays loaded") as refused:
        lanes_.unload("d")
    assert refused.value.status == 409
    lanes_.unload("a").result(TIMEOUT_S)
    with pytest.raises(Refused, match="model 'a' is unloaded") as refused:
        asyncio.run(lanes_.ready_lane("a", time.monotonic() + TIMEOUT_S))
    assert refused.value.status == 503 and lanes_.loaded() == ["d"]
    lanes_.stop()


def test_a_stuck_model_does_not_delay_another_models_requests() -> None:
    """Each lane has its own dispatcher: a model call that does not return holds its own requests only."""
    stuck = threading.Event()

    def slow(cols: Columns, ids: list[str]) -> Scored:
        assert stuck.wait(TIMEOUT_S)
        return doubled(cols, ids)

    def build(name: str, metrics: OnlineMetrics) -> Loaded:
        model = Doubler()
        model.name = name
        dispatcher = Dispatcher(slow if name == "a" else doubled, 8, 1, 100, metrics=metrics)
        dispatcher.start()
        return Loaded(model, dispatcher, lambda: dispatcher.stop(TIMEOUT_S))

    lanes_ = Lanes({"d": "1", "a": "1", "b": "1"}, build)
    default = build("d", OnlineMetrics())
    lanes_.pin("d", default)
    p = plane(default.model, default.dispatcher, lanes=lanes_)
    x = {"x": np.ones((1, 2), np.float32)}

    async def both() -> tuple[bool, np.ndarray]:
        held = asyncio.ensure_future(p.infer(InferRequest("a", "", x), p.deadline(p.clock())))
        answered = await p.infer(InferRequest("b", "", x), p.deadline(p.clock()))
        waiting = not held.done()
        stuck.set()
        await held
        return waiting, np.asarray(answered.outputs["y"])

    waiting, y = asyncio.run(both())
    assert waiting and np.array_equal(y, x["x"] * 2)  # b answered while a's call was stuck
    lanes_.stop()
