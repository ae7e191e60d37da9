"""The columnar encoder of any prediction layout (formats/columnar/record.py) against fastavro.

Generated output fields (labels, probability rows, named scores of each element type and shape)
and generated pass-through fields (every scalar Avro type, nullable, and the JSON input's union),
with generated values (empty, non-ASCII, lone surrogates, extremes, NaN and infinities, nulls):
each row's value is fastavro's bytes of ``prediction_fields(...)``, or None where the row steps aside
(always where fastavro refuses it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streamer.errors import SerializeError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.columnar.record import RecordEncoder
from streamer.formats.columnar.values import column
from streamer.model.prediction_schema import JSON_VALUE
from streamer.pipeline.records import ModelId, SourceRecord, Stamp, prediction_fields
from streamer.pipeline.stages import stamp_fields

SCHEMAS = Path(__file__).resolve().parents[3] / "streamer" / "schemas"
BASE = json.loads(AvroCodec(load_schema(SCHEMAS / "prediction.avsc")).schema_json)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from(["\ud800", "é", "\x00", "😀"]), max_size=8)
LONG = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, -1, 2**63 - 1, -(2**63)])
INT = st.integers(-(2**31), 2**31 - 1)
BIG = st.integers(-(2**70), 2**70)  # past 64 bits: the long branch refuses it
DOUBLE = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([float("nan"), -0.0, 1e300, 5e-324])
ENUM = {"type": "enum", "name": "Kind", "symbols": ["A", "B", "Ete_2"]}
FIXED = {"type": "fixed", "name": "Three", "size": 3}

# Output element type -> (Avro item, numpy dtype, a strategy of one value)
OUTPUTS: dict[str, tuple[str, Any, Any]] = {
    "int64": ("long", np.int64, LONG), "int32": ("int", np.int32, INT), "bool": ("boolean", np.bool_, st.booleans()),
    "string": ("string", object, TEXT),
    "float32": ("float", np.float32, st.integers(0, 2**32 - 1).map(
        lambda b: np.array([b], np.uint32).view(np.float32)[0])),
    "float64": ("double", np.float64, DOUBLE),
}
# A pass-through field's Avro type (as made_schema makes it: nullable) -> a strategy of one value.
INCLUDES: list[tuple[Any, Any]] = [
    ("string", TEXT), ("bytes", st.binary(max_size=6)), ("int", INT), ("long", LONG), ("float", DOUBLE),
    ("double", DOUBLE), ("boolean", st.booleans()), (ENUM, st.sampled_from(ENUM["symbols"])),
    (FIXED, st.binary(min_size=3, max_size=3)),
]
JSON_ANY = st.none() | st.booleans() | LONG | BIG | DOUBLE | TEXT


@st.composite
def layouts(draw: Any) -> tuple[dict[str, Any], list[str], list[str], dict[str, np.ndarray], list[tuple[Any, ...]]]:
    """(schema, output fields, include fields, output columns, pass-through rows) for k rows."""
    k = draw(st.integers(1, 12))
    outputs: list[dict[str, Any]] = []
    columns: dict[str, np.ndarray] = {}
    for n in range(draw(st.integers(1, 3))):
        element = draw(st.sampled_from(sorted(OUTPUTS)))
        avro, dtype, value = OUTPUTS[element]
        width = draw(st.none() | st.integers(0, 4))  # None: one value a row (a label, a score)
        name = f"out{n}"
        shape = (k,) if width is None else (k, width)
        values = draw(st.lists(value, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        col = np.empty(int(np.prod(shape)), dtype)
        col[:] = values
        columns[name] = col.reshape(shape)
        outputs.append({"name": name, "type": avro if width is None else {"type": "array", "items": avro}})
    fields: list[dict[str, Any]] = []
    for f in BASE["fields"]:
        fields.extend(outputs if f["name"] == "scores" else [f])
    include: list[str] = []
    strategies = []
    named: set[str] = set()
    for n in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            inc_type, value = JSON_VALUE, JSON_ANY  # a JSON input's pass-through field
        else:
            t, value = INCLUDES[draw(st.integers(0, len(INCLUDES) - 1))]
            if isinstance(t, dict):  # a named type is defined once, then referred to by its name
                t = t["name"] if t["name"] in named else t
                named.add(t if isinstance(t, str) else t["name"])
            inc_type, value = ["null", t], st.none() | value
        include.append(f"inc{n}")
        strategies.append(value)
        fields.append({"name": f"inc{n}", "type": inc_type, "default": None})
    passthrough = [tuple(draw(s) for s in strategies) for _ in range(k)]
    return {**BASE, "fields": fields}, [o["name"] for o in outputs], include, columns, passthrough


def reference(codec: AvroCodec, record: dict[str, Any]) -> bytes | None:
    try:
        return codec.encode(record)
    except SerializeError:
        return None


@PROPERTY
@given(layouts(), st.booleans(), st.none() | TEXT, st.none() | TEXT, st.none() | TEXT, st.booleans(),
       st.lists(TEXT, min_size=12, max_size=12))
def test_any_made_layout_is_byte_identical_to_fastavro(drawn: Any, per_row_topics: bool, run_id: str | None,
                                                       degraded: str | None, digest: str | None, framed: bool,
                                                       ids: list[str]) -> None:
    schema, outputs, include, columns, passthrough = drawn
    k = len(passthrough)
    prefix = b"\0\0\0\0\7" if framed else b""
    codec = AvroCodec(schema, prefix=prefix)
    encoder = RecordEncoder.compile(json.loads(codec.schema_json), outputs, include, prefix)
    assert encoder is not None
    stamp = Stamp(ModelId("m", "1", digest or ""), 1_764_417_600_000, run_id, degraded, with_digest=digest is not None)
    topics = [f"t{i % 2}é" for i in range(k)] if per_row_topics else ["t"] * k
    lists = {n: c.tolist() for n, c in columns.items()}
    want = [reference(codec, prediction_fields(
        SourceRecord(topics[i], i % 3, 2**40 + i, None, ids[i], ids[-1 - i], -i, 0, None, passthrough[i]),
        {n: lists[n][i] for n in outputs}, stamp, include)) for i in range(k)]
    got = encoder.encode(ids[:k], ids[::-1][:k], columns, topics, np.arange(k) % 3, 2**40 + np.arange(k),
                         -np.arange(k), passthrough, stamp_fields(stamp))
    assert len(got) == k
    event(f"rows stepped aside that fastavro writes: {sum(g is None and w is not None for g, w in zip(got, want)) > 0}")
    for g, w in zip(got, want):
        assert g is None or g == w
        assert w is not None or g is None


def test_a_mixed_event_s_outputs_take_the_fast_path_whole() -> None:
    """The (j) event's prediction: a label, a probability row and two pass-through fields; no row steps aside."""
    schema, columns, passthrough = j_layout(1000)
    codec = AvroCodec(schema)
    encoder = RecordEncoder.compile(json.loads(codec.schema_json), ["label", "probabilities"], ["country", "amount"])
    assert encoder is not None
    got = encode_j(encoder, columns, passthrough)
    assert None not in got and got == per_row_j(codec, columns, passthrough)


