"""Builds the house for every command from a Config: codecs, prediction schema, runner, serving, shadow, a Processor."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry

from streamer.config import Config, dead_letter_topic, librdkafka_config
from streamer.errors import ConfigError, InferenceError
from streamer.formats.avro import AvroCodec, AvroSchema, load_schema
from streamer.formats.codec import Codec
from streamer.formats.confluent import ConfluentAvroCodec, SchemaIds
from streamer.formats.json_events import CheckedJsonCodec, ConfluentJsonCodec, JsonCodec, JsonSchemaCheck
from streamer.formats.protobuf import ConfluentProtobufCodec
from streamer.formats.subjects import confluent_output_codec, registry_client
from streamer.house import KafkaSide, Observer, OpenKafka, Scope, Wiring
from streamer.kafka.checkpoint import CHECKPOINTS, Checkpoint
from streamer.kafka.clients import (
    KafkaClients,
    check_topics,
    ensure_topic,
    make_admin,
    make_producer,
    queue_limit,
)
from streamer.kafka.delivery import Deliveries
from streamer.kafka.offsets import OffsetTracker
from streamer.kafka.retrylog import retry_level
from streamer.kafka.topics import TopicWait
from streamer.model.contract import Contract
from streamer.model.onnx_file import file_digest
from streamer.model.prediction_schema import check_schema, made_schema
from streamer.model.runner import ModelRunner, OnnxRunner, cuda_options
from streamer.observe.health import HealthServer, Status
from streamer.observe.metrics import GroupRegistry, Metrics
from streamer.pipeline.breaker import Fallback
from streamer.pipeline.records import ModelId, Partition
from streamer.pipeline.reload import check_candidate, file_version, served_file, served_model
from streamer.pipeline.serving import Serving
from streamer.pipeline.stages import Stages
from streamer.processor import Processor
from streamer.schemas import bundled
from streamer.shadow import Shadow

log = logging.getLogger(__name__)


def input_codec(cfg: Config) -> Codec:
    i = cfg.input
    check = JsonSchemaCheck.from_file(i.json_schema) if i.json_schema is not None else None
    if i.format == "json":
        return JsonCodec(i.max_message_bytes) if check is None else CheckedJsonCodec(check, i.max_message_bytes)
    schema = load_schema(i.schema, key="input.schema") if i.schema is not None else None
    if i.format == "avro":
        assert schema is not None  # checked when the config was loaded
        return AvroCodec(schema, i.max_message_bytes)
    registry = i.registry  # every other format is Confluent-framed: a registry, checked when loaded
    assert registry is not None
    client = registry_client(registry)
    retry_s = registry.not_found_retry_ms / 1000.0
    # Decoding reads each message's writer schema by its id; the schema and the subject serve only
    # streamer's own producers of input (streamer produce, the demo, the tests).
    subject = registry.subject or f"{i.topics[0]}-value"
    if i.format == "protobuf-confluent":
        return ConfluentProtobufCodec(client, i.max_message_bytes, SchemaIds(client, retry_s),
                                      fresh=lambda: registry_client(registry))
    if i.format == "json-schema-confluent":
        return ConfluentJsonCodec(client, subject, check, i.max_message_bytes, SchemaIds(client, retry_s))
    return ConfluentAvroCodec(client, subject, schema, i.max_message_bytes, not_found_retry_s=retry_s)


def prediction_schema(cfg: Config, runner: ModelRunner | None = None, *,
                      contract: Contract | None = None) -> AvroSchema:
    """The prediction schema: ``output.schema`` (checked against what the model's contract and
    ``output.include`` write), else the bundled one or, with named outputs or pass-through
    fields, one made from them. ``runner``: the model (default: none checked, the bundled layout);
    or only its ``contract``, for a command that reads predictions and loads no model."""
    shipped = load_schema(bundled("prediction.avsc"), key="output.schema")
    contract = contract if runner is None else runner.contract
    made = shipped
    if contract is not None and (contract.score_column is None or cfg.output.include):
        made = made_schema(shipped, contract, cfg.output.include, avro_input_schema(cfg))
    if cfg.output.schema is None:
        return made
    user = load_schema(cfg.output.schema, key="output.schema")
    if contract is not None:
        check_schema(user, made)
    return user


def avro_input_schema(cfg: Config) -> AvroSchema | None:
    """``input.schema`` when the input is Avro with one (None for JSON: its fields are not declared)."""
    if cfg.input.format not in ("avro", "avro-confluent") or cfg.input.schema is None:
        return None
    return load_schema(cfg.input.schema, key="input.schema")


def output_codec(cfg: Config, runner: ModelRunner | None = None) -> Codec:
    """The predictions' codec for ``output.format``: plain Avro, Avro framed with the id the
    prediction schema has in the registry (registered or looked up, its compatibility checked,
    formats/subjects.py), or JSON objects with the schema's fields."""
    schema = prediction_schema(cfg, runner)
    if cfg.output.format == "json":
        return JsonCodec()
    if cfg.output.format == "avro-confluent":
        return confluent_output_codec(cfg, schema)
    return AvroCodec(schema)


