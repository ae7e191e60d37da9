"""The named-field fast path over generated schemas: it agrees with the reference, or steps aside.

Hypothesis builds record schemas (primitives, enums, fixed, unions with null in either order,
nested records, arrays, maps, defaults), a contract whose inputs read some of their leaves by
dotted path (with and without fill values) and pass-through fields (``output.include``), and
records from the schema written by fastavro: empty and non-ASCII strings, extreme ints and
floats, NaN and infinity; then some messages truncated, extended, flipped or replaced by garbage.
Every row the fast path accepts equals fastavro + the contract's per-row conversion (inputs bit
for bit, pass-through values by type and value); every row it refuses the reference decides; and
a plain valid row is not left to the reference.
"""

from __future__ import annotations

import io
import json
import math
import struct
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pytest
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
from tests.formats.columnar.test_columnar import PROPERTY, codec, config

OUT = (TensorSpec("y", "float32", (None, 1), "tensor(float)"),)
PRIMITIVES = ["boolean", "int", "long", "float", "double", "string", "bytes"]
ELEMENTS = {"float": ["float32", "float64"], "double": ["float32", "float64"],
            "int": ["float32", "float64", "int64", "int32"], "long": ["float32", "float64", "int64", "int32"],
            "boolean": ["bool"], "string": ["string"], "enum": ["string"]}
FILL = {"float32": 0.5, "float64": -1.25, "int64": 7, "int32": -3, "bool": True, "string": "?"}
DEFAULTS = {"boolean": False, "int": 0, "long": -1, "float": 0.5, "double": 1e300, "string": "", "bytes": ""}
INTS = {"int": st.one_of(st.integers(-5, 5), st.integers(-2**31, 2**31 - 1), st.sampled_from([-2**31, 2**31 - 1])),
        "long": st.one_of(st.integers(-5, 5), st.integers(-2**63, 2**63 - 1),
                          st.sampled_from([-2**63, 2**63 - 1, 2**24, 2**24 + 1, -2**53 - 1]))}
FLOATS = {"float": st.one_of(st.floats(-4, 4, width=32), st.floats(width=32)),
          "double": st.one_of(st.floats(-4, 4), st.floats(), st.sampled_from([1e39, -3.5e38, 5e-324]))}
TEXT = st.one_of(st.just(""), st.text(max_size=5), st.text(st.characters(max_codepoint=127), max_size=5))


