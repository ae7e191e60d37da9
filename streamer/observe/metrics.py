"""Prometheus metrics of one processor, built from an injected registry, and their no-op twin."""

from __future__ import annotations

import functools
import platform
from collections.abc import Iterator
from typing import TYPE_CHECKING, get_args

import confluent_kafka
import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric

from streamer import __version__
from streamer.errors import STAGES
from streamer.pipeline.batcher import FlushReason

ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536)
FAST_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
DIFF_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
RELOAD_SECONDS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
E2E_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Metrics:
    """Every metric the processor exports, registered on ``registry`` under ``prefix``."""

    def __init__(self, registry: CollectorRegistry, prefix: str = "streamer") -> None:
        p = prefix
        self.registry = registry
        self.events_consumed = Counter(f"{p}_events_consumed", "Input events consumed",
                                       ["topic"], registry=registry)
        self.predictions_produced = Counter(f"{p}_predictions_produced",
                                            "Predictions acknowledged by the broker",
                                            ["topic"], registry=registry)
        self.dead_letters = Counter(f"{p}_dead_letters", "Dead letters acknowledged, by stage",
                                    ["stage"], registry=registry)
        self.batch_size = Histogram(f"{p}_batch_size_rows", "Rows per inference batch", ["model"],
                                    buckets=ROW_BUCKETS, registry=registry)
        self.flushes = Counter(f"{p}_batch_flushes", "Batch flushes by model and reason", ["model", "reason"],
                               registry=registry)
        self.batch_wait = Histogram(f"{p}_batch_wait_seconds", "Age of a batch's first row at flush",
                                    buckets=FAST_SECONDS, registry=registry)
        self.inference = Histogram(f"{p}_inference_seconds", "Duration of one model call",
                                   ["model", "version", "provider"], buckets=FAST_SECONDS,
                                   registry=registry)
        self.end_to_end = Histogram(f"{p}_end_to_end_latency_seconds",
                                    "Event time to acknowledged prediction", buckets=E2E_SECONDS,
                                    registry=registry)
        self.commit_failures = Counter(f"{p}_commit_failures", "Partitions whose commit failed",
                                       registry=registry)
        self.rebalances = Counter(f"{p}_rebalances", "Partition assignment changes", ["kind"],
                                  registry=registry)
        self.assigned_partitions = Gauge(f"{p}_assigned_partitions", "Partitions assigned now",
                                         registry=registry)
        self.in_flight_rows = Gauge(f"{p}_in_flight_rows",
                                    "Consumed rows whose outputs are not yet acknowledged",
                                    registry=registry)
        self.bisections = Counter(f"{p}_batch_bisections", "Failing batches split in two to find "
                                  "poison rows", registry=registry)
        self.healthy = Gauge(f"{p}_healthy", "1 while processing; 0 while blocked (model failing, "
                             "outputs unwritable)", registry=registry)
        self.input_broken = Gauge(f"{p}_input_broken", "1 while input is held because every row of the last "
                                  "processing.broken_input_batches batches failed validation the same way",
                                  registry=registry)
        self.model_info = Gauge(f"{p}_model_info", "The loaded model (value is always 1)",
                                ["model", "version", "provider"], registry=registry)
        tp = ["topic", "partition"]
        self.consumer_lag = Gauge(f"{p}_consumer_lag_messages", "Messages behind the partition's end "
                                  "(librdkafka statistics)", tp, registry=registry)
        self.committed_offset = Gauge(f"{p}_committed_offset", "Last committed position", tp,
                                      registry=registry)
        self.partition_stalled = Gauge(f"{p}_partition_stalled", "1 when a partition with work has "
                                       "not committed for metrics.stall_timeout_ms", tp,
                                       registry=registry)
        self.paused_partitions = Gauge(f"{p}_paused_partitions", "Partitions paused now",
                                       registry=registry)
        self.in_flight_batches = Gauge(f"{p}_in_flight_batches", "Batches flushed and not yet "
                                       "scored, plus output units awaiting acks", registry=registry)
        self.producer_queue = Gauge(f"{p}_producer_queue_messages", "Messages in the producer's "
                                    "local queue", registry=registry)
        self.feature_psi = Gauge(f"{p}_feature_psi", "Population stability index of a feature over the drift "
                                 "window, against the model's reference profile", ["model", "feature"], registry=registry)
        self.feature_out_of_range = Gauge(f"{p}_feature_out_of_range_ratio", "Share of a feature's values in "
                                          "the drift window outside the reference range", ["model", "feature"],
                                          registry=registry)
        self.degraded = Counter(f"{p}_degraded_predictions", "Rows scored by the fallback (model.fallback_*), "
                                "flagged degraded", ["model"], registry=registry)
        self.breaker_state = Gauge(f"{p}_model_breaker_state", "The model's circuit breaker: 0 closed, "
                                   "1 half-open (probing), 2 open (the fallback scores)", ["model"], registry=registry)
        self.reloads = Counter(f"{p}_model_reloads", "Model versions loaded while running, by result "
                               "(swapped, refused)", ["model", "result"], registry=registry)
        self.reload_seconds = Histogram(f"{p}_model_reload_seconds", "From a model change seen (or SIGHUP) to "
                                        "its swap or refusal", ["model"], buckets=RELOAD_SECONDS, registry=registry)
        ch = ["model", "challenger"]  # the champion's name, the challenger's
        self.shadow_rows = Counter(f"{p}_shadow_compared_rows", "Rows a challenger scored that the champion "
                                   "scored itself (compared)", ch, registry=registry)
        self.shadow_flips = Counter(f"{p}_shadow_flips", "Compared rows whose decision (score[0] >= "
                                    "shadow.flip_threshold) differs from the champion's", ch, registry=registry)
        self.shadow_abs_diff = Histogram(f"{p}_shadow_abs_diff", "Absolute difference of a challenger's first "
                                         "score from the champion's, per compared row", ch,
                                         buckets=DIFF_BUCKETS, registry=registry)
        self.shadow_predictions = Counter(f"{p}_shadow_predictions", "Shadow predictions acknowledged by the "
                                          "broker", ch, registry=registry)
        self.shadow_failures = Counter(f"{p}_shadow_failures", "A challenger's rows not published, by stage "
                                       "(skipped: its queue was full; score, encode, produce)",
                                       ["model", "challenger", "stage"], registry=registry)
        self.build_info = Gauge(f"{p}_build_info", "streamer and runtime versions (value is 1)",
                                ["version", "python", "librdkafka"], registry=registry)
        self.build_info.labels(__version__, platform.python_version(), confluent_kafka.libversion()[0]).set(1)
        # Known label values start at zero, so dashboards and alerts see a series before the
        # first event of its kind.
        for stage in STAGES:
            self.dead_letters.labels(stage)
        for kind in ("assign", "revoke", "lost"):
            self.rebalances.labels(kind)

    def of_model(self, model: str) -> None:
        """Start a model's labelled series at zero (its batches, flushes by reason, degraded rows,
        breaker, reloads by result and their seconds)."""
        for metric in (self.batch_size, self.degraded, self.breaker_state, self.reload_seconds):
            metric.labels(model)
        for reason in get_args(FlushReason):
            self.flushes.labels(model, reason)
        for result in ("swapped", "refused"):
            self.reloads.labels(model, result)


