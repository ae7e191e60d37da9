"""Degrade, don't fail, online too: a failing model's requests are answered by the fallback behind
the breaker, each answer flagged degraded with the reason; without a fallback they get 500."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from streamer.model.signature import Columns
from streamer.online.dispatch import Dispatcher
from streamer.online.served import ServedModel
from tests.online.doubler import TIMEOUT_S
from tests.pipeline.test_serving import N, flaky_serving, write_model


def test_a_failing_model_is_answered_by_the_fallback_flagged_degraded(tmp_path: Path) -> None:
    serving, flaky, _ = flaky_serving(write_model(tmp_path / "model.onnx", version="1"))
    served = ServedModel("fraud", serving)
    dispatcher = Dispatcher(served.score, 16, 0, 100)
    dispatcher.start()
    features = Columns({"features": np.ones((2, N), np.float32)})
    good = dispatcher.submit(features, time.monotonic() + TIMEOUT_S).result(TIMEOUT_S)
    assert good.scored.degraded is None and good.outputs["scores"].ravel().tolist() == [2.0, 2.0]
    flaky.failing = True
    degraded = dispatcher.submit(features, time.monotonic() + TIMEOUT_S).result(TIMEOUT_S)
    assert degraded.scored.degraded is not None and "model failing" in degraded.scored.degraded
    assert degraded.outputs["scores"].ravel().tolist() == [0.5, 0.5]  # the constant fallback row
    dispatcher.stop(TIMEOUT_S)


def test_without_a_fallback_a_failing_model_fails_the_batchs_requests(tmp_path: Path) -> None:
    serving, flaky, _ = flaky_serving(write_model(tmp_path / "model.onnx", version="1"))
    serving.fallback = None
    served = ServedModel("fraud", serving)
    dispatcher = Dispatcher(served.score, 16, 0, 100)
    dispatcher.start()
    flaky.failing = True
    with pytest.raises(Exception, match="failing"):
        dispatcher.submit(Columns({"features": np.ones((1, N), np.float32)}),
                          time.monotonic() + TIMEOUT_S).result(TIMEOUT_S)
    dispatcher.stop(TIMEOUT_S)
