"""The protobuf-confluent fast path agrees with ConfluentProtobufCodec + EventValidator + the
contract, or steps aside.

Property tests over generated message types (every scalar type, enums, repeated numbers, nested
messages reached by dotted paths) and generated contracts (float32, float64, int64, int32, bool and
string inputs, single, stacked or whole arrays, with and without fill values), on generated
messages (defaults left out, NaN and infinities, integers at their type's ends, unknown enum
numbers, non-ASCII strings, absent nested messages) and hostile bytes (truncated, flipped, bad
framing, an unknown id or message index). Every row the fast path takes equals the reference's
record bit for bit; a message type that compiles leaves no plain row to the reference.
"""

from __future__ import annotations

import base64
import itertools
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from streamer.config import InputConfig, InputSource
from streamer.errors import DeserializeError, RecordError
from streamer.formats.columnar.protobuf_columns import ProtobufColumns
from streamer.formats.protobuf import ConfluentProtobufCodec
from streamer.model.contract import Contract
from streamer.model.signature import Signature, TensorSpec
from streamer.pipeline.records import SourceRecord
from streamer.pipeline.validate import EventValidator
from tests.formats.columnar.agreement import assert_row_agrees
from tests.formats.columnar.test_json_fields import FILL, OUT

T = descriptor_pb2.FieldDescriptorProto
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INF = float("inf")
VALUES: dict[int, Any] = {
    T.TYPE_FLOAT: st.one_of(st.floats(width=32), st.sampled_from([0.0, -0.0, 3.4028234663852886e38, INF])),
    T.TYPE_DOUBLE: st.one_of(st.floats(), st.sampled_from([0.0, 3.5e38, -3.5e38, 1e300, INF, -INF])),
    T.TYPE_INT32: st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([2**31 - 1, -(2**31), 2**24 + 1])),
    T.TYPE_INT64: st.one_of(st.integers(-(2**63), 2**63 - 1),
                            st.sampled_from([2**24, 2**24 + 1, 2**53 + 1, 2**63 - 1, -(2**63), 2**31])),
    T.TYPE_UINT64: st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([2**63, 2**64 - 1, 2**31, 2**24 + 1])),
    T.TYPE_SINT32: st.integers(-(2**31), 2**31 - 1),
    T.TYPE_FIXED64: st.integers(0, 2**64 - 1),
    T.TYPE_BOOL: st.booleans(),
    T.TYPE_STRING: st.text(max_size=6),
    T.TYPE_ENUM: st.sampled_from([0, 1, 2, 7]),  # 7: a number the enum does not name (proto3 keeps it)
}
SCALARS = list(VALUES)
ELEMENTS = ["float32", "float64", "int64", "int32", "bool", "string"]
# What convert.py takes (by the Python type each protobuf type reads as); other pairs step aside.
_FLOATS, _INTS = {T.TYPE_FLOAT, T.TYPE_DOUBLE}, {T.TYPE_INT32, T.TYPE_INT64, T.TYPE_UINT64, T.TYPE_SINT32, T.TYPE_FIXED64}
TAKES = {"float32": _FLOATS | _INTS, "float64": _FLOATS | _INTS, "int64": _INTS, "int32": _INTS,
         "bool": {T.TYPE_BOOL}, "string": {T.TYPE_STRING, T.TYPE_ENUM}}
TIMES = [T.TYPE_INT64, T.TYPE_UINT64, T.TYPE_INT32, T.TYPE_SINT32]
_names = itertools.count()


def config(**kw: Any) -> InputConfig:
    return InputConfig(topics=("t",), group_id="g", format="json", **kw)  # the format is the codec's: not read here