def model_runner(cfg: Config, path: Path | None = None) -> ModelRunner:
    """The model at ``path`` (default: the one ``model.path`` serves) on the configured devices,
    with the contract of ``model.inputs`` and ``model.outputs`` (ConfigError: it does not fit)."""
    m = cfg.model
    return OnnxRunner(path or served_file(m)[0], m.providers, intra_op_threads=m.intra_op_threads,
                      cuda_options=cuda_options(m.cuda_device_id, m.cuda_mem_limit_mb, m.cuda_arena),
                      io_binding=m.io_binding,
                      contract=lambda sig: Contract.of(sig, m.inputs, m.outputs, cfg.input.features_field))


def checked_runner(cfg: Config, path: Path | None = None, key: str = "model.path",
                   like: ModelRunner | None = None) -> ModelRunner:
    """:func:`model_runner`, refused at start-up as a hot reload would refuse it: its fields must
    be in ``input.schema`` with types it takes, it must have ``like``'s signature (when given),
    warm up, and answer a probe batch with finite outputs. A refusal is a ConfigError on ``key``
    (exit 2): a restart cannot make the model servable."""
    try:
        runner = model_runner(cfg, path)
    except InferenceError as exc:
        raise ConfigError(key, str(exc)) from exc
    if like is None:
        runner.contract.check_fields(avro_input_schema(cfg))
    name = (path or served_file(cfg.model)[0]).name
    try:
        refused = check_candidate(runner, like, [runner.contract.blank(2)], cfg.batching.max_size)
    except InferenceError as exc:
        refused = f"it fails on a probe batch: {exc}"
    if refused:
        raise ConfigError(key, f"cannot serve {name}: {refused}")
    return runner


def serving(cfg: Config, runner: ModelRunner, metrics: Metrics | None = None,
            encoder: Codec | None = None, label: str | None = None) -> Serving:
    """``runner`` serving, reloaded from ``model.path``, with the configured fallback and
    challengers (whose predictions ``encoder``, the output codec, writes)."""
    m = cfg.model
    fallback = None
    if m.fallback:
        schema = prediction_schema(cfg, runner)
        if "degraded_reason" not in {f["name"] for f in schema["fields"]}:
            raise ConfigError("output.schema", "has no degraded and degraded_reason fields (schemas/"
                                               "prediction.avsc has them): model.fallback_* needs them "
                                               "to flag degraded predictions")
        runner_of_fallback, version = None, "constant"
        if m.fallback_path is not None:
            runner_of_fallback = checked_runner(cfg, m.fallback_path, "model.fallback_path", like=runner)
            version = file_version("", None, runner_of_fallback, file_digest(m.fallback_path))
        fallback = Fallback(runner_of_fallback, m.fallback_scores, ModelId(f"{m.name}-fallback", version))
    return Serving(m, cfg.processing, cfg.batching.max_size, runner, time.monotonic,
                   model=served_model(m, runner, label), load=lambda path: model_runner(cfg, path), fallback=fallback,
                   shadow=shadow(cfg, runner, metrics, encoder))


def shadow(cfg: Config, champion: ModelRunner, metrics: Metrics | None,
           encoder: Codec | None = None) -> Shadow | None:
    """The challengers of ``shadow.challengers``, each checked to take the champion's input."""
    if not cfg.shadow.challengers:
        return None
    challengers = []
    for n, spec in enumerate(cfg.shadow.challengers):
        runner = model_runner(cfg, spec.path)
        if differs := champion.signature.differs(runner.signature):
            raise ConfigError(f"shadow.challengers[{n}].path", f"{spec.name!r}: {differs}")
        challengers.append((spec, runner))
    stages = Stages.serving(JsonCodec(), encoder or output_codec(cfg, champion), cfg, champion)  # encodes only
    return Shadow(cfg, challengers, stages, lambda: make_producer(cfg), metrics,
                  ensure_topic=lambda topic: ensure_topic(cfg, topic, like=cfg.output.topic))


