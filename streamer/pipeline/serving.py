"""The model that scores: swapped for a new version without a restart, and degraded, not stopped.

One :class:`Serving` per processor; the loop calls :meth:`Serving.score` for each batch and
:meth:`Serving.poll` between batches, and never touches a runner itself. Beside the serving model
stand its :class:`Reloader` (reload.py: a changed ``model.path`` loaded and checked on a thread,
swapped in here between two batches, its predictions naming the new version from the first batch
it scores), its fallback behind a :class:`Breaker` (breaker.py: degrade, don't fail; without a
fallback the model's failure goes up and the loop holds the batch and retries), and its
challengers in shadow.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from streamer import heap
from streamer.config import ModelConfig, ProcessingConfig
from streamer.errors import InferenceError, ModelBrokenError
from streamer.model.contract import SCORES
from streamer.model.runner import ModelRunner
from streamer.model.signature import Columns
from streamer.pipeline.breaker import Breaker, Fallback
from streamer.pipeline.isolate import BatchScorer, IsolationPolicy
from streamer.pipeline.priority import PriorityLock
from streamer.pipeline.records import ModelId, Rows, Scored
from streamer.pipeline.reload import Reload, Reloader, served_model

log = logging.getLogger(__name__)
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class _Model:
    runner: ModelRunner
    model: ModelId  # its name, version label and file digest ("" for a runner not from a file)
    scorer: BatchScorer
    breaker: Breaker


class Beside(Protocol):
    """Models scored beside the serving one, in shadow (streamer/shadow.py): it hands them each
    batch it scored and lets them publish between batches."""

    def start(self, rows: int) -> None: ...

    def submit(self, rows: Rows, out: Scored) -> None: ...

    def pump(self) -> None: ...

    def close(self, timeout_s: float) -> None: ...


class Serving:
    """The serving model, its reloads, its fallback behind a breaker, and its challengers."""

    def __init__(self, m: ModelConfig, p: ProcessingConfig, rows: int, runner: ModelRunner, clock: Clock, *,
                 model: ModelId | None = None, load: Callable[[Path], ModelRunner] | None = None,
                 fallback: Fallback | None = None, shadow: Beside | None = None) -> None:
        """``rows``: a batch's size (``batching.max_size``: warm-ups, a reload's probe);
        ``model``: the serving model's name, version label and digest (default: its file's, as a
        reload names it: reload.served_model)."""
        self._m, self._clock, self._rows = m, clock, rows
        self._policy = IsolationPolicy(max_poison_fraction=p.max_poison_fraction)
        self._broken_after = p.broken_after_failed_batches
        self.fallback, self.shadow = fallback, shadow
        # The serving model as one value, swapped in one assignment: a batch scored on the
        # inference thread (pipelined) while the loop swaps names the model that scored it.
        self._current = self._model(runner, model or served_model(m, runner))
        self._timeout_s = m.timeout_ms / 1000
        self._width = 0  # the serving model's output width, once known
        self._last: Columns | None = None  # the last live batch: a candidate's probe
        self.reloader = Reloader(m, load, clock, rows)
        self.priority = PriorityLock()  # the stream and the online server call one model: online first
        self.warmed = threading.Event()  # set once warm_up() ran: the challengers take batches

    def _model(self, runner: ModelRunner, model: ModelId) -> _Model:
        """A model to serve, with a scorer and a closed breaker of its own (a new version does
        not inherit its predecessor's failures, even those of batches still in flight)."""
        m = self._m
        breaker = Breaker(m.breaker_failures, m.breaker_probe_ms / 1000, m.breaker_probe_max_ms / 1000,
                          self._clock)
        return _Model(runner, model, BatchScorer(runner, self._policy, self._broken_after), breaker)

    @property
    def runner(self) -> ModelRunner:
        return self._current.runner

    @property
    def breaker(self) -> Breaker:
        return self._current.breaker

    @property
    def model(self) -> ModelId:
        """The serving model's name, version label and file digest: what its predictions carry."""
        return self._current.model

    @property
    def provider(self) -> str:
        return self.runner.provider

    def warm_up(self) -> None:
        """Warm the model (and the fallback model) up; a model failing already is scored later."""
        self.runner.warm_up(self._rows)
        if self.fallback is not None and self.fallback.runner is not None:
            self.fallback.runner.warm_up(self._rows)
        if self.shadow is not None:
            self.shadow.start(self._rows)
        self.warmed.set()

    def close(self, timeout_s: float) -> None:
        """Let the challengers publish what they have (up to ``timeout_s``)."""
        if self.shadow is not None:
            self.shadow.close(timeout_s)

    # ---- scoring --------------------------------------------------------------------------

    def score(self, rows: Rows, urgent: bool = False) -> Scored:
        """Score one batch (and hand it to the challengers); ``urgent``: an online batch, which
        goes before waiting stream batches. Raises ModelBrokenError when the model is failing and
        no fallback (or a failing one) can stand in: the loop holds the batch and retries it later."""
        with self.priority.hold(urgent):
            out = self._score(rows.features)
        if self.shadow is not None:
            self.shadow.submit(rows, out)
        return out

    def _score(self, features: Columns) -> Scored:
        self._last, model = features, self._current
        if self.fallback is None:
            return self._scored(model, model.scorer.score(features))
        if not model.breaker.allow():
            return self._degraded(model, features, model.breaker.reason)
        started = self._clock()
        try:
            scored = model.scorer.score(features)
        except ModelBrokenError as exc:
            model.breaker.failed(f"model failing: {exc}")
            return self._degraded(model, features, model.breaker.reason)
        took = self._clock() - started
        if self._timeout_s and took > self._timeout_s:  # its scores are good; the next ones wait
            model.breaker.failed(f"a batch took {took * 1000:.0f} ms, over model.timeout_ms", at_once=True)
        else:
            model.breaker.succeeded()
        return self._scored(model, scored)

    def _scored(self, model: _Model, scored: Scored) -> Scored:
        scores = scored.scores.arrays.get(SCORES)
        if len(scored.poison) < len(scored.scores) and scores is not None:
            self._width = scores.shape[1]  # the serving width: what a candidate must give
        return replace(scored, model=model.model, provider=model.runner.provider)

    def _degraded(self, model: _Model, features: Columns, reason: str) -> Scored:
        assert self.fallback is not None
        try:
            scored = self.fallback.score(features)
        except InferenceError as exc:
            raise ModelBrokenError(f"{reason}; and the fallback fails too: {exc}") from exc
        return replace(scored, degraded=reason)

    # ---- reloads --------------------------------------------------------------------------

    def ask_reload(self) -> None:
        """Load ``model.path`` again at the next poll, changed or not (SIGHUP). Signal-safe."""
        self.reloader.ask()

    def poll(self) -> Reload | None:
        """Between batches: the challengers publish; a checked candidate is swapped in, or a
        refused one reported (the Reloader starts loads when ``model.path`` changes)."""
        if self.shadow is not None:
            self.shadow.pump()
        done = self.reloader.poll(self.runner, self.model.version, self._width, self._last)
        if done is not None and done.runner is not None:
            self.swap(done)
        return done

    def swap(self, done: Reload) -> None:
        """Serve a checked candidate from the next batch on, with a closed breaker of its own (a
        batch still in flight on the inference thread names the model that scored it)."""
        assert done.runner is not None, "a refused candidate is never swapped in"
        self._current = self._model(done.runner, ModelId(self._m.name, done.version, done.digest))
        heap.settle()  # the old model is garbage now: collected before the heap is frozen again
        log.warning("model version %s swapped in from %s, %.2f s after the change", done.version, done.file,
                    done.seconds)
