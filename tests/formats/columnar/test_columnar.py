"""Tests for the columnar fast path: it agrees with the reference (fastavro + EventValidator), or steps aside.

The decoder may send any row to ``fallback``; a row it accepts must be one the reference accepts, with
the same values, bit for bit. The encoder's values equal ``AvroCodec.encode`` byte for byte, and it
returns None exactly where the reference raises.
"""

from __future__ import annotations

import functools
import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamer.commands.demo import synthetic_events
from streamer.config import InputConfig
from streamer.errors import DeserializeError, RecordError, SerializeError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.columnar.decode import ColumnarDecoder
from streamer.formats.columnar.encode import PredictionEncoder
from streamer.formats.columnar.walk import DecodedColumns
from streamer.formats.confluent import ConfluentAvroCodec
from streamer.model.contract import Contract
from streamer.pipeline.records import ModelId, SourceRecord, Stamp, prediction_fields
from streamer.pipeline.validate import EventValidator
from streamer.testing import matrix_signature

SCHEMAS = Path(__file__).resolve().parents[3] / "streamer" / "schemas"
FEATURES = load_schema(SCHEMAS / "feature_event.avsc")
PREDICTION = load_schema(SCHEMAS / "prediction.avsc")
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GOLDEN_AVRO = bytes.fromhex("0a6576742d310e616363742d343280e8dff7d966080000003f0000a0bf000000400000000000")

# Every simple type the decoder walks, in an order unlike the shipped one, with unions on the roles.
EXTRAS = {"type": "record", "name": "Wide", "namespace": "test", "fields": [
    {"name": "flag", "type": "boolean"},
    {"name": "features", "type": {"type": "array", "items": "float"}},
    {"name": "ratio", "type": "double"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "blob", "type": "bytes"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "entity_id", "type": ["null", "string"]},
    {"name": "note", "type": ["null", "string", "long"]},
    {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 3}},
    {"name": "event_id", "type": "string"},
    {"name": "weights", "type": {"type": "array", "items": "double"}},
    {"name": "kind2", "type": "Kind"},
    {"name": "nothing", "type": "null"},
    {"name": "small", "type": "int"},
    {"name": "f", "type": "float"},
]}
UNIONS = {"type": "record", "name": "Unions", "fields": [
    {"name": "event_id", "type": ["string", "null", "long"]},
    {"name": "features", "type": [{"type": "array", "items": "double"}, "null"]},
    {"name": "event_time", "type": ["int", "string", "null"]},
]}
BOUNDS = [(None, None), (-1.0, 1.0), (0.1, 0.30000001192092896), (-2, 2), (1e-45, 3.4028234663852886e38),
          (None, 0.0), (-0.0, None)]


def config(lo: float | None = None, hi: float | None = None, max_bytes: int = 1_048_576) -> InputConfig:
    return InputConfig(topics=("t",), group_id="g", schema=SCHEMAS / "feature_event.avsc",
                       feature_min=lo, feature_max=hi, max_message_bytes=max_bytes)


def zigzag(n: int) -> bytes:
    u = ((n << 1) ^ (n >> 63)) & (2**64 - 1)
    out = bytearray()
    while u > 0x7F:
        out.append(u & 0x7F | 0x80)
        u >>= 7
    return bytes(out + bytes([u]))


@functools.cache
def _codec(schema_json: str, max_bytes: int) -> AvroCodec:
    return AvroCodec(json.loads(schema_json), max_bytes)


def codec(schema: dict[str, Any], max_bytes: int = 1_048_576) -> AvroCodec:
    return _codec(json.dumps(schema), max_bytes)


def reference(value: bytes | None, schema: dict[str, Any], cfg: InputConfig, n: int, offset: int = 0,
              at: int = 0) -> SourceRecord | RecordError:
    """What decode_batch does with one message: a record, or the error it dead-letters."""
    try:
        if value is None:
            raise DeserializeError("tombstone")
        if len(value) > cfg.max_message_bytes:
            raise DeserializeError("too big")
        payload = codec(schema, cfg.max_message_bytes).decode(value[offset:])
        return EventValidator(cfg, Contract.of(matrix_signature(n))).to_record(payload, "t", 0, at, None, 1234)
    except RecordError as exc:
        return exc


