"""The online server's Prometheus metrics: requests by transport and status, requests shed at
admission (and why), rows queued, each request's latency, the rows per model call, and the drift of
the online features (with ``model.drift_profile``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
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
        for reason in ("queue", "deadline", "stopping", "expired"):
            self.shed.labels(reason)
