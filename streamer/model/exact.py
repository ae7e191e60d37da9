"""The conversion table: which event field types go into which model input element types, and how.

One table (:data:`CONVERSIONS`) read by the start-up check (contract.check_fields, from the
Avro ``input.schema``), the per-row conversion (:func:`exact`, behind contract.exact) and the
columnar fast paths (formats/columnar/fields.py). A pair that is not in the table is refused at
start with the key ``model.inputs.<name>`` where a schema tells the field's type at start (Avro);
where none does (JSON, a JSON Schema, Protobuf), a value that breaks the table is a ``validate``
dead letter naming the field.

    field \\ input   float32            float64          int64           int32           bool     string
    bool            exact (true = 1)   exact (true = 1) exact (true = 1) exact (true = 1) exact    refused
    int, long       |v| <= 2^24        |v| <= 2^53      in range        in range        refused  refused
    float           exact              exact            refused         refused         refused  refused
    double          rounds to nearest  exact            refused         refused         refused  refused
    string          refused            refused          refused         refused         refused  exact
    enum            refused            refused          refused         refused         refused  the symbol

"|v| <= 2^24", "in range": the values inside are exact; a value outside is a dead letter naming
the field. "rounds to nearest": a double into a float32 input takes the nearest float32 (ties to
even), as every skl2onnx ``FloatTensorType`` model expects its input; a double beyond float32's
range (about 3.4e38) is a dead letter. NaN and infinity into any float input, and a null without
a ``fill``, are dead letters too. Nothing needs a setting.

Per value (JSON, Protobuf, and what fastavro gives): true and false are bool; an integer is int;
a number with a fraction or an exponent (``3.0``, ``1e3``) is a double; a string is a string (an
Avro enum or a Protobuf enum arrives as its symbol). Avro logical types are read as their
underlying type (a ``timestamp-millis`` is a long).

    >>> exact(True, "int64"), exact(2 ** 24, "float32"), exact(0.1, "float32")
    (1, 16777216.0, 0.1)
    >>> exact(2 ** 24 + 1, "float32")
    ValueError: is the integer 16777217, beyond 2^24: float32 holds integers exactly up to 2^24
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

Source = Literal["bool", "int", "float", "double", "string", "enum"]  # an event field's element type
# How a value of a source type goes into an element type: "exact" always; "bounded" when the
# integer is inside EXACT_INT or INT_RANGE (else a dead letter); "nearest" rounded to float32
# (beyond its range: a dead letter); "symbol" an enum's symbol. A pair not listed is refused.
Rule = Literal["exact", "bounded", "nearest", "symbol"]
CONVERSIONS: dict[tuple[Source, str], Rule] = {
    ("bool", "float32"): "exact", ("bool", "float64"): "exact", ("bool", "int64"): "exact",
    ("bool", "int32"): "exact", ("bool", "bool"): "exact",
    ("int", "float32"): "bounded", ("int", "float64"): "bounded", ("int", "int64"): "bounded",
    ("int", "int32"): "bounded",
    ("float", "float32"): "exact", ("float", "float64"): "exact",
    ("double", "float32"): "nearest", ("double", "float64"): "exact",
    ("string", "string"): "exact", ("enum", "string"): "symbol",
}
EXACT_INT = {"float32": 2 ** 24, "float64": 2 ** 53}  # the integers a float input takes: |v| up to this
INT_RANGE = {"int64": (-2 ** 63, 2 ** 63 - 1), "int32": (-2 ** 31, 2 ** 31 - 1)}
F32_MAX = float(np.finfo(np.float32).max)  # the largest finite float32
# An Avro primitive (a union's null left out) as a source type; bytes, fixed, map, record: none.
AVRO_SOURCES: dict[str, Source] = {"boolean": "bool", "int": "int", "long": "int", "float": "float",
                                   "double": "double", "string": "string", "enum": "enum"}
_VALUE_SOURCES: dict[type, Source] = {bool: "bool", int: "int", float: "double", str: "string"}


def takes(source: Source, element: str) -> bool:
    """Whether an ``element`` input takes a field of type ``source`` (else: refused at start)."""
    return (source, element) in CONVERSIONS


def value_source(value: Any) -> Source | None:
    """The source type of a decoded value (a float is a double: see the module docstring)."""
    return _VALUE_SOURCES.get(type(value))


def exact(value: Any, element: str) -> Any:
    """``value`` as the Python value an ``element`` tensor holds, by the table; raises ValueError saying why not."""
    source = value_source(value)
    rule = CONVERSIONS.get((source, element)) if source is not None else None
    if rule is None:
        shown = f"{type(value).__name__} {value!r}" if source is None else f"{source} {value!r}"
        want = {"string": "a string", "bool": "true or false", "int64": "an integer", "int32": "an integer"}.get(
            element, "a number")
        raise ValueError(f"is {shown[:80]}, not {want}")
    if source == "bool":
        return value if element == "bool" else float(value) if element in EXACT_INT else int(value)
    if source == "int":
        if element in EXACT_INT:
            if abs(value) > EXACT_INT[element]:
                bound = "2^24" if element == "float32" else "2^53"
                raise ValueError(f"is the integer {str(value)[:40]}, beyond {bound}: {element} holds integers "
                                 f"exactly up to {bound}")
            return float(value)
        lo, hi = INT_RANGE[element]
        if not lo <= value <= hi:
            raise ValueError(f"is {str(value)[:40]}, out of the {element} range")
        return value
    if source == "double":
        if not math.isfinite(value) or (element == "float32" and abs(value) > F32_MAX):
            raise ValueError(f"is {value!r}, not a finite {element}")
        return value  # the column rounds it to float32 (to nearest, ties to even)
    return value