def check(values: Sequence[bytes | None], schema: dict[str, Any], cfg: InputConfig, n: int,
          offset: int = 0) -> tuple[DecodedColumns, list[SourceRecord | RecordError]]:
    """Decode with both paths; every accepted row must equal the reference's record exactly."""
    decoder = ColumnarDecoder.compile(schema, cfg, n)
    assert decoder is not None
    cols = decoder.decode(values, offset)
    refs = [reference(v, schema, cfg, n, offset, i) for i, v in enumerate(values)]
    assert sorted(cols.rows.tolist() + cols.fallback.tolist()) == list(range(len(values)))
    assert cols.features.dtype == np.float32 and cols.features.shape == (len(cols.rows), n)
    assert cols.event_times.dtype == np.int64
    for j, i in enumerate(cols.rows.tolist()):
        ref = refs[i]
        assert isinstance(ref, SourceRecord), f"row {i} accepted, reference says {ref!r}"
        assert (cols.event_ids[j], cols.entity_ids[j], int(cols.event_times[j])) == (
            ref.event_id, ref.entity_id, ref.event_time_ms)
        assert cols.features[j].tobytes() == ref.features.tobytes()  # -0.0 and every bit
    return cols, refs


# ---- decoding: fixed cases, one per trap -------------------------------------------------------------

def shipped(event_id: bytes = b"evt-1", entity: bytes = b"acct-42", time: bytes = zigzag(1764417600000),
            features: bytes = zigzag(4) + struct.pack("<4f", 0.5, -1.25, 2.0, 0.0) + b"\0") -> bytes:
    return zigzag(len(event_id)) + event_id + zigzag(len(entity)) + entity + time + features


def test_golden_event_decodes_as_the_reference() -> None:
    assert shipped() == GOLDEN_AVRO
    cols, _ = check([GOLDEN_AVRO], FEATURES, config(), 4)
    assert cols.rows.tolist() == [0] and cols.event_ids == ["evt-1"] and cols.entity_ids == ["acct-42"]
    assert cols.event_times.tolist() == [1764417600000]
    assert cols.features.tolist() == [[0.5, -1.25, 2.0, 0.0]]


def test_synthetic_events_all_take_the_fast_path() -> None:
    codec = AvroCodec(FEATURES)
    values = [codec.encode(e) for e in synthetic_events(500, 32)]
    cols, _ = check(values, FEATURES, config(), 32)
    assert len(cols.rows) == 500 and len(cols.fallback) == 0


FLOATS4 = struct.pack("<4f", 0.5, -1.25, 2.0, 0.0)
TRAPS: dict[str, tuple[bytes | None, bool]] = {  # name: (message, whether the fast path takes it)
    "plain": (shipped(), True),
    "tombstone": (None, False),
    "non-ascii id": (shipped(event_id="évènement-☃".encode()), True),
    "invalid utf-8 id": (shipped(event_id=b"evt-\xff"), False),
    "surrogate in utf-8": (shipped(entity=b"\xed\xa0\x80"), False),
    "non-minimal varint": (shipped(time=b"\x80\x00"), True),
    "11-byte varint": (shipped(time=b"\x80" * 10 + b"\x00"), False),
    "10th byte overflows": (shipped(time=b"\xff" * 9 + b"\x02"), False),
    "10-byte varint, max": (shipped(time=zigzag(-2**63)), True),
    "negative block count": (shipped(features=zigzag(-4) + zigzag(16) + FLOATS4 + b"\0"), False),
    "two blocks": (shipped(features=zigzag(2) + FLOATS4[:8] + zigzag(2) + FLOATS4[8:] + b"\0"), False),
    "wrong count": (shipped(features=zigzag(3) + FLOATS4[:12] + b"\0"), False),
    "empty array": (shipped(features=b"\0"), False),
    "length past the end": (zigzag(200) + shipped()[1:], False),
    "negative length": (b"\x01" + shipped()[1:], False),
    "truncated": (shipped()[:-3], False),
    "trailing byte": (shipped() + b"\0", False),
    "no closing count": (shipped()[:-1], False),
    "bad closing count": (shipped()[:-1] + b"\x02", False),
    "negative count, no size": (shipped(features=zigzag(-4) + FLOATS4 + b"\0"), False),
    "nan": (shipped(features=zigzag(4) + struct.pack("<4f", 0.5, float("nan"), 2.0, 0.0) + b"\0"), False),
    "inf": (shipped(features=zigzag(4) + struct.pack("<4f", 0.5, float("-inf"), 2.0, 0.0) + b"\0"), False),
    "negative zero": (shipped(features=zigzag(4) + struct.pack("<4f", -0.0, -0.0, 2.0, 0.0) + b"\0"), True),
    "above feature_max": (shipped(features=zigzag(4) + struct.pack("<4f", 0.5, 9, 2, 0) + b"\0"), False),
    "empty": (b"", False),
}


