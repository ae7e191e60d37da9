"""Model outputs to prediction fields: ``model.outputs`` planned against the signature, raw
session outputs turned into named columns, and the one number a decision is made on.

A field takes a label (``[N]`` or ``[N, 1]``: one value), a row (``[N, k]``: an array), one column
of a row (``column: k``: one value), or a ZipMap's class -> probability maps as a probability row
in class order. With several outputs and no mapping the model is refused: nothing is picked
silently (skl2onnx's classifiers put the label first, so the first output of a classifier is its
label, not a score).

Worked example (skl2onnx's classifier with ``zipmap=False``: ``label`` int64 [N], ``probabilities``
float32 [N, 2]; ``model.outputs: {label: label, fraud: {output: probabilities, column: 1}}``): the
prediction gets ``label`` (Avro long) and ``fraud`` (Avro float, P(class 1)).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamer.config import OutputTarget
from streamer.errors import ConfigError, InferenceError
from streamer.model.signature import DTYPES, Columns, Signature, TensorSpec

AVRO_TYPES = {"float32": "float", "float64": "double", "int64": "long", "int32": "int", "bool": "boolean",
              "string": "string", "zipmap": "float"}
# What the common converters name their outputs, for the mapping a refusal suggests.
_LABELS = ("output_label", "label")
_PROBABILITIES = ("output_probability", "probabilities")


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """One prediction field and the model output it comes from."""

    field: str
    spec: TensorSpec
    column: int | None
    scalar: bool  # one value per row; else an array

    @property
    def element(self) -> str:
        return "float32" if self.spec.element == "zipmap" else self.spec.element

    def avro(self) -> Any:
        item = AVRO_TYPES[self.spec.element]
        return item if self.scalar else {"type": "array", "items": item}

    def take(self, raw: Any, rows: int) -> np.ndarray:
        """This field's column from the session's raw output; raises InferenceError when it does
        not have the shape the signature promised."""
        if self.spec.element == "zipmap":
            out = _zipmap_rows(raw, self.spec.name)
        else:
            out = np.asarray(raw)
            if out.ndim == 1:
                out = out.reshape(-1, 1)
        if out.ndim != 2 or len(out) != rows:
            raise InferenceError(f"output '{self.spec.name}' has shape {out.shape} for {rows} rows")
        if self.column is not None:
            if self.column >= out.shape[1]:
                raise InferenceError(f"output '{self.spec.name}' has {out.shape[1]} columns; model.outputs."
                                     f"{self.field}.column is {self.column}")
            return out[:, self.column]
        if self.scalar:
            if out.shape[1] != 1:
                raise InferenceError(f"output '{self.spec.name}' gives {out.shape[1]} values a row; "
                                     f"prediction field '{self.field}' holds one")
            return out[:, 0]
        return out


def _zipmap_rows(raw: Any, name: str) -> np.ndarray:
    """ZipMap's list of {class: probability} as a float32 [N, classes] matrix, in class order
    (the map's order, which is the classifier's)."""
    if not len(raw):
        return np.empty((0, 0), np.float32)
    classes = list(raw[0])
    try:
        return np.array([[m[c] for c in classes] for m in raw], np.float32)
    except (KeyError, TypeError) as exc:
        raise InferenceError(f"output '{name}': the ZipMap rows do not share the classes {classes}") from exc


def field_doc(p: OutputPlan) -> str:
    what = "the class probabilities in class order" if p.spec.element == "zipmap" else "its value"
    column = f", column {p.column}" if p.column is not None else ""
    return f"The model's output '{p.spec.name}'{column}: {what}."


def plan_outputs(mapped: Mapping[str, OutputTarget] | None, sig: Signature) -> list[OutputPlan]:
    if not sig.outputs:
        raise ConfigError("model.path", "the model has no outputs")
    if mapped is None:
        if len(sig.outputs) > 1:
            mapping = ", ".join(f"{f}: {t}" for f, t in suggested_outputs(sig))
            raise ConfigError("model.outputs", f"the model has {len(sig.outputs)} outputs "
                                               f"({[s.name for s in sig.outputs]}) and none is picked silently: "
                                               f"say which go into the prediction, e.g. {{{mapping}}}")
        spec = sig.outputs[0]
        if spec.element not in DTYPES or spec.element == "string":
            raise ConfigError("model.outputs", f"output {spec.name!r} is {spec.onnx_type}; 'scores' holds "
                                               f"numbers: map it to a prediction field in model.outputs")
        return [OutputPlan("scores", spec, None, False)]
    plans = []
    for field, target in mapped.items():
        plans.append(_output(field, target, sig))
    return plans


def _output(field: str, target: OutputTarget, sig: Signature) -> OutputPlan:
    key = f"model.outputs.{field}"
    spec = sig.output(target.output)
    if spec is None:
        raise ConfigError(key, f"the model has no output {target.output!r}; its outputs are "
                               f"{[s.name for s in sig.outputs]}")
    if not spec.known:
        raise ConfigError(key, f"output {spec.name!r} is {spec.onnx_type}, which streamer cannot read")
    if len(spec.shape) > 2:
        raise ConfigError(key, f"output {spec.name!r} has shape {list(spec.shape)}: streamer reads [N] or [N, k]")
    if target.column is not None:
        if spec.width is not None and target.column >= spec.width:
            raise ConfigError(f"{key}.column", f"output {spec.name!r} has {spec.width} columns")
        return OutputPlan(field, spec, target.column, True)
    return OutputPlan(field, spec, None, spec.width == 1)


def suggested_outputs(sig: Signature) -> list[tuple[str, str]]:
    """Prediction fields for a signature's outputs: a classifier's label and probabilities by
    their usual names, the rest by the output's own name."""
    out = []
    for spec in sig.outputs:
        field = ("label" if spec.name in _LABELS else "probabilities" if spec.name in _PROBABILITIES
                 else spec.name)
        out.append((field, spec.name))
    return out


def decision_scores(scores: Columns) -> np.ndarray:
    """One number per row that a decision is made on (shadow flips and agreement): the first
    column of ``scores`` (outputs not mapped); with named outputs, the first float field: a single
    value as it is, a two-class probability row's second column (P(positive)), a wider row's
    largest value."""
    unmapped = scores.arrays.get("scores")
    if unmapped is not None and len(scores.arrays) == 1 and unmapped.ndim == 2:
        return unmapped[:, 0] if unmapped.shape[1] else np.full(len(scores), np.nan)
    for col in scores.arrays.values():
        if col.dtype.kind == "f":
            if col.ndim == 1:
                return col.astype(np.float64)
            return (col[:, 1] if col.shape[1] == 2 else col.max(axis=1)).astype(np.float64)
    return np.full(len(scores), np.nan)
