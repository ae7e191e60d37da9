"""Typed, frozen, validated configuration (config_file.py reads it from YAML, once).

Every section validates itself in ``__post_init__`` (types, ranges, files), so a config that
exists is valid however it was built: loaded, copied with ``dataclasses.replace`` or
:func:`with_overrides`, or changed by a command-line flag. A bad value raises :class:`ConfigError`
naming the dotted key and the reason. A key's dataclass default is its one default: example
configs and command-line flags do not restate it.

The ``kafka:`` mapping is passed to librdkafka verbatim; values of secret-looking keys are held
in :class:`Secret`, which prints as ``***``, unwrapped by :func:`librdkafka_config` and ``registry_client``.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from streamer.config_check import Location, Secret, above, at_least, check_types, file_exists
from streamer.config_contract import InputSource, OutputTarget
from streamer.config_models import (
    MANIFEST,
    MODEL_FILE,
    ModelConfig,
    ModelEntry,
    ModelsConfig,
    Provider,
    RouteConfig,
    check_models,
    default_model,
    model_entries,
    model_shadow,
    model_versions,
    route_models,
    under,
)
from streamer.config_sections import (
    MAX_BATCH_SIZE,
    BatchingConfig,
    CacheConfig,
    ChallengerConfig,
    FeaturesConfig,
    Guarantee,
    JobsConfig,
    KvConfig,
    MetricsConfig,
    OnlineConfig,
    ProcessingConfig,
    ShadowConfig,
)
from streamer.errors import ConfigError

__all__ = ["InputSource", "OutputTarget",  # the contract's, defined in config_contract.py
           "MODEL_FILE", "ModelConfig", "ModelEntry", "ModelsConfig", "Provider", "RouteConfig",
           "check_models", "default_model", "model_entries", "model_shadow", "model_versions", "route_models", "under",  # the model sections, defined in config_models.py
           "MAX_BATCH_SIZE", "BatchingConfig", "CacheConfig", "ChallengerConfig", "FeaturesConfig", "Guarantee",
           "KvConfig", "MetricsConfig", "OnlineConfig", "ProcessingConfig", "ShadowConfig"]  # sections defined in config_sections.py, used from here

Format = Literal["avro", "avro-confluent", "json", "json-schema-confluent", "protobuf-confluent"]  # input
OutputFormat = Literal["avro", "avro-confluent", "json"]
SubjectStrategy = Literal["topic", "record", "topic-record"]  # Confluent's TopicNameStrategy, ...
OutputKey = Literal["input", "entity_id", "event_id"]

SECRET_KEY = re.compile(r"(password|secret|credentials|user\.info|token|key\.pem)", re.IGNORECASE)
KAFKA_NEEDS = "must be a mapping with at least 'bootstrap.servers'"


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """Schema Registry client settings (for the ``-confluent`` formats, in and out)."""

    url: str  # the registry's base URL, e.g. http://registry:8081
    basic_auth_user_info: Secret | None = None  # USER:PASSWORD for HTTP basic auth; None: none
    subject: str | None = None  # subject for encoding; defaults to '<topic>-value'
    # A registry that restarts answers 404 for ids it holds while it loads: a 404 is asked again
    # (with the processing back-off) for this long before its rows are dead letters.
    not_found_retry_ms: int = 10_000
    timeout_ms: int = 10_000  # a request's limit: a registry that accepts and never answers fails, not hangs

    def __post_init__(self) -> None:
        check_types(self, "registry")
        at_least(0, "registry.not_found_retry_ms", self.not_found_retry_ms)
        above(0, "registry.timeout_ms", self.timeout_ms)
        if self.basic_auth_user_info is not None and ":" not in self.basic_auth_user_info.value:
            raise ConfigError("registry.basic_auth_user_info", "must be USER:PASSWORD")  # the value stays unsaid


@dataclass(frozen=True, slots=True)
class InputConfig:
    topics: tuple[str, ...]  # the topics read (a name or a list)
    group_id: str  # the consumer group, whose committed offsets are the processor's progress
    format: Format = "avro"  # the events' wire format
    schema: Path | None = None  # the events' Avro schema file (.avsc); required for format 'avro'
    # json: every event is checked against it (a violation is a validate dead letter);
    # json-schema-confluent: what streamer's own producers register (events are checked against
    # the schema their id names)
    json_schema: Path | None = None
    features_field: str = "features"  # the event field holding the feature array (no model.inputs)
    id_field: str = "event_id"  # copied into each prediction; missing: '<topic>-<partition>-<offset>'
    entity_field: str = "entity_id"  # copied into each prediction; missing: ''
    time_field: str = "event_time"  # event time, integer ms; missing: the message's timestamp
    max_message_bytes: int = 1_048_576  # a larger message is a deserialize dead letter, never decoded
    feature_min: float | None = None  # a feature below this is a validation error
    feature_max: float | None = None  # a feature above this is a validation error
    create_topics: bool = False  # a missing input topic is created at start, not refused (exit 2)
    consume_max_messages: int = 1000  # the most messages one consume call returns
    consume_timeout_ms: int = 100  # the longest one consume call waits for messages
    registry: RegistryConfig | None = None  # the Schema Registry of the '-confluent' formats

    def __post_init__(self) -> None:
        check_types(self, "input")
        if not self.topics:
            raise ConfigError("input.topics", "needs at least one topic")
        if not all(self.topics):
            raise ConfigError("input.topics", "a topic name cannot be empty")
        if not self.group_id:
            raise ConfigError("input.group_id", "cannot be empty")
        if self.format == "avro" and self.schema is None:
            raise ConfigError("input.schema", "is required for format 'avro'")
        if self.format.endswith("-confluent") and self.registry is None:
            raise ConfigError("input.registry", f"is required for format {self.format!r}")
        if self.json_schema is not None and self.format not in ("json", "json-schema-confluent"):
            raise ConfigError("input.json_schema", f"is for JSON input, not format {self.format!r}")
        above(0, "input.max_message_bytes", self.max_message_bytes)
        above(0, "input.consume_max_messages", self.consume_max_messages)
        at_least(0, "input.consume_timeout_ms", self.consume_timeout_ms)
        lo, hi = self.feature_min, self.feature_max
        if lo is not None and hi is not None and lo > hi:
            raise ConfigError("input.feature_min", f"{lo} is above input.feature_max {hi}")
        file_exists("input.schema", "schema", self.schema)
        file_exists("input.json_schema", "JSON Schema", self.json_schema)


@dataclass(frozen=True, slots=True)
class OutputConfig:
    topic: str  # where predictions are written
    schema: Path | None = None  # None: the bundled streamer/schemas/prediction.avsc, or one made from model.outputs
    ack_timeout_ms: int = 30_000  # how long a flush waits for the broker's acks of predictions
    include: tuple[str, ...] = ()  # input fields (dotted paths) copied into each prediction
    # avro: schemaless binary Avro (a reader needs the schema out of band); avro-confluent: magic
    # byte, schema id, Avro (Confluent's wire format; the schema registered under a subject);
    # json: one JSON object per prediction.
    format: OutputFormat = "avro"
    registry: RegistryConfig | None = None  # avro-confluent; None: input.registry's
    subject_strategy: SubjectStrategy = "topic"  # '<topic>-value', '<record name>', '<topic>-<record name>'
    auto_register: bool = True  # False: the schema must already be registered under the subject
    key: OutputKey = "input"  # the prediction's key: the input message's, or a prediction field
    topic_per_model: bool = False  # each model's predictions to '<topic>.<model name>' (models, route)

    def __post_init__(self) -> None:
        check_types(self, "output")
        if not self.topic:
            raise ConfigError("output.topic", "cannot be empty")
        for n, path in enumerate(self.include):
            if not path or "" in path.split("."):
                raise ConfigError(f"output.include[{n}]", f"{path!r} is not a field name")
        if len(set(self.include)) != len(self.include):
            raise ConfigError("output.include", f"names a field twice: {list(self.include)}")
        above(0, "output.ack_timeout_ms", self.ack_timeout_ms)
        file_exists("output.schema", "schema", self.schema)


@dataclass(frozen=True, slots=True)
class S3Config:
    """An S3-compatible object store, for an ``s3://`` warehouse or Parquet path."""

    endpoint: str | None = None  # e.g. http://store:8333; None: the cloud's own for the region
    region: str = "us-east-1"  # the bucket's region
    access_key_id: Secret | None = None  # None: the environment's credentials (AWS_* variables, an instance role)
    secret_access_key: Secret | None = None  # the key's secret; give both or neither

    def __post_init__(self) -> None:
        check_types(self, "lake.s3")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ConfigError("lake.s3.secret_access_key" if self.secret_access_key is None
                              else "lake.s3.access_key_id", "give both access_key_id and secret_access_key, or neither")


