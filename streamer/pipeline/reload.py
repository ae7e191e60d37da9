"""Hot reload: ``model.path`` watched, a changed model loaded and checked beside the serving one.

``model.path`` is a file, or a folder of numbered versions (``<n>/model.onnx``, the highest
served). Every ``model.reload_check_ms`` the :class:`Reloader` looks at its state; a change that
has held still for one look (a copy in progress is not loaded half-written), or a SIGHUP, starts a
load in a thread beside the serving model. The candidate must take the same input width and
signature, warm up, and answer a batch of zeros and the last live batch with finite outputs of the
serving width (:func:`check_candidate`, the same checks as start-up); the Reloader then hands it
over, and the serving model (serving.py) swaps it in between two batches. A candidate that fails
any of this is refused and logged: the old model keeps scoring.

Two things name the served file, the same whether it was loaded at start or by a reload. Its
version label (:func:`file_version`), which predictions carry in ``model_version``: a configured
``model.version``, verbatim; without one, the version folder's number, else the ONNX metadata
property ``version``, else the digest. Its digest (:func:`file_digest`): the first
:data:`DIGEST_HEX` hex digits of the file's SHA-256, which every prediction carries in
``model_digest`` (and every dead letter in its ``streamer.dlq.model.digest`` header). So with
``model.version: "1"`` a reloaded file keeps the label ``1`` and its predictions' ``model_digest``
changes: the label is what the operator called the model, the digest which bytes scored.

Worked example (reload_check_ms 100): the file changes at t=0.05; the look at 0.1 sees it (once:
it may still be written); the look at 0.2 sees the same state, so the load starts; the poll after
the thread ends returns the checked Reload, which the serving model swaps in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from streamer.config import Config, ModelConfig
from streamer.errors import ConfigError, InferenceError
from streamer.model.contract import SCORES
from streamer.model.onnx_file import file_digest, served_file
from streamer.model.runner import ModelRunner, model_runner
from streamer.model.signature import Columns
from streamer.pipeline.records import ModelId

log = logging.getLogger(__name__)


def file_version(configured: str, place: str | None, runner: ModelRunner, digest: str) -> str:
    """The version label predictions of a file carry: ``configured`` (``model.version``) verbatim
    when set; else ``place`` (its version folder's number), else its declared ONNX metadata
    ``version``, else ``digest`` (:func:`file_digest`; ``"?"`` when there is none).

    Worked example, for ``models/fraud/3/model.onnx`` declaring ``version: 2024-05`` with digest
    ``b61d4048aa01``: ``model.version: "1"`` labels it ``1``; no ``model.version`` labels it ``3``;
    the same file served as ``model.path: fraud.onnx`` is ``2024-05``, and without that metadata
    ``b61d4048aa01``.
    """
    if configured:
        return configured
    declared = place or getattr(runner, "declared_version", None)
    return str(declared) if declared else digest or "?"


def served_model(m: ModelConfig, runner: ModelRunner, label: str | None = None) -> ModelId:
    """The name, version label and digest of the file ``model.path`` serves, loaded as ``runner``;
    ``label``: a version given verbatim (``replay --model-version``), whatever the file says."""
    file, place = served_file(m)
    digest = file_digest(file)
    return ModelId(m.name, label or file_version(m.version, place, runner, digest), digest)


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
    serving model's signature, a warm-up, and on each probe batch one result row per row in every
    field, finite float outputs, and ``width`` columns of ``scores`` (0: any)."""
    if serving is not None:
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


@dataclass(frozen=True, slots=True)
class Reload:
    """What came of a load: ``runner`` to swap in, or ``refused`` with the reason."""

    file: Path
    version: str
    seconds: float  # from the change first seen (or SIGHUP) to the swap, or to the refusal
    runner: ModelRunner | None = None
    refused: str | None = None
    digest: str = ""  # file_digest of the file


class Reloader:
    """Watches ``model.path`` and loads a changed model on a thread of its own; :meth:`poll`,
    between batches, returns each load's outcome once."""

    def __init__(self, m: ModelConfig, load: Callable[[Path], ModelRunner] | None,
                 clock: Callable[[], float], rows: int) -> None:
        self._m, self._load, self._clock, self._rows = m, load, clock, rows
        self._seen = _state(m)  # model.path as looked at
        self._changed: tuple[str, int, int, int] | None = None  # a change seen once
        self._changed_at = 0.0
        self._next_look = clock() + m.reload_check_ms / 1000
        self._asked = False  # SIGHUP
        self._loading: threading.Thread | None = None
        self._loaded: Reload | None = None
        self._since = 0.0  # when the change being loaded was seen

    def ask(self) -> None:
        """Load ``model.path`` again at the next poll, changed or not (SIGHUP). Signal-safe."""
        self._asked = True

    @property
    def loading(self) -> bool:
        """A candidate is being loaded and checked."""
        return self._loading is not None

    def wait(self, timeout_s: float) -> None:
        """Wait for the load under way, if any (up to ``timeout_s``)."""
        if self._loading is not None:
            self._loading.join(timeout_s)

    def poll(self, serving: ModelRunner, version: str, width: int, last: Columns | None) -> Reload | None:
        """A finished load's outcome (checked against ``serving``, of output ``width``), once;
        else start a load when ``model.path`` changed (and held still for one look) or a reload
        was asked for, probing with zeros and ``last``, the last live batch."""
        if self._loading is not None:
            if self._loading.is_alive():
                return None
            self._loading, done, self._loaded = None, self._loaded, None
            assert done is not None
            done = replace(done, seconds=self._clock() - self._since)
            if done.runner is None:
                log.warning("refused the model at %s (the serving version %s goes on): %s",
                            done.file, version, done.refused)
            return done
        now = self._clock()
        if not self._asked and (not self._m.reload_check_ms or now < self._next_look):
            return None
        self._next_look = now + self._m.reload_check_ms / 1000
        state = _state(self._m)
        if self._asked or state != self._seen and state == self._changed:
            since = now if self._asked else self._changed_at
            self._asked, self._seen, self._changed = False, state, None
            self._since = since
            self._start(serving, version, width, last)
        elif state != self._seen:
            self._changed, self._changed_at = state, now  # loaded at the next look if it holds still
        return None

    def _start(self, serving: ModelRunner, version: str, width: int, last: Columns | None) -> None:
        if self._load is None:
            log.warning("model reload asked for, but this processor cannot load models")
            return
        file, place = served_file(self._m)
        probes = [serving.contract.blank(self._rows)]
        if last is not None:
            probes.append(last)
        log.info("loading %s beside the serving model (version %s)", file, version)
        self._loading = threading.Thread(target=self._candidate, args=(file, place, serving, width, probes),
                                         name="model-reload", daemon=True)
        self._loading.start()

    def _candidate(self, file: Path, place: str | None, serving: ModelRunner, width: int,
                   probes: list[Columns]) -> None:
        """In the loading thread: load, warm up and check one candidate; never raises."""
        assert self._load is not None
        runner: ModelRunner | None = None
        version, digest = self._m.version or place, ""
        try:
            runner = self._load(file)
            refused = check_candidate(runner, serving, probes, self._rows, width)
            digest = file_digest(file, strict=True)
            version = file_version(self._m.version, place, runner, digest)
        except Exception as exc:  # noqa: BLE001 - whatever a broken file does, the old model stays
            refused = f"{type(exc).__name__}: {exc}"
        self._loaded = Reload(file, version or "?", 0.0,  # the seconds are the swap's: poll
                              runner=None if refused else runner, refused=refused, digest=digest)


def checked_runner(cfg: Config, path: Path | None = None, key: str = "model.path",
                   like: ModelRunner | None = None, schema_in: dict[str, Any] | None = None) -> ModelRunner:
    """:func:`model_runner`, refused at start-up as a hot reload would refuse it: its fields must
    be in ``schema_in`` (the input's Avro schema, when there is one) with types it takes, it must
    have ``like``'s signature (when given), warm up, and answer a probe batch with finite outputs.
    A refusal is a ConfigError on ``key`` (exit 2): a restart cannot make the model servable."""
    try:
        runner = model_runner(cfg, path)
    except InferenceError as exc:
        raise ConfigError(key, str(exc)) from exc
    if like is None:
        runner.contract.check_fields(schema_in)
    name = (path or served_file(cfg.model)[0]).name
    try:
        refused = check_candidate(runner, like, [runner.contract.blank(2)], cfg.batching.max_size)
    except InferenceError as exc:
        refused = f"it fails on a probe batch: {exc}"
    if refused:
        raise ConfigError(key, f"cannot serve {name}: {refused}")
    return runner
