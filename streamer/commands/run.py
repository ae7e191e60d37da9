"""Wiring: builds the codecs, the model runner and a Processor from a Config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka.schema_registry import SchemaRegistryClient
from prometheus_client import CollectorRegistry

from streamer.pipeline.codecs import AvroCodec, Codec, ConfluentAvroCodec, JsonCodec, load_schema
from streamer.config import Config
from streamer.errors import ConfigError
from streamer.observe.health import HealthServer, Status
from streamer.observe.metrics import GroupRegistry, Metrics
from streamer.processor import Processor
from streamer.pipeline.runner import ModelRunner, OnnxRunner

REPO_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def input_codec(cfg: Config) -> Codec:
    i = cfg.input
    if i.format == "json":
        return JsonCodec(i.max_message_bytes)
    schema = load_schema(i.schema, key="input.schema") if i.schema is not None else None
    if i.format == "avro":
        assert schema is not None  # checked when the config was loaded
        return AvroCodec(schema, i.max_message_bytes)
    assert i.registry is not None
    conf = {"url": i.registry.url}
    if i.registry.basic_auth_user_info is not None:
        conf["basic.auth.user.info"] = i.registry.basic_auth_user_info.value
    subject = i.registry.subject or f"{i.topics[0]}-value"
    # Decoding reads each message's writer schema by its id; the schema and the subject serve only
    # streamer's own producers of input (the demo, the tests). new_client also understands the
    # client's own mock:// URLs (used by the tests).
    return ConfluentAvroCodec(SchemaRegistryClient.new_client(conf), subject, schema, i.max_message_bytes)


def output_codec(cfg: Config) -> Codec:
    path = cfg.output.schema or REPO_SCHEMAS / "prediction.avsc"
    return AvroCodec(load_schema(path, key="output.schema"))


def model_runner(cfg: Config) -> ModelRunner:
    m = cfg.model
    return OnnxRunner(m.path, m.providers, intra_op_threads=m.intra_op_threads)


def build_processor(cfg: Config, runner: ModelRunner | None = None,
                    registry: CollectorRegistry | None = None) -> Processor:
    """A ready Processor; with ``metrics.enabled`` it serves /metrics, /healthz and /readyz."""
    metrics = None
    if cfg.metrics.enabled or registry is not None:
        registry = registry or GroupRegistry(cfg.input.group_id)
        metrics = Metrics(registry)
    processor = Processor(cfg, runner or model_runner(cfg), input_codec(cfg), output_codec(cfg), metrics)
    if cfg.metrics.enabled:
        assert registry is not None
        processor.http = serve_http(cfg, registry, processor.status)
    return processor


def serve_http(cfg: Config, registry: CollectorRegistry, status: Callable[[], Status]) -> HealthServer:
    try:
        return HealthServer(registry, cfg.metrics.host, cfg.metrics.port, status)
    except OSError as exc:
        raise ConfigError("metrics.port", f"cannot listen on {cfg.metrics.host}:"
                                          f"{cfg.metrics.port}: {exc.strerror}") from exc
