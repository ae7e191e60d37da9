"""The model's contract: which event fields feed which model input, which outputs become which
prediction fields, checked against the model's :class:`Signature` before anything is scored.

Built once per model from ``model.inputs`` and ``model.outputs`` (config.py); a contract that
cannot be served raises :class:`ConfigError` naming the key, so start-up exits 2 with the fix.

Inputs. Each model input takes one field, a list of fields stacked into ``[N, k]``, or an array
field (``input.features_field``, the default for a model with one input). Values are converted
to the input's element type by the conversion table (exact.py): a pair the table refuses is
refused at start where ``input.schema`` tells the field's type (:meth:`Contract.check_fields`),
and is a ``validate`` dead letter naming the field where nothing does (JSON, Protobuf); so are
a value out of its bounds (an int past 2^24 into float32), NaN or infinity, and null (or
missing) without a ``fill``. true into a number is 1; a double into float32 rounds to nearest.

Outputs. Each prediction field takes one output: a label (``[N]`` or ``[N, 1]``: one value), a
row (``[N, k]``: an array), one column of a row (``column: k``), or a ZipMap's class -> probability
maps as a probability row in class order. A model with several outputs and no mapping is refused:
nothing is picked silently (skl2onnx's classifiers put the label first).

A batch is always :class:`Columns`. A one-input model fed from the array field (the default
contract) takes one column, :data:`FEATURES`, a float32 ``[N, k]`` matrix that the columnar fast
path builds in one go; a model whose outputs are not mapped gives one column, :data:`SCORES`,
written as the prediction's ``scores`` array.

Worked example (a ColumnTransformer model with inputs ``country`` string [N, 1] and ``amount``
float32 [N, 1]; ``model.inputs: {country: card.country, amount: {field: amount, fill: 0}}``)::

    >>> contract.row({"card": {"country": "FR"}, "amount": None})
    {'country': ['FR'], 'amount': [0.0]}
    >>> contract.row({"card": {"country": 7}, "amount": 1.0})
    ValidationError: field 'card.country' is int 7, not a string; model input 'country' takes string
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamer.config import InputSource, OutputTarget
from streamer.errors import ConfigError, InferenceError, ValidationError
from streamer.model.exact import AVRO_SOURCES, Source, exact, takes
from streamer.model.outputs import OutputPlan, field_doc, plan_outputs
from streamer.model.signature import DTYPES, Columns, Signature, TensorSpec

FEATURES = "features"  # the input column of a one-input model fed from the array field
SCORES = "scores"  # the output column of a model whose outputs are not mapped


def field_value(payload: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path (``card.country``); None when it or a record above it is null or missing."""
    value: Any = payload
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
        if value is None:
            return None
    return value


def input_field_type(schema: dict[str, Any] | None, path: str, key: str) -> Any:
    """The Avro type at a dotted path of a record schema (None: no schema, any JSON value);
    raises ConfigError(key) when the path is not in it."""
    if schema is None:
        return None
    node: Any = schema
    for part in path.split("."):
        record = _record_branch(node)
        if record is None:
            raise ConfigError(key, f"{path!r}: {part!r} is not inside a record of input.schema")
        field = next((f for f in record["fields"] if f["name"] == part), None)
        if field is None:
            raise no_field(key, path, part, "input.schema", [f["name"] for f in record["fields"]])
        node = field["type"]
    return node


def _record_branch(node: Any) -> dict[str, Any] | None:
    """The record a type is, or the one record of a nullable union."""
    if isinstance(node, dict) and node.get("type") == "record":
        return node
    if isinstance(node, list):
        records = [b for b in node if isinstance(b, dict) and b.get("type") == "record"]
        return records[0] if len(records) == 1 else None
    return None


def _avro_kinds(node: Any, named: Mapping[str, Any]) -> set[str]:
    """The primitive kinds an Avro type can hold (an array: its items'), null left out; a
    reference to a named type (``shop.Channel``) is looked up in ``named``."""
    if isinstance(node, list):
        return set().union(*(_avro_kinds(b, named) for b in node))
    if isinstance(node, dict):
        kind = node.get("type")
        if kind == "array":
            return _avro_kinds(node["items"], named)
        return {str(kind)} if kind in ("enum", "record", "map", "fixed") else _avro_kinds(kind, named)
    if isinstance(node, str) and node in named:
        return _avro_kinds(named[node], named)
    return set() if node == "null" else {str(node)}