def open_kafka(cfg: Config, clients: KafkaClients) -> OpenKafka:
    """The Kafka side a processor opens when it runs (house.OpenKafka): the dead-letter topic
    ensured when configured (its size bounds the producer's messages), the producer of the
    guarantee's checkpoint (the one place the guarantee is read) with a fatal one replaced, the
    consumer, whose background commits are answered inside consume(), and the checkpoint."""

    def open_(tracker: OffsetTracker, clock: Callable[[], float],
              commit_metadata: Callable[[Partition], str] | None,
              on_stats: Callable[[str], None] | None, on_full: Callable[[], None]) -> KafkaSide:
        room = (clients.ensure_topic(dead_letter_topic(cfg), cfg.input.topics[0])
                if cfg.processing.create_dead_letter_topic else None)  # the largest dead letter
        kind = CHECKPOINTS[cfg.processing.guarantee]
        opened: list[Checkpoint] = []  # librdkafka may call back before the checkpoint exists

        def client_error(err: KafkaError) -> None:
            """A fatal producer error goes to the checkpoint (which replaces the producer); an
            expected start-up retry (a broker still starting) is INFO, any other error a warning."""
            if not err.fatal():
                log.log(retry_level(err), "producer: %s", err)
            elif opened:  # (before it exists, init_transactions raises it)
                opened[0].producer_failed(err)

        make_producer = partial(clients.producer, error_cb=client_error, largest_message=room,
                                **kind.producer_settings(cfg))
        stats = ({"statistics.interval.ms": cfg.metrics.stats_interval_ms, "stats_cb": on_stats}
                 if on_stats is not None else {})
        consumer = clients.consumer(on_commit=lambda e, tps: opened[0].commit_reported(e, tps), **stats)
        deliveries = Deliveries(make_producer(), on_full=on_full, make_producer=make_producer,
                                key_by=cfg.output.key, queue_limit=queue_limit(cfg))
        opened.append(kind(cfg, tracker, consumer, deliveries, clock, commit_metadata))
        return KafkaSide(consumer, deliveries, opened[0])

    return open_


def build_wiring(cfg: Config, runner: ModelRunner | None = None, registry: CollectorRegistry | None = None,
                 clients: KafkaClients | None = None, stopping: Callable[[], bool] = lambda: False,
                 model_version: str | None = None, observers: tuple[Observer, ...] = ()) -> Wiring:
    """The house for one processor, built and checked before anything is read: the model (checked
    at start-up as a reload is, unless ``runner`` is given), codecs, serving (reloads, fallback,
    challengers), metrics when ``metrics.enabled`` or a ``registry`` is given, and /metrics,
    /healthz and /readyz when ``metrics.enabled``. ``clients``: other Kafka clients than the
    config's (the in-memory ones of benchmarks/gpu.py); the config's cluster is checked first, and
    the processor waits for the topics of :func:`topic_wait` before it reads. ``stopping``: a stop signal came (it ends start-up's wait for
    the cluster: StopRequested). ``model_version``: the label every prediction carries, verbatim,
    whatever the file declares. ``observers``: watch the loop beside its accounting."""
    metrics = None
    if cfg.metrics.enabled or registry is not None:
        registry = registry or GroupRegistry(cfg.input.group_id)
        metrics = Metrics(registry)
    runner = runner or checked_runner(cfg)
    encoder = output_codec(cfg, runner)
    topics = None
    if clients is None:
        check_topics(cfg, stopping=stopping)
        topics = topic_wait(cfg)
    served = serving(cfg, runner, metrics, encoder, model_version)
    health = None
    if cfg.metrics.enabled:
        exported = registry
        assert exported is not None
        health = partial(serve_http, cfg, exported)
    return Wiring(cfg, served, input_codec(cfg), encoder, open_kafka(cfg, clients or KafkaClients.from_config(cfg)),
                  metrics, health=health, observers=observers, topics=topics)


def topic_wait(cfg: Config) -> TopicWait:
    """What a processor waits for before it reads: the output topic, and the input topics unless
    ``input.create_topics`` (start-up created them then); each named by its config key."""
    needed = [] if cfg.input.create_topics else [(f"input.topics[{n}]", t) for n, t in enumerate(cfg.input.topics)]
    needed.append(("output.topic", cfg.output.topic))
    return TopicWait(make_admin(cfg), needed, str(librdkafka_config(cfg)["bootstrap.servers"]))


def build_processor(cfg: Config, runner: ModelRunner | None = None, registry: CollectorRegistry | None = None,
                    clients: KafkaClients | None = None, stopping: Callable[[], bool] = lambda: False,
                    scope: Scope = Scope(), model_version: str | None = None,
                    observers: tuple[Observer, ...] = ()) -> Processor:
    """A ready Processor on :func:`build_wiring`'s house, for ``scope`` (default: the live stream)."""
    return Processor(build_wiring(cfg, runner, registry, clients, stopping, model_version, observers), scope)


def serve_http(cfg: Config, registry: CollectorRegistry, status: Callable[[], Status]) -> HealthServer:
    try:
        return HealthServer(registry, cfg.metrics.host, cfg.metrics.port, status)
    except OSError as exc:
        raise ConfigError("metrics.port", f"cannot listen on {cfg.metrics.host}:"
                                          f"{cfg.metrics.port}: {exc.strerror}") from exc