class Names:
    """Unique names for the named types of one schema."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def avro_type(draw: st.DrawFn, names: Names, depth: int) -> Any:
    """A random Avro type; records, arrays and maps only while ``depth`` lasts."""
    choice = draw(st.integers(0, 14 if depth > 0 else 8))
    if choice <= 4:
        return draw(st.sampled_from(PRIMITIVES))
    if choice == 5:
        return {"type": "enum", "name": names("E"), "symbols": draw(st.sampled_from([["A"], ["A", "B", "c_9"]]))}
    if choice == 6:
        return {"type": "fixed", "name": names("F"), "size": draw(st.integers(0, 4))}
    if choice in (7, 8):  # a union with null, null first or last, maybe with a second type
        other = avro_type(draw, names, depth - 1) if depth > 0 else draw(st.sampled_from(PRIMITIVES))
        if isinstance(other, list):
            return other
        second = draw(st.sampled_from(["", "long", "string"]))
        branches = [other] + ([second] if second and second != other else [])
        return ["null", *branches] if draw(st.booleans()) else [*branches, "null"]
    if choice in (9, 10):
        return record(draw, names, depth - 1)
    if choice in (13, 14):  # a nullable record, null first or last
        inner = record(draw, names, depth - 1)
        return ["null", inner] if choice == 13 else [inner, "null"]
    item = avro_type(draw, names, depth - 1)
    return {"type": "array", "items": item} if choice == 11 else {"type": "map", "values": item}


def record(draw: st.DrawFn, names: Names, depth: int, top: bool = False) -> dict[str, Any]:
    fields: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 5 if top else 3))):
        t = avro_type(draw, names, depth)
        field: dict[str, Any] = {"name": f"f{i}", "type": t}
        if isinstance(t, list) and t[0] == "null" and draw(st.booleans()):
            field["default"] = None
        elif isinstance(t, str) and draw(st.booleans()):
            field["default"] = DEFAULTS[t]
        fields.append(field)
    return {"type": "record", "name": names("R"), "fields": fields}


def leaves(t: Any, path: str, named: dict[str, Any], out: list[tuple[str, Any]]) -> None:
    """The (path, type) of every field reachable through records and nullable records."""
    if isinstance(t, str) and t in named:
        t = named[t]
    if isinstance(t, dict) and t["type"] == "record":
        named[t["name"]] = t
        for f in t["fields"]:
            leaves(f["type"], f"{path}.{f['name']}" if path else f["name"], named, out)
        return
    if isinstance(t, dict) and t["type"] in ("enum", "fixed"):
        named[t["name"]] = t
    if isinstance(t, list):
        for b in t:
            if isinstance(b, dict) and b["type"] in ("record", "enum", "fixed"):
                leaves(b, path, named, [])  # register the named types
        records = [b for b in t if isinstance(b, dict) and b["type"] == "record"]
        if len(records) == 1:
            leaves(records[0], path, named, out)
    out.append((path, t))


def kinds(t: Any) -> set[str]:
    """The input kinds of a type (its non-null branches), as ELEMENTS names them."""
    if isinstance(t, list):
        return set().union(*(kinds(b) for b in t if b != "null"))
    if isinstance(t, dict):
        return {"enum"} if t["type"] == "enum" else {"other"}
    return {t}


@st.composite
def layout(draw: st.DrawFn) -> tuple[dict[str, Any], Contract, tuple[str, ...]]:
    names = Names()
    body = record(draw, names, 2, top=True)
    schema = {"type": "record", "name": "Event", "namespace": "gen", "fields": [
        {"name": "event_id", "type": draw(st.sampled_from(["string", "long", ["null", "string"]]))},
        *body["fields"][:1], {"name": "event_time", "type": "long"}, *body["fields"][1:]]}
    found: list[tuple[str, Any]] = []
    leaves(body, "", {}, found)
    found = [(p, t) for p, t in found if p]
    usable = [(p, t) for p, t in found if len(kinds(t)) == 1 and next(iter(kinds(t))) in ELEMENTS
              or kinds(t) == {"float", "double"}]
    specs, inputs = [], {}
    for n, (path, t) in enumerate(draw(st.lists(st.sampled_from(usable), max_size=4, unique_by=lambda x: x[0]))
                                  if usable else []):
        element = draw(st.sampled_from(ELEMENTS[sorted(kinds(t))[0]]))
        nullable = isinstance(t, list) and "null" in t
        fill = FILL[element] if nullable and draw(st.booleans()) else None
        specs.append(TensorSpec(f"in{n}", element, (None, 1), ""))
        inputs[f"in{n}"] = InputSource((path,), fill=fill)
    assume(specs)
    passable = [p for p, t in found if kinds(t) <= {*PRIMITIVES, "enum", "other"} and not _complex(t)]
    include = tuple(draw(st.lists(st.sampled_from(passable), max_size=3, unique=True))) if passable else ()
    return schema, Contract.of(Signature(tuple(specs), OUT), inputs), include


def _complex(t: Any) -> bool:
    """A record, array or map (in a union too): not passed through on the fast path."""
    if isinstance(t, list):
        return any(_complex(b) for b in t)
    return isinstance(t, dict) and t["type"] in ("record", "array", "map")


def value(draw: st.DrawFn, t: Any, named: dict[str, Any]) -> Any:
    """A value of type ``t`` for fastavro's writer."""
    if isinstance(t, str) and t in named:
        t = named[t]
    if isinstance(t, list):
        return value(draw, t[draw(st.integers(0, len(t) - 1))], named)
    kind = t if isinstance(t, str) else t["type"]
    if isinstance(t, dict) and kind in ("enum", "fixed", "record"):
        named[t["name"]] = t
    if kind == "null":
        return None
    if kind == "boolean":
        return draw(st.booleans())
    if kind in INTS:
        return draw(INTS[kind])
    if kind in FLOATS:
        return draw(FLOATS[kind])
    if kind == "string":
        return draw(TEXT)
    if kind == "bytes":
        return draw(st.binary(max_size=4))
    if kind == "enum":
        return draw(st.sampled_from(t["symbols"]))
    if kind == "fixed":
        return draw(st.binary(min_size=t["size"], max_size=t["size"]))
    if kind == "record":
        return {f["name"]: value(draw, f["type"], named) for f in t["fields"]}
    count = draw(st.integers(0, 3))
    if kind == "array":
        return [value(draw, t["items"], named) for _ in range(count)]
    return {draw(TEXT): value(draw, t["values"], named) for _ in range(count)}