@dataclass(frozen=True, slots=True)
class InputPlan:
    """One model input and where its values come from; ``width`` values per row."""

    spec: TensorSpec
    source: InputSource
    width: int
    fill: Any  # the fill value, converted; None: a null is a dead letter

    def row(self, payload: Mapping[str, Any]) -> list[Any]:
        """This input's values for one event; raises ValidationError naming the field."""
        values: list[Any] = []
        for path in self.source.fields:
            value = field_value(payload, path)
            if value is None:
                if self.fill is None:
                    raise ValidationError(f"field '{path}' is null or missing and model.inputs."
                                          f"{self.spec.name} has no fill value")
                value = self.fill if self.source.stacked or self.width == 1 else [self.fill] * self.width
            many = isinstance(value, (list, tuple))
            try:
                if many:
                    values.extend(exact(v, self.spec.element) if v is not None else self._filled(path)
                                  for v in value)
                else:
                    values.append(exact(value, self.spec.element))
            except ValueError as exc:
                raise ValidationError(f"field '{path}' {exc}; model input '{self.spec.name}' takes "
                                      f"{self.spec.element}") from exc
        if len(values) != self.width:
            raise ValidationError(f"field '{'+'.join(self.source.fields)}' gives {len(values)} values; model "
                                  f"input '{self.spec.name}' takes {self.width}")
        return values

    def _filled(self, path: str) -> Any:
        if self.fill is None:
            raise ValueError(f"holds a null and model.inputs.{self.spec.name} has no fill value")
        return self.fill

    def column(self, rows: Sequence[list[Any]]) -> np.ndarray:
        """The rows' values as this input's tensor: ``[N]`` or ``[N, width]``, its element type."""
        dtype = DTYPES[self.spec.element]
        if dtype is np.object_:
            out = np.empty((len(rows), self.width), object)
            for i, r in enumerate(rows):
                out[i] = r
        else:
            out = np.array(rows, dtype).reshape(len(rows), self.width)
        return out[:, 0] if len(self.spec.shape) == 1 else out