@pytest.mark.parametrize("name", list(TRAPS))
def test_each_trap_is_decoded_exactly_or_left_to_the_reference(name: str) -> None:
    value, fast = TRAPS[name]
    cols, refs = check([shipped(), value, shipped()], FEATURES, config(-10.0, 5.0), 4)
    assert (1 in cols.rows.tolist()) == fast, refs[1]
    assert cols.rows.tolist()[0] == 0 and cols.rows.tolist()[-1] == 2  # neighbours unaffected


def test_empty_chunks_and_chunks_of_tombstones() -> None:
    decoder = ColumnarDecoder.compile(FEATURES, config(), 4)
    assert decoder is not None
    empty = decoder.decode([])
    assert empty.rows.size == 0 and empty.fallback.size == 0 and empty.features.shape == (0, 4)
    assert decoder.decode([None, b"", None]).fallback.tolist() == [0, 1, 2]


def test_oversized_messages_are_left_to_the_reference() -> None:
    bigger = shipped(event_id=b"evt-123")
    cols, refs = check([GOLDEN_AVRO, bigger], FEATURES, config(max_bytes=len(GOLDEN_AVRO)), 4)
    assert cols.rows.tolist() == [0] and isinstance(refs[1], DeserializeError)
    assert len(check([bigger], FEATURES, config(), 4)[0].rows) == 1


def test_confluent_framing_is_skipped_by_offset() -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    registry = SchemaRegistryClient.new_client({"url": "mock://columnar"})
    codec = ConfluentAvroCodec(registry, "t-value", FEATURES)
    events = synthetic_events(20, 4)
    values = [codec.encode(e) for e in events]
    decoder = ColumnarDecoder.compile(FEATURES, config(), 4)
    assert decoder is not None
    cols = decoder.decode(values, offset_of_payload=5)
    assert len(cols.rows) == 20
    for j, payload in enumerate(map(codec.decode, values)):
        assert cols.event_ids[j] == payload["event_id"] and cols.features[j].tolist() == payload["features"]
    cols, _ = check([values[0][:3], values[0]], FEATURES, config(), 4, offset=5)
    assert cols.rows.tolist() == [1]


@pytest.mark.parametrize("schema,cfg,n", [
    ({"type": "record", "name": "R", "fields": [  # no event_id: its default needs the coordinates
        {"name": "features", "type": {"type": "array", "items": "float"}},
        {"name": "event_time", "type": "long"}]}, config(), 4),
    (FEATURES, InputConfig(topics=("t",), group_id="g", schema=SCHEMAS / "feature_event.avsc",
                           time_field="event_id"), 4),
    ({**FEATURES, "fields": FEATURES["fields"] + [  # a recursive record
        {"name": "next", "type": ["null", "streamer.FeatureEvent"]}]}, config(), 4),
    ({**FEATURES, "fields": [{"name": "features", "type": {"type": "array", "items": "long"}}]
      + FEATURES["fields"][:3]}, config(), 4),
    (FEATURES, config(), 0),
    ({"type": "string"}, config(), 4),
])
def test_layouts_it_does_not_walk_compile_to_none(schema: dict[str, Any], cfg: InputConfig, n: int) -> None:
    assert ColumnarDecoder.compile(schema, cfg, n) is None


def unions(event_id: bytes = b"\0" + zigzag(1) + b"e",
           features: bytes = b"\0" + zigzag(1) + struct.pack("<d", 0.5) + b"\0",
           time: bytes = b"\0" + zigzag(7)) -> bytes:
    return event_id + features + time


