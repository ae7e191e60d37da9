"""Predictions in Confluent's wire format: the subject of the prediction schema, its compatibility
with what the subject holds, and the schema id every value is framed with.

Subject names follow Confluent's strategies (``output.subject_strategy``), as its serializers,
Kafka Connect's AvroConverter, ksqlDB and Flink's ``avro-confluent`` format look them up:

- ``topic`` (TopicNameStrategy, the default): ``<output topic>-value``, e.g. ``scores-value``;
- ``record`` (RecordNameStrategy): the schema's full name, e.g. ``streamer.Prediction``;
- ``topic-record`` (TopicRecordNameStrategy): ``<output topic>-<full name>``.

``output.registry.subject`` names one outright. At start-up, before anything is consumed, the
schema is tested against the subject's latest version under the subject's compatibility rule
(a new subject has nothing to be incompatible with), then registered (``output.auto_register``,
the default; registering an existing schema returns its id) or looked up (auto-register off:
it must be registered already). An incompatible or missing schema is a :class:`ConfigError`
(exit 2, a restart cannot fix it); a registry that does not answer (each request limited to
``registry.timeout_ms``) is a :class:`BrokerError`.
"""

from __future__ import annotations

from typing import Any, cast

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from streamer.config import Config, RegistryConfig, SubjectStrategy, output_registry
from streamer.errors import BrokerError, ConfigError
from streamer.formats.avro import AvroCodec, AvroSchema
from streamer.formats.confluent import confluent_header, redact

# The client's own retries of a request that failed in transport (refused, reset, timed out), with
# its jittered back-off; said here, not left to the library's default, because messages state it.
REGISTRY_RETRIES = 3


def registry_client(reg: RegistryConfig) -> SchemaRegistryClient:
    """confluent-kafka's client for ``reg`` (also its own ``mock://`` URLs, used by unit tests).

    The one place the registry's credentials are unwrapped: into the client's settings, and
    nowhere else. Every request has ``reg.timeout_ms`` (the client's ``timeout``, in seconds;
    without one it waits for an answer forever).
    """
    conf: dict[str, Any] = {"url": reg.url, "timeout": reg.timeout_ms / 1000, "max.retries": REGISTRY_RETRIES}
    if reg.basic_auth_user_info is not None:
        conf["basic.auth.user.info"] = reg.basic_auth_user_info.value
    return SchemaRegistryClient.new_client(conf)


def full_name(schema: AvroSchema) -> str:
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def subject_name(strategy: SubjectStrategy, topic: str, schema: AvroSchema) -> str:
    """The subject a Confluent reader of ``topic`` looks the value schema up under."""
    if strategy == "topic":
        return f"{topic}-value"
    if strategy == "record":
        return full_name(schema)
    return f"{topic}-{full_name(schema)}"


def output_subject(cfg: Config, schema: AvroSchema) -> str:
    given = cfg.output.registry.subject if cfg.output.registry is not None else None
    return given or subject_name(cfg.output.subject_strategy, cfg.output.topic, schema)


def confluent_output_codec(cfg: Config, schema: AvroSchema,
                           client: SchemaRegistryClient | None = None) -> AvroCodec:
    """The prediction codec framed with the id ``schema`` has under its subject (checked first)."""
    reg = output_registry(cfg)
    assert reg is not None  # the config refuses avro-confluent output without a registry
    client = client or registry_client(reg)
    plain = AvroCodec(schema)
    subject = output_subject(cfg, schema)
    registered = Schema(plain.schema_json, "AVRO")
    _check_compatible(client, subject, registered, reg)
    try:
        if cfg.output.auto_register:
            schema_id = int(client.register_schema(subject, registered))
        else:
            schema_id = int(cast(int, client.lookup_schema(subject, registered).schema_id))
    except SchemaRegistryError as exc:
        if exc.http_status_code == 409:
            raise ConfigError("output.schema", f"the registry refuses the prediction schema under subject "
                                               f"{subject!r} as incompatible: {_said(exc)}") from exc
        if exc.http_status_code == 404 and not cfg.output.auto_register:
            raise ConfigError("output.auto_register", f"is false and the prediction schema is not registered "
                                                      f"under subject {subject!r} (register it, e.g. with "
                                                      f"`streamer schema`'s output, or allow auto_register)") from exc
        raise _away(f"registering under {subject!r}", exc, reg) from exc
    except Exception as exc:  # a transport error: the registry is away
        raise _away(f"registering under {subject!r}", exc, reg) from exc
    return AvroCodec(schema, prefix=confluent_header(schema_id))


def _check_compatible(client: SchemaRegistryClient, subject: str, schema: Schema, reg: RegistryConfig) -> None:
    try:
        compatible = client.test_compatibility(subject, schema)
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404:  # no such subject (or no version yet): nothing to break
            return
        raise _away(f"testing compatibility under {subject!r}", exc, reg) from exc
    except Exception as exc:
        raise _away(f"testing compatibility under {subject!r}", exc, reg) from exc
    if not compatible:
        raise ConfigError("output.schema", f"the prediction schema is not compatible with the latest version "
                                           f"under subject {subject!r} ({_level(client, subject)}): readers of "
                                           f"the topic could not read both; change the schema, or the subject "
                                           f"(output.subject_strategy, output.registry.subject)")


def _level(client: SchemaRegistryClient, subject: str) -> str:
    """The compatibility rule the subject is held to, for the message (best effort)."""
    for ask in (lambda: client.get_compatibility(subject), client.get_compatibility):
        try:
            return f"compatibility {ask()}"
        except Exception:  # noqa: BLE001, S112 - 404: no subject-level rule; the global one is asked next
            continue
    return "its compatibility rule"


def _said(exc: SchemaRegistryError) -> str:
    return f"HTTP {exc.http_status_code}, error code {exc.error_code}: {exc.error_message}"


def _away(what: str, exc: Exception, reg: RegistryConfig) -> BrokerError:
    if isinstance(exc, SchemaRegistryError):
        detail = _said(exc)
    elif _timed_out(exc):
        detail = (f"{reg.url} did not answer within registry.timeout_ms ({reg.timeout_ms} ms), "
                  f"asked {REGISTRY_RETRIES + 1} times")
    else:
        detail = repr(exc)
    return BrokerError(redact(f"schema registry: {what} failed: {detail}", reg.basic_auth_user_info))


def _timed_out(exc: Exception) -> bool:
    # The client's transport is httpx or its successor httpx2, whichever is installed (the
    # client's choice): their timeouts share the base class's name, not the class.
    return any(c.__name__ == "TimeoutException" for c in type(exc).__mro__)