@dataclass(frozen=True, slots=True)
class Contract:
    """How one model is fed and read; see the module docstring."""

    signature: Signature
    inputs: tuple[InputPlan, ...]
    outputs: tuple[OutputPlan, ...]
    # FEATURES: the model's one float32 [N, k] input, fed the array field ``features_field`` as the
    # batch's one column; None: a column per model input, named by the input
    feature_column: str | None
    # SCORES: the model's one output, unmapped, written as the prediction's ``scores`` array: the
    # result's one column; None: a column per prediction field of ``model.outputs``
    score_column: str | None
    features_field: str

    @classmethod
    def of(cls, sig: Signature, inputs: Mapping[str, InputSource] | None = None,
           outputs: Mapping[str, OutputTarget] | None = None, features_field: str = "features") -> Contract:
        """The contract of ``model.inputs`` and ``model.outputs`` for a model of signature ``sig``
        (None: the defaults); raises ConfigError naming the key when the model cannot be served so."""
        inputs_ = _inputs(inputs, sig, features_field)
        outputs_ = plan_outputs(outputs, sig)
        one = inputs_[0] if len(inputs_) == 1 else None
        # The feature array: one float32 [N, k] input from an array field (the default; a mapped
        # single field is an array only where k > 1: for k = 1 it may be a plain number).
        array_in = (one is not None and one.spec.element == "float32" and len(one.spec.shape) == 2
                    and len(one.source.fields) == 1 and not one.source.stacked and one.fill is None
                    and (inputs is None or one.width > 1))
        return cls(sig, tuple(inputs_), tuple(outputs_), FEATURES if array_in else None,
                   SCORES if outputs is None else None,
                   one.source.fields[0] if array_in and one is not None else features_field)

    # ---- inputs ---------------------------------------------------------------------------

    @property
    def feature_width(self) -> int:
        """Values per row of the feature array (:attr:`feature_column`'s width); 0 for named inputs."""
        return self.inputs[0].width if self.feature_column is not None else 0

    @property
    def numeric_width(self) -> int:
        """Numeric values per row (what drift profiles describe: signature.numeric_matrix)."""
        return sum(p.width for p in self.inputs if p.spec.element not in ("string", "bool"))

    def row(self, payload: Mapping[str, Any]) -> dict[str, list[Any]]:
        """One event's values per input; raises ValidationError naming the field."""
        return {p.spec.name: p.row(payload) for p in self.inputs}

    def stack(self, rows: Sequence[Any]) -> Columns:
        """The events' values (each a :meth:`row`, or a float32 feature row for the array field)
        as the batch's columns."""
        if self.feature_column is not None:
            width = self.inputs[0].width
            matrix = np.stack(rows).astype(np.float32, copy=False) if rows else np.empty((0, width), np.float32)
            return Columns({FEATURES: matrix})
        return Columns({p.spec.name: p.column([r[p.spec.name] for r in rows]) for p in self.inputs})

    def blank(self, rows: int) -> Columns:
        """A probe batch: zeros (empty strings, false) in every input."""
        if self.feature_column is not None:
            return Columns({FEATURES: np.zeros((rows, self.inputs[0].width), np.float32)})
        return self.stack([{p.spec.name: [_zero(p.spec.element)] * p.width for p in self.inputs}] * rows)

    def feed(self, batch: Columns) -> dict[str, np.ndarray]:
        """The session's input dict for a batch: its columns, by model input name."""
        if self.feature_column is None:
            return batch.arrays
        (plan,) = self.inputs
        x = np.ascontiguousarray(batch.arrays[FEATURES], dtype=DTYPES[plan.spec.element])
        if x.ndim != 2 or x.shape[1] != plan.width:
            raise InferenceError(f"model input '{plan.spec.name}' takes [rows, {plan.width}], got {x.shape}")
        return {plan.spec.name: x}

    # ---- outputs --------------------------------------------------------------------------

    @property
    def output_names(self) -> list[str]:
        return list(dict.fromkeys(p.spec.name for p in self.outputs))

    def collect(self, raw: Sequence[Any], rows: int) -> Columns:
        """The session's outputs (in :attr:`output_names` order) as the batch's result: Columns
        named by prediction field (one float32 matrix, :data:`SCORES`, when outputs are not mapped)."""
        if self.score_column is not None:  # the session was asked for its one output: no lookup by name
            (first,) = raw
            out = np.asarray(first, dtype=np.float32)
            if out.ndim < 2:
                out = out.reshape(-1, 1)
            if out.ndim != 2:
                raise InferenceError(f"the model returned a {out.ndim}-D output; expected [rows, n_outputs]")
            if len(out) != rows:
                raise InferenceError(f"model returned {len(out)} output rows for {rows} input rows")
            return Columns({SCORES: out})
        by_name = dict(zip(self.output_names, raw, strict=True))
        return Columns({p.field: p.take(by_name[p.spec.name], rows) for p in self.outputs})

    def blank_result(self, rows: int) -> Columns:
        """A result of ``rows`` placeholder rows (NaN, 0, '') in every prediction field: what a
        batch whose every row failed holds."""
        cols = {}
        for p in self.outputs:
            dtype = DTYPES.get(p.element, np.float32)
            shape = (rows,) if p.scalar else (rows, p.spec.width or 1)
            cols[p.field] = np.zeros(shape, dtype)
        return Columns(cols).blank(rows)

    def avro_fields(self) -> list[dict[str, Any]]:
        """The prediction fields the outputs fill, as Avro fields ('scores' for the one unmapped output)."""
        if self.score_column is not None:
            return [{"name": "scores", "type": {"type": "array", "items": "float"},
                     "doc": f"The model's output '{self.outputs[0].spec.name}' for the event."}]
        return [{"name": p.field, "type": p.avro(), "doc": field_doc(p)} for p in self.outputs]

    def fields(self) -> list[tuple[InputPlan, str, str]]:
        """Each field an input reads: ``(its input, the key that maps it, its dotted path)``."""
        return [(plan, f"model.inputs.{plan.spec.name}" if self.feature_column is None else "input.features_field",
                 path) for plan in self.inputs for path in plan.source.fields]

    def check_fields(self, input_schema: dict[str, Any] | None) -> None:
        """Refuse (ConfigError naming ``model.inputs.<input>``) a field that is not in the input's
        Avro schema, or whose type the input does not take by the conversion table (exact.py:
        a string into a number, a double into an int)."""
        if input_schema is None:
            return
        named = input_schema.get("__named_schemas", {})  # fastavro's parsed named types, by full name
        for plan, key, path in self.fields():
            kinds = _avro_kinds(input_field_type(input_schema, path, key), named)
            check_kinds(plan, key, path, {k: AVRO_SOURCES.get(k) for k in kinds}, "input.schema")

    def unfilled(self, nullable: Callable[[str, str], bool]) -> list[tuple[InputPlan, str, str]]:
        """The fields mapped in ``model.inputs`` without a ``fill`` that ``nullable(path, key)``
        says may be null: each null among them is refused row by row."""
        return [(plan, key, path) for plan, key, path in self.fields()
                if self.feature_column is None and plan.fill is None and nullable(path, key)]

    def nullable_fields(self, input_schema: dict[str, Any] | None) -> list[tuple[str, str]]:
        """``(key, words)`` per field mapped without ``fill`` that the Avro ``input.schema`` lets
        be null (a union with null, or inside one): each null is a dead letter."""
        if input_schema is None:
            return []
        return [(key, no_fill(path, key, "can be null in input.schema", "a null is a dead letter", "field"))
                for _, key, path in self.unfilled(lambda path, key: _avro_nullable(input_schema, path, key))]