UNION_TRAPS: dict[str, tuple[bytes, bool]] = {  # name: (message, whether the fast path takes it)
    "plain": (unions(), True),
    "long id": (unions(event_id=zigzag(2) + zigzag(-7)), True),
    "null id": (unions(event_id=zigzag(1)), True),
    "id index -1 (fastavro wraps)": (unions(event_id=zigzag(-1) + zigzag(7)), False),
    "id index 3": (unions(event_id=zigzag(3) + zigzag(7)), False),
    "null features": (unions(features=zigzag(1)), False),
    "features index -1": (unions(features=zigzag(-1)), False),
    "string time": (unions(time=zigzag(1) + zigzag(1) + b"7"), False),
    "null time": (unions(time=zigzag(2)), False),
    "time index -1": (unions(time=zigzag(-1)), False),
    "time index 3": (unions(time=zigzag(3)), False),
}


@pytest.mark.parametrize("name", list(UNION_TRAPS))
def test_unions_on_the_roles_are_decoded_exactly_or_left_to_the_reference(name: str) -> None:
    value, fast = UNION_TRAPS[name]
    cols, refs = check([unions(), value], UNIONS, config(), 1)
    assert (1 in cols.rows.tolist()) == fast, refs[1]


SKIPPED = {"type": "record", "name": "Skipped", "fields": [
    {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B", "C"]}},
    {"name": "note", "type": "string"},
    {"name": "flag", "type": "boolean"},
    {"name": "weights", "type": {"type": "array", "items": "double"}},
    {"name": "features", "type": {"type": "array", "items": "float"}},
    {"name": "event_id", "type": "string"},
    {"name": "event_time", "type": "long"},
]}


def skipped(kind: bytes = zigzag(2), note: bytes = zigzag(2) + b"ok", flag: bytes = b"\1",
            weights: bytes = zigzag(1) + struct.pack("<d", 2.5) + b"\0") -> bytes:
    features = zigzag(1) + struct.pack("<f", 1.0) + b"\0"
    return kind + note + flag + weights + features + zigzag(1) + b"e" + zigzag(9)


SKIPPED_TRAPS: dict[str, tuple[bytes, bool]] = {  # name: (message, whether the fast path takes it)
    "plain": (skipped(), True),
    "enum out of range": (skipped(kind=zigzag(3)), False),
    "enum -1 (fastavro wraps)": (skipped(kind=zigzag(-1)), False),
    "note not utf-8": (skipped(note=zigzag(2) + b"\xc3("), False),
    "note past the end": (skipped(note=zigzag(90) + b"ok"), False),
    "boolean 7 (fastavro reads True)": (skipped(flag=b"\7"), True),
    "no weights": (skipped(weights=b"\0"), True),
    "weights in two blocks": (skipped(weights=zigzag(1) + bytes(8) + zigzag(1) + bytes(8) + b"\0"), False),
    "weights, negative count": (skipped(weights=zigzag(-1) + zigzag(8) + bytes(8) + b"\0"), False),
}


@pytest.mark.parametrize("name", list(SKIPPED_TRAPS))
def test_skipped_fields_are_checked_as_fastavro_reads_them(name: str) -> None:
    value, fast = SKIPPED_TRAPS[name]
    cols, refs = check([skipped(), value], SKIPPED, config(), 1)
    assert (1 in cols.rows.tolist()) == fast, refs[1]


def test_an_absent_entity_field_defaults_to_empty() -> None:
    fields = [f for f in FEATURES["fields"] if f["name"] != "entity_id"]
    schema = {"type": "record", "name": "R", "fields": fields}
    value = zigzag(5) + b"evt-1" + zigzag(7) + zigzag(1) + struct.pack("<f", 1.0) + b"\0"
    cols, _ = check([value], schema, config(), 1)
    assert cols.entity_ids == [""]


# ---- decoding: randomised, hostile messages ---------------------------------------------------------

SPECIAL_F32 = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 3.4028234663852886e38, 1e-45, 0.1,
               0.30000001192092896, 0.30000004172325134, 1.0, 1.0000001192092896, -1.0, -1.0000001192092896,
               2.0, -2.0, 0.9999999403953552]


