"""Typed, frozen, validated configuration: YAML with ${ENV} interpolation, converted once.

Loading checks every key against the dataclasses below and raises :class:`ConfigError` naming the
dotted key and the reason. ``${VAR}`` and ``${VAR:-default}`` are taken from the environment after
the YAML is parsed, so a value from the environment can never change the document's structure.
The ``kafka:`` mapping is passed to librdkafka verbatim; values of secret-looking keys are held in
:class:`Secret`, which prints as ``***`` and is unwrapped only by :func:`librdkafka_config`.
Relative paths are resolved against the config file's folder.
"""

from __future__ import annotations

import os
import re
import socket
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from streamer.errors import ConfigError

Format = Literal["avro", "avro-confluent", "json"]
Provider = Literal["cuda", "cpu"]
Guarantee = Literal["at_least_once", "exactly_once"]

MAX_BATCH_SIZE = 65_536  # one ORT call on a bigger batch gains nothing and risks device memory
_SECRET_KEY = re.compile(r"(password|secret|credentials|user\.info|token|key\.pem)", re.I)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True, slots=True)
class Secret:
    """A configuration value that must never be printed, logged or exported."""

    value: str = field(repr=False)

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """Schema Registry client settings (for ``input.format: avro-confluent``)."""

    url: str
    basic_auth_user_info: Secret | None = None
    subject: str | None = None  # subject for encoding; defaults to '<topic>-value'


@dataclass(frozen=True, slots=True)
class InputConfig:
    topics: tuple[str, ...]
    group_id: str
    format: Format = "avro"
    schema: Path | None = None
    features_field: str = "features"
    id_field: str = "event_id"
    entity_field: str = "entity_id"
    time_field: str = "event_time"
    max_message_bytes: int = 1_048_576
    feature_min: float | None = None  # a feature below this is a validation error
    feature_max: float | None = None  # a feature above this is a validation error
    consume_max_messages: int = 1000
    consume_timeout_ms: int = 100
    registry: RegistryConfig | None = None


@dataclass(frozen=True, slots=True)
class ModelConfig:
    path: Path
    name: str
    version: str
    providers: tuple[Provider, ...] = ("cuda", "cpu")
    intra_op_threads: int = 0


@dataclass(frozen=True, slots=True)
class BatchingConfig:
    max_size: int = 256
    max_wait_ms: int = 20


@dataclass(frozen=True, slots=True)
class OutputConfig:
    topic: str
    schema: Path | None = None
    ack_timeout_ms: int = 30_000


@dataclass(frozen=True, slots=True)
class ProcessingConfig:
    guarantee: Guarantee = "at_least_once"
    transactional_id: str | None = None  # exactly-once; default '<group_id>-<instance id or host>'
    transaction_timeout_ms: int = 60_000
    commit_interval_ms: int = 1000
    dead_letter_topic: str | None = None  # default: '<first input topic>.dlq'
    create_dead_letter_topic: bool = True  # create it at start-up when missing
    max_poison_fraction: float = 0.5  # more failing rows than this in one batch: the model is broken
    broken_after_failed_batches: int = 3  # this many whole batches failing in a row: likewise
    retry_backoff_ms: int = 500  # first wait before retrying a broken model or a failed delivery
    retry_backoff_max_ms: int = 30_000
    max_redrives: int = 3  # `streamer dlq redrive` refuses rows redriven this often already


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 9400
    stats_interval_ms: int = 5000  # librdkafka statistics (consumer lag) this often
    stall_timeout_ms: int = 60_000  # work but no commit for this long: unhealthy


