"""The Reloader on a fake clock: a change is loaded once it holds still, checked, and handed over once."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from streamer.config import Config
from streamer.model.contract import FEATURES
from streamer.model.signature import Columns
from streamer.pipeline.breaker import BreakerState
from streamer.pipeline.reload import Reloader
from streamer.testing import FakeClock, FunctionRunner
from tests.pipeline.test_serving import N, config

SERVING = FunctionRunner(lambda x: x[:, :1], N)


def touch(path: Path, content: bytes) -> None:
    """A new file in place (a new inode, as a deploy's rename gives)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(content)
    os.replace(tmp, path)


def reloader(tmp_path: Path, answer: FunctionRunner) -> tuple[Reloader, FakeClock, Path, Config]:
    path = tmp_path / "model.onnx"
    touch(path, b"v1")
    cfg = config(path)  # reload_check_ms 100
    clock = FakeClock()
    return Reloader(cfg.model, lambda file: answer, clock, cfg.batching.max_size), clock, path, cfg


def look(r: Reloader, clock: FakeClock) -> object:
    """One poll, a look's interval (100 ms, and a hair: the next look is due at a float sum) later."""
    clock.advance(0.1001)
    return r.poll(SERVING, "1", 1, Columns({FEATURES: np.ones((3, N), np.float32)}))


def test_a_change_is_loaded_after_holding_still_for_one_look_and_handed_over_once(tmp_path: Path) -> None:
    candidate = FunctionRunner(lambda x: x[:, :1] + 1, N)
    r, clock, path, _ = reloader(tmp_path, candidate)
    assert look(r, clock) is None and not r.loading  # nothing changed
    touch(path, b"v2")
    assert look(r, clock) is None and not r.loading  # seen once: it may still be being written
    assert look(r, clock) is None and r.loading  # held still: the load starts beside the serving model
    r.wait(30)
    done = look(r, clock)
    assert done is not None and done.runner is candidate and done.refused is None  # type: ignore[attr-defined]
    assert abs(done.seconds - 0.2002) < 1e-9  # type: ignore[attr-defined]  # from the change first seen
    assert candidate.calls == 2  # the probes: zeros, and the last live batch
    assert look(r, clock) is None and not r.loading  # handed over once


def test_a_candidate_of_another_output_width_is_refused_and_a_sighup_loads_without_a_change(
        tmp_path: Path) -> None:
    wider = FunctionRunner(lambda x: x[:, :2], N)
    r, clock, _, _ = reloader(tmp_path, wider)
    r.ask()  # SIGHUP: loaded at the next poll, changed or not
    assert look(r, clock) is None and r.loading
    r.wait(30)
    done = look(r, clock)
    assert done is not None and done.runner is None  # type: ignore[attr-defined]
    assert "shape (8, 2); expected (8, 1)" in (done.refused or "")  # type: ignore[attr-defined]


def test_no_look_while_reload_check_ms_is_not_due(tmp_path: Path) -> None:
    r, clock, path, _ = reloader(tmp_path, SERVING)
    touch(path, b"v2")
    clock.advance(0.05)
    assert r.poll(SERVING, "1", 1, None) is None and not r.loading  # not due: the change is not even seen
    for _ in range(2):
        assert look(r, clock) is None
    assert r.loading


def test_the_breaker_states_are_the_gauge_codes() -> None:
    """streamer_model_breaker_state reads 0 closed, 1 half-open, 2 open (the dashboard divides by 2)."""
    assert [(s.name, s.value) for s in BreakerState] == [("CLOSED", 0), ("HALF_OPEN", 1), ("OPEN", 2)]