def check_kinds(plan: InputPlan, key: str, path: str, kinds: Mapping[str, Source | None], where: str) -> None:
    """Refuse (ConfigError on ``key``) a field of ``kinds`` (a schema's type names, each with its
    source type of the conversion table, None: none) that ``plan``'s input does not take."""
    wrong = {k for k, source in kinds.items() if source is None or not takes(source, plan.spec.element)}
    if wrong or not kinds:
        raise ConfigError(key, f"field {path!r} is {sorted(kinds) or 'null'} in {where}; model "
                               f"input {plan.spec.name!r} takes {plan.spec.element}")


def no_field(key: str, path: str, part: str, where: str, names: Sequence[str]) -> ConfigError:
    """The refusal of a field that ``where`` does not hold."""
    return ConfigError(key, f"{path!r}: {where} has no field {part!r} there (it has {list(names)})")


def no_fill(path: str, key: str, found: str, then: str, noun: str) -> str:
    """The words for a field that may be null mapped without a fill: what a null becomes, and the two fixes."""
    return f"field {path!r} {found} and {key} has no fill: {then}; set {key}.fill or make the {noun} not null"


def _avro_nullable(schema: dict[str, Any], path: str, key: str) -> bool:
    """Whether the field at ``path``, or a record above it, is a union with null."""
    node: Any = schema
    for part in path.split("."):
        record = _record_branch(node)
        if record is None:
            return False
        node = next((f["type"] for f in record["fields"] if f["name"] == part), None)
        if node == "null" or isinstance(node, list) and "null" in node:
            return True
    return False


def _zero(element: str) -> Any:
    return {"string": "", "bool": False}.get(element, 0)


def _inputs(mapped: Mapping[str, InputSource] | None, sig: Signature, features_field: str) -> list[InputPlan]:
    if not sig.inputs:
        raise ConfigError("model.path", "the model has no inputs")
    sources: Mapping[str, InputSource]
    if mapped is not None:
        sources = mapped
        unknown = [n for n in sources if sig.input(n) is None]
        if unknown:
            raise ConfigError(f"model.inputs.{unknown[0]}", f"the model has no input {unknown[0]!r}; its "
                                                            f"inputs are {[s.name for s in sig.inputs]}")
        missing = [s.name for s in sig.inputs if s.name not in sources]
        if missing:
            raise ConfigError(f"model.inputs.{missing[0]}", f"model input {missing[0]!r} is not mapped to "
                                                            f"any field (model.inputs maps {list(sources)})")
    elif len(sig.inputs) == 1:
        sources = {sig.inputs[0].name: InputSource((features_field,))}
    else:
        raise ConfigError("model.inputs", f"the model has {len(sig.inputs)} inputs "
                                          f"({[s.name for s in sig.inputs]}): map each to event fields, e.g. "
                                          + ", ".join(f"{s.name}: {s.name}" for s in sig.inputs))
    return [_input(spec, sources[spec.name]) for spec in sig.inputs]


def _input(spec: TensorSpec, source: InputSource) -> InputPlan:
    key = f"model.inputs.{spec.name}"
    if spec.element not in DTYPES:
        raise ConfigError(key, f"model input {spec.name!r} is {spec.onnx_type}: streamer feeds "
                               f"tensors of {', '.join(DTYPES)}")
    if len(spec.shape) > 2:
        raise ConfigError(key, f"model input {spec.name!r} has shape {list(spec.shape)}: streamer feeds "
                               f"[N] or [N, k]")
    width = spec.width
    if source.stacked:
        if width is not None and width != len(source.fields):
            raise ConfigError(key, f"lists {len(source.fields)} fields; model input {spec.name!r} takes "
                                   f"{width} values a row")
        width = len(source.fields)
    elif width is None:
        raise ConfigError(key, f"model input {spec.name!r} has no fixed width {list(spec.shape)}: list its "
                               f"fields, one per column")
    fill = None
    if source.fill is not None:
        try:
            fill = exact(source.fill, spec.element)
        except ValueError as exc:
            raise ConfigError(f"{key}.fill", f"{source.fill!r} {exc}; model input {spec.name!r} takes "
                                             f"{spec.element}") from exc
    return InputPlan(spec, source, width, fill)


