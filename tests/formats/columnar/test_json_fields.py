"""The named-field JSON fast path agrees with JsonCodec + EventValidator + the contract, or steps aside.

Property tests over generated contracts (float32, float64, int64, int32, bool and string inputs,
single, stacked or an array field, dotted paths, with and without fill values) and generated
events whose values are of every JSON kind: missing, null, wrong types, non-ASCII strings,
integers past 64 bits, fractions in int fields, booleans, nested objects; written with and
without ASCII escapes, plus hostile bytes. Every row the fast path takes equals the reference's
record bit for bit; a plain valid row is not left to the reference.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from streamer.config import InputConfig, InputSource
from streamer.errors import DeserializeError, RecordError
from streamer.formats.columnar.convert import convert
from streamer.formats.columnar.json_fields import JsonFields
from streamer.formats.json_events import JsonCodec
from streamer.model.contract import Contract, exact
from streamer.model.signature import DTYPES, Signature, TensorSpec
from streamer.pipeline.records import SourceRecord
from streamer.pipeline.validate import EventValidator
from tests.formats.columnar.agreement import assert_row_agrees

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ELEMENTS = ["float32", "float64", "int64", "int32", "bool", "string"]
FILL: dict[str, Any] = {"float32": 0.5, "float64": -1.25, "int64": 7, "int32": -3, "bool": True, "string": "?"}
OUT = (TensorSpec("y", "float32", (None, 1), "tensor(float)"),)
PLAIN = {"float32": st.floats(-1e6, 1e6, width=32), "float64": st.floats(-1e300, 1e300),
         "int64": st.integers(-(2**63), 2**63 - 1), "int32": st.integers(-(2**31), 2**31 - 1),
         "bool": st.booleans(), "string": st.text(max_size=8)}
TRAPS = st.sampled_from([2**24, 2**24 + 1, -(2**24) - 1, 2**53, 2**53 + 1, 2**63, 2**63 - 1, -(2**63) - 1, 2**31,
                         -(2**31) - 1, 10**400, 1.5, -0.0, 3.0, 1e300, 3.4028235e38, 3.4028236e38, 3.5e38, -3.5e38,
                         "1.5", "é", "\u0000", "😀", "", [1.0], {"a": 1}, [], True, False, None])
ODD = st.one_of(TRAPS, TRAPS, st.none(), st.booleans(), st.integers(), st.integers(-(2**80), 2**80),
                st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6))
ROLES = ("event_id", "entity_id", "event_time")


def config(**kw: Any) -> InputConfig:
    return InputConfig(topics=("t",), group_id="g", format="json", **kw)


@st.composite
def layout(draw: st.DrawFn) -> tuple[Contract, dict[str, str]]:
    """A contract of named inputs, and each field path's element type."""
    inputs: dict[str, InputSource] = {}
    specs: list[TensorSpec] = []
    paths: dict[str, str] = {}
    for i in range(draw(st.integers(1, 4))):
        element = draw(st.sampled_from(ELEMENTS))
        kind = draw(st.sampled_from(["one", "one", "dotted", "stacked", "array"]))
        fill = FILL[element] if draw(st.booleans()) else None
        if kind == "stacked":
            fields: tuple[str, ...] = (f"s{i}a", f"s{i}b")
            specs.append(TensorSpec(f"x{i}", element, (None, 2), ""))
        elif kind == "array":
            fields = (f"a{i}",)
            specs.append(TensorSpec(f"x{i}", element, (None, 3), ""))
        else:
            fields = (f"card{i}.v{i}" if kind == "dotted" else f"f{i}",)
            specs.append(TensorSpec(f"x{i}", element, draw(st.sampled_from([(None,), (None, 1)])), ""))
        inputs[f"x{i}"] = InputSource(fields, stacked=kind == "stacked", fill=fill)
        paths.update({f: element for f in fields})
    contract = Contract.of(Signature(tuple(specs), OUT), inputs)
    assume(contract.feature_column is None)
    return contract, paths


def _put(event: dict[str, Any], path: str, value: Any) -> None:
    top, *rest = path.split(".")
    if rest:
        event[top] = {rest[0]: value}
    else:
        event[top] = value