@dataclass(frozen=True, slots=True)
class LakeConfig:
    """Where ``replay --to-table``/``--to-parquet`` and ``score`` write: Apache Iceberg tables in a catalog, or Parquet."""

    warehouse: Location = Location("lake")  # the tables' folder, or s3://bucket/prefix
    catalog: Literal["sql", "rest"] = "sql"  # sql: embedded, no server (SQLite by default); rest: an Iceberg REST catalog
    catalog_uri: Secret | None = None  # sql: a SQLAlchemy URL (null: SQLite in the warehouse, or ./lake-catalog.db for s3://); rest: its URL. A secret: a URL may hold a password
    catalog_token: Secret | None = None  # rest: a bearer token for the catalog
    catalog_credential: Secret | None = None  # rest: OAuth2 client credentials, CLIENT_ID:CLIENT_SECRET
    namespace: str = "streamer"  # the namespace of tables named without one
    target_file_mb: int = 128  # rows are written in files of about this size (a run's last files are smaller)
    s3: S3Config = field(default_factory=S3Config)  # the object store of s3:// locations

    def __post_init__(self) -> None:
        check_types(self, "lake")
        above(0, "lake.target_file_mb", self.target_file_mb)
        if self.catalog == "rest" and (self.catalog_uri is None or not self.catalog_uri.value):
            raise ConfigError("lake.catalog_uri", "is required for catalog 'rest' (the catalog's URL)")
        if not self.namespace or "." in self.namespace:
            raise ConfigError("lake.namespace", f"must be one non-empty name without dots, got {self.namespace!r}")


