"""Degrade, don't fail: a circuit breaker over the serving model, and the fallback that answers while it is open.

With ``model.fallback_path`` (a simpler ONNX model) or ``model.fallback_scores`` (a constant row),
a :class:`Breaker` guards the model: a batch the model fails (the isolate.py verdict: broken, not
poison rows) is scored by the :class:`Fallback` and counts as a failure;
``model.breaker_failures`` in a row, or one batch slower than ``model.timeout_ms``, open it. While
open, the fallback scores every batch, flagged degraded with the reason; after
``model.breaker_probe_ms`` (doubling per failed probe, up to ``model.breaker_probe_max_ms``) one
batch probes the model (half-open), and a success closes it.

States and what moves them (the state's value is the ``model_breaker_state`` gauge):

    state          event                                   next
    CLOSED (0)     a failure, fewer than the limit          CLOSED (counted)
    CLOSED (0)     the limit reached, or one slow batch     OPEN: probe after the wait
    OPEN (2)       allow() once the probe is due            HALF_OPEN
    HALF_OPEN (1)  the probe succeeds                       CLOSED: count and wait reset
    HALF_OPEN (1)  the probe fails                          OPEN: the wait doubles (to the max)

Worked example (failures 3, probe 1 s): batches 1-3 fail -> each is scored by the fallback,
degraded; after batch 3 the breaker is open; batches in the next second never reach the model;
the first batch after it probes: it fails -> open again for 2 s; the next probe succeeds ->
closed, and the model's own scores go out again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import Any

import numpy as np

from streamer.config import Config
from streamer.model.contract import SCORES
from streamer.model.onnx_file import file_digest
from streamer.model.prediction_schema import can_flag_degraded
from streamer.model.runner import ModelRunner
from streamer.model.signature import Columns
from streamer.pipeline.records import ModelId, Scored
from streamer.pipeline.reload import checked_runner, file_version

log = logging.getLogger(__name__)


class BreakerState(Enum):
    """The breaker's state; its value is the gauge's code."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class Breaker:
    """A circuit breaker: closed (the model scores), open (the fallback does), half-open (one probe)."""

    def __init__(self, failures: int, probe_s: float, probe_max_s: float, clock: Callable[[], float]) -> None:
        self._limit, self._first, self._max, self._clock = failures, probe_s, probe_max_s, clock
        self.state, self.reason = BreakerState.CLOSED, ""
        self._failed, self._wait, self._probe_at = 0, probe_s, 0.0

    def allow(self) -> bool:
        """May the model score the next batch? An open breaker turns half-open when a probe is due."""
        if self.state is BreakerState.OPEN and self._clock() >= self._probe_at:
            self.state = BreakerState.HALF_OPEN
        return self.state is not BreakerState.OPEN

    def is_open(self) -> bool:
        """Whether the next batch would go to the fallback: open, and no probe due yet (asked
        without moving the state: an online answer decides before it scores)."""
        return self.state is BreakerState.OPEN and self._clock() < self._probe_at

    def succeeded(self) -> None:
        if self.state is not BreakerState.CLOSED:
            log.warning("model breaker closed: the model answers again")
        self.state, self.reason, self._failed, self._wait = BreakerState.CLOSED, "", 0, self._first

    def failed(self, reason: str, at_once: bool = False) -> None:
        self._failed += 1
        self.reason = reason
        if self.state is BreakerState.HALF_OPEN:  # the probe failed: wait longer before the next
            self._wait = min(2 * self._wait, self._max)
            self._open()
        elif at_once or self._failed >= self._limit:
            self._open()

    def _open(self) -> None:
        self.state, self._probe_at = BreakerState.OPEN, self._clock() + self._wait
        log.warning("model breaker open (%s): the fallback scores, next probe in %.1f s",
                    self.reason, self._wait)


class Fallback:
    """The degraded answer: a simpler model, or the same constant row for every event. Its
    predictions carry its own name and version (and the degraded reason), never the serving
    model's."""

    def __init__(self, runner: ModelRunner | None, scores: tuple[float, ...] | None,
                 model: ModelId = ModelId("fallback", "constant")) -> None:
        self.runner, self.model = runner, model
        self._row = None if scores is None else np.asarray(scores, np.float32).reshape(1, -1)

    def score(self, features: Columns) -> Scored:
        if self.runner is None:
            assert self._row is not None
            return Scored(Columns({SCORES: np.repeat(self._row, len(features), axis=0)}), calls=0, model=self.model,
                          provider="fallback")
        return Scored(self.runner.run(features), calls=1, model=self.model, provider="fallback")


def fallback_of(cfg: Config, runner: ModelRunner, schema_out: dict[str, Any]) -> Fallback | None:
    """``model.fallback_path``'s model (opened once, with the serving model's signature), or
    ``model.fallback_scores``' constant row; None without either."""
    m = cfg.model
    if not m.fallback:
        return None
    can_flag_degraded(schema_out)
    if m.fallback_path is None:
        return Fallback(None, m.fallback_scores, ModelId(f"{m.name}-fallback", "constant"))
    stand_in = checked_runner(cfg, m.fallback_path, "model.fallback_path", like=runner)
    version = file_version("", None, stand_in, file_digest(m.fallback_path))
    return Fallback(stand_in, m.fallback_scores, ModelId(f"{m.name}-fallback", version))
