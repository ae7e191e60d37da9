"""The prediction's Avro schema: made from the model's contract and ``output.include``, or a user's
own ``output.schema`` checked against them at start-up.

The made schema is the bundled ``streamer/schemas/prediction.avsc`` with ``scores`` replaced by the fields
``model.outputs`` names (their Avro types from the outputs' element types) and the pass-through
fields appended, each nullable: its type from ``input.schema`` where the input is Avro with a
schema, else a union of the JSON primitives. With the one output unmapped (``scores``) and
nothing passed through, the bundled schema is used as it is, byte for byte.

Worked example (``model.outputs: {label: label, fraud: {output: probabilities, column: 1}}``,
``output.include: [amount]`` from an Avro input whose ``amount`` is a double)::

    event_id, entity_id, label: long, fraud: float, model_name, ..., degraded_reason,
    amount: ["null", "double"] = null
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from streamer.errors import ConfigError
from streamer.model.contract import Contract, input_field_type


def include_name(path: str) -> str:
    """The prediction field a pass-through path becomes: ``card.country`` -> ``card_country``."""
    return path.replace(".", "_")


# A pass-through field of an input with no schema (JSON) may hold any JSON primitive.
JSON_VALUE: list[Any] = ["null", "boolean", "long", "double", "string"]


def _nullable(avro: Any) -> list[Any]:
    branches = avro if isinstance(avro, list) else [avro]
    return ["null", *[b for b in branches if b != "null"]]


def made_schema(base: dict[str, Any], contract: Contract, include: Sequence[str],
                input_schema: dict[str, Any] | None) -> dict[str, Any]:
    """``base`` (the bundled prediction schema) with the contract's output fields in place of
    ``scores`` and the pass-through fields after the rest."""
    schema = _plain(base)
    outputs = contract.avro_fields()
    fields: list[dict[str, Any]] = []
    for f in schema["fields"]:
        fields.extend(outputs if f["name"] == "scores" else [f])
    taken = {f["name"] for f in fields}
    for o in outputs:
        if sum(f["name"] == o["name"] for f in fields) > 1:
            raise ConfigError(f"model.outputs.{o['name']}", f"{o['name']!r} is already a prediction field")
    for n, path in enumerate(include):
        name = include_name(path)
        if name in taken:
            raise ConfigError(f"output.include[{n}]", f"{name!r} is already a prediction field")
        avro = input_field_type(input_schema, path, f"output.include[{n}]")
        fields.append({"name": name, "type": JSON_VALUE if avro is None else _nullable(_plain(avro)), "default": None,
                       "doc": f"The input event's field '{path}', passed through (output.include)."})
        taken.add(name)
    schema["fields"] = fields
    if contract.score_column is None:
        schema["doc"] = f"{schema.get('doc', '')} Fields from model.outputs: {[o['name'] for o in outputs]}."
    return schema


def _plain(node: Any) -> Any:
    """A copy without fastavro's private ``__`` keys (a parsed schema carries them)."""
    if isinstance(node, list):
        return [_plain(x) for x in node]
    if isinstance(node, dict):
        return {k: copy.deepcopy(v) if k == "default" else _plain(v) for k, v in node.items()
                if not k.startswith("__")}
    return node


LEAVE_OUT = frozenset({"model_digest", "degraded", "degraded_reason"})  # records.prediction_fields omits them


def check_schema(user: dict[str, Any], made: dict[str, Any]) -> None:
    """Refuse (ConfigError on ``output.schema``) a user's schema that lacks a field streamer
    writes, types it otherwise, or has a field streamer does not write and that has no default.

    Of the bundled schema's fields, only those a record may go without (:data:`LEAVE_OUT`) may be
    left out. ``model_digest`` is one: a schema without it stays valid and the digest is then not
    written (pipeline/stages.py); with it, every prediction carries the digest. ``run_id`` is not:
    every record carries it (null when live), and the writer refuses a field its schema lacks."""
    theirs = {f["name"]: f for f in user["fields"]}
    ours = {f["name"]: f for f in made["fields"]}
    for name, f in ours.items():
        if name not in theirs:
            if name in LEAVE_OUT:
                continue
            raise ConfigError("output.schema", f"has no field {name!r}, which the model's contract writes "
                                               f"({_type(f['type'])}); leave output.schema out to have one "
                                               f"made from model.outputs (`streamer schema` prints it)")
        if not _fits(_type(f["type"]), _type(theirs[name]["type"])):
            raise ConfigError("output.schema", f"field {name!r} is {_type(theirs[name]['type'])}; the model's "
                                               f"contract writes {_type(f['type'])}")
    for name, f in theirs.items():
        if name not in ours and "default" not in f:
            raise ConfigError("output.schema", f"field {name!r} is not written by streamer and has no default")


def _type(avro: Any) -> str:
    """A type's canonical text without docs and logical types (they do not change the bytes)."""
    def clean(node: Any) -> Any:
        if isinstance(node, list):
            return [clean(x) for x in node]
        if isinstance(node, dict):
            kept = {k: clean(v) for k, v in node.items() if k not in ("doc", "logicalType", "default")
                    and not k.startswith("__")}
            return kept["type"] if set(kept) == {"type"} else kept
        return node
    return json.dumps(clean(avro), sort_keys=True)


def _fits(ours: str, theirs: str) -> bool:
    """Our values are written under their type: the same type, or a union that holds ours."""
    if ours == theirs:
        return True
    branches = json.loads(theirs)
    return isinstance(branches, list) and all(
        json.dumps(b, sort_keys=True) in {json.dumps(x, sort_keys=True) for x in branches}
        for b in (json.loads(ours) if ours.startswith("[") else [json.loads(ours)]))


def can_flag_degraded(schema: dict[str, Any]) -> None:
    """A fallback's predictions are flagged degraded: refused when the schema cannot say so."""
    if "degraded_reason" not in {f["name"] for f in schema["fields"]}:
        raise ConfigError("output.schema", "has no degraded and degraded_reason fields (schemas/"
                                           "prediction.avsc has them): model.fallback_* needs them "
                                           "to flag degraded predictions")
