"""The model side of every command, built once: the checked runner, the schemas, the codecs, the fallback and challengers, and the serving that holds them.

Each piece is derived from the config once and handed to what needs it: the input schema is
read once (the contract's field check, the prediction schema's pass-through types, the Avro
decoder), the prediction schema made once (the encoder, the degraded-fields check, the lake's
columns), and the fallback model opened once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from streamer.config import Config
from streamer.errors import ConfigError, InferenceError
from streamer.formats.avro import AvroSchema
from streamer.formats.codec import Codec
from streamer.formats.json_events import JsonCodec
from streamer.kafka.clients import ensure_topic, make_producer
from streamer.model.contract import Contract
from streamer.model.onnx_file import file_digest
from streamer.model.runner import ModelRunner, OnnxRunner, cuda_options
from streamer.observe.metrics import Metrics
from streamer.pipeline.breaker import Fallback
from streamer.pipeline.records import ModelId
from streamer.pipeline.reload import check_candidate, file_version, served_file, served_model
from streamer.pipeline.serving import Serving
from streamer.pipeline.stages import Stages
from streamer.shadow import Shadow
from streamer.wiring.codecs import (
    can_flag_degraded,
    input_schema,
    output_codec,
    prediction_schema,
)


@dataclass(frozen=True, slots=True)
class ModelHouse:
    """What one model scores with, each piece built once: the runner (checked at start-up), the
    input's Avro schema (None: not Avro; a mode that reads events builds its decoder from it), the
    prediction schema, the predictions' codec, and the serving (reloads, fallback, challengers,
    the version label)."""

    runner: ModelRunner
    schema_in: AvroSchema | None
    schema_out: AvroSchema
    encoder: Codec
    serving: Serving

    @property
    def contract(self) -> Contract:
        return self.runner.contract


def model_runner(cfg: Config, path: Path | None = None) -> ModelRunner:
    """The model at ``path`` (default: the one ``model.path`` serves) on the configured devices,
    with the contract of ``model.inputs`` and ``model.outputs`` (ConfigError: it does not fit)."""
    m = cfg.model
    return OnnxRunner(path or served_file(m)[0], m.providers, intra_op_threads=m.intra_op_threads,
                      cuda_options=cuda_options(m.cuda_device_id, m.cuda_mem_limit_mb, m.cuda_arena),
                      io_binding=m.io_binding,
                      contract=lambda sig: Contract.of(sig, m.inputs, m.outputs, cfg.input.features_field))


def checked_runner(cfg: Config, path: Path | None = None, key: str = "model.path",
                   like: ModelRunner | None = None, schema_in: AvroSchema | None = None) -> ModelRunner:
    """:func:`model_runner`, refused at start-up as a hot reload would refuse it: its fields must
    be in ``schema_in`` (the input's Avro schema, when there is one) with types it takes, it must
    have ``like``'s signature (when given), warm up, and answer a probe batch with finite outputs.
    A refusal is a ConfigError on ``key`` (exit 2): a restart cannot make the model servable."""
    try:
        runner = model_runner(cfg, path)
    except InferenceError as exc:
        raise ConfigError(key, str(exc)) from exc
    if like is None:
        runner.contract.check_fields(schema_in)
    name = (path or served_file(cfg.model)[0]).name
    try:
        refused = check_candidate(runner, like, [runner.contract.blank(2)], cfg.batching.max_size)
    except InferenceError as exc:
        refused = f"it fails on a probe batch: {exc}"
    if refused:
        raise ConfigError(key, f"cannot serve {name}: {refused}")
    return runner


def model_house(cfg: Config, runner: ModelRunner | None = None, *, metrics: Metrics | None = None,
                label: str | None = None, key: str = "model.path", like: ModelRunner | None = None) -> ModelHouse:
    """The house of ``cfg``'s model (``runner``: one given, else ``model.path``'s, checked at
    start-up and refused on ``key``, with ``like``'s signature when given). ``label``: the version
    its predictions carry, verbatim, whatever the file says. ``metrics``: the challengers'."""
    schema_in = input_schema(cfg.input)
    runner = runner or checked_runner(cfg, None, key, like, schema_in)
    schema_out = prediction_schema(cfg.output, runner.contract, schema_in)
    encoder = output_codec(cfg, schema_out)
    m = cfg.model
    serving = Serving(m, cfg.processing, cfg.batching.max_size, runner, time.monotonic,
                      model=served_model(m, runner, label), load=lambda path: model_runner(cfg, path),
                      fallback=_fallback(cfg, runner, schema_out), shadow=_shadow(cfg, runner, encoder, metrics))
    return ModelHouse(runner, schema_in, schema_out, encoder, serving)


def _fallback(cfg: Config, runner: ModelRunner, schema_out: AvroSchema) -> Fallback | None:
    """``model.fallback_path``'s model (opened once, with the serving model's signature), or
    ``model.fallback_scores``' constant row; None without either."""
    m = cfg.model
    if not m.fallback:
        return None
    can_flag_degraded(schema_out)
    if m.fallback_path is None:
        return Fallback(None, m.fallback_scores, ModelId(f"{m.name}-fallback", "constant"))
    stand_in = checked_runner(cfg, m.fallback_path, "model.fallback_path", like=runner)
    version = file_version("", None, stand_in, file_digest(m.fallback_path))
    return Fallback(stand_in, m.fallback_scores, ModelId(f"{m.name}-fallback", version))


def _shadow(cfg: Config, champion: ModelRunner, encoder: Codec, metrics: Metrics | None) -> Shadow | None:
    """The challengers of ``shadow.challengers``, each checked to take the champion's input."""
    if not cfg.shadow.challengers:
        return None
    challengers = []
    for n, spec in enumerate(cfg.shadow.challengers):
        runner = model_runner(cfg, spec.path)
        if differs := champion.signature.differs(runner.signature):
            raise ConfigError(f"shadow.challengers[{n}].path", f"{spec.name!r}: {differs}")
        challengers.append((spec, runner))
    stages = Stages.serving(JsonCodec(), encoder, cfg, champion)  # encodes only
    return Shadow(cfg, challengers, stages, lambda: make_producer(cfg), metrics,
                  ensure_topic=lambda topic: ensure_topic(cfg, topic, like=cfg.output.topic))