@st.composite
def events(draw: st.DrawFn, paths: dict[str, str]) -> tuple[bytes | None, bool]:
    """One message and whether it is plain (every value of its path's type, all roles there)."""
    event: dict[str, Any] = {"event_id": draw(st.text(max_size=5))}
    event["event_time"] = draw(st.integers(0, 2**62))
    if draw(st.booleans()):
        event["entity_id"] = draw(st.text(max_size=5))
    plain = True
    for path, element in paths.items():
        if path.startswith("a"):  # an array field of 3
            if draw(st.booleans()):
                value: Any = draw(st.lists(PLAIN[element], min_size=3, max_size=3))
            else:
                plain = False
                value = draw(st.one_of(ODD, st.lists(st.one_of(PLAIN[element], ODD), min_size=2, max_size=4)))
        elif draw(st.integers(0, 3)):  # mostly plain: a row with one odd value tests that value
            value = draw(PLAIN[element])
        else:
            plain = False
            value = draw(ODD)
        if value is None and draw(st.booleans()):
            if path.startswith("card") and draw(st.booleans()):
                event[path.split(".")[0]] = draw(st.sampled_from([None, 5, "x", []]))
            continue  # missing
        _put(event, path, value)
    for role in ROLES:
        if draw(st.integers(0, 9)) == 0:
            plain = False
            roll = draw(st.sampled_from(["drop", "odd"]))
            if roll == "drop":
                event.pop(role, None)
            else:
                event[role] = draw(ODD)
    if draw(st.booleans()):
        event["unused"] = draw(st.one_of(ODD, st.text(), st.lists(st.integers(), max_size=3)))
    data = json.dumps(event, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    roll = draw(st.integers(0, 19))
    if roll == 0:
        return None, False
    if roll == 1:
        cut = draw(st.integers(0, len(data)))
        return data[:cut] + draw(st.binary(max_size=3)), False
    if roll == 2:
        return data.replace(b'"unused"', b'"unused":"\xff\xfe","x"'), False
    return data, plain


def reference(value: bytes | None, cfg: InputConfig, contract: Contract, at: int) -> SourceRecord | RecordError:
    try:
        if value is None:
            raise DeserializeError("tombstone")
        payload = JsonCodec(cfg.max_message_bytes).decode(value)
        return EventValidator(cfg, contract).to_record(payload, "t", 0, at, None, 1234)
    except RecordError as exc:
        return exc


def agree(contract: Contract, values: list[bytes | None], cfg: InputConfig | None = None) -> tuple[Any, list[Any]]:
    cfg = cfg or config()
    decoder = JsonFields.compile(cfg, contract)
    assert decoder is not None
    cols: Any = decoder.decode(values)
    refs = [reference(v, cfg, contract, i) for i, v in enumerate(values)]
    assert sorted(cols.rows.tolist() + cols.fallback.tolist()) == list(range(len(values)))
    for j, i in enumerate(cols.rows.tolist()):
        assert_row_agrees(cols, j, refs[i], contract, f"{i} {values[i]!r}", entity=True)
    return cols, refs


@PROPERTY
@given(layout().flatmap(lambda lay: st.tuples(st.just(lay[0]), st.lists(events(lay[1]), min_size=1, max_size=8))))
def test_named_json_decodes_as_the_reference_or_steps_aside(drawn: Any) -> None:
    contract, messages = drawn
    cols, refs = agree(contract, [v for v, _ in messages])
    for i, (value, plain) in enumerate(messages):
        if plain and isinstance(refs[i], SourceRecord) and not _unusual(refs[i], contract):
            assert i in cols.rows, f"a plain row the reference accepts went to the reference: {value!r}"


def _unusual(ref: SourceRecord, contract: Contract) -> bool:
    """Integers into a float input beyond 2**24 (float32) or 2**53 (float64): left to the reference."""
    limit = {"float32": 2 ** 24, "float64": 2 ** 53}
    return any(type(v) is float and v.is_integer() and abs(v) > limit[p.spec.element]
               for p in contract.inputs if p.spec.element in limit for v in ref.features[p.spec.name])


def mixed(i: int) -> dict[str, Any]:
    """benchmarks/domain_events.py's (j) event."""
    return {"event_id": f"m{i}", "entity_id": f"c{i % 97}", "event_time": 1_700_000_000_000 + i,
            "country": ["US", "DE", "FR", "BR"][i % 4], "channel": ["web", "app", "pos"][i % 3],
            "amount": 12.5 + i, "age_days": None if i % 10 == 0 else float(i % 2000), "n_items": i % 9 + 1,
            "merchant": f"shop-{i % 50}", "device": ["ios", "android", "web"][i % 3], "is_new": i % 7 == 0,
            "hint": 0.5}


def mixed_contract() -> Contract:
    specs = (TensorSpec("country", "string", (None, 1), ""), TensorSpec("channel", "string", (None, 1), ""),
             TensorSpec("amount", "float32", (None, 1), ""), TensorSpec("age_days", "float32", (None, 1), ""),
             TensorSpec("n_items", "int64", (None, 1), ""))
    return Contract.of(Signature(specs, OUT), {k.name: InputSource((k.name,), fill=0.0 if k.name == "age_days"
                                                                   else None) for k in specs})


def test_the_mixed_event_takes_the_fast_path_whole() -> None:
    values: list[bytes | None] = [json.dumps(mixed(i)).encode() for i in range(40)]
    cols, _ = agree(mixed_contract(), values)
    assert cols.rows.tolist() == list(range(40)) and cols.fallback.tolist() == []
    assert cols.features.arrays["age_days"][[0, 1]].tolist() == [[0.0], [1.0]]  # null: the fill
    assert cols.features.arrays["country"][:2].tolist() == [["US"], ["DE"]]


@pytest.mark.parametrize(("value", "fast"), [
    (b'{"event_id":"e","event_time":1,"amount":1,"amount":2.5}', True),  # the last of a duplicate key, as json
    (b'{"event_id":"e","event_time":1,"amount":1e400}', False),  # json reads inf; msgspec refuses
    (b'{"event_id":"e","event_time":1,"amount":2.5,"x":"\xff"}', False),  # bad UTF-8 in a skipped field
    (b'{"event_id":"e","event_time":1,"amount":2.5,"x":"\\ud800"}', False),  # a lone surrogate: json takes it
    (b'{"event_id":"e","event_time":1,"amount":2.5,"x":NaN}', False),
    (b'{"event_id":"e","event_time":1,"amount":16777217}', False),  # past 2**24 into float32
    (b'{"event_id":"e","event_time":1,"amount":true}', True),  # a bool is 1 in a number input
    (b'{"event_id":"e","event_time":1,"amount":null}', False),  # no fill
    (b'{"event_id":"e","event_time":1,"amount":2.5,"x":' + b"[" * 500 + b"]" * 500 + b"}", False),  # deep
    (b'{"event_id":"e","event_time":1,"amount":2.5,"x":"\xc3\xa9"}', True),  # valid non-ASCII
    (b' {"event_id":"e","event_time":1,"amount":2.5} ', True),
])
def test_json_traps_step_aside(value: bytes, fast: bool) -> None:
    contract = Contract.of(Signature((TensorSpec("amount", "float32", (None, 1), ""),), OUT),
                           {"amount": InputSource(("amount",))})
    cols, _ = agree(contract, [value])
    assert (cols.rows.tolist() == [0]) is fast


def test_convert_takes_its_types_and_leaves_the_rest() -> None:
    out, aside = convert([1.5, None, 2**30, "x", True, 2**70], "float32", 0.0)
    assert out.dtype == np.float32 and out.tolist()[:2] == [1.5, 0.0] and out[4] == 1.0
    assert aside.tolist() == [False, False, True, True, False, True]
    out, aside = convert([3, 2**31, 2.0, None], "int32", None)
    assert out.tolist()[0] == 3 and aside.tolist() == [False, True, True, True]
    out, aside = convert(["a", 1, None], "string", "?")
    assert out.tolist() == ["a", "?", "?"] and aside.tolist() == [False, True, False]


TABLE = [2**24, 2**24 + 1, -(2**24), -(2**24) - 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1, 2**63, -(2**63),
         -(2**63) - 1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 10**400, 0, 1, -1, 1.5, -0.0, 3.0, 1e300,
         3.4028235e38, 3.4028236e38, -3.5e38, 5e-324, float("inf"), float("-inf"), float("nan"), "1.5", "", "é", True, False, None, [1.0], {"a": 1}]


@pytest.mark.parametrize("element", ELEMENTS)
@pytest.mark.parametrize("fill", [None, "fill"])
def test_convert_equals_the_contracts_exact_or_steps_aside(element: str, fill: str | None) -> None:
    """Every value of the table, alone and all together in one column."""
    fill_value = FILL[element] if fill else None
    together, aside_all = convert(TABLE, element, fill_value)
    for i, value in enumerate(TABLE):
        out, aside = convert([value], element, fill_value)
        assert aside[0] == aside_all[i]
        if aside[0]:
            continue
        want = fill_value if value is None else exact(value, element)  # raises: a row the reference refuses
        ref = np.array([want], DTYPES[element])
        assert out.dtype == ref.dtype and out.tobytes() == ref.tobytes() if element != "string" else out.tolist() == [want]
        assert together[i:i + 1].tobytes() == out.tobytes() if element != "string" else together[i] == want
