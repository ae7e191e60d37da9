"""The conversion table (model/exact.py), one case per (event field type, model input element type,
value), for Avro, JSON and protobuf-confluent events decoded from real encoded bytes through the
processor's stages (pipeline/stages.py, fast path on and off).

Each case expects the converted value in the input's tensor, a refusal at start (``ConfigError``
on ``model.inputs.x`` from the Avro schema; JSON and Protobuf tell no type at start, so there the
same value is a ``validate`` dead letter naming the field), or a dead letter naming the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from streamer.config import InputConfig, InputSource, RegistryConfig
from streamer.errors import ConfigError
from streamer.formats.avro import AvroCodec
from streamer.formats.codec import Codec
from streamer.formats.json_events import JsonCodec
from streamer.formats.protobuf import ConfluentProtobufCodec
from streamer.model.contract import Contract
from streamer.model.exact import CONVERSIONS
from streamer.model.signature import DTYPES, Signature, TensorSpec
from streamer.pipeline.records import Messages
from streamer.pipeline.stages import Stages
from tests.pipeline.test_stages import PREDICTION, ROOT
from tests.support.fakes import FakeMessage

SOME_SCHEMA = ROOT / "streamer" / "schemas" / "feature_event.avsc"
REFUSED, DEAD = "refused", "dead letter"
F32_TENTH = float(np.float32(0.1))  # a float field's value: a float32, widened exactly
ONE_AND_A_HALF_ULP = 1 + 3 * 2.0 ** -24  # halfway between two float32s: rounds to the even one, 1 + 2^-22
TIE_TO_EVEN = 1 + 2.0 ** -24  # halfway between 1 and the next float32: rounds to 1


@dataclass(frozen=True)
class Case:
    source: str  # bool, int, long, float, double, string, enum
    element: str  # the model input's element type
    value: Any  # the event field's value
    expect: Any  # the value in the tensor, REFUSED or DEAD

    def __str__(self) -> str:
        return f"{self.source}-{self.element}-{self.value!r}"


CASES = [
    # bool -> every number exactly (true = 1); bool -> bool; bool -> string refused
    Case("bool", "float32", True, 1.0), Case("bool", "float64", False, 0.0), Case("bool", "int64", True, 1),
    Case("bool", "int32", True, 1), Case("bool", "int32", False, 0), Case("bool", "bool", True, True),
    Case("bool", "string", True, REFUSED),
    # int (32-bit) and long -> floats within 2^24 / 2^53, ints in range; else a dead letter
    Case("int", "float32", -7, -7.0), Case("int", "float32", 2 ** 24, 2.0 ** 24),
    Case("int", "float32", 2 ** 24 + 1, DEAD), Case("int", "float32", 2 ** 30, DEAD),
    Case("int", "float64", 2 ** 31 - 1, 2.0 ** 31 - 1), Case("int", "int64", -(2 ** 31), -(2 ** 31)),
    Case("int", "int32", 2 ** 31 - 1, 2 ** 31 - 1), Case("int", "bool", 1, REFUSED), Case("int", "string", 7, REFUSED),
    Case("long", "float32", -(2 ** 24), -(2.0 ** 24)), Case("long", "float32", -(2 ** 24) - 1, DEAD),
    Case("long", "float64", 2 ** 53, 2.0 ** 53), Case("long", "float64", 2 ** 53 + 1, DEAD),
    Case("long", "int64", 2 ** 63 - 1, 2 ** 63 - 1), Case("long", "int64", -(2 ** 63), -(2 ** 63)),
    Case("long", "int32", -(2 ** 31), -(2 ** 31)), Case("long", "int32", 2 ** 31, DEAD),
    # float -> floats exactly; -> ints, bool, string refused
    Case("float", "float32", F32_TENTH, F32_TENTH), Case("float", "float64", F32_TENTH, F32_TENTH),
    Case("float", "int64", 2.0, REFUSED), Case("float", "int32", 2.0, REFUSED), Case("float", "bool", 1.0, REFUSED),
    # double -> float32 to nearest (ties to even), beyond its range a dead letter; -> float64 exactly
    Case("double", "float32", 0.1, F32_TENTH), Case("double", "float32", TIE_TO_EVEN, 1.0),
    Case("double", "float32", ONE_AND_A_HALF_ULP, 1 + 2.0 ** -22), Case("double", "float32", -1e39, DEAD),
    Case("double", "float64", 0.1, 0.1), Case("double", "float64", 1e39, 1e39),
    Case("double", "float64", math.nan, DEAD), Case("double", "float32", math.inf, DEAD),
    Case("double", "int64", 3.0, REFUSED), Case("double", "int32", 3.0, REFUSED), Case("double", "string", 0.5, REFUSED),
    # string -> string; -> any number or bool refused
    Case("string", "string", "FR", "FR"), Case("string", "string", "", ""), Case("string", "string", "é€", "é€"),
    Case("string", "float32", "1.5", REFUSED), Case("string", "int64", "3", REFUSED),
    Case("string", "bool", "true", REFUSED),
    # enum -> string takes the symbol; -> numbers refused
    Case("enum", "string", "B", "B"), Case("enum", "float32", "B", REFUSED), Case("enum", "int64", "A", REFUSED),
]
FORMATS = ["avro", "json", "protobuf-confluent"]
AVRO_TYPES: dict[str, Any] = {"bool": "boolean", "int": "int", "long": "long", "float": "float", "double": "double",
                              "string": "string", "enum": {"type": "enum", "name": "Sym", "symbols": ["A", "B"]}}
T = descriptor_pb2.FieldDescriptorProto
PROTO_TYPES = {"bool": T.TYPE_BOOL, "int": T.TYPE_INT32, "long": T.TYPE_INT64, "float": T.TYPE_FLOAT,
               "double": T.TYPE_DOUBLE, "string": T.TYPE_STRING, "enum": T.TYPE_ENUM}
OUT = (TensorSpec("y", "float32", (None, 1), "tensor(float)"),)


def _proto_classes() -> dict[str, Any]:
    """conv.proto: one message per source type, each ``event_id``, ``event_time`` and ``v``."""
    fd = descriptor_pb2.FileDescriptorProto(name="conv.proto", package="conv", syntax="proto3")
    sym = fd.enum_type.add(name="Sym")
    for number, name in enumerate(["A", "B"]):
        sym.value.add(name=name, number=number)
    for source, kind in PROTO_TYPES.items():
        m = fd.message_type.add(name=f"Event{source.capitalize()}")
        m.field.add(name="event_id", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
        m.field.add(name="event_time", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
        m.field.add(name="v", number=3, type=kind, label=T.LABEL_OPTIONAL,
                    type_name=".conv.Sym" if source == "enum" else None)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {s: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"conv.Event{s.capitalize()}"))
            for s in PROTO_TYPES}


PROTO = _proto_classes()


def avro_schema(source: str) -> dict[str, Any]:
    return {"type": "record", "name": "Event", "namespace": "conv", "fields": [
        {"name": "event_id", "type": "string"}, {"name": "event_time", "type": "long"},
        {"name": "v", "type": AVRO_TYPES[source]}]}


def encoded(fmt: str, source: str, value: Any) -> tuple[Codec, InputConfig, bytes]:
    """The decoder, its input config, and the event with field ``v`` as the format's bytes."""
    event = {"event_id": "e1", "event_time": 1_764_417_600_000, "v": value}
    if fmt == "avro":
        codec = AvroCodec(avro_schema(source))
        # (input.schema only has to exist: the stages decode with the codec given)
        return codec, InputConfig(topics=("t",), group_id="g", schema=SOME_SCHEMA), codec.encode(event)
    if fmt == "json":
        return JsonCodec(), InputConfig(topics=("t",), group_id="g", format="json"), json.dumps(event).encode()
    registry = SchemaRegistryClient.new_client({"url": "mock://conversions"})
    write = ProtobufSerializer(PROTO[source], registry, {"use.deprecated.format": False})
    data = write(PROTO[source](**event), SerializationContext("t", MessageField.VALUE))
    cfg = InputConfig(topics=("t",), group_id="g", format="protobuf-confluent",
                      registry=RegistryConfig(url="mock://conversions"))
    return ConfluentProtobufCodec(registry), cfg, data


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_conversion_table_holds_for_every_format(case: Case, fmt: str, fast: bool) -> None:
    contract = Contract.of(Signature((TensorSpec("x", case.element, (None, 1), ""),), OUT),
                           {"x": InputSource(("v",))})
    in_table = (("int" if case.source == "long" else case.source), case.element) in CONVERSIONS
    assert in_table == (case.expect is not REFUSED), "the case disagrees with exact.CONVERSIONS"
    if fmt == "avro":  # the schema tells the type at start: a pair the table refuses never starts
        if case.expect is REFUSED:
            with pytest.raises(ConfigError) as err:
                contract.check_fields(avro_schema(case.source))
            assert err.value.key == "model.inputs.x"
            return
        contract.check_fields(avro_schema(case.source))
    decoder, cfg, data = encoded(fmt, case.source, case.value)
    stages = Stages(decoder, PREDICTION, cfg, contract, fast=fast)
    if fmt == "avro" and fast and case.source != "enum":  # top-level primitives: the columnar walk
        assert stages.fast_decoder is not None
    rows, rejects = stages.decode(Messages.of([FakeMessage("t", 0, 5, data)]))
    if case.expect in (REFUSED, DEAD):
        assert len(rows) == 0 and len(rejects) == 1, (rows, rejects)
        error, message = rejects[0]
        assert error.stage == "validate" and message.value() == data
        assert "field 'v'" in str(error) and "model input 'x'" in str(error), error
        return
    assert rejects == [] and len(rows) == 1
    column = rows.features.arrays["x"]
    want = np.array([[case.expect]], DTYPES[case.element])
    assert column.dtype == want.dtype and column.shape == want.shape
    if want.dtype == object:
        assert column.tolist() == want.tolist()
    else:
        assert column.tobytes() == want.tobytes(), (column, want)  # every bit


def test_every_pair_of_the_table_has_a_case_and_so_does_every_refusal() -> None:
    pairs = {(("int" if c.source == "long" else c.source), c.element) for c in CASES if c.expect is not REFUSED}
    assert pairs == set(CONVERSIONS)
    refused = {(c.source, c.element) for c in CASES if c.expect is REFUSED}
    assert {s for s, _ in refused} >= {"bool", "int", "float", "double", "string", "enum"}