def j_layout(k: int) -> tuple[dict[str, Any], dict[str, np.ndarray], list[tuple[Any, ...]]]:
    rng = np.random.default_rng(7)
    fields = []
    for f in BASE["fields"]:
        fields.extend([{"name": "label", "type": "long"},
                       {"name": "probabilities", "type": {"type": "array", "items": "float"}}]
                      if f["name"] == "scores" else [f])
    fields += [{"name": "country", "type": ["null", "string"], "default": None},
               {"name": "amount", "type": ["null", "double"], "default": None}]
    p = rng.random(k).astype(np.float32)
    columns: dict[str, np.ndarray] = {"label": (p > 0.5).astype(np.int64), "probabilities": np.stack([1 - p, p], axis=1)}
    passthrough: list[tuple[Any, ...]] = [(["DE", "FR", "ES"][i % 3], float(rng.random() * 100) if i % 5 else None) for i in range(k)]
    return {**BASE, "fields": fields}, columns, passthrough


def encode_j(encoder: RecordEncoder, columns: dict[str, np.ndarray], passthrough: list[tuple[Any, ...]]) -> list[Any]:
    k = len(passthrough)
    return encoder.encode([f"evt-{i}" for i in range(k)], [f"acct-{i % 50}" for i in range(k)], columns, "t",
                          np.zeros(k, np.int64), np.arange(k), np.full(k, 1_764_417_600_000), passthrough,
                          stamp_fields(Stamp(ModelId("m", "1"), 1_764_417_600_001)))