@st.composite
def layout(draw: st.DrawFn) -> tuple[descriptor_pb2.FileDescriptorProto, Contract, dict[str, Any], bool]:
    """A file whose first message is the event, a contract reading it, each field's values, and
    whether every (field type, input element) pair is one the fast path takes."""
    fd = descriptor_pb2.FileDescriptorProto(name=f"gen{next(_names)}.proto", package="gen", syntax="proto3")
    m = fd.message_type.add(name="Event")
    color = m.enum_type.add(name="Color")
    for number, name in enumerate(["RED", "GREEN", "BLUE"]):
        color.value.add(name=name, number=number)
    inner = m.nested_type.add(name="Inner")
    numbers = itertools.count(1)
    m.field.add(name="event_id", number=next(numbers), type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    time_type = draw(st.sampled_from(TIMES))
    m.field.add(name="event_time", number=next(numbers), type=time_type, label=T.LABEL_OPTIONAL)
    gen: dict[str, Any] = {"event_id": st.text(max_size=5), "event_time": VALUES[time_type]}
    if draw(st.booleans()):
        m.field.add(name="entity_id", number=next(numbers), type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
        gen["entity_id"] = st.text(max_size=5)
    inputs: dict[str, InputSource] = {}
    specs: list[TensorSpec] = []
    nested, taken = False, True
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["one", "one", "nested", "stacked", "array"]))
        element = draw(st.sampled_from(ELEMENTS))
        fill = FILL[element] if draw(st.booleans()) else None
        if kind == "array":
            t = draw(st.sampled_from([T.TYPE_FLOAT, T.TYPE_DOUBLE, T.TYPE_INT64]))
            m.field.add(name=f"a{i}", number=next(numbers), type=t, label=T.LABEL_REPEATED)
            gen[f"a{i}"] = st.lists(VALUES[t], min_size=2, max_size=4)
            taken &= t in TAKES[element]
            specs.append(TensorSpec(f"x{i}", element, (None, 3), ""))
            inputs[f"x{i}"] = InputSource((f"a{i}",), fill=fill)
            continue
        names = [f"s{i}a", f"s{i}b"] if kind == "stacked" else [f"f{i}"]
        for name in names:
            t = draw(st.sampled_from(SCALARS))
            extra: dict[str, Any] = {"type_name": ".gen.Event.Color"} if t == T.TYPE_ENUM else {}
            owner = inner if kind == "nested" else m
            if draw(st.booleans()):  # `optional`: presence tracked, a field not sent is null
                owner.oneof_decl.add(name=f"_{name}")  # the synthetic oneof protoc writes for it
                extra.update(oneof_index=len(owner.oneof_decl) - 1, proto3_optional=True)
            owner.field.add(name=name, number=next(numbers), type=t, label=T.LABEL_OPTIONAL, **extra)
            gen[f"inner.{name}" if kind == "nested" else name] = VALUES[t]
            taken &= t in TAKES[element] and (t != T.TYPE_ENUM or element == "string")
        nested |= kind == "nested"
        paths = tuple(f"inner.{n}" if kind == "nested" else n for n in names)
        specs.append(TensorSpec(f"x{i}", element, (None, 2) if kind == "stacked" else
                                draw(st.sampled_from([(None,), (None, 1)])), ""))
        inputs[f"x{i}"] = InputSource(paths, stacked=kind == "stacked", fill=fill)
    if nested:
        m.field.add(name="inner", number=next(numbers), type=T.TYPE_MESSAGE, type_name=".gen.Event.Inner",
                    label=T.LABEL_OPTIONAL)
    m.field.add(name="unused", number=next(numbers), type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    contract = Contract.of(Signature(tuple(specs), OUT), inputs)
    assume(contract.feature_column is None)
    return fd, contract, gen, taken


def classes(fd: descriptor_pb2.FileDescriptorProto) -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("gen.Event"))


@st.composite
def message(draw: st.DrawFn, gen: dict[str, Any], event: Any, head: bytes) -> bytes | None:
    m = event()
    for path, values in gen.items():
        if draw(st.integers(0, 4)) == 0:
            continue  # not sent: proto3's default (or an absent nested message)
        value = draw(values)
        target = m.inner if path.startswith("inner.") else m
        name = path.split(".")[-1]
        if isinstance(value, list):
            getattr(target, name).extend(value)
        else:
            setattr(target, name, value)
    if draw(st.booleans()):
        m.unused = draw(st.text(max_size=4))
    data = head + b"\0" + m.SerializeToString()
    roll = draw(st.integers(0, 14))
    if roll == 0:
        return None
    if roll == 1:
        return data[:draw(st.integers(0, len(data)))]
    if roll == 2 and len(data) > 6:
        at = draw(st.integers(6, len(data) - 1))
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    if roll == 3:
        return draw(st.sampled_from([b"\1" + data[1:], data[:5] + b"\2\2" + data[6:],  # no message [1]
                                     data[:5] + b"\2\0" + data[6:]]))  # [0] written long
    return data


def reference(codec: ConfluentProtobufCodec, value: bytes | None, contract: Contract,
              at: int) -> SourceRecord | RecordError:
    try:
        if value is None:
            raise DeserializeError("tombstone")
        payload = codec.decode(value)
        return EventValidator(config(), contract).to_record(payload, "t", 0, at, None, 1234)
    except RecordError as exc:
        return exc