# Strategies built once: a strategy made per drawn value costs more than the test itself.
ANY_LONG = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-5, 5))
SMALL_FLOAT = st.floats(-1.5, 1.5, width=32)
ANY_FLOAT = st.floats(width=32)
TEXT_BYTES = st.text(max_size=6).map(str.encode)
ANY_BYTES = st.one_of(TEXT_BYTES, st.binary(max_size=6))
BYTE = st.integers(0, 255)
HIGH_BYTE = st.integers(0x80, 0xFF)
OVERFLOW_BYTE = st.integers(2, 0x7F)
VARINT_STYLE = st.sampled_from(["plain", "padded", "overlong", "overflow"])
SIZE_DELTA = st.sampled_from([0, -1, 1, 100, -100])
ARRAY_SHAPE = st.sampled_from(["plain", "negative", "unsized", "split", "no end", "long end", "bad end"])
FLOAT_KIND = st.integers(0, 9)  # Hypothesis favours small draws: 0 is the usual case
SPECIAL = st.sampled_from(SPECIAL_F32)
BINARY = {w: st.binary(min_size=w, max_size=w) for w in (3, 4, 8)}


def varint(draw: st.DrawFn, n: int, hostile: bool) -> tuple[bytes, bool]:
    """``n`` as a varint: canonical; or, when hostile, maybe padded, too long or overflowing (not plain)."""
    style = draw(VARINT_STYLE) if hostile else "plain"
    canonical = zigzag(n)
    if style == "plain":
        return canonical, True
    if style == "padded":
        pad = draw(st.integers(1, 10 - len(canonical) if len(canonical) < 10 else 1))
        return canonical[:-1] + bytes([canonical[-1] | 0x80]) + b"\x80" * (pad - 1) + b"\0", False
    if style == "overlong":
        return b"\x80" * draw(st.integers(10, 12)) + b"\0", False
    return bytes([draw(HIGH_BYTE) for _ in range(9)]) + bytes([draw(OVERFLOW_BYTE)]), False


def float_bits(draw: st.DrawFn, width: int) -> bytes:
    """Mostly a small number (most rows must pass validation to test much); else anything."""
    kind = draw(FLOAT_KIND)
    if kind == 7:
        x = draw(SPECIAL)
    elif kind == 8:
        x = draw(ANY_FLOAT)
    elif kind == 9:
        return draw(BINARY[width])  # any bits: signalling NaNs, subnormals
    else:
        x = draw(SMALL_FLOAT)
    return struct.pack("<f" if width == 4 else "<d", x)


def index(draw: st.DrawFn, size: int, hostile: bool) -> int:
    """A union branch or enum symbol: in range, or, when hostile, maybe not."""
    if hostile and draw(st.booleans()):
        return draw(st.sampled_from([-1, size, 2**40]))
    return draw(st.integers(0, size - 1))


