"""Counting what the processor did, into its Stats and its Prometheus metrics at once.

The loop reports events (consumed, a batch scored, outputs final, a commit); this module turns
each into the summary counts (:class:`Stats`) and the exported metrics, so the loop holds no
metric code. Without metrics, the no-op twin takes the calls.

The model side's metrics carry a ``model`` label (the model's name): batch sizes, flushes,
inference seconds, degraded rows, the breaker's state, reloads, drift and the model's info (and
the challengers', shadow.py), so a
processor of several models (``route``) tells them apart.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamer.config import Config, ModelConfig
from streamer.kafka.checkpoint import Commit
from streamer.kafka.messages import Acked
from streamer.observe.drift import DriftGauges
from streamer.observe.metrics import Metrics, NullMetrics, observe_many
from streamer.observe.report import ProgressLog
from streamer.observe.stats import Stats
from streamer.pipeline.batcher import Batch
from streamer.pipeline.records import Rows, Scored
from streamer.pipeline.reload import Reload

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _OfModel:
    """A metric labelled ``model`` first, seen as one without it (what DriftGauges sets)."""

    metric: Any
    model: str

    def labels(self, *values: str) -> Any:
        return self.metric.labels(self.model, *values)


class Accounting:
    """Stats and metrics of one processor. ``models``: each model it scores with, the default
    first, and its numeric inputs' width (drift); None: ``cfg.model``'s, ``n_features`` wide."""

    def __init__(self, stats: Stats, metrics: Metrics | None, cfg: Config, n_features: int,
                 clock: Callable[[], float] = time.monotonic,
                 models: Mapping[str, tuple[ModelConfig, int]] | None = None) -> None:
        self.stats = stats
        self.log = ProgressLog(cfg.metrics.log_interval_ms / 1000.0, clock, cfg.model.name)
        self._held: str | None = None
        self._assigned = 0
        self.metrics: Metrics | NullMetrics = metrics if metrics is not None else NullMetrics()
        models = models or {cfg.model.name: (cfg.model, n_features)}
        self._default, self._output_topic = next(iter(models)), cfg.output.topic  # the default model first
        self._model = {name: [name, m.version, ""] for name, (m, _) in models.items()}  # its model_info labels
        self.drifts = {name: DriftGauges.of(m.drift_profile, width, m.drift_window_rows,  # where it is exported
                                            _OfModel(self.metrics.feature_psi, name),
                                            _OfModel(self.metrics.feature_out_of_range, name))
                       for name, (m, width) in models.items() if metrics is not None}
        self.drift = self.drifts.get(self._default)
        if metrics is not None:
            for name in models:
                metrics.of_model(name)

    def started(self, provider: str, version: str, model: str | None = None) -> None:
        info = self._model[model or self._default]
        info[1:] = version, provider
        self.metrics.model_info.labels(*info).set(1)
        self.metrics.healthy.set(1)

    def reloaded(self, reload: Reload | None, model: str | None = None) -> None:
        """A model load ended: swapped in (the info series moves to its version) or refused."""
        if reload is None:
            return
        name = model or self._default
        self.metrics.reloads.labels(name, "refused" if reload.runner is None else "swapped").inc()
        self.metrics.reload_seconds.labels(name).observe(reload.seconds)
        if reload.runner is not None:
            self.stats.reloads += 1
            info = self._model[name]
            self.metrics.model_info.remove(*info)
            info[1:] = reload.version, reload.runner.provider
            self.metrics.model_info.labels(*info).set(1)

    def consumed(self, topics: list[str]) -> None:
        """Messages consumed (the topic of each)."""
        self.stats.events += len(topics)
        if topics and self.stats.first_event_at is None:
            self.stats.first_event_at = time.monotonic()
        if topics and topics.count(topics[0]) == len(topics):  # one topic: no count per message in Python
            self.metrics.events_consumed.labels(topics[0]).inc(len(topics))
            return
        for topic, count in Counter(topics).items():
            self.metrics.events_consumed.labels(topic).inc(count)

    def decoded(self, rows: Rows) -> None:
        """Nothing to count: consumed() counted the messages, and rejects count as dead letters."""

    def acked(self, acked: Acked) -> None:
        """Nothing to count yet: outputs count once final (:meth:`final`, or a transaction's commit)."""

    def breaker(self, state: int, model: str | None = None) -> None:
        """A serving model's breaker state code, after each batch."""
        self.metrics.breaker_state.labels(model or self._default).set(state)

    def scored(self, batch: Batch[Rows], seconds: float, out: Scored, predicted: Rows) -> None:
        """A batch scored, by the model or (degraded) by the fallback, and its predictions encoded."""
        s, m, scored = self.stats, self.metrics, out
        name = out.model.name.removesuffix("-fallback") if out.degraded is not None else out.model.name
        name = name if name in self._model else self._default
        s.batches += 1
        s.rows_batched += len(batch.rows)
        s.flushes[batch.reason] += 1
        s.model_calls += scored.calls
        s.bisections += scored.bisections
        m.batch_size.labels(name).observe(len(batch.rows))
        m.flushes.labels(name, batch.reason).inc()
        m.batch_wait.observe(batch.wait_s)
        m.inference.labels(out.model.name or name, out.model.version, out.provider).observe(seconds)
        if out.degraded is not None:
            s.degraded += len(batch.rows)
            m.degraded.labels(name).inc(len(batch.rows))
        if scored.bisections:
            m.bisections.inc(scored.bisections)
        if (drift := self.drifts.get(name)) is not None:
            drift.add(batch.rows.features)

    def final(self, acked: Acked) -> None:
        """Outputs acknowledged for good (committed, under exactly-once): count and time them."""
        if not acked:
            return
        now_ms = time.time() * 1000
        self.stats.last_ack_at = time.monotonic()
        times = [rows.event_times for rows in acked.batches]
        singles = []
        for out in acked.outputs:
            if out.stage is None:
                singles.append(out.event_time_ms)
            else:
                self.stats.dead_letters[out.stage] += 1
                self.metrics.dead_letters.labels(out.stage).inc()
        if singles:
            times.append(np.array(singles, np.int64))
        if not times:
            return
        latencies = now_ms - np.concatenate(times)
        self.stats.predictions += len(latencies)
        self.stats.record_latencies(latencies)
        self.metrics.predictions_produced.labels(self._output_topic).inc(len(latencies))
        observe_many(self.metrics.end_to_end, latencies / 1000.0)

    def commit(self, commit: Commit) -> None:
        """A commit's positions, failures (logged: retried next time) and now-final outputs."""
        for (topic, partition), offset in commit.committed.items():
            self.metrics.committed_offset.labels(topic, str(partition)).set(offset)
        if commit.attempted:
            self.stats.commits += 1
        if commit.error is not None:
            log.warning("%s (will retry)", commit.error)
            self.metrics.commit_failures.inc(commit.failed_partitions)
        self.final(commit.counted)

    def rebalanced(self, kind: str, assigned: int) -> None:
        self.metrics.rebalances.labels(kind).inc()
        self.metrics.assigned_partitions.set(assigned)

    def gauges(self, *, held: str | None, paused: bool, assigned: int, in_flight_rows: int,
               input_broken: bool = False) -> None:
        """``held``: why the loop is blocked (None: it is not); ``input_broken``: held for broken input."""
        self._held, self._assigned = held, assigned
        self.metrics.healthy.set(0 if held else 1)
        self.metrics.input_broken.set(1 if input_broken else 0)
        self.metrics.paused_partitions.set(assigned if paused else 0)
        self.metrics.in_flight_rows.set(in_flight_rows)

    def queues(self, batches: int, producer_queue: int, lag: Mapping[Any, int]) -> None:
        """Once a pass: the queue gauges, and the progress line when it is due."""
        self.metrics.in_flight_batches.set(batches)
        self.metrics.producer_queue.set(producer_queue)
        self.log.tick(self.stats, version=self._model[self._default][1], assigned=self._assigned, lag=lag, held=self._held)

    def stopped(self, failed: bool) -> None:
        self.log.summary(self.stats, failed)