def agree(codec: ConfluentProtobufCodec, contract: Contract, values: list[bytes | None]) -> tuple[Any, list[Any]]:
    decoder = ProtobufColumns.compile(codec, config(), contract)
    assert decoder is not None
    cols: Any = decoder.decode(values)
    refs = [reference(codec, v, contract, i) for i, v in enumerate(values)]
    assert sorted(cols.rows.tolist() + cols.fallback.tolist()) == list(range(len(values)))
    for j, i in enumerate(cols.rows.tolist()):
        assert_row_agrees(cols, j, refs[i], contract, f"{i} {values[i]!r}", entity=True)
    return cols, refs


def registered(fd: descriptor_pb2.FileDescriptorProto) -> tuple[ConfluentProtobufCodec, bytes]:
    reg = SchemaRegistryClient.new_client({"url": f"mock://pbcols{next(_names)}"})
    schema_id = reg.register_schema("t-value", Schema(base64.b64encode(fd.SerializeToString()).decode(), "PROTOBUF"))
    return ConfluentProtobufCodec(reg), b"\0" + schema_id.to_bytes(4, "big")


@PROPERTY
@given(st.data(), layout())
def test_protobuf_decodes_as_the_reference_or_steps_aside(data: st.DataObject, drawn: Any) -> None:
    fd, contract, gen, taken = drawn
    codec, head = registered(fd)
    event = classes(fd)
    values = data.draw(st.lists(message(gen, event, head), min_size=1, max_size=8))
    cols, refs = agree(codec, contract, values)
    decoder = ProtobufColumns.compile(codec, config(), contract)
    assert decoder is not None
    for i, value in enumerate(values):  # where the pairs are taken, only what it must goes to the reference
        if taken and isinstance(refs[i], SourceRecord) and i not in cols.rows:
            assert _unusual(refs[i], contract) or refs[i].event_time_ms >= 2**63 or value is None \
                or value[5] != 0, value


def _unusual(ref: SourceRecord, contract: Contract) -> bool:
    """Integers into a float input beyond 2**24 (float32) or 2**53 (float64): left to the reference."""
    limit = {"float32": 2 ** 24, "float64": 2 ** 53}
    return any(type(v) is float and v.is_integer() and abs(v) > limit[p.spec.element]
               for p in contract.inputs if p.spec.element in limit for v in ref.features[p.spec.name])


def mixed_file() -> descriptor_pb2.FileDescriptorProto:
    """benchmarks/domain_events.py's (j) event as a proto3 message (age_days: a FloatValue-like wrapper)."""
    fd = descriptor_pb2.FileDescriptorProto(name="order.proto", package="bench", syntax="proto3")
    m = fd.message_type.add(name="Order")
    device = m.enum_type.add(name="Device")
    for number, name in enumerate(["ios", "android", "web"]):
        device.value.add(name=name, number=number)
    box = m.nested_type.add(name="Box")
    box.field.add(name="value", number=1, type=T.TYPE_FLOAT, label=T.LABEL_OPTIONAL)
    for number, (name, t) in enumerate([("event_id", T.TYPE_STRING), ("entity_id", T.TYPE_STRING),
                                        ("event_time", T.TYPE_INT64), ("country", T.TYPE_STRING),
                                        ("channel", T.TYPE_STRING), ("amount", T.TYPE_DOUBLE),
                                        ("n_items", T.TYPE_INT64), ("merchant", T.TYPE_STRING),
                                        ("is_new", T.TYPE_BOOL), ("hint", T.TYPE_DOUBLE)], 1):
        m.field.add(name=name, number=number, type=t, label=T.LABEL_OPTIONAL)
    m.field.add(name="age_days", number=11, type=T.TYPE_MESSAGE, type_name=".bench.Order.Box", label=T.LABEL_OPTIONAL)
    m.field.add(name="device", number=12, type=T.TYPE_ENUM, type_name=".bench.Order.Device", label=T.LABEL_OPTIONAL)
    return fd


def mixed_values(n: int) -> tuple[ConfluentProtobufCodec, list[bytes | None], Contract]:
    fd = mixed_file()
    codec, head = registered(fd)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Order"))
    values: list[bytes | None] = []
    for i in range(n):
        m = order(event_id=f"m{i}", entity_id=f"c{i % 97}", event_time=1_700_000_000_000 + i,
                  country=["US", "DE", "FR", "BR"][i % 4], channel=["web", "app", "pos"][i % 3], amount=12.5 + i,
                  n_items=i % 9 + 1, merchant=f"shop-{i % 50}", is_new=i % 7 == 0, hint=0.5, device=i % 3)
        if i % 10:
            m.age_days.value = float(i % 2000)
        values.append(head + b"\0" + m.SerializeToString())
    specs = (TensorSpec("country", "string", (None, 1), ""), TensorSpec("channel", "string", (None, 1), ""),
             TensorSpec("amount", "float32", (None, 1), ""), TensorSpec("age_days", "float32", (None, 1), ""),
             TensorSpec("n_items", "int64", (None, 1), ""), TensorSpec("device", "string", (None, 1), ""))
    sources = {s.name: InputSource((s.name,)) for s in specs}
    sources["age_days"] = InputSource(("age_days.value",), fill=0.0)
    return codec, values, Contract.of(Signature(specs, OUT), sources)


