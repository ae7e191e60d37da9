"""The model that scores: swapped for a new version without a restart, and degraded, not stopped.

One :class:`Serving` per processor; the loop calls :meth:`Serving.score` for each batch and
:meth:`Serving.poll` between batches, and never touches a runner itself.

- **Hot reload.** ``model.path`` is a file, or a folder of numbered versions (``<n>/model.onnx``,
  the highest served). Every ``model.reload_check_ms`` its state is looked at; a change that has
  held still for one look (a copy in progress is not loaded half-written), or a SIGHUP, starts a
  load in a thread beside the serving model. The candidate must take the same input width, warm
  up, and answer a batch of zeros and the last live batch with finite scores of the serving
  width; then :meth:`poll` swaps it in between two batches, and predictions name its version from
  the first batch it scores. A candidate that fails any of this is refused and logged: the old
  model keeps scoring. A version is the folder's number, else the ONNX metadata property
  ``version``, else ``<model.version>+<first 8 hex digits of the file's SHA-256>``: the same
  whether the file was loaded at start or by a reload (:func:`file_version`).
- **Degrade, don't fail.** With ``model.fallback_path`` (a simpler ONNX model) or
  ``model.fallback_scores`` (a constant row), a :class:`Breaker` guards the model: a batch the
  model fails (the isolate.py verdict: broken, not poison rows) is scored by the fallback and
  counts as a failure; ``model.breaker_failures`` in a row, or one batch slower than
  ``model.timeout_ms``, open it. While open, the fallback scores every batch, flagged degraded
  with the reason; after ``model.breaker_probe_ms`` (doubling per failed probe, up to
  ``model.breaker_probe_max_ms``) one batch probes the model (half-open), and a success closes it.
  Without a fallback the model's failure goes up as before (the loop holds the batch and retries).

Worked example (failures 3, probe 1 s): batches 1-3 fail -> each is scored by the fallback,
degraded; after batch 3 the breaker is open; batches in the next second never reach the model;
the first batch after it probes: it fails -> open again for 2 s; the next probe succeeds ->
closed, and the model's own scores go out again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from streamer import heap
from streamer.config import Config, ModelConfig, model_versions
from streamer.errors import InferenceError, ModelBrokenError
from streamer.pipeline.isolate import BatchScorer, IsolationPolicy, Scored
from streamer.pipeline.records import Rows
from streamer.model.contract import SCORES
from streamer.model.runner import ModelRunner, blank_batch
from streamer.model.signature import Columns

log = logging.getLogger(__name__)
Clock = Callable[[], float]


def file_version(prefix: str, file: Path, place: str | None, runner: ModelRunner, strict: bool = False) -> str:
    """The version predictions of ``file`` carry, whenever it is loaded: ``place`` (its version
    folder's number), else its declared ONNX metadata ``version``, else ``<prefix>+<digest>``, the
    first 8 hex digits of its SHA-256. A file that cannot be read: ``prefix`` alone (a runner that
    is not a file's), or with ``strict`` (a reload) the OSError, so the candidate is refused
    rather than served under a label another file may carry."""
    declared = place or getattr(runner, "declared_version", None)
    if declared:
        return str(declared)
    try:
        digest = hashlib.sha256(file.read_bytes()).hexdigest()[:8]
    except OSError:
        if strict:
            raise
        return prefix
    return f"{prefix}+{digest}" if prefix else digest


def served_file(m: ModelConfig) -> tuple[Path, str | None]:
    """The file to load for ``model.path`` and the version its place gives (a folder's number)."""
    versions = model_versions(m.path)
    if versions:
        n = max(versions)
        return versions[n], str(n)
    return m.path, None


def _state(m: ModelConfig) -> tuple[str, int, int, int]:
    """What tells that ``model.path`` changed: the served file and its inode, size and mtime."""
    path, _ = served_file(m)
    try:
        st = path.stat()
    except OSError:
        return str(path), -1, -1, -1
    return str(path), st.st_ino, st.st_size, st.st_mtime_ns


def check_candidate(runner: ModelRunner, serving: ModelRunner | None, probes: list[Columns], rows: int,
                    width: int = 0) -> str | None:
    """Why ``runner`` cannot serve (None: it can), the checks of a hot reload and of start-up: the
    serving model's input width and signature, a warm-up, and on each probe batch one result row
    per row in every field, finite float outputs, and ``width`` columns of ``scores`` (0: any)."""
    if serving is not None:
        if runner.n_features != serving.n_features:
            return f"it takes {runner.n_features} features; the serving model takes {serving.n_features}"
        if differs := serving.signature.differs(runner.signature):
            return f"its signature differs: {differs}"
    runner.warm_up(rows)
    for probe in probes:
        out = runner.run(probe)
        bad = [k for k, v in out.arrays.items() if len(v) != len(probe)
               or v.dtype.kind == "f" and not np.isfinite(v).all()]
        if bad:
            return f"it gives non-finite or missing values in {bad} on a probe of {len(probe)} rows"
        scores = out.arrays.get(SCORES)
        if width and scores is not None and scores.shape[1:] != (width,):
            return f"it answers {len(probe)} rows with shape {scores.shape}; expected ({len(probe)}, {width})"
    return None


class Breaker:
    """A circuit breaker: closed (the model scores), open (the fallback does), half-open (one probe)."""

    CLOSED, HALF_OPEN, OPEN = "closed", "half_open", "open"

    def __init__(self, failures: int, probe_s: float, probe_max_s: float, clock: Clock) -> None:
        self._limit, self._first, self._max, self._clock = failures, probe_s, probe_max_s, clock
        self.state, self.reason = self.CLOSED, ""
        self._failed, self._wait, self._probe_at = 0, probe_s, 0.0

    def allow(self) -> bool:
        """May the model score the next batch? An open breaker turns half-open when a probe is due."""
        if self.state == self.OPEN and self._clock() >= self._probe_at:
            self.state = self.HALF_OPEN
        return self.state != self.OPEN

    def succeeded(self) -> None:
        if self.state != self.CLOSED:
            log.warning("model breaker closed: the model answers again")
        self.state, self.reason, self._failed, self._wait = self.CLOSED, "", 0, self._first

    def failed(self, reason: str, at_once: bool = False) -> None:
        self._failed += 1
        self.reason = reason
        if self.state == self.HALF_OPEN:  # the probe failed: wait longer before the next
            self._wait = min(2 * self._wait, self._max)
            self._open()
        elif at_once or self._failed >= self._limit:
            self._open()

    def _open(self) -> None:
        self.state, self._probe_at = self.OPEN, self._clock() + self._wait
        log.warning("model breaker open (%s): the fallback scores, next probe in %.1f s",
                    self.reason, self._wait)

    @property
    def code(self) -> int:
        """For the gauge: 0 closed, 1 half-open, 2 open."""
        return (self.CLOSED, self.HALF_OPEN, self.OPEN).index(self.state)


class Fallback:
    """The degraded answer: a simpler model, or the same constant row for every event. Its
    predictions carry its own ``name`` and ``version`` (and the degraded reason), never the
    serving model's."""

    def __init__(self, runner: ModelRunner | None, scores: tuple[float, ...] | None,
                 name: str = "fallback", version: str = "constant") -> None:
        self.runner, self.name, self.version = runner, name, version
        self._row = None if scores is None else np.asarray(scores, np.float32).reshape(1, -1)

    def score(self, features: Columns) -> Scored:
        if self.runner is None:
            assert self._row is not None
            return Scored(Columns({SCORES: np.repeat(self._row, len(features), axis=0)}), calls=0)
        return Scored(self.runner.run(features), calls=1)


@dataclass(frozen=True, slots=True)
class _Model:
    runner: ModelRunner
    version: str
    scorer: BatchScorer
    breaker: Breaker


@dataclass(frozen=True, slots=True)
class Reload:
    """What came of a load: ``runner`` swapped in, or ``refused`` with the reason."""

    file: Path
    version: str
    seconds: float  # from the change first seen (or SIGHUP) to the swap, or to the refusal
    runner: ModelRunner | None = None
    refused: str | None = None


class Beside(Protocol):
    """Models scored beside the serving one, in shadow (streamer/shadow.py): it hands them each
    batch it scored and lets them publish between batches."""

    def start(self, rows: int) -> None: ...

    def submit(self, rows: Rows, out: Scored) -> None: ...

    def pump(self) -> None: ...

    def close(self, timeout_s: float) -> None: ...


class Serving:
    """The serving model, its reloads, its fallback behind a breaker, and its challengers."""

    def __init__(self, cfg: Config, runner: ModelRunner, clock: Clock,
                 load: Callable[[Path], ModelRunner] | None = None, fallback: Fallback | None = None,
                 shadow: Beside | None = None) -> None:
        m, p = cfg.model, cfg.processing
        self._m, self._clock, self._load, self._rows = m, clock, load, cfg.batching.max_size
        self._policy = IsolationPolicy(max_poison_fraction=p.max_poison_fraction)
        self._broken_after = p.broken_after_failed_batches
        self.fallback, self.shadow = fallback, shadow
        # The serving model as one value, swapped in one assignment: a batch scored on the
        # inference thread (pipelined) while the loop swaps names the model that scored it.
        self._current = self._model(runner, file_version(m.version, *served_file(m), runner))
        self._timeout_s = m.timeout_ms / 1000
        self._width = 0  # the serving model's output width, once known
        self._last: Columns | None = None  # the last live batch: a candidate's probe
        self._seen, self._changed = _state(m), None  # model.path as looked at, and a change seen once
        self._changed_at = 0.0
        self._next_look = clock() + m.reload_check_ms / 1000
        self._asked = False  # SIGHUP
        self._loading: threading.Thread | None = None
        self._loaded: Reload | None = None
        self._since = 0.0  # when the change being loaded was seen

    def _model(self, runner: ModelRunner, version: str) -> _Model:
        """A model to serve, with a scorer and a closed breaker of its own (a new version does
        not inherit its predecessor's failures, even those of batches still in flight)."""
        m = self._m
        breaker = Breaker(m.breaker_failures, m.breaker_probe_ms / 1000, m.breaker_probe_max_ms / 1000,
                          self._clock)
        return _Model(runner, version, BatchScorer(runner, self._policy, self._broken_after), breaker)

    @property
    def runner(self) -> ModelRunner:
        return self._current.runner

    @property
    def breaker(self) -> Breaker:
        return self._current.breaker

    @property
    def version(self) -> str:
        return self._current.version

    def relabel(self, version: str) -> None:
        """Name the serving model ``version`` whatever its file says (``replay --model-version``)."""
        self._current = replace(self._current, version=version)

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

    def close(self, timeout_s: float) -> None:
        """Let the challengers publish what they have (up to ``timeout_s``)."""
        if self.shadow is not None:
            self.shadow.close(timeout_s)

    # ---- scoring --------------------------------------------------------------------------

    def score(self, rows: Rows) -> Scored:
        """Score one batch (and hand it to the challengers). Raises ModelBrokenError when the
        model is failing and no fallback (or a failing one) can stand in: the loop holds the batch
        and retries it later."""
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
        return replace(scored, model=self._m.name, version=model.version, provider=model.runner.provider)

    def _degraded(self, model: _Model, features: Columns, reason: str) -> Scored:
        assert self.fallback is not None
        try:
            scored = self.fallback.score(features)
        except InferenceError as exc:
            raise ModelBrokenError(f"{reason}; and the fallback fails too: {exc}") from exc
        return replace(scored, model=self.fallback.name, version=self.fallback.version, provider="fallback",
                       degraded=reason)

    # ---- reloads --------------------------------------------------------------------------

    def ask_reload(self) -> None:
        """Load ``model.path`` again at the next poll, changed or not (SIGHUP). Signal-safe."""
        self._asked = True

    def poll(self) -> Reload | None:
        """Between batches: the challengers publish; a checked candidate is swapped in, or a
        refused one reported; a load starts when ``model.path`` changed (and held still for one
        look) or a reload was asked for."""
        if self.shadow is not None:
            self.shadow.pump()
        if self._loading is not None:
            if self._loading.is_alive():
                return None
            self._loading, done, self._loaded = None, self._loaded, None
            assert done is not None
            return self._finish(done)
        now = self._clock()
        if not self._asked and (not self._m.reload_check_ms or now < self._next_look):
            return None
        self._next_look = now + self._m.reload_check_ms / 1000
        state = _state(self._m)
        if self._asked or state != self._seen and state == self._changed:
            since = now if self._asked else self._changed_at
            self._asked, self._seen, self._changed = False, state, None
            self._since = since
            self._start()
        elif state != self._seen:
            self._changed, self._changed_at = state, now  # loaded at the next look if it holds still
        return None

    def _start(self) -> None:
        if self._load is None:
            log.warning("model reload asked for, but this processor cannot load models")
            return
        file, version = served_file(self._m)
        probes = [blank_batch(self.runner, self._rows)]
        if self._last is not None:
            probes.append(self._last)
        log.info("loading %s beside the serving model (version %s)", file, self.version)
        self._loading = threading.Thread(target=self._candidate, args=(file, version, probes),
                                         name="model-reload", daemon=True)
        self._loading.start()

    def _candidate(self, file: Path, place: str | None, probes: list[Columns]) -> None:
        """In the loading thread: load, warm up and check one candidate; never raises."""
        assert self._load is not None
        runner: ModelRunner | None = None
        version = place
        try:
            runner = self._load(file)
            refused = self._check(runner, probes)
            version = file_version(self._m.version, file, place, runner, strict=True)
        except Exception as exc:  # noqa: BLE001 - whatever a broken file does, the old model stays
            refused = f"{type(exc).__name__}: {exc}"
        self._loaded = Reload(file, version or "?", 0.0,  # the seconds are the swap's: _finish
                              runner=None if refused else runner, refused=refused)

    def _check(self, runner: ModelRunner, probes: list[Columns]) -> str | None:
        return check_candidate(runner, self.runner, probes, self._rows, self._width)

    def _finish(self, done: Reload) -> Reload:
        done = replace(done, seconds=self._clock() - self._since)
        if done.runner is None:
            log.warning("refused the model at %s (the serving version %s goes on): %s",
                        done.file, self.version, done.refused)
            return done
        self._current = self._model(done.runner, done.version)  # with a closed breaker of its own
        heap.settle()  # the old model is garbage now: collected before the heap is frozen again
        log.warning("model version %s swapped in from %s, %.2f s after the change", done.version, done.file,
                    done.seconds)
        return done