def encoded(draw: st.DrawFn, t: Any, named: dict[str, Any], n: int, role: str,
            hostile: bool) -> tuple[bytes, bool]:
    """Bytes for a value of type ``t``, and whether they are plain (canonical, no trap on purpose).

    Only a hostile value may hold a trap; any value, plain or not, may fail validation.
    """
    if isinstance(t, list):
        i = index(draw, len(t), hostile)
        head, plain = varint(draw, i, hostile)
        if not 0 <= i < len(t):
            return head, False
        body, plain2 = encoded(draw, t[i], named, n, role, hostile)
        return head + body, plain and plain2
    if isinstance(t, str) and t in named:
        t = named[t]
    kind = t if isinstance(t, str) else t["type"]
    if isinstance(t, dict) and kind in ("enum", "fixed"):
        named[t["name"]] = named[f"test.{t['name']}"] = t
    if kind == "null":
        return b"", True
    if kind == "boolean":
        return bytes([draw(BYTE)]), True
    if kind in ("int", "long"):
        return varint(draw, draw(ANY_LONG), hostile)
    if kind in ("float", "double"):
        return float_bits(draw, 4 if kind == "float" else 8), True
    if kind in ("string", "bytes"):
        raw = draw(ANY_BYTES if hostile else TEXT_BYTES)
        size = len(raw) + (draw(SIZE_DELTA) if hostile else 0)
        head, plain = varint(draw, size, hostile)
        return head + raw, plain and size == len(raw) and (kind == "bytes" or _utf8(raw))
    if kind == "enum":
        i = index(draw, len(t["symbols"]), hostile)
        head, plain = varint(draw, i, hostile)
        return head, plain and 0 <= i < len(t["symbols"])
    if kind == "fixed":
        return draw(BINARY[t["size"]]), True
    width = 4 if t["items"] == "float" else 8
    count = (n if role == "features" else draw(st.integers(0, 3))) + (
        draw(st.sampled_from([0, -1, 1, -n])) if hostile else 0)
    body = b"".join(float_bits(draw, width) for _ in range(max(count, 0)))
    shape = draw(ARRAY_SHAPE) if hostile else "plain"
    if shape == "negative" and count > 0:
        return zigzag(-count) + zigzag(len(body)) + body + b"\0", False
    if shape == "unsized" and count > 0:  # a negative count without its byte size
        return zigzag(-count) + body + b"\0", False
    if shape == "split" and count > 1:
        a = draw(st.integers(1, count - 1)) * width
        return zigzag(a // width) + body[:a] + zigzag(count - a // width) + body[a:] + b"\0", False
    end = {"no end": b"", "long end": b"\x80\x00", "bad end": b"\x02"}.get(shape, b"\0") if count > 0 else b""
    head, plain = varint(draw, count, hostile)
    return head + body + end, plain and shape == "plain" and count >= 0


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode()
        return True
    except UnicodeDecodeError:
        return False


@st.composite
def message(draw: st.DrawFn, schema: dict[str, Any], n: int, traps: bool = True) -> tuple[bytes | None, bool]:
    """A message whose fields are plain but for at most one, which may hold a trap; maybe mutated."""
    if traps and draw(st.integers(0, 30)) == 30:
        return None, False
    named: dict[str, Any] = {}
    fields = schema["fields"]
    trap = draw(st.one_of(st.just(-1), st.integers(0, len(fields) - 1))) if traps else -1
    parts = [encoded(draw, f["type"], named, n, f["name"], i == trap) for i, f in enumerate(fields)]
    value, plain = b"".join(p for p, _ in parts), all(ok for _, ok in parts)
    mutation = draw(st.sampled_from(["none"] * 12 + ["truncate", "append", "flip"])) if traps else "none"
    if mutation == "truncate" and value:
        return value[:draw(st.integers(0, len(value) - 1))], False
    if mutation == "append":
        return value + draw(st.binary(min_size=1, max_size=3)), False
    if mutation == "flip" and value:
        i = draw(st.integers(0, len(value) - 1))
        return value[:i] + bytes([draw(st.integers(0, 255))]) + value[i + 1:], False
    return value, plain


@st.composite
def chunk(draw: st.DrawFn) -> tuple[dict[str, Any], InputConfig, int, list[bytes | None], list[bool]]:
    schema = draw(st.sampled_from([FEATURES, EXTRAS, UNIONS]))
    n = draw(st.integers(1, 5))
    lo, hi = draw(st.sampled_from(BOUNDS))
    cfg = config(lo, hi, draw(st.sampled_from([1_048_576] * 5 + [80])))
    drawn = draw(st.lists(message(schema, n), min_size=1, max_size=6))
    return schema, cfg, n, [v for v, _ in drawn], [p for _, p in drawn]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # the validator's, on huge doubles
@PROPERTY
@given(chunk())
def test_fast_decoding_agrees_with_the_reference_or_steps_aside(drawn: Any) -> None:
    schema, cfg, n, values, plain = drawn
    cols, refs = check(values, schema, cfg, n)
    for i, ref in enumerate(refs):  # and it does step aside only for the unusual
        if plain[i] and isinstance(ref, SourceRecord) and len(values[i] or b"") <= cfg.max_message_bytes:
            assert i in cols.rows, f"a plain row the reference accepts went to fallback: {values[i]!r}"


@PROPERTY
@given(st.integers(1, 6), st.data())
def test_plain_shipped_events_take_the_fast_path(n: int, data: st.DataObject) -> None:
    plain = message(FEATURES, n, traps=False).map(lambda m: m[0])
    values = data.draw(st.lists(plain, min_size=1, max_size=8))
    cols, refs = check(values, FEATURES, config(), n)
    assert cols.fallback.tolist() == [i for i, r in enumerate(refs) if not isinstance(r, SourceRecord)]


@PROPERTY
@given(st.sampled_from(BOUNDS), st.lists(st.sampled_from(SPECIAL_F32) | st.floats(-3, 3, width=32),
                                         min_size=1, max_size=4))
def test_feature_bounds_match_the_validator_at_every_edge(bounds: tuple[Any, Any], xs: list[float]) -> None:
    cfg = config(*bounds)
    value = shipped(features=zigzag(len(xs)) + struct.pack(f"<{len(xs)}f", *xs) + b"\0")
    cols, refs = check([value], FEATURES, cfg, len(xs))
    assert (len(cols.rows) == 1) == isinstance(refs[0], SourceRecord)


# ---- encoding ---------------------------------------------------------------------------------------

def stamp_of(common: dict[str, Any]) -> Stamp:
    """The stamp of ``common``'s fields; a ``model_digest`` of None: the schema has no field for it."""
    digest = common.get("model_digest", "")
    return Stamp(ModelId(common["model_name"], common["model_version"], digest or ""), common["scored_at_ms"],
                 common.get("run_id"), common.get("degraded"), with_digest=digest is not None)


def reference_encode(codec: AvroCodec, row: dict[str, Any], scores: np.ndarray,
                     common: dict[str, Any]) -> bytes | None:
    """What encode_batch gives for one row: the value, or None where it raises SerializeError."""
    record = SourceRecord(topic=row["topic"], partition=row["partition"], offset=row["offset"], key=None,
                          event_id=row["event_id"], entity_id=row["entity_id"], event_time_ms=row["time"],
                          timestamp_ms=0, features=np.zeros(1, np.float32))
    try:
        return codec.encode(prediction_fields(record, {"scores": scores.tolist()}, stamp_of(common)))
    except SerializeError:
        return None


def encoder() -> PredictionEncoder:
    compiled = PredictionEncoder.compile(PREDICTION)
    assert compiled is not None
    return compiled


def test_golden_prediction() -> None:
    scores = np.array([[0.5, -1.0]], np.float32)
    got = encoder().encode(["evt-1"], ["acct-42"], scores, "model", "7", "features", [2], [41],
                           [1764417600000], 1764417600123, None, model_digest="0123456789ab")
    want = bytes.fromhex("0a6576742d310e616363742d3432040000003f000080bf00" "0a6d6f64656c0237"
                         "18303132333435363738396162"  # model_digest: 12 characters
                         "106665617475726573" "0452" "80e8dff7d966" "f6e9dff7d966" "00" "0000")
    assert got == [want]
    row = {"event_id": "evt-1", "entity_id": "acct-42", "topic": "features", "partition": 2, "offset": 41,
           "time": 1764417600000}
    assert want == reference_encode(AvroCodec(PREDICTION), row, np.array([0.5, -1.0], np.float32), {
        "model_name": "model", "model_version": "7", "scored_at_ms": 1764417600123, "run_id": None,
        "model_digest": "0123456789ab"})


def test_signalling_nan_scores_come_out_quiet_as_fastavro_writes_them() -> None:
    scores = np.array([[0x7F800001, 0xFFBFFFFF, 0x7FC00001]], np.uint32).view(np.float32)
    got = encoder().encode(["e"], [""], scores, "m", "1", "t", [0], [0], [0], 0, "run")
    row = {"event_id": "e", "entity_id": "", "topic": "t", "partition": 0, "offset": 0, "time": 0}
    want = reference_encode(codec(PREDICTION), row, scores[0],
                            {"model_name": "m", "model_version": "1", "scored_at_ms": 0, "run_id": "run"})
    assert got == [want] and want is not None
    assert want[4:16] == struct.pack("<3I", 0x7FC00001, 0xFFFFFFFF, 0x7FC00001)


@pytest.mark.parametrize("change", ["order", "run_id", "scores", "extra", "logical", "digest"])
def test_other_prediction_layouts_compile_to_none(change: str) -> None:
    fields = [dict(f) for f in PREDICTION["fields"]]
    named = {f["name"]: f for f in fields}
    if change == "order":
        fields[0], fields[1] = fields[1], fields[0]
    elif change == "run_id":
        named["run_id"]["type"] = ["string", "null"]
    elif change == "scores":
        fields[2]["type"] = {"type": "array", "items": "double"}
    elif change == "extra":
        fields.append({"name": "x", "type": "long"})
    elif change == "digest":
        named["model_digest"]["type"] = ["null", "string"]
    else:
        named["event_time"]["type"] = {"type": "long", "logicalType": "timestamp-micros"}
    assert PredictionEncoder.compile({"type": "record", "name": "P", "fields": fields}) is None


TEXT = st.text(st.one_of(st.characters(), st.sampled_from(["\ud800", "\udfff", "é", "☃", "\0"])), max_size=8)
LONG = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-3, 300), st.integers(-(2**70), 2**70))


