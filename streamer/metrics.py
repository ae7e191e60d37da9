"""Prometheus metrics of one processor, built from an injected registry, and their HTTP endpoint."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536)
FAST_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
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
        self.batch_size = Histogram(f"{p}_batch_size_rows", "Rows per inference batch",
                                    buckets=ROW_BUCKETS, registry=registry)
        self.flushes = Counter(f"{p}_batch_flushes", "Batch flushes by reason", ["reason"],
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
        self.model_info = Gauge(f"{p}_model_info", "The loaded model (value is always 1)",
                                ["model", "version", "provider"], registry=registry)


def serve(registry: CollectorRegistry, host: str, port: int) -> None:
    """Serve ``/metrics`` on ``host:port`` in a daemon thread (loopback unless configured)."""
    start_http_server(port, addr=host, registry=registry)
