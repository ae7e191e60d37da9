"""What a processor runs on: the wiring that commands build before it runs, and the scope of a bounded run with its run id."""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from streamer.config import Config
from streamer.errors import ConfigError
from streamer.formats.codec import Codec
from streamer.kafka.messages import Acked
from streamer.kafka.ranges import Ranges
from streamer.kafka.side import OpenKafka
from streamer.kafka.topics import TopicWait
from streamer.model.runner import ModelRunner
from streamer.observe.health import Status
from streamer.observe.metrics import Metrics
from streamer.pipeline.batcher import Batch
from streamer.pipeline.records import Partition, Rows, Scored
from streamer.pipeline.serving import Serving

_RUN_ID = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


class Observer(Protocol):
    """What the loop reports as it goes, to the processor's accounting and to whoever else
    watches it (a benchmark's stage timer): rows decoded from a consumed chunk, a batch scored
    and its predictions encoded, outputs acknowledged by the broker. Called on the loop's thread;
    an observer must not block."""

    def decoded(self, rows: Rows) -> None: ...

    def scored(self, batch: Batch[Rows], seconds: float, out: Scored, predicted: Rows) -> None: ...

    def acked(self, acked: Acked) -> None: ...


@dataclass(frozen=True, slots=True)
class Observers:
    """Several observers as one, told in order."""

    each: tuple[Observer, ...]

    def decoded(self, rows: Rows) -> None:
        for o in self.each:
            o.decoded(rows)

    def scored(self, batch: Batch[Rows], seconds: float, out: Scored, predicted: Rows) -> None:
        for o in self.each:
            o.scored(batch, seconds, out, predicted)

    def acked(self, acked: Acked) -> None:
        for o in self.each:
            o.acked(acked)


@dataclass(frozen=True, slots=True)
class ModelSide:
    """One model a routed processor scores with: its one-model config (config.for_model), its
    serving and its predictions' codec."""

    cfg: Config
    serving: Serving
    encoder: Codec


@dataclass(frozen=True, slots=True)
class Wiring:
    """Everything one processor needs, built and checked before it runs (wiring/stream.py builds it):
    the model that scores, the input and output codecs, the Kafka side to open when it runs, the
    metrics (None: not exported) and the clock. ``health`` serves /metrics, /healthz and /readyz for a
    status source (None: not served). ``observers`` watch the loop beside its accounting. ``topics``:
    the topics the processor waits for before it reads anything (None: none, fake clients).
    ``models``: the models of a route (``route.field``), the default first, whose serving and
    encoder are ``serving`` and ``encoder``; empty: ``serving`` scores every event."""

    cfg: Config
    serving: Serving
    decoder: Codec
    encoder: Codec
    kafka: OpenKafka
    metrics: Metrics | None = None
    clock: Callable[[], float] = time.monotonic
    health: Callable[[Callable[[], Status]], Any] | None = None
    observers: tuple[Observer, ...] = ()
    topics: TopicWait | None = None
    models: tuple[ModelSide, ...] = ()

    @property
    def runner(self) -> ModelRunner:
        return self.serving.runner


@dataclass(frozen=True, slots=True)
class Scope:
    """A bounded run (a replay): exactly ``[start, end)`` of each partition of ``bounds``, assigned
    directly; ``run_id`` stamps its predictions; ``commit_metadata`` is kept with each partition's
    commits (a replay's bounds, so that a crashed run resumes with them)."""

    bounds: Ranges | None = None
    run_id: str | None = None
    commit_metadata: Callable[[Partition], str] | None = None


def new_run_id(given: str | None) -> str:
    """A bounded run's id (a replay's, a lake run's, an evaluation's): ``given`` checked (letters,
    digits, '.', '_', '-', up to 100: it names consumer groups, commits and files), or a new one
    of the time and 4 hex digits."""
    run_id = given or dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S-") + uuid.uuid4().hex[:4]
    if not _RUN_ID.match(run_id):
        raise ConfigError("--run-id", f"{run_id!r}: letters, digits, '.', '_' and '-' only, up to 100")
    return run_id
