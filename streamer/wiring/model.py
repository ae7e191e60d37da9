"""The model side of every command, built once: the checked runner, the schemas, the predictions' codec, the fallback and challengers, and the serving that holds them.

Each piece is derived from the config once, by the room it belongs to, and handed to what needs
it: the input schema is read once (the contract's field check, the prediction schema's
pass-through types, the Avro decoder: formats/configured.py), the prediction schema made once
(the encoder, the degraded-fields check, the lake's columns), the runner checked as a reload
checks it (pipeline/reload.py), and the fallback model opened once (pipeline/breaker.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from streamer.config import Config
from streamer.formats.avro import AvroSchema
from streamer.formats.codec import Codec
from streamer.formats.configured import input_schema, output_codec, prediction_schema
from streamer.model.contract import Contract
from streamer.model.runner import ModelRunner, model_runner
from streamer.observe.metrics import Metrics
from streamer.pipeline.breaker import fallback_of
from streamer.pipeline.reload import checked_runner, served_model
from streamer.pipeline.serving import Serving
from streamer.shadow import shadow_of


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
                      fallback=fallback_of(cfg, runner, schema_out), shadow=shadow_of(cfg, runner, encoder, metrics))
    return ModelHouse(runner, schema_in, schema_out, encoder, serving)