@st.composite
def predictions(draw: st.DrawFn) -> tuple[list[dict[str, Any]], np.ndarray, dict[str, Any], bool]:
    k = draw(st.integers(0, 6))
    n_out = draw(st.integers(0, 4))
    rows = [{"event_id": draw(TEXT), "entity_id": draw(TEXT), "topic": draw(TEXT),
             "partition": draw(st.integers(-(2**31), 2**40)), "offset": draw(LONG), "time": draw(LONG)}
            for _ in range(k)]
    specials = st.sampled_from([0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FC00000, 0x80000000, 0x7F800000])
    bits = draw(st.lists(st.integers(0, 2**32 - 1) | specials, min_size=k * n_out, max_size=k * n_out))
    scores = np.array(bits, np.uint32).view(np.float32).reshape(k, n_out)  # NaNs of every kind, -0.0, inf
    common = {"model_name": draw(TEXT), "model_version": draw(TEXT), "scored_at_ms": draw(LONG),
              "run_id": draw(st.none() | TEXT), "degraded": draw(st.none() | TEXT),
              "model_digest": draw(st.none() | TEXT)}
    return rows, scores, common, draw(st.booleans())


def without(schema: dict[str, Any], *names: str) -> dict[str, Any]:
    return {**schema, "fields": [f for f in schema["fields"] if f["name"] not in names]}