@st.composite
def messages(draw: st.DrawFn, schema: dict[str, Any]) -> list[tuple[bytes | None, bool]]:
    """Messages written by fastavro from generated records; some then broken (not plain)."""
    parsed = fastavro.parse_schema(schema)
    out: list[tuple[bytes | None, bool]] = []
    for _ in range(draw(st.integers(1, 6))):
        named: dict[str, Any] = {}
        buf = io.BytesIO()
        try:
            fastavro.schemaless_writer(buf, parsed, value(draw, schema, named))
        except (ValueError, TypeError, OverflowError, struct.error):  # a union branch the writer will not pick
            continue
        raw = buf.getvalue()
        mutation = draw(st.sampled_from(["none"] * 8 + ["truncate", "append", "flip", "garbage", "tombstone"]))
        if mutation == "truncate" and raw:
            out.append((raw[:draw(st.integers(0, len(raw) - 1))], False))
        elif mutation == "append":
            out.append((raw + draw(st.binary(min_size=1, max_size=3)), False))
        elif mutation == "flip" and raw:
            i = draw(st.integers(0, len(raw) - 1))
            out.append((raw[:i] + bytes([draw(st.integers(0, 255))]) + raw[i + 1:], False))
        elif mutation == "garbage":
            out.append((draw(st.binary(max_size=12)), False))
        elif mutation == "tombstone":
            out.append((None, False))
        else:
            out.append((raw, True))
    assume(out)
    return out


def reference(value_: bytes | None, schema: dict[str, Any], contract: Contract, include: tuple[str, ...],
              at: int) -> SourceRecord | RecordError:
    try:
        if value_ is None:
            raise DeserializeError("tombstone")
        payload = codec(schema).decode(value_)
        return EventValidator(config(), contract, include).to_record(
            payload, "t", 0, at, None, 1234)
    except RecordError as exc:
        return exc


