"""The online server's Prometheus metrics: requests by transport and status, requests shed at
admission (and why), rows queued, each request's latency and its hops (feature fetch, queue, model
call, encode), the rows per model call, the answers by source and the degraded ones by reason, and
the drift of the online features (with ``model.drift_profile``).

Several models online (``models``): each model's meters are on a registry of its own, and the
server exposes them together (:class:`ModelsRegistry`), each sample labelled with its ``model``
(and the consumer ``group``), so one dashboard selects a model as it selects a processor."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
HOP_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
HOPS = ("features", "queue", "model", "encode")  # a request's hops, in order
SOURCES = ("precomputed", "scored")  # where an answer's prediction comes from
DEGRADED = ("breaker", "deadline", "features")  # why an answer is degraded
ROWS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class OnlineMetrics:
    """Every online metric, registered on ``registry``; labels ``transport``: http, grpc, score."""

    def __init__(self, registry: CollectorRegistry | None = None, prefix: str = "streamer_online") -> None:
        self.registry = registry or CollectorRegistry()
        r, p = self.registry, prefix
        self.requests = Counter(f"{p}_requests", "Inference requests answered, by transport and status code",
                                ["transport", "code"], registry=r)
        self.shed = Counter(f"{p}_shed", "Requests refused at admission (503) or expired while waiting, by reason",
                            ["reason"], registry=r)
        self.queued_rows = Gauge(f"{p}_queued_rows", "Rows admitted and not yet scored", registry=r)
        self.latency = Histogram(f"{p}_request_seconds", "From a request's arrival to its answer, by transport",
                                 ["transport"], buckets=LATENCY_BUCKETS, registry=r)
        self.batch_rows = Histogram(f"{p}_batch_rows", "Rows per model call of the online batches",
                                    buckets=ROWS_BUCKETS, registry=r)
        self.feature_psi = Gauge(f"{p}_feature_psi", "Population stability index of a feature of the online "
                                 "requests over the drift window, against the model's reference profile",
                                 ["feature"], registry=r)
        self.feature_out_of_range = Gauge(f"{p}_feature_out_of_range_ratio", "Share of a feature's values in the "
                                          "online drift window outside the reference range", ["feature"], registry=r)
        self.answers = Counter(f"{p}_answers", "Answers of /v1/score and /v1/predictions by where the prediction "
                               "comes from: precomputed (the kv: store) or scored", ["source"], registry=r)
        self.degraded = Counter(f"{p}_degraded", "Answers of /v1/score flagged degraded, by reason: breaker (the "
                                "model's breaker is open), deadline (it could not be met), features (the fetch "
                                "failed or timed out)", ["reason"], registry=r)
        self.hop = Histogram(f"{p}_hop_seconds", "Each hop of an online answer: features (the fetch), queue "
                             "(admitted to its batch's model call), model (the call), encode (the call's end "
                             "to the answer's body)", ["hop"], buckets=HOP_BUCKETS, registry=r)
        for reason in ("queue", "deadline", "stopping", "expired"):
            self.shed.labels(reason)
        self.sources = {source: self.answers.labels(source) for source in SOURCES}
        self.reasons = {reason: self.degraded.labels(reason) for reason in DEGRADED}
        self.hops = {hop: self.hop.labels(hop) for hop in HOPS}


class ModelsRegistry(CollectorRegistry):
    """The online meters of several models as one registry: :meth:`of` a model is the registry its
    meters live on; a collection yields each metric once, its samples labelled ``group`` and
    ``model``, whichever models' registries hold it."""

    def __init__(self, group: str) -> None:
        super().__init__()
        self._group = group
        self._models: dict[str, CollectorRegistry] = {}

    def of(self, model: str) -> CollectorRegistry:
        """Model ``model``'s registry (made at its first call, kept across its loads)."""
        return self._models.setdefault(model, CollectorRegistry())

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for metric in super().collect():
            merged[metric.name] = metric
        for model, registry in list(self._models.items()):
            for metric in registry.collect():  # fresh Metric objects on every collection
                samples = [s._replace(labels={"group": self._group, "model": model, **s.labels}) for s in metric.samples]
                if metric.name in merged:
                    merged[metric.name].samples += samples
                else:
                    metric.samples = samples
                    merged[metric.name] = metric
        yield from merged.values()
