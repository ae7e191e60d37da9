"""The columnar fast path for named fields agrees with the reference, or steps aside.

Property tests over generated record schemas (field types, nullable unions, arrays, skipped
fields) and generated contracts (float32, float64, int64, int32, bool and string inputs, stacked
or single, with and without fill values), on hostile messages from tests/formats/columnar/test_columnar.py's
generator: every row the fast path accepts equals what fastavro + the contract's per-row
conversion give, bit for bit, and a plain valid row is not left to the reference.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

from streamer.config import InputSource
from streamer.errors import DeserializeError, RecordError
from streamer.formats.columnar.fields import FieldDecoder
from streamer.model.contract import Contract
from streamer.model.signature import Signature, TensorSpec
from streamer.pipeline.records import SourceRecord
from streamer.pipeline.validate import EventValidator
from tests.formats.columnar.agreement import assert_row_agrees
from tests.formats.columnar.test_columnar import PROPERTY, codec, config, message, zigzag

SCALARS = ["float", "double", "int", "long", "boolean", "string"]
ELEMENTS = {"float": ["float32", "float64"], "double": ["float32", "float64"],
            "int": ["float32", "float64", "int64", "int32"], "long": ["float32", "float64", "int64", "int32"],
            "boolean": ["bool", "float32", "float64", "int64", "int32"], "string": ["string"]}
FILL = {"float32": 0.5, "float64": -1.25, "int64": 7, "int32": -3, "bool": True, "string": "?"}
SKIPPED = [{"name": "blob", "type": "bytes"},
           {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
           {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 3}}]
OUT = (TensorSpec("y", "float32", (None, 1), "tensor(float)"),)


@st.composite
def layout(draw: st.DrawFn) -> tuple[dict[str, Any], Contract, int]:
    """A record schema with named fields, and a contract whose inputs read them."""
    n = draw(st.integers(1, 4))
    fields: list[dict[str, Any]] = [{"name": "event_id", "type": "string"},
                                    {"name": "event_time", "type": "long"}]
    inputs: dict[str, InputSource] = {}
    specs: list[TensorSpec] = []
    for i in range(draw(st.integers(1, 5))):
        base = draw(st.sampled_from(SCALARS))
        nullable = draw(st.booleans())
        name = f"x{i}"
        fields.append({"name": name, "type": ["null", base] if nullable else base})
        element = draw(st.sampled_from(ELEMENTS[base]))
        fill = FILL[element] if nullable and draw(st.booleans()) else None
        inputs[name] = InputSource((name,), fill=fill)
        specs.append(TensorSpec(name, element, (None, 1), ""))
    if draw(st.booleans()):  # one array field feeding an [N, n] input
        items = draw(st.sampled_from(["float", "double"]))
        fields.append({"name": "features", "type": {"type": "array", "items": items}})
        element = draw(st.sampled_from(["float32", "float64"]))
        inputs["features"] = InputSource(("features",))
        specs.append(TensorSpec("features", element, (None, n), ""))
    numeric = [s.name for s in specs if s.element in ("float32", "float64") and s.name != "features"
               and not inputs[s.name].fill]
    if len(numeric) >= 2 and draw(st.booleans()):  # stack two float fields into one [N, 2] input
        a, b = numeric[:2]
        element = draw(st.sampled_from(["float32", "float64"]))
        specs = [s for s in specs if s.name not in (a, b)] + [TensorSpec("stacked", element, (None, 2), "")]
        del inputs[a], inputs[b]
        inputs["stacked"] = InputSource((a, b), stacked=True)
    for extra in draw(st.lists(st.sampled_from(SKIPPED), max_size=2, unique_by=lambda f: f["name"])):
        fields.insert(draw(st.integers(0, len(fields))), extra)
    schema = {"type": "record", "name": "Generated", "namespace": "test", "fields": fields}
    contract = Contract.of(Signature(tuple(specs), OUT), inputs)
    assume(contract.feature_column is None)  # one float32 array: columnar_decode.py's (tests/formats/columnar/test_columnar.py)
    return schema, contract, n


def reference(value: bytes | None, schema: dict[str, Any], contract: Contract, at: int) -> SourceRecord | RecordError:
    cfg = config()
    try:
        if value is None:
            raise DeserializeError("tombstone")
        payload = codec(schema).decode(value)
        return EventValidator(cfg, contract).to_record(payload, "t", 0, at, None, 1234)
    except RecordError as exc:
        return exc


def agree(schema: dict[str, Any], contract: Contract, values: list[bytes | None]) -> list[Any]:
    decoder = FieldDecoder.compile(schema, config(), contract)
    assert decoder is not None, schema
    cols = decoder.decode(values)
    refs = [reference(v, schema, contract, i) for i, v in enumerate(values)]
    assert sorted(cols.rows.tolist() + cols.fallback.tolist()) == list(range(len(values)))
    for j, i in enumerate(cols.rows.tolist()):
        assert_row_agrees(cols, j, refs[i], contract, str(i))
    return [cols, refs]


@PROPERTY
@given(layout().flatmap(lambda lay: st.tuples(st.just(lay), st.lists(message(lay[0], lay[2]), min_size=1,
                                                                        max_size=6))))
def test_named_fields_decode_as_the_reference_or_step_aside(drawn: Any) -> None:
    (schema, contract, _), messages = drawn
    cols, refs = agree(schema, contract, [v for v, _ in messages])
    for i, (value, plain) in enumerate(messages):
        ref = refs[i]
        if plain and isinstance(ref, SourceRecord):
            assert i in cols.rows, f"a plain row the reference accepts went to the reference: {value!r}"


def test_a_nullable_field_takes_its_fill_and_a_missing_fill_steps_aside() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "event_id", "type": "string"}, {"name": "event_time", "type": "long"},
        {"name": "a", "type": ["null", "double"]}, {"name": "b", "type": ["null", "long"]}]}
    sig = Signature((TensorSpec("a", "float32", (None, 1), ""), TensorSpec("b", "int64", (None, 1), "")), OUT)
    contract = Contract.of(sig, {"a": InputSource(("a",), fill=0.0), "b": InputSource(("b",))})

    def event(a: float | None, b: int | None) -> bytes:
        body = zigzag(2) + b"e1" + zigzag(5)
        body += zigzag(0) if a is None else zigzag(1) + struct.pack("<d", a)
        return body + (zigzag(0) if b is None else zigzag(1) + zigzag(b))

    cols, refs = agree(schema, contract, [event(None, 3), event(1.5, None), event(1e39, 4)])
    assert cols.rows.tolist() == [0]  # row 1: b is null, no fill; row 2: 1e39 is beyond float32
    assert "1e+39" in str(refs[2]) and "float32" in str(refs[2])
    assert cols.features.arrays["a"].tolist() == [[0.0]] and cols.features.arrays["b"].tolist() == [[3]]
    assert "field 'b' is null" in str(refs[1])


def test_layouts_it_leaves_to_the_reference_compile_to_none() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "event_id", "type": "string"}, {"name": "event_time", "type": "long"},
        {"name": "s", "type": "string"}, {"name": "card", "type": {"type": "record", "name": "C", "fields": [
            {"name": "country", "type": "string"}]}}]}
    sig = Signature((TensorSpec("s", "float32", (None, 1), ""),), OUT)
    assert FieldDecoder.compile(schema, config(), Contract.of(sig, {"s": InputSource(("s",))})) is None
    flat = {**schema, "fields": schema["fields"][:3]}
    assert FieldDecoder.compile(flat, config(), Contract.of(sig, {"s": InputSource(("s",))})) is None  # str->float
    strings = Signature((TensorSpec("s", "string", (None, 1), ""),), OUT)
    assert FieldDecoder.compile(flat, config(), Contract.of(strings, {"s": InputSource(("s",))})) is not None
    nested = Signature((TensorSpec("c", "string", (None, 1), ""),), OUT)
    by_path = Contract.of(nested, {"c": InputSource(("card.country",))})
    assert FieldDecoder.compile(schema, config(), by_path) is not None
    assert FieldDecoder.compile(schema, config(), by_path, include=("card",)) is None  # a record passed through
    assert FieldDecoder.compile(schema, config(), by_path, include=("card.city",)) is None  # not in the schema
    mapped = {**schema, "fields": [*schema["fields"][:3], {"name": "card", "type": {"type": "map", "values": "string"}}]}
    assert FieldDecoder.compile(mapped, config(), by_path) is None  # a dotted path into a map: the reference's
    looped = {**schema, "fields": [*schema["fields"], {"name": "next", "type": ["null", "R"]}]}
    assert FieldDecoder.compile(looped, config(), by_path) is None  # a recursive record


def test_a_chunk_of_plain_events_takes_the_fast_path_whole() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "event_id", "type": "string"}, {"name": "event_time", "type": "long"},
        *({"name": f"f{k}", "type": "float"} for k in range(32))]}
    sig = Signature((TensorSpec("features", "float32", (None, 32), ""),), OUT)
    contract = Contract.of(sig, {"features": InputSource(tuple(f"f{k}" for k in range(32)), stacked=True)})
    x = np.random.default_rng(1).standard_normal((50, 32)).astype(np.float32)
    values = [codec(schema).encode({"event_id": f"e{i}", "event_time": i, **{f"f{k}": float(x[i, k])
                                                                             for k in range(32)}})
              for i in range(50)]
    cols, _ = agree(schema, contract, values)
    assert cols.fallback.size == 0
    assert cols.features.arrays["features"].tobytes() == x.tobytes()


@PROPERTY
@given(st.sampled_from(["float", "double"]), st.sampled_from(["float32", "float64"]), st.integers(2, 6),
       st.integers(0, 4), st.data())
def test_a_run_of_adjacent_float_fields_is_read_as_one_block_as_the_reference_reads_it(
        item: str, element: str, width: int, split: int, data: st.DataObject) -> None:
    """Adjacent plain float (or double) fields are read as one block per row; stacked whole into
    one input, or partly stacked and partly single inputs, they decode as the reference does."""
    names = [f"f{k}" for k in range(width)]
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "event_id", "type": "string"}, {"name": "event_time", "type": "long"},
        *({"name": n, "type": item} for n in names)]}
    split = min(split, width)
    stacked, single = names[:split] if split >= 2 else [], names[split:] if split >= 2 else names
    specs = ([TensorSpec("s", element, (None, len(stacked)), "")] if stacked else []) + [
        TensorSpec(n, element, (None, 1), "") for n in single]
    inputs = ({"s": InputSource(tuple(stacked), stacked=True)} if stacked else {}) | {
        n: InputSource((n,)) for n in single}
    contract = Contract.of(Signature(tuple(specs), OUT), inputs)
    special = st.sampled_from([0.0, -0.0, 1.5, float("nan"), float("inf"), -float("inf"), 3.4e38, 1e300])
    values = []
    for i in range(data.draw(st.integers(1, 8))):
        row = {n: data.draw(special if item == "double" else special.filter(lambda v: abs(v) < 1e39 or v != v))
               for n in names}
        value = codec(schema).encode({"event_id": f"e{i}", "event_time": i, **row})
        values.append(value[:data.draw(st.integers(0, len(value)))] if data.draw(st.booleans()) else value)
    agree(schema, contract, values)