@dataclass(frozen=True, slots=True)
class Config:
    kafka: Mapping[str, str | Secret]  # librdkafka properties for every client, passed as given
    input: InputConfig
    model: ModelConfig
    output: OutputConfig
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    processing: ProcessingConfig = field(default_factory=ProcessingConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    shadow: ShadowConfig = field(default_factory=ShadowConfig)
    lake: LakeConfig = field(default_factory=LakeConfig)
    online: OnlineConfig = field(default_factory=OnlineConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    kv: KvConfig = field(default_factory=KvConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    route: RouteConfig = field(default_factory=RouteConfig)

    def __post_init__(self) -> None:
        _check_sections(self)
        check_models(self)


@dataclass(frozen=True, slots=True)
class UnscoredConfig:
    """The part of a config the commands that neither score nor read the prediction schema use
    (``topics create``, ``produce``, ``dlq``): no ``model``, so its files need not exist where they
    run (``config_file.load_unscored``). The sections are checked as :class:`Config` checks them."""

    kafka: Mapping[str, str | Secret]
    input: InputConfig
    output: OutputConfig
    processing: ProcessingConfig = field(default_factory=ProcessingConfig)
    shadow: ShadowConfig = field(default_factory=ShadowConfig)
    lake: LakeConfig = field(default_factory=LakeConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    kv: KvConfig = field(default_factory=KvConfig)

    def __post_init__(self) -> None:
        _check_sections(self)


class Sections(Protocol):
    """A :class:`Config`, or an :class:`UnscoredConfig`: the sections every command reads."""

    @property
    def kafka(self) -> Mapping[str, str | Secret]: ...
    @property
    def input(self) -> InputConfig: ...
    @property
    def output(self) -> OutputConfig: ...
    @property
    def processing(self) -> ProcessingConfig: ...
    @property
    def shadow(self) -> ShadowConfig: ...


def _check_sections(cfg: Config | UnscoredConfig) -> None:
    """What no one section can check alone, once each section has checked itself."""
    if not isinstance(cfg.kafka, Mapping) or "bootstrap.servers" not in cfg.kafka:
        raise ConfigError("kafka", KAFKA_NEEDS)
    check_types(cfg, "")
    if cfg.output.format == "avro-confluent" and output_registry(cfg) is None:
        raise ConfigError("output.registry", "is required for format 'avro-confluent' (or input.registry)")
    if cfg.output.registry is not None and cfg.output.format != "avro-confluent":
        raise ConfigError("output.registry", f"is for output.format 'avro-confluent', not {cfg.output.format!r}")
    if shadow_topic(cfg) in (cfg.output.topic, dead_letter_topic(cfg)):
        raise ConfigError("shadow.topic", f"{shadow_topic(cfg)!r} is already the output or dead-letter topic")


class HasKafka(Protocol):  # a Config, or the part of one a tool reads alone (observe/lag.py's LagConfig)
    @property
    def kafka(self) -> Mapping[str, str | Secret]: ...


def librdkafka_config(cfg: HasKafka, **overrides: Any) -> dict[str, Any]:
    """The raw librdkafka dict: the one place Kafka secrets are unwrapped, at the client boundary."""
    out: dict[str, Any] = {k: v.value if isinstance(v, Secret) else v for k, v in cfg.kafka.items()}
    out.update(overrides)
    return out


def output_registry(cfg: Sections) -> RegistryConfig | None:
    """The registry predictions are registered in: ``output.registry``, else ``input.registry``."""
    return cfg.output.registry or cfg.input.registry


def shadow_topic(cfg: Sections) -> str:
    return cfg.shadow.topic or f"{cfg.output.topic}.shadow"


def dead_letter_topic(cfg: Sections) -> str:
    """Where dead letters go: configured, else '<first input topic>.dlq'."""
    return cfg.processing.dead_letter_topic or f"{cfg.input.topics[0]}.dlq"


def transactional_id(cfg: Config) -> str:
    """Stable per process, so a restarted process fences its own previous incarnation.

    ``<group_id>-<group.instance.id>`` with static membership, else ``<group_id>-<hostname>``:
    run several processes on one host with static membership or an explicit id each.
    """
    if cfg.processing.transactional_id:
        return cfg.processing.transactional_id
    instance = cfg.kafka.get("group.instance.id")
    return f"{cfg.input.group_id}-{instance if isinstance(instance, str) else socket.gethostname()}"


def redacted(cfg: Config) -> dict[str, Any]:
    """A printable view of the ``kafka`` mapping with secrets shown as ``***``."""
    return {k: repr(v) if isinstance(v, Secret) else v for k, v in cfg.kafka.items()}


def with_overrides(cfg: Config, **sections: Any) -> Config:
    """Copy ``cfg`` replacing fields of sections, e.g. ``batching={'max_size': 8}``.

    The copy is validated like a loaded config: ``batching={'max_size': 0}`` raises
    ``ConfigError: config key 'batching.max_size': must be between 1 and 65536, got 0``.
    """
    changes = {name: replace(getattr(cfg, name), **values) for name, values in sections.items()}
    return replace(cfg, **changes)


# ---- several models (config_models.py's sections) ---------------------------------------------

def replay_config(cfg: Config, name: str | None, into: Literal["topic", "lake"] | None, key: str = "--model") -> Config:
    """The config a command or a job scores with: model ``name``'s one-model config (None: the
    default model's; an unknown one refused on ``key``). ``into``: where a replay writes (None: not
    a replay). A replay of a routed config naming no model keeps every model to a topic, routing as
    the stream does; into the lake, which takes one model, it is refused on ``key``."""
    if name is None and into is not None and cfg.route.field is not None:
        if into == "lake":
            raise ConfigError(key, f"a replay into the lake scores with one model, and the config routes each "
                                   f"event by route.field {cfg.route.field!r}: name one of "
                                   f"{', '.join(sorted(model_entries(cfg)))}, or replay to a topic")
        return cfg
    return for_model(cfg, name, key)


def model_key(cfg: Config, name: str) -> str:
    """The config key a model's section is under: ``model``, ``models.named.<name>.model``, or
    ``models.repository.<name>.model`` for one of the repository folder's."""
    if name not in cfg.models.named:
        return "model"
    folder = cfg.models.repository
    if folder is not None and (folder / name / MANIFEST).is_file():
        return f"models.repository.{name}.model"
    return f"models.named.{name}.model"


def prediction_topic(cfg: Sections, name: str) -> str:
    """Where the predictions of model ``name`` go: ``output.topic``, or ``<output.topic>.<name>``
    with ``output.topic_per_model``."""
    return f"{cfg.output.topic}.{name}" if cfg.output.topic_per_model else cfg.output.topic


def for_model(cfg: Config, name: str | None = None, key: str = "--model") -> Config:
    """The one-model config model ``name`` scores with (None: the default model): its model section,
    its batching and challengers, and its prediction topic; no other model and no route. An
    unknown name is refused on ``key``."""
    name = name or default_model(cfg)
    entries = model_entries(cfg)
    if name not in entries:
        raise ConfigError(key, f"no model {name!r}; the models are {', '.join(sorted(entries))}")
    entry = entries[name]
    return replace(cfg, model=entry.model, batching=entry.batching or cfg.batching, shadow=model_shadow(cfg, name, entry),
                   output=replace(cfg.output, topic=prediction_topic(cfg, name), topic_per_model=False),
                   models=ModelsConfig(), route=RouteConfig())