def same(a: Any, b: Any) -> bool:
    """Equal as the prediction would carry them: the same type and value (NaN is NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def usual(ref: SourceRecord, contract: Contract) -> bool:
    """Values the fast path takes (it leaves to the reference integers beyond 2**24 / 2**53 into
    float inputs, where one may or may not be exact, and a NaN float passed through)."""
    limit = {"float32": 2 ** 24, "float64": 2 ** 53}
    return not any(abs(v) > limit[p.spec.element] for p in contract.inputs if p.spec.element in limit
                   for v in ref.features[p.spec.name] if isinstance(v, (int, float)))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
@PROPERTY
@given(layout().flatmap(lambda lay: st.tuples(st.just(lay), messages(lay[0]))))
def test_generated_schemas_decode_as_the_reference_or_step_aside(drawn: Any) -> None:
    (schema, contract, include), drawn_messages = drawn
    values = [v for v, _ in drawn_messages]
    decoder = FieldDecoder.compile(schema, config(), contract, include)
    assert decoder is not None, (schema, include)  # every generated layout walks
    cols = decoder.decode(values)
    refs = [reference(v, schema, contract, include, i) for i, v in enumerate(values)]
    assert sorted(cols.rows.tolist() + cols.fallback.tolist()) == list(range(len(values)))
    passed = cols.passthrough if include else [()] * len(cols.rows)
    assert passed is not None and len(passed) == len(cols.rows)
    for j, i in enumerate(cols.rows.tolist()):
        ref = refs[i]
        assert_row_agrees(cols, j, ref, contract, str(i))
        assert len(passed[j]) == len(ref.passthrough)
        assert all(same(a, b) for a, b in zip(passed[j], ref.passthrough)), (passed[j], ref.passthrough)
    for i, (_, plain) in enumerate(drawn_messages):
        ref = refs[i]
        nan_passed = isinstance(ref, SourceRecord) and any(isinstance(v, float) and math.isnan(v)
                                                           for v in ref.passthrough)
        if plain and isinstance(ref, SourceRecord) and usual(ref, contract) and not nan_passed:
            assert i in cols.rows, f"a plain row the reference accepts went to the reference: {values[i]!r}"


def test_the_mixed_event_takes_the_fast_path_whole() -> None:
    """The benchmark's (j) event: strings, a double, a nullable float with a fill, a long, and
    fields the model does not use (a string, an enum, a boolean, a double); two passed through."""
    from benchmarks.domain_events import MIXED

    sig = Signature((TensorSpec("country", "string", (None, 1), ""), TensorSpec("channel", "string", (None, 1), ""),
                     TensorSpec("amount", "float32", (None, 1), ""), TensorSpec("age_days", "float32", (None, 1), ""),
                     TensorSpec("n_items", "int64", (None, 1), "")), OUT)
    contract = Contract.of(sig, {k: InputSource((k,), fill=0.0 if k == "age_days" else None)
                                 for k in ("country", "channel", "amount", "age_days", "n_items")})
    rows = [{"event_id": f"m{i}", "entity_id": f"c{i}", "event_time": i, "country": "DÉ", "channel": "",
             "amount": 1.5 * i, "age_days": None if i % 3 == 0 else float(i), "n_items": i, "merchant": "shop",
             "device": ["ios", "android", "web"][i % 3], "is_new": i % 2 == 0, "hint": 0.5} for i in range(30)]
    values = [codec(MIXED).encode(r) for r in rows]
    decoder = FieldDecoder.compile(MIXED, config(), contract, ("device", "merchant"))
    assert decoder is not None
    cols = decoder.decode(values)
    assert cols.fallback.size == 0
    assert cols.features.arrays["country"].tolist() == [["DÉ"]] * 30
    assert cols.features.arrays["age_days"][:4].ravel().tolist() == [0.0, 1.0, 2.0, 0.0]
    assert cols.passthrough is not None and cols.passthrough[:2] == [("ios", "shop"), ("android", "shop")]
    assert np.array_equal(cols.features.arrays["n_items"].ravel(), np.arange(30))


def test_a_null_record_gives_its_fields_null() -> None:
    """A field under a nullable record: the record's null is the field's (the input's fill, a
    pass-through None), whatever order the union's branches take."""
    card = {"type": "record", "name": "Card", "fields": [
        {"name": "country", "type": "string"}, {"name": "level", "type": ["long", "null"]}]}
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "event_id", "type": "string"}, {"name": "event_time", "type": "long"},
        {"name": "tags", "type": {"type": "map", "values": {"type": "array", "items": "string"}}},
        {"name": "card", "type": [card, "null"]}]}
    sig = Signature((TensorSpec("country", "string", (None, 1), ""), TensorSpec("level", "int64", (None, 1), "")), OUT)
    contract = Contract.of(sig, {"country": InputSource(("card.country",), fill="none"),
                                 "level": InputSource(("card.level",), fill=-1)})
    events = [{"event_id": "a", "event_time": 1, "tags": {"k": ["x", "é"]}, "card": {"country": "FR", "level": 3}},
              {"event_id": "b", "event_time": 2, "tags": {}, "card": None},
              {"event_id": "c", "event_time": 3, "tags": {"": []}, "card": {"country": "", "level": None}}]
    values = [codec(schema).encode(e) for e in events]
    decoder = FieldDecoder.compile(schema, config(), contract, ("card.level", "card.country"))
    assert decoder is not None
    cols = decoder.decode(values)
    assert cols.rows.tolist() == [0, 1, 2]
    assert cols.features.arrays["country"].ravel().tolist() == ["FR", "none", ""]
    assert cols.features.arrays["level"].ravel().tolist() == [3, -1, -1]
    assert cols.passthrough == [(3, "FR"), (None, None), (None, "")]
    refs = [reference(v, schema, contract, ("card.level", "card.country"), i) for i, v in enumerate(values)]
    assert [r.passthrough for r in refs if isinstance(r, SourceRecord)] == cols.passthrough


NESTED = {"type": "record", "name": "Order", "namespace": "gen", "fields": [
    {"name": "event_id", "type": "string"}, {"name": "event_time", "type": "long"},
    {"name": "amount", "type": ["null", "double"]},
    {"name": "device", "type": {"type": "enum", "name": "Device", "symbols": ["ios", "web"]}},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
    {"name": "card", "type": ["null", {"type": "record", "name": "Card", "fields": [
        {"name": "country", "type": "string"}, {"name": "digest", "type": {"type": "fixed", "name": "D", "size": 2}}]}]}]}


