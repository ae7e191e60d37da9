"""Shadow scoring (champion/challenger): challengers score the live batches beside the champion.

Each challenger (``shadow.challengers``) runs in its own thread with a queue of at most
``shadow.queue_batches`` batches. The loop hands it every batch the champion scored
(:meth:`Shadow.submit`, which never waits: a batch that finds the queue full is skipped for that
challenger and counted) and, between batches, publishes what the challengers finished
(:meth:`Shadow.pump`): their predictions to the shadow topic (``shadow.topic``, default
``<output.topic>.shadow``), with their own model name and version, and the agreement with the
champion on the same rows: the absolute difference of the decision scores, and the decisions that
flip at ``shadow.flip_threshold`` (a decision is ``score >= threshold``). The decision score is
the first column of ``scores`` when outputs are not mapped and, with named outputs, the first float field: a single
value as it is, a two-class probability row's P(second class), a wider row's largest probability
(outputs.decision_scores). Rows the champion
could not score itself (poison rows, degraded batches) are not compared.

So a failing or slow challenger never blocks, delays or dead-letters the champion's rows: the
champion's path only puts a reference on a queue. Its failures are counted and logged (once a
minute at most), never retried. Shadow predictions are an analysis stream, written by a plain
idempotent producer outside the champion's commits and transactions: a crash may lose the last
ones and a rewind or restart may write some twice; they never hold up an input offset.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from confluent_kafka import KafkaError

from streamer.config import ChallengerConfig, Config, ShadowConfig, shadow_topic
from streamer.errors import ConfigError
from streamer.formats.codec import Codec
from streamer.formats.json_events import JsonCodec
from streamer.kafka.clients import ensure_topic, make_producer
from streamer.model.onnx_file import file_digest
from streamer.model.outputs import decision_scores
from streamer.model.runner import ModelRunner, model_runner
from streamer.model.signature import Columns
from streamer.observe.metrics import Metrics, NullMetrics, observe_many
from streamer.pipeline.records import ModelId, Rows, Scored, Stamp
from streamer.pipeline.stages import Stages

log = logging.getLogger(__name__)
LOG_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class _Job:
    rows: Rows
    champion: np.ndarray | None  # the champion's first scores (NaN: not its own); None: degraded


@dataclass(frozen=True, slots=True)
class _Done:
    job: _Job
    scores: Columns | None  # the challenger's result; None: it failed
    error: Exception | None
    seconds: float


class Challenger:
    """One challenger model and the thread that scores its queue."""

    def __init__(self, spec: ChallengerConfig, runner: ModelRunner, depth: int) -> None:
        self.runner = runner
        self.model = ModelId(spec.name, spec.version, file_digest(spec.path))  # what its predictions carry
        self.inbox: queue.Queue[_Job | None] = queue.Queue(maxsize=depth)
        self.done: queue.Queue[_Done] = queue.Queue()
        self.thread = threading.Thread(target=self._work, name=f"shadow-{spec.name}", daemon=True)
        self.logged_at = -LOG_EVERY_S

    def _work(self) -> None:
        while (job := self.inbox.get()) is not None:
            started = time.perf_counter()
            try:
                scores, error = self.runner.run(job.rows.features), None
            except Exception as exc:  # noqa: BLE001 - whatever a challenger does, it stays in shadow
                scores, error = None, exc
            self.done.put(_Done(job, scores, error, time.perf_counter() - started))


class Shadow:
    """The challengers of one processor, their shadow predictions and agreement metrics."""

    def __init__(self, s: ShadowConfig, topic: str, challengers: list[tuple[ChallengerConfig, ModelRunner]],
                 stages: Stages, make_producer: Callable[[], Any], metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 ensure_topic: Callable[[str], object] = lambda topic: None, model: str = "") -> None:
        """``s``: the ``shadow`` section; ``topic``: where shadow predictions go (config.shadow_topic);
        ``stages``: the champion's encoder of predictions; ``model``: the champion's name (the
        metrics' ``model`` label)."""
        self.challengers = [Challenger(spec, runner, s.queue_batches) for spec, runner in challengers]
        self.topic, self.threshold = topic, s.flip_threshold
        self._stages, self._make_producer, self._ensure = stages, make_producer, ensure_topic
        self._clock, self.model = clock, model
        self.metrics: Metrics | NullMetrics = metrics if metrics is not None else NullMetrics()
        self._producer: Any = None
        self.compared = self.flips = self.skipped = self.failed = self.produced = 0  # for tests and notes
        for c in self.challengers:
            for stage in ("skipped", "score", "encode", "produce"):
                self.metrics.shadow_failures.labels(self.model, c.model.name, stage)

    def start(self, rows: int) -> None:
        """Create the shadow topic if missing (shaped like the output topic), warm every
        challenger up (``rows`` at a time) and start its thread."""
        if self.challengers:
            self._ensure(self.topic)
        for c in self.challengers:
            try:
                c.runner.warm_up(rows)
            except Exception as exc:  # noqa: BLE001 - a challenger that cannot warm up stays in shadow
                self._failed(c, "score", f"failed to warm up: {exc}")
            c.thread.start()
        if self.challengers:
            log.info("shadow: %s scored beside the champion, predictions to %s",
                     ", ".join(f"{c.model.name} v{c.model.version}" for c in self.challengers), self.topic)

    def submit(self, rows: Rows, out: Scored) -> None:
        """Queue a scored batch for every challenger; never waits (a full queue skips the batch)."""
        if not self.challengers or not len(rows):
            return
        champion = None if out.degraded is not None else decision_scores(out.scores)
        job = _Job(rows, champion)
        for c in self.challengers:
            try:
                c.inbox.put_nowait(job)
            except queue.Full:
                self.skipped += len(rows)
                self.metrics.shadow_failures.labels(self.model, c.model.name, "skipped").inc(len(rows))

    def pump(self) -> None:
        """Publish what the challengers finished: shadow predictions and agreement."""
        for c in self.challengers:
            while True:
                try:
                    done = c.done.get_nowait()
                except queue.Empty:
                    break
                self._publish(c, done)
        if self._producer is not None:
            self._producer.poll(0)

    def close(self, timeout_s: float) -> None:
        """Let the challengers finish what is queued (up to ``timeout_s``), publish it, flush."""
        deadline = self._clock() + timeout_s
        for c in self.challengers:
            try:
                c.inbox.put(None, timeout=max(0.0, deadline - self._clock()))
            except queue.Full:
                continue  # still busy: its daemon thread ends with the process
        for c in self.challengers:
            c.thread.join(max(0.0, deadline - self._clock()))
        self.pump()
        if self._producer is not None:
            left = self._producer.flush(max(0.0, deadline - self._clock()))
            if left:
                log.warning("shadow: %d predictions not acknowledged at close", left)
            self._producer = None  # a closed shadow holds no client (another publish makes one)

    # ---- publishing -----------------------------------------------------------------------

    def _publish(self, c: Challenger, done: _Done) -> None:
        m = self.metrics
        if done.error is not None or done.scores is None:
            self._failed(c, "score", f"failed on a batch of {len(done.job.rows)} rows: {done.error}")
            return
        scores = done.scores
        m.inference.labels(c.model.name, c.model.version, c.runner.provider).observe(done.seconds)
        n = len(done.job.rows)
        if not scores.arrays or any(len(v) != n for v in scores.arrays.values()):
            self._failed(c, "score", f"answered {scores!r} for {n} rows")
            return
        self._compare(c, done.job.champion, scores)
        stamp = Stamp.of(Scored(scores, model=c.model, provider=c.runner.provider), int(time.time() * 1000))
        rows, values, rejects = self._stages.encode(done.job.rows, scores, {}, stamp)
        if rejects:
            self._failed(c, "encode", f"{len(rejects)} predictions could not be encoded: {rejects[0][0]}",
                         count=len(rejects))
        self._produce(c, rows, values)

    def _compare(self, c: Challenger, champion: np.ndarray | None, scores: Columns) -> None:
        if champion is None:
            return
        own = ~np.isnan(champion)
        theirs, ours = decision_scores(scores)[own], champion[own]
        flips = int(np.count_nonzero((theirs >= self.threshold) != (ours >= self.threshold)))
        self.compared += len(ours)
        self.flips += flips
        self.metrics.shadow_rows.labels(self.model, c.model.name).inc(len(ours))
        self.metrics.shadow_flips.labels(self.model, c.model.name).inc(flips)
        observe_many(self.metrics.shadow_abs_diff.labels(self.model, c.model.name), np.abs(theirs - ours))

    def _produce(self, c: Challenger, rows: Rows, values: list[bytes]) -> None:
        if self._producer is None:
            self._producer = self._make_producer()
        items = rows.source.items

        def report(err: KafkaError | None, _msg: Any) -> None:
            if err is None:
                self.produced += 1
                self.metrics.shadow_predictions.labels(self.model, c.model.name).inc()
            else:
                self._failed(c, "produce", f"the broker refused a shadow prediction: {err}")

        for i, value in enumerate(values):
            try:
                self._producer.produce(self.topic, value, items[i].key(), on_delivery=report)
            except BufferError:  # the local queue is full: shadow output is dropped, never waited for
                self._failed(c, "produce", "the producer's queue is full: shadow predictions dropped",
                             count=len(values) - i)
                return

    def _failed(self, c: Challenger, stage: str, why: str, count: int = 1) -> None:
        self.failed += count
        self.metrics.shadow_failures.labels(self.model, c.model.name, stage).inc(count)
        now = self._clock()
        if now - c.logged_at >= LOG_EVERY_S:
            c.logged_at = now
            log.warning("shadow %s v%s: %s (the champion is not affected; logged once a minute)",
                        c.model.name, c.model.version, why)


def shadow_of(cfg: Config, champion: ModelRunner, encoder: Codec, metrics: Metrics | None) -> Shadow | None:
    """The challengers of ``shadow.challengers``, each checked to take the champion's input."""
    if not cfg.shadow.challengers:
        return None
    challengers = []
    for n, spec in enumerate(cfg.shadow.challengers):
        runner = model_runner(cfg, spec.path)
        if differs := champion.signature.differs(runner.signature):
            raise ConfigError(f"shadow.challengers[{n}].path", f"{spec.name!r}: {differs}")
        challengers.append((spec, runner))
    stages = Stages.serving(JsonCodec(), encoder, cfg, champion)  # encodes only
    return Shadow(cfg.shadow, shadow_topic(cfg), challengers, stages, lambda: make_producer(cfg), metrics,
                  ensure_topic=lambda topic: ensure_topic(cfg, topic, like=cfg.output.topic), model=cfg.model.name)
