"""The config sections about running a processor: batching, processing, shadow scoring, metrics, online.

Validated like every section (config.py's docstring): a bad value raises ConfigError naming the
dotted key. Imported through streamer.config, which assembles the whole Config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from streamer.config_check import Location, Secret, above, at_least, check_types, file_exists, key_prefix
from streamer.errors import ConfigError

Guarantee = Literal["at_least_once", "exactly_once"]
MAX_BATCH_SIZE = 65_536  # one ORT call on a bigger batch gains nothing and risks device memory


@dataclass(frozen=True, slots=True)
class BatchingConfig:
    max_size: int = 256  # a batch is scored when it holds this many rows
    max_wait_ms: int = 20  # or this long after its first row came

    def __post_init__(self) -> None:
        check_types(self, "batching")
        if not 1 <= self.max_size <= MAX_BATCH_SIZE:
            raise ConfigError("batching.max_size",
                              f"must be between 1 and {MAX_BATCH_SIZE}, got {self.max_size}")
        at_least(0, "batching.max_wait_ms", self.max_wait_ms)


@dataclass(frozen=True, slots=True)
class ProcessingConfig:
    guarantee: Guarantee = "at_least_once"  # exactly_once: predictions and offsets in one transaction
    transactional_id: str | None = None  # exactly-once; default '<group_id>-<instance id or host>'
    transaction_timeout_ms: int = 60_000  # exactly-once: the broker aborts a transaction open longer
    commit_interval_ms: int = 1000  # how often offsets (or a transaction) are committed
    dead_letter_topic: str | None = None  # default: '<first input topic>.dlq'
    create_dead_letter_topic: bool = True  # create it at start-up when missing
    max_poison_fraction: float = 0.5  # more failing rows than this in one batch: the model is broken
    broken_after_failed_batches: int = 3  # this many whole batches failing in a row: likewise
    broken_input_batches: int = 5  # batches in a row wholly failing validation alike: input held (0: never)
    retry_backoff_ms: int = 500  # first wait before retrying a broken model or a failed delivery
    retry_backoff_max_ms: int = 30_000  # the wait doubles up to this
    max_redrives: int = 3  # `streamer dlq redrive` refuses rows redriven this often already

    def __post_init__(self) -> None:
        check_types(self, "processing")
        above(0, "processing.commit_interval_ms", self.commit_interval_ms)
        if not 0 < self.max_poison_fraction <= 1:
            raise ConfigError("processing.max_poison_fraction",
                              f"must be in (0, 1], got {self.max_poison_fraction}")
        if self.transaction_timeout_ms <= self.commit_interval_ms:
            raise ConfigError("processing.transaction_timeout_ms",
                              f"must exceed processing.commit_interval_ms ({self.commit_interval_ms})")
        at_least(1, "processing.broken_after_failed_batches", self.broken_after_failed_batches)
        at_least(0, "processing.broken_input_batches", self.broken_input_batches)  # 0: never held
        at_least(1, "processing.retry_backoff_ms", self.retry_backoff_ms)
        at_least(1, "processing.retry_backoff_max_ms", self.retry_backoff_max_ms)
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ConfigError("processing.retry_backoff_max_ms",
                              f"must be >= processing.retry_backoff_ms ({self.retry_backoff_ms}), "
                              f"got {self.retry_backoff_max_ms}")
        at_least(0, "processing.max_redrives", self.max_redrives)  # 0: never redrive


@dataclass(frozen=True, slots=True)
class ChallengerConfig:
    """A model scored in shadow beside the champion (``model``): its predictions go to the shadow topic."""

    path: Path  # the challenger's ONNX file
    name: str  # its name in shadow predictions and metrics; unique
    version: str  # its model.version in shadow predictions

    def __post_init__(self) -> None:
        check_types(self, "shadow.challengers")
        if not self.name:
            raise ConfigError("shadow.challengers", "a challenger's name cannot be empty")
        file_exists("shadow.challengers", f"challenger {self.name!r} model", self.path)


@dataclass(frozen=True, slots=True)
class ShadowConfig:
    challengers: tuple[ChallengerConfig, ...] = ()  # none: no shadow scoring
    topic: str | None = None  # None: '<output.topic>.shadow'
    flip_threshold: float = 0.5  # a decision is score[0] >= this; a flip is a decision that differs
    queue_batches: int = 4  # batches waiting per challenger; more and the batch is skipped for it

    def __post_init__(self) -> None:
        check_types(self, "shadow")
        names = [c.name for c in self.challengers]
        if len(set(names)) != len(names):
            raise ConfigError("shadow.challengers", f"names must be unique, got {names}")
        if self.topic == "":
            raise ConfigError("shadow.topic", "cannot be empty (leave it out for '<output.topic>.shadow')")
        at_least(1, "shadow.queue_batches", self.queue_batches)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    enabled: bool = False  # serve /metrics, /healthz and /readyz
    host: str = "127.0.0.1"  # the address they are served on
    port: int = 9400  # 0: any free port
    stats_interval_ms: int = 5000  # librdkafka statistics (consumer lag) this often
    stall_timeout_ms: int = 60_000  # work but no commit for this long: unhealthy
    log_interval_ms: int = 30_000  # a progress line in the log this often (0: none)

    def __post_init__(self) -> None:
        check_types(self, "metrics")
        if not 0 <= self.port <= 65_535:
            raise ConfigError("metrics.port", f"must be between 0 and 65535, got {self.port}")
        above(0, "metrics.stats_interval_ms", self.stats_interval_ms)  # 0 would turn stats off
        above(0, "metrics.stall_timeout_ms", self.stall_timeout_ms)
        at_least(0, "metrics.log_interval_ms", self.log_interval_ms)


@dataclass(frozen=True, slots=True)
class KvConfig:
    """The key-value store (Redis) that precomputed predictions and features live in (streamer/stores/)."""

    address: str | None = None  # host:port; cluster: any node's; sentinel: the sentinels', comma-separated. None: no store
    kind: Literal["node", "cluster", "sentinel"] = "node"  # one server, a Redis Cluster, or a master found by Sentinel
    master: str = "mymaster"  # sentinel: the master's name
    db: int = 0  # node and sentinel: the database number
    username: str | None = None  # an ACL user; None: the default user
    password: Secret | None = None  # the server's password (AUTH); None: none
    tls: bool = False  # connect with TLS (rediss)
    prefix: str = "streamer"  # every key streamer writes starts with it and ':'
    ttl_s: int = 0  # each precomputed prediction expires this long after its run wrote it; 0: kept until replaced
    keep_previous_s: int = 600  # a run's keys are removed this long after a newer run replaced it (readers finish); >= 5
    timeout_ms: int = 1000  # each command's socket timeout (connect, read, write)
    pipeline_rows: int = 1000  # rows written per pipeline (one round trip)
    commit_rows: int = 100_000  # a run records its progress after this many rows (its resume point)

    def __post_init__(self) -> None:
        check_types(self, "kv")
        if self.address is not None:
            for part in self.address.split(","):
                host, _, port = part.strip().rpartition(":")
                if not host or not port.isdigit() or not 0 < int(port) < 65_536:
                    raise ConfigError("kv.address", f"{part.strip()!r} is not HOST:PORT")
            if self.kind == "node" and "," in self.address:
                raise ConfigError("kv.address", "names several servers: set kv.kind to cluster or sentinel")
        key_prefix("kv.prefix", self.prefix)
        at_least(0, "kv.db", self.db)
        at_least(0, "kv.ttl_s", self.ttl_s)
        at_least(5, "kv.keep_previous_s", self.keep_previous_s)  # readers resolve P:current once a second
        above(0, "kv.timeout_ms", self.timeout_ms)
        above(0, "kv.pipeline_rows", self.pipeline_rows)
        above(0, "kv.commit_rows", self.commit_rows)
        if self.password is not None and not self.password.value:
            raise ConfigError("kv.password", "must not be empty (leave the key out for a server without one)")


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """How an online answer uses the precomputed predictions (kv:): ``mode`` of POST /v1/score."""

    mode: Literal["fresh", "cached", "auto"] = "fresh"  # a request's mode when it names none (?mode=)
    max_age_s: int = 86_400  # auto: a precomputed prediction younger than this answers; older: scored fresh
    skip_ms: int = 1000  # after a failed lookup, lookups are skipped this long (degraded answers go on without one)
    max_in_flight: int = 64  # lookups waiting on the store at once; one more is skipped

    def __post_init__(self) -> None:
        check_types(self, "online.cache")
        above(0, "online.cache.max_age_s", self.max_age_s)
        at_least(0, "online.cache.skip_ms", self.skip_ms)
        above(0, "online.cache.max_in_flight", self.max_in_flight)


@dataclass(frozen=True, slots=True)
class FeaturesConfig:
    """Where an online request's features are fetched by its entity id: Feast's feature server, or
    a Redis hash per entity (``streamer features load``)."""

    kind: Literal["none", "feast", "redis"] = "none"  # none: a request carries its features
    url: str | None = None  # feast: the feature server's URL (http://host:6566)
    features: tuple[str, ...] = ()  # feast: the feature references (view:feature); each feeds the event field named like the feature
    feature_service: str | None = None  # feast: a feature service instead of ``features``
    entity_key: str = "entity_id"  # feast: the entity's join key that the request's entity id is
    prefix: str = "streamer:features"  # redis: each entity's hash is <prefix>:<entity id>, in the kv: store
    timeout_ms: int = 50  # a fetch past this is abandoned and the answer degraded (reason 'features')
    defaults: Mapping[str, object] | None = None  # a missing feature takes its default here; without one: 422 naming it
    skip_ms: int = 1000  # after a failed fetch, fetches are skipped this long (answers degrade at once), then one probes
    max_in_flight: int = 64  # fetches waiting on the store at once; one more is skipped (and degrades)

    def __post_init__(self) -> None:
        check_types(self, "online.features")
        above(0, "online.features.timeout_ms", self.timeout_ms)
        at_least(0, "online.features.skip_ms", self.skip_ms)
        above(0, "online.features.max_in_flight", self.max_in_flight)
        if self.kind == "feast":
            if not self.url:
                raise ConfigError("online.features.url", "is required for kind 'feast' (the feature server's URL)")
            if not self.features and not self.feature_service:
                raise ConfigError("online.features.features", "give the feature references, or a feature_service")
        if not self.prefix:
            raise ConfigError("online.features.prefix", "must not be empty")


@dataclass(frozen=True, slots=True)
class OnlineConfig:
    enabled: bool = False  # streamer run serves online beside the stream (streamer serve always does)
    host: str = "127.0.0.1"  # the address the protocol is served on (0.0.0.0 in container deploys)
    http_port: int = 8000  # the Open Inference Protocol over HTTP, and POST /v1/score
    grpc_port: int = 8001  # the Open Inference Protocol over gRPC; 0: not served
    max_size: int | None = None  # rows per model call; null: batching.max_size
    max_wait_ms: int | None = None  # a batch is scored this long after its first row; null: batching.max_wait_ms
    timeout_ms: int = 1000  # a request's deadline when it sets none, and the latest one it may set
    max_queue_rows: int = 4096  # rows admitted and not yet scored; one more is refused with 503
    max_body_bytes: int = 8_388_608  # a larger request is refused (413, gRPC RESOURCE_EXHAUSTED)
    cache: CacheConfig = field(default_factory=CacheConfig)  # answers from the precomputed predictions (kv:)
    features: FeaturesConfig = field(default_factory=FeaturesConfig)  # features fetched by entity id

    def __post_init__(self) -> None:
        check_types(self, "online")
        if not 1 <= self.http_port <= 65_535:
            raise ConfigError("online.http_port", f"must be between 1 and 65535, got {self.http_port}")
        if not 0 <= self.grpc_port <= 65_535:
            raise ConfigError("online.grpc_port", f"must be between 0 (no gRPC) and 65535, got {self.grpc_port}")
        if self.grpc_port == self.http_port:
            raise ConfigError("online.grpc_port", f"is online.http_port too ({self.http_port}): one port each")
        if self.max_size is not None and not 1 <= self.max_size <= MAX_BATCH_SIZE:
            raise ConfigError("online.max_size", f"must be between 1 and {MAX_BATCH_SIZE}, got {self.max_size}")
        if self.max_wait_ms is not None:
            at_least(0, "online.max_wait_ms", self.max_wait_ms)
        above(0, "online.timeout_ms", self.timeout_ms)
        above(0, "online.max_queue_rows", self.max_queue_rows)
        above(0, "online.max_body_bytes", self.max_body_bytes)


@dataclass(frozen=True, slots=True)
class JobsConfig:
    """Batch jobs (streamer/jobs/): the queue a group of workers takes them from, their statuses, the HTTP API."""

    topic: str = "streamer.jobs"  # the queue: one message per submitted job, keyed by its id
    status_topic: str = "streamer.jobs.status"  # compacted: each job's latest status, keyed by its id
    group_id: str = "streamer-jobs"  # the workers' consumer group
    partitions: int = 12  # the queue's partitions when streamer creates it: the most workers that run jobs at once
    progress_ms: int = 2000  # a running job's status (rows done, rows/s) is written this often
    api_token: Secret | None = None  # the HTTP jobs API's bearer token (streamer serve); None: the API is off
    files: Location | None = None  # where files submitted over HTTP are kept; None: <lake.warehouse>/jobs
    max_upload_bytes: int = 1_073_741_824  # a larger file submitted over HTTP is refused (413)
    keep_finished_days: int = 0  # a finished job's status is forgotten this long after its end; 0: kept

    def __post_init__(self) -> None:
        check_types(self, "jobs")
        for key in ("topic", "status_topic", "group_id"):
            if not getattr(self, key):
                raise ConfigError(f"jobs.{key}", "must not be empty")
        if self.topic == self.status_topic:
            raise ConfigError("jobs.status_topic", f"is jobs.topic too ({self.topic!r}): one topic each")
        above(0, "jobs.partitions", self.partitions)
        above(0, "jobs.progress_ms", self.progress_ms)
        above(0, "jobs.max_upload_bytes", self.max_upload_bytes)
        at_least(0, "jobs.keep_finished_days", self.keep_finished_days)
        if self.api_token is not None and not self.api_token.value:
            raise ConfigError("jobs.api_token", "must not be empty (leave the key out to turn the API off)")

