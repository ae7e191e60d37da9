"""`streamer check --config FILE`: a dry run of start-up that names every problem it finds.

It checks what `streamer run` needs before it scores anything, and touches nothing: the config
(loaded by the caller: a bad key is exit 2 before any of this), each model against the schemas
(signature, ``model.inputs`` and ``model.outputs``, a probe batch: the checks start-up runs), every
model of ``models`` (``models.named``, ``models.repository``) on a line of its own, the default
first, a refusal naming its own key (``models.named.<name>.model.path``), the
cluster answering a metadata request with the configured security settings, the input and output
topics existing, and each configured Schema Registry answering. A missing input topic with
``input.create_topics``, or a missing dead-letter topic with ``processing.create_dead_letter_topic``,
is ok: start-up creates it (``will be created at start``); without them, as a missing output
topic (with ``output.topic_per_model``, each topic of a model the stream scores with), it is a FAIL (run waits for it, unhealthy, naming it). Each finding is one line, ``ok`` or ``FAIL`` with the key to change;
the command exits 0 when all are ok, else 2. A field of the Avro ``input.schema`` that can be
null, mapped in ``model.inputs`` without a ``fill``, is a ``warn`` line (each null is a dead
letter; the run starts): the exit code stays 0. Nothing is consumed, produced or registered.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException

from streamer.config import (
    Config,
    RegistryConfig,
    dead_letter_topic,
    default_model,
    for_model,
    librdkafka_config,
    model_entries,
    model_key,
    output_registry,
    prediction_topic,
    route_models,
    under,
)
from streamer.errors import ConfigError
from streamer.formats.configured import input_schema, prediction_schema
from streamer.formats.subjects import redact, registry_client
from streamer.kafka.clients import make_admin
from streamer.pipeline.reload import checked_runner


@dataclass(frozen=True, slots=True)
class Finding:
    key: str  # the config key (or file) the finding is about
    ok: bool
    detail: str
    warn: bool = False  # ok, with something to know: the run starts

    def line(self) -> str:
        return f"{'FAIL' if not self.ok else 'warn' if self.warn else 'ok  '}  {self.key}: {self.detail}"


def check(cfg: Config, timeout_s: float = 10.0) -> list[Finding]:
    """Every finding, in the order start-up meets them; see the module docstring."""
    return [*_models(cfg), *_kafka(cfg, timeout_s), *_registries(cfg)]


def _models(cfg: Config) -> list[Finding]:
    """Each model's findings, the default model's first; with several, each line names its model."""
    default = default_model(cfg)
    names = sorted(model_entries(cfg), key=lambda name: (name != default, name))
    if len(names) == 1:
        return _model(for_model(cfg, default), "model", "")
    return [finding for name in names
            for finding in _model(for_model(cfg, name), model_key(cfg, name), f"model {name!r}"
                                  f"{' (the default)' if name == default else ''}: ")]


def _model(cfg: Config, key: str, which: str) -> list[Finding]:
    """One model's findings, its keys under ``key`` (``model``, ``models.named.<name>.model``)."""
    try:
        schema_in = input_schema(cfg.input)
        runner = checked_runner(cfg, schema_in=schema_in, key=f"{key}.path")
        schema = prediction_schema(cfg.output, runner.contract, schema_in)
    except ConfigError as exc:
        return [Finding(under(exc.key, key), False, f"{which}{exc.reason}")]
    fields = ", ".join(f["name"] for f in schema["fields"])
    return [Finding(f"{key}.path", True, f"{which}{cfg.model.path.name} serves version {cfg.model.version}; "
                                         f"predictions carry {fields}"),
            *(Finding(under(k, key), True, f"{which}{words}", warn=True)
              for k, words in runner.contract.nullable_fields(schema_in))]


def _kafka(cfg: Config, timeout_s: float) -> list[Finding]:
    bootstrap = str(librdkafka_config(cfg)["bootstrap.servers"])
    try:
        topics = make_admin(cfg).list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        return [Finding("kafka.bootstrap.servers", False,
                        f"no metadata from {bootstrap} within {timeout_s:g} s with these kafka settings "
                        f"(address, security.protocol, sasl.*): {exc.args[0].str()}")]
    found = [Finding("kafka.bootstrap.servers", True, f"{bootstrap} answers ({len(topics)} topics)")]
    # (key, topic, whether start-up creates it when missing), as clients.check_topics and
    # open_kafka do
    wanted = [(f"input.topics[{n}]", t, cfg.input.create_topics) for n, t in enumerate(cfg.input.topics)]
    if cfg.output.topic_per_model:  # each model's topic the stream writes to
        wanted += [("output.topic_per_model", prediction_topic(cfg, name), False) for name in route_models(cfg)]
    else:
        wanted.append(("output.topic", cfg.output.topic, False))
    wanted.append(("processing.dead_letter_topic", dead_letter_topic(cfg), cfg.processing.create_dead_letter_topic))
    for key, topic, created in wanted:
        meta = topics.get(topic)
        if (meta is None or meta.error is not None) and created:
            found.append(Finding(key, True, f"topic {topic!r} does not exist on {bootstrap}: will be created at start"))
        elif meta is None or meta.error is not None:
            found.append(Finding(key, False, f"topic {topic!r} does not exist on {bootstrap} "
                                             f"(`streamer topics create` creates it)"))
        else:
            found.append(Finding(key, True, f"topic {topic!r}, {len(meta.partitions)} partitions"))
    return found


def _registries(cfg: Config) -> list[Finding]:
    needed: list[tuple[str, RegistryConfig]] = []
    if cfg.input.format.endswith("-confluent") and cfg.input.registry is not None:
        needed.append(("input.registry.url", cfg.input.registry))
    out = output_registry(cfg)
    if cfg.output.format == "avro-confluent" and out is not None and out not in [r for _, r in needed]:
        needed.append(("output.registry.url" if cfg.output.registry else "input.registry.url", out))
    found = []
    for key, reg in needed:
        secret = reg.basic_auth_user_info
        try:
            subjects = registry_client(reg).get_subjects()
        except Exception as exc:  # noqa: BLE001 - any failure is the finding
            found.append(Finding(key, False, redact(f"{reg.url} does not answer: {exc}", secret)))
            continue
        found.append(Finding(key, True, redact(f"{reg.url} answers ({len(subjects)} subjects)", secret)))
    return found
