"""`streamer lag-exporter`: a consumer group's lag, exported without any of its members.

Reads the group's committed offsets and the partitions' end offsets and exports, per partition
and in total, the lag in messages and an estimate in seconds: the age of the first uncommitted
message. It never joins the group, so it keeps working when every processor is down, which is
when the lag matters most.

Of the processors' config file it reads only what it uses (:class:`LagConfig`): the cluster
(``kafka``, security settings included), the group and its topics, where to serve. The model and
schema files the rest of the file names need not exist where it runs.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, Gauge

from streamer.config import KAFKA_NEEDS, MetricsConfig, Secret
from streamer.config_check import check_types
from streamer.errors import BrokerError, ConfigError
from streamer.kafka.clients import admin_consumer, plain_admin, retrying
from streamer.kafka.topics import partitions
from streamer.pipeline.records import Partition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GroupSection:
    """``input.group_id`` and ``input.topics`` of a processor's config: the group and what it reads."""

    topics: tuple[str, ...]
    group_id: str

    def __post_init__(self) -> None:
        check_types(self, "input")
        if not self.topics or not all(self.topics):
            raise ConfigError("input.topics", "needs at least one topic, and no empty name")
        if not self.group_id:
            raise ConfigError("input.group_id", "cannot be empty")


@dataclass(frozen=True, slots=True)
class LagConfig:
    """The part of a processor's config the lag exporter reads (``config_file.load_part``)."""

    kafka: Mapping[str, str | Secret]
    input: GroupSection
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.kafka, Mapping) or "bootstrap.servers" not in self.kafka:
            raise ConfigError("kafka", KAFKA_NEEDS)
        check_types(self, "")


class LagExporter:
    """Computes a group's lag on demand (:meth:`collect`) into gauges on ``registry``.

    ``client_config`` is the cluster: a bootstrap address or a librdkafka mapping.
    """

    def __init__(self, client_config: str | Mapping[str, Any], group: str, topics: Sequence[str],
                 registry: CollectorRegistry, prefix: str = "streamer") -> None:
        self.group, self.topics = group, list(topics)
        # Names the group to read its commits; never subscribes, so it is never a member.
        self._offsets = admin_consumer(client_config, group)
        # Reads the first uncommitted message of a lagging partition, for its timestamp.
        self._peek = admin_consumer(client_config, f"{group}.lag-exporter-{uuid.uuid4().hex[:6]}")
        self._admin = plain_admin(client_config)
        labels = ["group", "topic", "partition"]
        p = prefix
        self.lag_messages = Gauge(f"{p}_group_lag_messages", "End offset minus committed offset",
                                  labels, registry=registry)
        self.lag_seconds = Gauge(f"{p}_group_lag_seconds", "Age of the first uncommitted message "
                                 "(0 when caught up)", labels, registry=registry)
        # A gauge: no "_total" suffix, which Prometheus reserves for counters.
        self.total_lag_messages = Gauge(f"{p}_group_total_lag_messages", "Lag summed over "
                                        "partitions", ["group"], registry=registry)
        self.lag_seconds_max = Gauge(f"{p}_group_lag_seconds_max", "Oldest uncommitted message "
                                     "over partitions", ["group"], registry=registry)
        self.members = Gauge(f"{p}_group_members", "Members of the group now", ["group"],
                             registry=registry)
        self.scrape_errors = Gauge(f"{p}_lag_exporter_errors", "1 when the last collection failed",
                                   ["group"], registry=registry)

    def collect(self, timeout_s: float = 10.0) -> dict[Partition, int]:
        """Refresh every gauge; returns the lag in messages per (topic, partition)."""
        try:
            lags = self._collect(timeout_s)
        except (KafkaException, BrokerError) as exc:
            log.warning("lag collection for group %s failed: %s", self.group, exc)
            self.scrape_errors.labels(self.group).set(1)
            raise
        self.scrape_errors.labels(self.group).set(0)
        return lags

    def _collect(self, timeout_s: float) -> dict[Partition, int]:
        tps = [TopicPartition(topic, p) for topic in self.topics
               for p in partitions(self._offsets, topic, timeout_s)]
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in retrying(lambda: self._offsets.committed(tps, timeout=timeout_s),
                                        "reading the group's offsets", timeout_s)}
        lags: dict[Partition, int] = {}
        starts: dict[Partition, int] = {}
        for tp in tps:
            low, high = self._offsets.get_watermark_offsets(tp, timeout=timeout_s)
            start = committed[(tp.topic, tp.partition)]
            start = low if start < 0 else max(start, low)  # nothing committed: all retained is lag
            lags[(tp.topic, tp.partition)] = max(high - start, 0)
            starts[(tp.topic, tp.partition)] = start
        ages = self._ages({k: starts[k] for k, lag in lags.items() if lag > 0}, timeout_s)
        for (topic, part), lag in lags.items():
            self.lag_messages.labels(self.group, topic, str(part)).set(lag)
            self.lag_seconds.labels(self.group, topic, str(part)).set(ages.get((topic, part), 0.0))
        self.total_lag_messages.labels(self.group).set(sum(lags.values()))
        self.lag_seconds_max.labels(self.group).set(max(ages.values(), default=0.0))
        self.members.labels(self.group).set(self._member_count(timeout_s))
        return lags

    def _ages(self, starts: dict[Partition, int], timeout_s: float) -> dict[Partition, float]:
        """Seconds since the timestamp of each partition's first uncommitted message."""
        if not starts:
            return {}
        self._peek.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])
        ages: dict[Partition, float] = {}
        deadline = time.monotonic() + timeout_s
        while len(ages) < len(starts) and time.monotonic() < deadline:
            for m in self._peek.consume(len(starts), 0.2):
                key = (cast(str, m.topic()), cast(int, m.partition()))
                if m.error() is None and key not in ages:
                    ages[key] = max(time.time() - m.timestamp()[1] / 1000.0, 0.0)
        self._peek.unassign()
        return ages

    def _member_count(self, timeout_s: float) -> int:
        future = self._admin.describe_consumer_groups([self.group], request_timeout=timeout_s)[self.group]
        return len(future.result(timeout=timeout_s).members)

    def run(self, interval_s: float, stop: Any = None) -> None:
        """Collect every ``interval_s`` until ``stop`` (a threading.Event) is set."""
        while stop is None or not stop.is_set():
            started = time.monotonic()
            try:
                self.collect()
            except (KafkaException, BrokerError):
                pass  # counted and logged; the next round tries again
            wait = max(interval_s - (time.monotonic() - started), 0.1)
            if stop is None:
                time.sleep(wait)
            elif stop.wait(wait):
                break

    def close(self) -> None:
        self._offsets.close()
        self._peek.close()
