"""The online server's Prometheus metrics: requests by transport and status, requests shed at
admission (and why), rows queued, each request's latency and its hops (feature fetch, queue, model
call, encode), the rows per model call, the answers by source and the degraded ones by reason, and
the drift of the online features (with ``model.drift_profile``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
