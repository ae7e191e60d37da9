"""`streamer model inspect` and `streamer schema`: what a model takes and gives, a starting
config for it, and the prediction schema a config produces; the calibration rows of `streamer
model optimize --int8 --calibrate-from`.

``inspect`` reads the model's signature (every input and output: name, element type, shape),
suggests ``model.inputs`` (each input from the event field of its name; a model with one input
of fixed width takes the ``features`` array) and ``model.outputs`` (a classifier's label and
probabilities; other outputs by their own names), and prints the prediction schema that config
would produce. ``schema`` loads a config, checks its model as start-up does and prints the schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnxruntime as ort

from streamer.config import Config
from streamer.config_contract import InputSource, OutputTarget
from streamer.errors import ConfigError, FileError
from streamer.formats.avro import load_schema
from streamer.formats.configured import input_codec, input_schema, prediction_schema
from streamer.formats.json_events import JsonCodec
from streamer.kafka.ranges import parse_when
from streamer.model.contract import Contract
from streamer.model.optimize import Feeds
from streamer.model.outputs import suggested_outputs
from streamer.model.prediction_schema import made_schema
from streamer.model.signature import DTYPES, Signature
from streamer.pipeline.reload import checked_runner
from streamer.pipeline.stages import Stages
from streamer.schemas import bundled


def signature_of(path: Path) -> Signature:
    """The signature of the ONNX file at ``path`` (CPU session; FileError when it does not load)."""
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own classes for a missing or corrupt file
        raise FileError(path, f"cannot load it as an ONNX model: {exc}") from exc
    return Signature.of(session)


def suggested(sig: Signature) -> tuple[dict[str, InputSource] | None, dict[str, OutputTarget] | None]:
    """``model.inputs`` and ``model.outputs`` for a signature (None: the default serves it)."""
    one = sig.inputs[0] if len(sig.inputs) == 1 else None
    inputs = (None if one is not None and one.width is not None and one.element in ("float32", "float64")
              else {s.name: InputSource((s.name,)) for s in sig.inputs})
    single = len(sig.outputs) == 1 and sig.outputs[0].element in DTYPES and sig.outputs[0].element != "string"
    outputs = None if single else {field: OutputTarget(name) for field, name in suggested_outputs(sig)}
    return inputs, outputs


def inspect(path: Path) -> str:
    """The report ``streamer model inspect PATH`` prints."""
    sig = signature_of(path)
    inputs, outputs = suggested(sig)
    lines = [f"model {path}", sig.describe(), "", "a starting config (rename the fields to your event's):",
             "model:", f"  path: {path}", f"  name: {path.stem}", '  version: "1"']
    if inputs is not None:
        lines.append("  inputs:")
        lines.extend(f"    {name}: {src.fields[0]}" for name, src in inputs.items())
    if outputs is not None:
        lines.append("  outputs:")
        lines.extend(f"    {field}: {t.output}" for field, t in outputs.items())
    if any(s.element == "zipmap" for s in sig.outputs):
        lines += ["", ("note: this classifier was converted with ZipMap on; it is served (its maps become a "
                       "probability row in class order), but converting with options={id(model): {'zipmap': "
                       "False}} gives a plain tensor, which is faster to read")]
    try:
        contract = Contract.of(sig, inputs, outputs)
    except ConfigError as exc:
        lines += ["", f"that config cannot serve it as it is: {exc}"]
        return "\n".join(lines)
    schema = made_schema(load_schema(bundled("prediction.avsc")), contract, (), None)
    lines += ["", "the prediction schema it produces (streamer schema --config prints yours):", _json(schema)]
    return "\n".join(lines)


def schema(cfg: Config) -> str:
    """The prediction schema a config produces, its model checked as at start-up."""
    schema_in = input_schema(cfg.input)
    return _json(prediction_schema(cfg.output, checked_runner(cfg, schema_in=schema_in).contract, schema_in))


def _json(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2)


def calibration_rows(cfg: Config, span: str, rows: int) -> Iterator[Feeds]:
    """Batches of the model's inputs from ``START..END`` of the config's input topics (replay's
    forms), decoded and validated as the stream does, up to ``rows`` rows; rows that fail are skipped."""
    from streamer.lake.sink import Resume, Shard  # the optimize extra's pyarrow
    from streamer.lake.topic import TopicSource, replay_plan

    start, sep, end = span.partition("..")
    if not sep or not start or not end:
        raise ConfigError("--calibrate-from", f"{span!r} is not START..END (e.g. 2h..latest, earliest..latest)")
    schema_in = input_schema(cfg.input)
    runner = checked_runner(cfg, schema_in=schema_in)
    bounds = replay_plan(cfg, parse_when(start, "--calibrate-from"), parse_when(end, "--calibrate-from"), Shard())
    source = TopicSource(cfg, Stages.serving(input_codec(cfg.input, schema_in), JsonCodec(), cfg, runner))  # decodes only
    taken = 0
    for chunk in source.chunks(Resume(bounds, {}, 0)):
        if not len(chunk.rows):
            continue
        part = chunk.rows.features[: rows - taken]
        yield runner.contract.feed(part)
        taken += len(part)
        if taken >= rows:
            return