@pytest.mark.parametrize("fmt", ["avro", "avro-confluent"])
def test_stages_with_pass_through_fields_decode_and_encode_as_the_reference(fmt: str, tmp_path: Path) -> None:
    """Through the processor's stages, fast path on and off: the same rows, inputs, pass-through
    values, dead letters and prediction bytes (avro-confluent: two writer schemas, fields reordered)."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from streamer.config import InputConfig, RegistryConfig
    from streamer.formats.avro import AvroCodec
    from streamer.formats.confluent import ConfluentAvroCodec
    from streamer.model.contract import SCORES
    from streamer.model.signature import Columns
    from streamer.pipeline.records import Messages, ModelId, Stamp
    from streamer.pipeline.stages import Stages
    from tests.pipeline.test_stages import PREDICTION, said
    from tests.support.fakes import FakeMessage

    sig = Signature((TensorSpec("amount", "float32", (None, 1), ""), TensorSpec("country", "string", (None, 1), ""),
                     TensorSpec("device", "string", (None, 1), "")), OUT)
    contract = Contract.of(sig, {"amount": InputSource(("amount",), fill=0.0),
                                 "country": InputSource(("card.country",)), "device": InputSource(("device",))})
    include = ("card.country", "device", "amount")
    reordered = {**NESTED, "fields": list(reversed(NESTED["fields"]))}
    if fmt == "avro":
        decoder: Any = AvroCodec(NESTED)
        writers = [lambda e: decoder.encode(e)] * 2
    else:
        reg = SchemaRegistryClient.new_client({"url": "mock://generated"})
        ids = [reg.register_schema("g", Schema(json.dumps(s), "AVRO")) for s in (NESTED, reordered)]
        decoder = ConfluentAvroCodec(reg, "g", not_found_retry_s=0)
        writers = [lambda e, k=k, s=s: b"\0" + k.to_bytes(4, "big") + AvroCodec(s).encode(e)
                   for k, s in zip(ids, (NESTED, reordered))]
    (tmp_path / "order.avsc").write_text(json.dumps(NESTED))
    cfg = InputConfig(topics=("t",), group_id="g", format=fmt, schema=tmp_path / "order.avsc",
                      registry=RegistryConfig(url="mock://generated") if fmt != "avro" else None)
    values: list[bytes | None] = []
    for i in range(40):
        card = None if i % 5 == 0 else {"country": ["FR", "", "ñ"][i % 3], "digest": b"\0\1"}
        raw = writers[i % 2]({"event_id": f"e{i}", "event_time": i, "amount": None if i % 4 == 0 else i / 3,
                              "device": ["ios", "web"][i % 2], "lines": [{"sku": "a", "qty": i}] * (i % 3),
                              "card": card})
        values.append(None if i == 7 else raw[:-1] if i == 9 else raw)
    chunk = Messages.of([FakeMessage("t", i % 2, 100 + i, v) for i, v in enumerate(values)])
    output = {**json.loads(PREDICTION.schema_json)}
    output["fields"] = [*output["fields"], {"name": "card_country", "type": ["null", "string"], "default": None},
                        {"name": "device", "type": "string"}, {"name": "amount", "type": ["null", "double"]}]
    encoder = AvroCodec(output)
    fast = Stages(decoder, encoder, cfg, contract, include=include)
    slow = Stages(decoder, encoder, cfg, contract, fast=False, include=include)
    (a, a_bad), (b, b_bad) = fast.decode(chunk), slow.decode(chunk)
    compiled = [fast.fast_decoder] if fmt == "avro" else list(fast._by_schema_id.values())
    assert compiled and None not in compiled  # every writer schema took the fast path
    assert a.source.offsets.tolist() == b.source.offsets.tolist() and len(a) == 30  # 8 with null cards, 2 broken
    assert [(said(e), m.offset()) for e, m in a_bad] == [(said(e), m.offset()) for e, m in b_bad]
    assert a.passthrough == b.passthrough and a.passthrough is not None
    for name in ("amount", "country", "device"):
        x, y = a.features.arrays[name], b.features.arrays[name]
        assert x.dtype == y.dtype and x.tolist() == y.tolist()
    scores = Columns({SCORES: np.zeros((len(a), 1), np.float32)})
    stamp = Stamp(ModelId("m", "1"), 5)
    assert fast.encode(a, scores, {}, stamp)[1] == slow.encode(b, scores, {}, stamp)[1]