def test_the_mixed_event_takes_the_fast_path_whole() -> None:
    codec, values, contract = mixed_values(30)
    cols, _ = agree(codec, contract, values)
    assert cols.rows.tolist() == list(range(30))
    assert cols.features.arrays["age_days"][[0, 1]].tolist() == [[0.0], [1.0]]  # absent: the fill
    assert cols.features.arrays["device"][:3].tolist() == [["ios"], ["android"], ["web"]]


def test_an_optional_field_not_sent_is_null_and_takes_the_fill() -> None:
    fd = descriptor_pb2.FileDescriptorProto(name="opt.proto", package="gen", syntax="proto3")
    m = fd.message_type.add(name="Event")
    m.field.add(name="event_id", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    m.field.add(name="event_time", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    m.oneof_decl.add(name="_n")
    m.field.add(name="n", number=3, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL, oneof_index=0, proto3_optional=True)
    codec, head = registered(fd)
    event = classes(fd)
    values: list[bytes | None] = [head + b"\0" + event(event_id="a", event_time=1, **n).SerializeToString()
                                  for n in ({"n": 7}, {}, {"n": 0})]
    contract = Contract.of(Signature((TensorSpec("n", "float32", (None, 1), ""),), OUT),
                           {"n": InputSource(("n",), fill=-1.0)})
    cols, _ = agree(codec, contract, values)
    assert cols.rows.tolist() == [0, 1, 2]
    assert cols.features.arrays["n"].tolist() == [[7.0], [-1.0], [0.0]]  # not sent: the fill; sent 0: 0


@pytest.mark.parametrize("element", ["float32", "int64"])
def test_a_type_that_does_not_walk_leaves_its_rows_to_the_reference(element: str) -> None:
    """An enum into a number, a repeated field into a scalar input: the message type does not compile."""
    codec, values, _ = mixed_values(3)
    specs = (TensorSpec("device", element, (None, 1), ""),)
    contract = Contract.of(Signature(specs, OUT), {"device": InputSource(("device",))})
    cols, refs = agree(codec, contract, values)
    assert cols.rows.tolist() == [] and cols.fallback.tolist() == [0, 1, 2]
    assert all(isinstance(r, RecordError) for r in refs) == (element == "float32" or element == "int64")


@pytest.mark.parametrize("fmt", ["json", "protobuf"])
def test_the_stages_take_the_fast_path_and_agree_with_the_reference(fmt: str) -> None:
    """pipeline/stages.py chooses JsonFields or ProtobufColumns for named inputs; a chunk with
    rejects among the rows decodes as with the fast path off (rows, columns, dead letters)."""
    import json

    from streamer.formats.json_events import JsonCodec
    from streamer.pipeline.records import Messages
    from streamer.pipeline.stages import Stages
    from tests.formats.columnar.test_json_fields import mixed, mixed_contract
    from tests.support.fakes import FakeMessage

    codec: Any
    if fmt == "json":
        codec, contract = JsonCodec(), mixed_contract()
        values: list[bytes | None] = [json.dumps(mixed(i)).encode() for i in range(20)]
        values.append(b'{"event_id":"x","event_time":1,"amount":"no"}')
    else:
        codec, values, contract = mixed_values(20)
        values.append(values[0][:8])  # type: ignore[index]
    chunk = Messages.of([FakeMessage("t", 0, i, v) for i, v in enumerate([*values, None])])
    fast, slow = Stages(codec, codec, config(), contract), Stages(codec, codec, config(), contract, fast=False)
    assert fast.fast_decoder is not None and slow.fast_decoder is None
    (a, a_rejects), (b, b_rejects) = fast.decode(chunk), slow.decode(chunk)
    assert [str(e) for e, _ in a_rejects] == [str(e) for e, _ in b_rejects] and len(a_rejects) == 2
    assert (list(a.event_ids), a.event_times.tolist()) == (list(b.event_ids), b.event_times.tolist())
    assert a.source.offsets.tolist() == b.source.offsets.tolist() == list(range(20))
    for name, column in b.features.arrays.items():
        assert a.features.arrays[name].dtype == column.dtype and a.features.arrays[name].tolist() == column.tolist()