class NullMetric:
    """A metric that takes every recording call a Counter, Gauge or Histogram takes, and drops it."""

    __slots__ = ()

    def labels(self, *_values: object, **_labels: object) -> NullMetric:
        return self

    def remove(self, *_values: object) -> None:
        pass

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass


_NULL_METRIC = NullMetric()


def observe_many(histogram: Histogram | NullMetric, values: np.ndarray) -> None:
    """``histogram.observe(v)`` for every v of ``values``, one bucket increment per bucket.

    What observe does per value (add to the sum, count in the first bucket whose upper bound is
    >= the value), done with numpy for a batch; proven equal to the loop in tests/observe/test_metrics.py.
    """
    if not isinstance(histogram, Histogram) or not len(values):
        return
    values = np.asarray(values, np.float64)
    histogram._raise_if_not_observable()
    histogram._sum.inc(float(values.sum()))
    counts = np.bincount(np.searchsorted(np.asarray(histogram._upper_bounds), values, side="left"),
                         minlength=len(histogram._upper_bounds))
    for bucket, count in zip(histogram._buckets, counts.tolist()):
        if count:
            bucket.inc(count)


class GroupRegistry(CollectorRegistry):
    """A registry whose every sample also carries the consumer group's label (``group``), as the
    lag exporter's do: dashboards and alerts select processors and lag by the same group."""

    def __init__(self, group: str) -> None:
        super().__init__()
        self._group = group

    def collect(self) -> Iterator[Metric]:
        for metric in super().collect():  # fresh Metric objects on every collection
            metric.samples = [s._replace(labels={"group": self._group, **s.labels}) for s in metric.samples]
            yield metric


class NullMetrics:
    """The no-op twin of :class:`Metrics`, for a processor run without metrics: the same
    attributes, each metric a :class:`NullMetric`, so callers record without asking first.

    Example: ``NullMetrics().dead_letters.labels("infer").inc()`` does nothing; a name Metrics
    does not have raises AttributeError, as on Metrics.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()  # stays empty: nothing is recorded
        for name in _metric_names():
            setattr(self, name, _NULL_METRIC)

    if TYPE_CHECKING:  # the metric attributes are set from Metrics' own, in __init__
        def __getattr__(self, name: str) -> NullMetric: ...


@functools.cache
def _metric_names() -> tuple[str, ...]:
    # Read off a Metrics on a throwaway registry, so the twin never lags behind a new metric.
    sample = Metrics(CollectorRegistry())
    return tuple(name for name, value in vars(sample).items() if isinstance(value, MetricWrapperBase))