@PROPERTY
@given(predictions(), st.booleans(), st.booleans(), st.booleans())
def test_fast_encoding_is_byte_identical_to_fastavro(drawn: Any, per_row_topics: bool, no_digest: bool,
                                                     no_degraded: bool) -> None:
    """The shipped layout, and a user's copy of an older one without model_digest or without the
    degraded fields: fastavro leaves them out, and so must the fast path. A None digest is the
    field's default (""); a digest for a schema without the field is refused by both."""
    rows, scores, common, as_arrays = drawn
    if not per_row_topics:
        rows = [{**r, "topic": "the-topic"} for r in rows]
    schema = PREDICTION
    if no_digest:
        schema = without(schema, "model_digest")
    if no_degraded:
        schema = without(schema, "degraded", "degraded_reason")
    want = [reference_encode(codec(schema), r, scores[i], common) for i, r in enumerate(rows)]
    fast = PredictionEncoder.compile(schema)
    assert fast is not None and fast.degraded_fields is not no_degraded and fast.digest_field is not no_digest

    def column(key: str) -> Any:
        values = [r[key] for r in rows]
        fits = all(-(2**63) <= v < 2**63 for v in values)
        return np.array(values, np.int64) if as_arrays and fits else values

    got = fast.encode([r["event_id"] for r in rows], [r["entity_id"] for r in rows], scores,
                      common["model_name"], common["model_version"],
                      [r["topic"] for r in rows] if per_row_topics else "the-topic",
                      column("partition"), column("offset"), column("time"), common["scored_at_ms"],
                      common["run_id"], common["degraded"], common["model_digest"])
    assert got == want


def test_rows_with_very_long_strings_are_left_to_the_reference() -> None:
    ids = ["a" * 5000, "b", "é" * 2100, "c"]
    got = encoder().encode(ids, ["x"] * 4, np.ones((4, 1), np.float32), "m", "1", "t", [0] * 4, [1] * 4,
                           [2] * 4, 3)
    common = {"model_name": "m", "model_version": "1", "scored_at_ms": 3, "run_id": None}
    rows = [{"event_id": e, "entity_id": "x", "topic": "t", "partition": 0, "offset": 1, "time": 2}
            for e in ids]
    want = [reference_encode(codec(PREDICTION), row, np.ones(1, np.float32), common) for row in rows]
    assert got == [None, want[1], None, want[3]] and None not in want
    one = np.ones((1, 1), np.float32)
    assert encoder().encode(["e"], ["x"], one, "m" * 5000, "1", "t", [0], [1], [2], 3) == [None]


def test_encoder_refuses_columns_of_unequal_length() -> None:
    with pytest.raises(ValueError):
        encoder().encode(["a", "b"], ["x", "y"], np.zeros((1, 1), np.float32), "m", "1", "t", [0, 0], [0, 0],
                       [0, 0], 0)