def per_row_j(codec: AvroCodec, columns: dict[str, np.ndarray], passthrough: list[tuple[Any, ...]]) -> list[bytes]:
    lists = {n: c.tolist() for n, c in columns.items()}
    stamp = Stamp(ModelId("m", "1"), 1_764_417_600_001)
    return [codec.encode(prediction_fields(
        SourceRecord("t", 0, i, None, f"evt-{i}", f"acct-{i % 50}", 1_764_417_600_000, 0, None, passthrough[i]),
        {n: v[i] for n, v in lists.items()}, stamp, ("country", "amount"))) for i in range(len(passthrough))]


@pytest.mark.parametrize(("t", "values", "ok"), [
    ("long", [1, True, 2.0, 2**64], [True, False, False, False]),
    ("int", [2**31, -(2**31)], [False, True]),
    ("string", ["a", "\ud800", 3], [True, False, False]),
    (("enum", ("A",)), ["A", "B"], [True, False]),
    (("fixed", 2), [b"ab", b"a"], [True, False]),
    ("double", [1.5, True, "1", 10**400], [True, False, False, False]),
])
def test_values_fastavro_writes_otherwise_or_refuses_step_aside(t: Any, values: list[Any], ok: list[bool]) -> None:
    mask = np.ones(len(values), bool)
    column(t, values, mask)
    assert mask.tolist() == ok


def test_user_schema_fields_the_record_leaves_out_take_their_defaults() -> None:
    """A user's output.schema with a field streamer does not write (with its default) and the
    include field as a wider union: written as fastavro writes them; a field without a default
    leaves every row to the reference, which refuses it."""
    schema, columns, passthrough = j_layout(5)
    extra = {**schema, "fields": [*schema["fields"][:3], {"name": "note", "type": "string", "default": "hé"},
                                  *schema["fields"][3:-1],
                                  {"name": "amount", "type": ["null", "string", "double"], "default": None}]}
    codec = AvroCodec(extra)
    encoder = RecordEncoder.compile(json.loads(codec.schema_json), ["label", "probabilities"], ["country", "amount"])
    assert encoder is not None
    assert encode_j(encoder, columns, passthrough) == per_row_j(codec, columns, passthrough)
    no_default = {**extra, "fields": [{k: v for k, v in f.items() if k != "default" or f["name"] != "note"}
                                      for f in extra["fields"]]}
    codec = AvroCodec(no_default)
    encoder = RecordEncoder.compile(json.loads(codec.schema_json), ["label", "probabilities"], ["country", "amount"])
    assert encoder is not None and encode_j(encoder, columns, passthrough) == [None] * 5
    with pytest.raises(SerializeError):
        per_row_j(codec, columns, passthrough)


def test_the_j_events_outputs_encode_as_fastavro_does() -> None:
    """The (j) event's outputs (benchmarks/throughput.py measures the speed): 4,000 rows, every one
    from the columnar encoder, byte for byte fastavro's."""
    schema, columns, passthrough = j_layout(4000)
    codec = AvroCodec(schema)
    encoder = RecordEncoder.compile(json.loads(codec.schema_json), ["label", "probabilities"], ["country", "amount"])
    assert encoder is not None
    got = encode_j(encoder, columns, passthrough)
    assert None not in got and got == per_row_j(codec, columns, passthrough)