@dataclass(frozen=True, slots=True)
class Config:
    kafka: Mapping[str, str | Secret]
    input: InputConfig
    model: ModelConfig
    output: OutputConfig
    batching: BatchingConfig = BatchingConfig()
    processing: ProcessingConfig = ProcessingConfig()
    metrics: MetricsConfig = MetricsConfig()


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """Read, interpolate and validate a YAML config file."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError("<file>", f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError("<file>", f"{path} is not valid YAML: {exc}") from exc
    return config_from_dict(raw, base_dir=path.parent, env=os.environ if env is None else env)


def config_from_dict(raw: Any, base_dir: Path = Path("."),
                     env: Mapping[str, str] | None = None) -> Config:
    """Validate an already-parsed document (what :func:`load_config` does after reading YAML)."""
    env = os.environ if env is None else env
    if not isinstance(raw, Mapping):
        raise ConfigError("<root>", "the config must be a mapping of sections")
    raw = _interpolate(raw, "", env)
    kafka = raw.get("kafka")
    if not isinstance(kafka, Mapping) or "bootstrap.servers" not in kafka:
        raise ConfigError("kafka", "must be a mapping with at least 'bootstrap.servers'")
    raw = dict(raw)
    raw["kafka"] = {str(k): Secret(str(v)) if _SECRET_KEY.search(str(k)) else _librdkafka_str(v)
                    for k, v in kafka.items()}
    cfg: Config = _build(Config, raw, "", base_dir)
    _check(cfg)
    return cfg


def librdkafka_config(cfg: Config, **overrides: Any) -> dict[str, Any]:
    """The raw librdkafka dict: the one place secrets are unwrapped, at the client boundary."""
    out: dict[str, Any] = {k: v.value if isinstance(v, Secret) else v for k, v in cfg.kafka.items()}
    out.update(overrides)
    return out


def dead_letter_topic(cfg: Config) -> str:
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
    """Copy ``cfg`` replacing fields of whole sections, e.g. ``batching={'max_size': 8}``."""
    changes = {name: replace(getattr(cfg, name), **values) for name, values in sections.items()}
    return replace(cfg, **changes)


def _check(cfg: Config) -> None:
    b = cfg.batching
    if not 1 <= b.max_size <= MAX_BATCH_SIZE:
        raise ConfigError("batching.max_size", f"must be between 1 and {MAX_BATCH_SIZE}, got {b.max_size}")
    if b.max_wait_ms < 0:
        raise ConfigError("batching.max_wait_ms", f"must be >= 0, got {b.max_wait_ms}")
    i = cfg.input
    if not i.topics:
        raise ConfigError("input.topics", "needs at least one topic")
    if i.format in ("avro", "avro-confluent") and i.schema is None:
        raise ConfigError("input.schema", f"is required for format '{i.format}'")
    if i.format == "avro-confluent" and i.registry is None:
        raise ConfigError("input.registry", "is required for format 'avro-confluent'")
    for key, value in (("input.max_message_bytes", i.max_message_bytes),
                       ("input.consume_max_messages", i.consume_max_messages),
                       ("output.ack_timeout_ms", cfg.output.ack_timeout_ms),
                       ("processing.commit_interval_ms", cfg.processing.commit_interval_ms)):
        if value <= 0:
            raise ConfigError(key, f"must be > 0, got {value}")
    p = cfg.processing
    if not 0 < p.max_poison_fraction <= 1:
        raise ConfigError("processing.max_poison_fraction", f"must be in (0, 1], got {p.max_poison_fraction}")
    if p.transaction_timeout_ms <= p.commit_interval_ms:
        raise ConfigError("processing.transaction_timeout_ms",
                          f"must exceed processing.commit_interval_ms ({p.commit_interval_ms})")
    for key, value in (("processing.broken_after_failed_batches", p.broken_after_failed_batches),
                       ("processing.retry_backoff_ms", p.retry_backoff_ms),
                       ("processing.retry_backoff_max_ms", p.retry_backoff_max_ms)):
        if value < 1:
            raise ConfigError(key, f"must be >= 1, got {value}")
    if i.feature_min is not None and i.feature_max is not None and i.feature_min > i.feature_max:
        raise ConfigError("input.feature_min", f"{i.feature_min} is above input.feature_max {i.feature_max}")
    if not cfg.model.providers:
        raise ConfigError("model.providers", "needs at least one of 'cuda', 'cpu'")
    if not cfg.model.path.is_file():
        raise ConfigError("model.path", f"no model file at {cfg.model.path}")
    for key, schema in (("input.schema", i.schema), ("output.schema", cfg.output.schema)):
        if schema is not None and not schema.is_file():
            raise ConfigError(key, f"no schema file at {schema}")


def _interpolate(value: Any, key: str, env: Mapping[str, str]) -> Any:
    if isinstance(value, Mapping):
        return {k: _interpolate(v, f"{key}.{k}" if key else str(k), env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{key}[{n}]", env) for n, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(key, f"environment variable {name} is not set and has no default")

    result = _VAR.sub(sub, value)
    # A value that is one ${...} takes the YAML type of what it expands to ("8" -> 8), so that
    # numbers and booleans can come from the environment. Secrets stay strings (see above).
    if _VAR.fullmatch(value) and result and not _SECRET_KEY.search(key):
        try:
            parsed = yaml.safe_load(result)
        except yaml.YAMLError:
            return result
        return parsed if isinstance(parsed, (int, float, bool)) else result
    return result


def _librdkafka_str(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _build(cls: type, raw: Any, prefix: str, base_dir: Path) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(prefix or "<root>", f"must be a mapping, got {_kind(raw)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    for k in raw:
        if k not in names:
            raise ConfigError(f"{prefix}{k}", f"unknown key (expected one of: {', '.join(sorted(names))})")
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        key = f"{prefix}{f.name}"
        if f.name not in raw:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(key, "is required but missing")
            continue
        kwargs[f.name] = _convert(hints[f.name], raw[f.name], key, base_dir)
    return cls(**kwargs)


def _convert(tp: Any, value: Any, key: str, base_dir: Path) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, value, key, base_dir)
    if origin is Literal:
        if value not in args:
            raise ConfigError(key, f"must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if origin is tuple:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list):
            raise ConfigError(key, f"expected a list, got {_kind(value)}")
        return tuple(_convert(args[0], v, f"{key}[{n}]", base_dir) for n, v in enumerate(items))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {_kind(value)} {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {_kind(value)} {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {_kind(value)} {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(key, f"expected a string, got {_kind(value)}")
        return str(value)
    if tp is Path:
        if not isinstance(value, str) or not value:
            raise ConfigError(key, f"expected a file path, got {_kind(value)}")
        p = Path(value).expanduser()
        return p if p.is_absolute() else (base_dir / p).resolve()
    if tp is Secret:
        return Secret(str(value))
    if isinstance(tp, type) and hasattr(tp, "__dataclass_fields__"):
        return _build(tp, value, f"{key}.", base_dir)
    if origin is not None and issubclass(origin, Mapping):
        return value
    raise TypeError(f"config field {key} has an unsupported type {tp!r}")  # a bug here, not in YAML


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
