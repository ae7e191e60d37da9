"""streamer.formats (avro, confluent, json_events, varint): round trips, golden bytes, bad and hostile input."""

from __future__ import annotations

import contextlib
import io
import json
import random
import struct
import time
import tracemalloc
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from streamer.errors import BrokerError, ConfigError, DeserializeError, SerializeError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.codec import Codec
from streamer.formats.confluent import ConfluentAvroCodec
from streamer.formats.json_events import JsonCodec

SCHEMAS = Path(__file__).resolve().parents[2] / "streamer" / "schemas"

# A small event whose encodings are pinned byte for byte below.
GOLDEN_EVENT = {
    "event_id": "evt-1",
    "entity_id": "acct-42",
    "event_time": 1764417600000,
    "features": [0.5, -1.25, 2.0, 0.0],
}
GOLDEN_AVRO = bytes.fromhex("0a6576742d310e616363742d343280e8dff7d966080000003f0000a0bf000000400000000000")
# Confluent framing: magic byte 0x00, schema id 1 as 4 big-endian bytes, then exactly the plain Avro body.
GOLDEN_CONFLUENT = bytes.fromhex(
    "00000000010a6576742d310e616363742d343280e8dff7d966080000003f0000a0bf000000400000000000"
)
GOLDEN_JSON = (
    b'{"event_id":"evt-1","entity_id":"acct-42","event_time":1764417600000,"features":[0.5,-1.25,2.0,0.0]}'
)


def zigzag(n: int) -> bytes:
    """Avro's zigzag varint encoding of ``n``."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def registry() -> SchemaRegistryClient:
    # In confluent-kafka 2.16.1 the plain constructor sends mock:// URLs over HTTP and fails;
    # new_client is the factory that returns the in-memory MockSchemaRegistryClient for them.
    return SchemaRegistryClient.new_client({"url": "mock://test"})


@pytest.fixture(scope="module")
def feature_schema() -> dict[str, Any]:
    return load_schema(SCHEMAS / "feature_event.avsc")


@pytest.fixture
def event() -> dict[str, Any]:
    return {
        "event_id": "e-77",
        "entity_id": "card-9",
        "event_time": 1764417600123,
        "features": [i * 0.25 for i in range(32)],
    }


def counting(reg: SchemaRegistryClient) -> list[int]:
    """Count (by id) the get_schema calls that reach ``reg``."""
    asked: list[int] = []
    real = reg.get_schema

    def get_schema(schema_id: int, *args: Any, **kwargs: Any) -> Any:
        asked.append(schema_id)
        return real(schema_id, *args, **kwargs)

    reg.get_schema = get_schema  # type: ignore[method-assign]
    return asked


# --- round trips and golden bytes -------------------------------------------------------------


def test_each_codec_round_trips_a_feature_event(
    feature_schema: dict[str, Any], event: dict[str, Any]
) -> None:
    codecs: list[Codec] = [
        AvroCodec(feature_schema),
        ConfluentAvroCodec(registry(), "f-value", feature_schema),
        JsonCodec(),
    ]
    for codec in codecs:
        decoded = codec.decode(codec.encode(event))
        assert decoded == event, type(codec).__name__
        assert type(decoded["event_time"]) is int, type(codec).__name__  # int ms, never a datetime


def test_plain_avro_golden_bytes(feature_schema: dict[str, Any]) -> None:
    codec = AvroCodec(feature_schema)
    assert codec.encode(GOLDEN_EVENT) == GOLDEN_AVRO
    assert codec.decode(GOLDEN_AVRO) == GOLDEN_EVENT


def test_confluent_framing_golden_bytes(feature_schema: dict[str, Any]) -> None:
    reg = registry()
    codec = ConfluentAvroCodec(reg, "features-value", feature_schema)
    assert codec.encode(GOLDEN_EVENT) == GOLDEN_CONFLUENT
    assert codec.encode(GOLDEN_EVENT) == GOLDEN_CONFLUENT  # the id is cached, not registered anew
    assert reg.get_latest_version("features-value").schema_id == 1
    # A decode-only codec (no schema) reads with the writer schema the id names.
    assert ConfluentAvroCodec(reg, "features-value").decode(GOLDEN_CONFLUENT) == GOLDEN_EVENT


def test_registered_schema_keeps_logical_types_and_docs(feature_schema: dict[str, Any]) -> None:
    reg = registry()
    ConfluentAvroCodec(reg, "features-value", feature_schema).encode(GOLDEN_EVENT)
    registered = json.loads(reg.get_schema(1).schema_str or "")
    event_time = next(f for f in registered["fields"] if f["name"] == "event_time")
    assert event_time["type"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert event_time["doc"] and "__fastavro_parsed" not in registered


def test_json_golden_bytes_and_numpy_values() -> None:
    codec = JsonCodec()
    assert codec.encode(GOLDEN_EVENT) == GOLDEN_JSON
    as_numpy = {**GOLDEN_EVENT, "features": np.array(GOLDEN_EVENT["features"], dtype=np.float32)}
    assert codec.encode(as_numpy) == GOLDEN_JSON


def test_prediction_schema_round_trip() -> None:
    codec = AvroCodec(load_schema(SCHEMAS / "prediction.avsc"))
    prediction = {
        "event_id": "e-1",
        "entity_id": "acct-1",
        "scores": [0.75],
        "model_name": "fraud_mlp",
        "model_version": "1",
        "source_topic": "features",
        "source_partition": 3,
        "source_offset": 2**40,
        "event_time": 1764417600000,
        "scored_at": 1764417600042,
    }
    # run_id and model_digest are optional with a default: a record without them still encodes.
    assert codec.decode(codec.encode(prediction)) == {**prediction, "model_digest": "", "run_id": None,
                                                      "degraded": False, "degraded_reason": None}
    replayed = {**prediction, "model_digest": "0123456789ab", "run_id": "backfill-7", "degraded": True,
                "degraded_reason": "breaker open"}
    assert codec.decode(codec.encode(replayed)) == replayed


def test_prediction_schema_is_backward_compatible() -> None:
    """Predictions written before run_id and model_digest existed read with today's schema
    (run_id null, model_digest empty)."""
    new = load_schema(SCHEMAS / "prediction.avsc")
    old = fastavro.parse_schema({**new, "fields": [f for f in new["fields"]
                                                   if f["name"] not in ("run_id", "model_digest")]})
    old_record = {"event_id": "e", "entity_id": "a", "scores": [0.5], "model_name": "m",
                  "model_version": "1", "source_topic": "t", "source_partition": 0,
                  "source_offset": 1, "event_time": 2, "scored_at": 3}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old, old_record)
    buf.seek(0)
    read = fastavro.schemaless_reader(buf, old, new)
    assert read["run_id"] is None and read["model_digest"] == ""


# --- schemas ----------------------------------------------------------------------------------


def test_load_schema_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as missing:
        load_schema(tmp_path / "nope.avsc", key="input.schema")
    assert missing.value.key == "input.schema"
    (tmp_path / "bad.avsc").write_text(
        '{"type": "record", "name": "R", "fields": [{"name": "x", "type": "nope"}]}'
    )
    with pytest.raises(ConfigError, match="not a valid Avro schema"):
        load_schema(tmp_path / "bad.avsc")
    (tmp_path / "notjson.avsc").write_text("{type: record")
    with pytest.raises(ConfigError):
        load_schema(tmp_path / "notjson.avsc")


# --- bad input --------------------------------------------------------------------------------


def test_every_truncation_of_avro_is_a_deserialize_error(feature_schema: dict[str, Any]) -> None:
    codec = AvroCodec(feature_schema)
    for cut in range(len(GOLDEN_AVRO)):
        with pytest.raises(DeserializeError):
            codec.decode(GOLDEN_AVRO[:cut])


def test_trailing_bytes_are_rejected(feature_schema: dict[str, Any]) -> None:
    with pytest.raises(DeserializeError, match="1 bytes after the record"):
        AvroCodec(feature_schema).decode(GOLDEN_AVRO + b"\x00")


def test_wrong_magic_byte_and_short_frames(feature_schema: dict[str, Any]) -> None:
    codec = ConfluentAvroCodec(registry(), "features-value", feature_schema)
    with pytest.raises(DeserializeError, match="wrong magic byte"):
        codec.decode(b"\x01" + GOLDEN_CONFLUENT[1:])
    for short in (b"", b"\x00\x00\x00\x01"):
        with pytest.raises(DeserializeError, match="at least 5"):
            codec.decode(short)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_unknown_schema_id_is_held_then_rejected_and_not_asked_again(feature_schema: dict[str, Any]) -> None:
    reg = registry()
    ConfluentAvroCodec(reg, "features-value", feature_schema).encode(GOLDEN_EVENT)  # id 1 exists
    asked = counting(reg)
    clock = Clock()
    codec = ConfluentAvroCodec(reg, "features-value", not_found_retry_s=10, clock=clock)
    unknown = b"\x00\x00\x00\x00\x63" + GOLDEN_AVRO  # schema id 99
    for t in (0, 4, 9.9):  # a registry still loading answers 404: held, asked again each time
        clock.t = 1000 + t
        with pytest.raises(BrokerError, match="schema id 99 not found; asked again for up to 10s"):
            codec.decode(unknown)
    clock.t = 1010
    for _ in range(3):
        with pytest.raises(DeserializeError, match="schema id 99 is not in the schema registry"):
            codec.decode(unknown)
    for _ in range(3):
        assert codec.decode(GOLDEN_CONFLUENT) == GOLDEN_EVENT
    assert asked == [99, 99, 99, 99, 1]  # then one lookup per id: the miss and the hit are both cached


def restarting(reg: SchemaRegistryClient) -> list[bool]:
    """Make ``reg`` answer 404 for every id, as a registry still loading does, while the returned
    flag's one item is True."""
    real, loading = reg.get_schema, [True]

    def get_schema(schema_id: int, *args: Any, **kwargs: Any) -> Any:
        if loading[0]:
            raise SchemaRegistryError(404, 40403, "Schema not found")
        return real(schema_id, *args, **kwargs)

    reg.get_schema = get_schema  # type: ignore[method-assign]
    return loading


def test_an_id_the_restarting_registry_answers_404_for_is_decoded_once_it_has_loaded(
        feature_schema: dict[str, Any]) -> None:
    """The data-losing case: a registry that restarts answers 404 for ids it holds while it loads."""
    reg = registry()
    ConfluentAvroCodec(reg, "features-value", feature_schema).encode(GOLDEN_EVENT)
    loading = restarting(reg)
    clock = Clock()
    codec = ConfluentAvroCodec(reg, "features-value", clock=clock)
    for t in (0, 0.5, 1.5):
        clock.t = 1000 + t
        with pytest.raises(BrokerError):
            codec.decode(GOLDEN_CONFLUENT)
    loading[0] = False
    clock.t = 1002
    assert codec.decode(GOLDEN_CONFLUENT) == GOLDEN_EVENT


def test_each_id_is_held_on_its_own_and_a_refusal_is_asked_again_later(feature_schema: dict[str, Any]) -> None:
    """A deleted id refused at t=10 must not get a real id dead-lettered when the registry then
    restarts: the real id's own 404s are held for the whole window."""
    reg = registry()
    clock = Clock()
    codec = ConfluentAvroCodec(reg, "features-value", not_found_retry_s=10, clock=clock)
    with pytest.raises(BrokerError):
        codec.decode(b"\x00\x00\x00\x00\x63" + GOLDEN_AVRO)  # id 99 at t=0: held
    clock.t += 10
    with pytest.raises(DeserializeError, match="schema id 99 is not in"):
        codec.decode(b"\x00\x00\x00\x00\x63" + GOLDEN_AVRO)  # t=10: believed
    loading = restarting(reg)
    ConfluentAvroCodec(reg, "features-value", feature_schema).encode(GOLDEN_EVENT)  # id 1 is registered
    for step in (1, 4, 4):  # t=11..19: the registry restarts; id 1 is held, never believed
        clock.t += step
        with pytest.raises(BrokerError):
            codec.decode(GOLDEN_CONFLUENT)
    loading[0] = False
    assert codec.decode(GOLDEN_CONFLUENT) == GOLDEN_EVENT
    clock.t += 300  # a refused id is asked again after refused_ttl_s
    with pytest.raises(BrokerError):
        codec.decode(b"\x00\x00\x00\x00\x63" + GOLDEN_AVRO)


def test_a_404_without_the_registrys_error_body_is_not_a_missing_schema(feature_schema: dict[str, Any]) -> None:
    """A wrong URL path or a proxy answers 404 without the registry's body: the registry is not
    there, so the input is held; it is never believed and never dead-letters a row."""
    reg = registry()
    clock = Clock()

    def bare_404(*_: Any, **__: Any) -> Any:
        raise SchemaRegistryError(404, -1, "Unknown Schema Registry Error: b'<html>Not Found</html>'")

    reg.get_schema = bare_404  # type: ignore[method-assign]
    codec = ConfluentAvroCodec(reg, "features-value", not_found_retry_s=10, clock=clock)
    for _ in range(3):
        clock.t += 60
        with pytest.raises(BrokerError, match="lookup of schema id 1 failed"):
            codec.decode(GOLDEN_CONFLUENT)


def test_a_registry_5xx_is_never_a_missing_schema_however_long_it_lasts(feature_schema: dict[str, Any]) -> None:
    """A registry that fails (500 with its own error body, for longer than the 404 hold) is unwell:
    the input is held for as long as it lasts, and no row becomes a dead letter."""
    reg = registry()
    ConfluentAvroCodec(reg, "features-value", feature_schema).encode(GOLDEN_EVENT)
    real = reg.get_schema
    clock = Clock()

    def failing(*_: Any, **__: Any) -> Any:
        raise SchemaRegistryError(500, 50001, "Error in the backend data store")

    reg.get_schema = failing  # type: ignore[method-assign]
    codec = ConfluentAvroCodec(reg, "features-value", not_found_retry_s=10, clock=clock)
    for _ in range(3):  # 0 s, 60 s, 120 s: each well past the hold a 404 would get
        with pytest.raises(BrokerError, match="lookup of schema id 1 failed"):
            codec.decode(GOLDEN_CONFLUENT)
        clock.t += 60
    reg.get_schema = real  # type: ignore[method-assign]
    assert codec.decode(GOLDEN_CONFLUENT) == GOLDEN_EVENT


def test_not_found_retry_zero_believes_the_first_404(feature_schema: dict[str, Any]) -> None:
    codec = ConfluentAvroCodec(registry(), "features-value", not_found_retry_s=0)
    with pytest.raises(DeserializeError, match="schema id 99"):
        codec.decode(b"\x00\x00\x00\x00\x63" + GOLDEN_AVRO)


def test_registry_outage_is_a_broker_error_and_not_cached() -> None:
    reg = registry()
    codec = ConfluentAvroCodec(reg, "features-value", load_schema(SCHEMAS / "feature_event.avsc"))
    codec.encode(GOLDEN_EVENT)
    real = reg.get_schema

    def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("registry down")

    reg.get_schema = down  # type: ignore[method-assign]
    reader = ConfluentAvroCodec(reg, "features-value")
    with pytest.raises(BrokerError, match="registry down"):
        reader.decode(GOLDEN_CONFLUENT)
    reg.get_schema = real  # type: ignore[method-assign]
    assert reader.decode(GOLDEN_CONFLUENT) == GOLDEN_EVENT


def test_encode_errors_are_serialize_errors(feature_schema: dict[str, Any]) -> None:
    codec = AvroCodec(feature_schema)
    for bad in (
        {k: v for k, v in GOLDEN_EVENT.items() if k != "entity_id"},
        {**GOLDEN_EVENT, "surprise": 1},
        {**GOLDEN_EVENT, "features": "not floats"},
    ):
        with pytest.raises(SerializeError):
            codec.encode(bad)
    with pytest.raises(SerializeError, match="no schema"):
        ConfluentAvroCodec(registry(), "features-value").encode(GOLDEN_EVENT)
    with pytest.raises(SerializeError):
        JsonCodec().encode({"x": float("nan")})


@pytest.mark.parametrize(
    "data, match",
    [
        (b'{"event_id": ', "invalid JSON"),
        (b"\xff\xfe{}", "invalid JSON"),
        (b"[1, 2]", "not an object"),
        (b'"text"', "not an object"),
    ],
)
def test_invalid_json(data: bytes, match: str) -> None:
    with pytest.raises(DeserializeError, match=match):
        JsonCodec().decode(data)


def test_oversize_messages_are_rejected(feature_schema: dict[str, Any]) -> None:
    codecs: list[Codec] = [
        AvroCodec(feature_schema, max_bytes=64),
        ConfluentAvroCodec(registry(), "f-value", feature_schema, max_bytes=64),
        JsonCodec(max_bytes=64),
    ]
    for codec in codecs:
        with pytest.raises(DeserializeError, match="over the 64-byte limit"):
            codec.decode(b"\x00" * 65)


# --- hostile Avro -----------------------------------------------------------------------------

HUNDRED_MILLION = zigzag(100_000_000)


def assert_rejected_cheaply(codec: Codec, data: bytes) -> None:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(DeserializeError):
            codec.decode(data)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 1.0
    assert peak < 10 * 1024 * 1024


def test_hostile_array_of_100_million_floats(feature_schema: dict[str, Any]) -> None:
    # empty event_id, empty entity_id, event_time 0, then an array block declaring 100M floats
    data = b"\x00\x00\x00" + HUNDRED_MILLION
    assert len(data) == 7
    assert_rejected_cheaply(AvroCodec(feature_schema), data)
    framed = ConfluentAvroCodec(registry(), "f-value", feature_schema)
    assert_rejected_cheaply(framed, framed.encode(GOLDEN_EVENT)[:5] + data)


def test_hostile_zero_width_items_strings_and_maps() -> None:
    # fastavro alone would build a 100M-element list of None from these 5 bytes (about 800 MB).
    nulls = AvroCodec(
        {
            "type": "record",
            "name": "N",
            "fields": [{"name": "xs", "type": {"type": "array", "items": "null"}}],
        }
    )
    assert_rejected_cheaply(nulls, HUNDRED_MILLION + b"\x00")
    text = AvroCodec({"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]})
    assert_rejected_cheaply(text, HUNDRED_MILLION + b"abc")
    maps = AvroCodec(
        {"type": "record", "name": "M", "fields": [{"name": "m", "type": {"type": "map", "values": "null"}}]}
    )
    assert_rejected_cheaply(maps, HUNDRED_MILLION + b"\x00")


# --- the walker is generic --------------------------------------------------------------------

EVERYTHING = {
    "type": "record",
    "name": "Everything",
    "namespace": "t",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "n", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "x", "type": "double"},
        {"name": "blob", "type": "bytes"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "maybe", "type": ["null", "string", {"type": "array", "items": "Kind"}]},
        {"name": "tags", "type": {"type": "map", "values": {"type": "array", "items": "Hash"}}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "nothing", "type": {"type": "array", "items": "null"}},
        {
            "name": "chain",
            "type": {
                "type": "record",
                "name": "Link",
                "fields": [{"name": "next", "type": ["null", "Link"]}],
            },
        },
    ],
}
EVERYTHING_VALUE = {
    "flag": True,
    "n": -7,
    "big": 2**50,
    "x": 1.5,
    "blob": b"\x00\xff",
    "kind": "B",
    "hash": b"abcd",
    "maybe": ["A", "C"],
    "tags": {"k": [b"wxyz"], "": []},
    "day": 19000,
    "nothing": [None, None],
    "chain": {"next": {"next": None}},
}


def test_walker_handles_every_avro_type() -> None:
    codec = AvroCodec(EVERYTHING)
    data = codec.encode(EVERYTHING_VALUE)
    assert codec.decode(data) == EVERYTHING_VALUE  # date stays a plain int: logical types are not applied
    for cut in range(len(data)):
        with pytest.raises(DeserializeError):
            codec.decode(data[:cut])


def test_random_bytes_only_ever_raise_deserialize_error(feature_schema: dict[str, Any]) -> None:
    rng = random.Random(7)
    codecs = [AvroCodec(EVERYTHING), AvroCodec(feature_schema)]
    valid = [codecs[0].encode(EVERYTHING_VALUE), GOLDEN_AVRO]
    for _ in range(3000):
        which = rng.randrange(2)
        data = bytearray(valid[which])
        for _ in range(rng.randint(1, 4)):  # flip a few bytes
            data[rng.randrange(len(data))] = rng.randrange(256)
        with contextlib.suppress(DeserializeError):
            codecs[which].decode(bytes(data))


def test_negative_block_counts_are_walked() -> None:
    codec = AvroCodec(
        {"type": "record", "name": "A", "fields": [{"name": "xs", "type": {"type": "array", "items": "int"}}]}
    )
    # One block of -2 items declared as 2 bytes long, holding the ints 1 and 2, then the end block.
    assert codec.decode(zigzag(-2) + zigzag(2) + zigzag(1) + zigzag(2) + b"\x00") == {"xs": [1, 2]}
    with pytest.raises(DeserializeError, match="block size|bytes after the record"):
        codec.decode(zigzag(-2) + zigzag(3) + zigzag(1) + zigzag(2) + b"\x00\x00")


def test_deeply_nested_recursive_data_is_a_deserialize_error() -> None:
    linked = {"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]}
    codec = AvroCodec(linked)
    assert codec.decode(b"\x02\x02\x00") == {"next": {"next": {"next": None}}}
    assert_rejected_cheaply(codec, b"\x02" * 200_000 + b"\x00")


def test_numbers_past_64_bits_are_deserialize_errors(feature_schema: dict[str, Any]) -> None:
    """fastavro reads a varint of any length (an 11-byte event_time came out as -2**63): the codec
    refuses more than 10 bytes, and a 10th byte that overflows 64 bits; the extremes still read."""
    codec = AvroCodec(feature_schema)
    head = zigzag(2) + b"e1" + zigzag(1) + b"a"
    tail = zigzag(1) + struct.pack("<f", 0.5) + b"\0"
    for value in (-(2**63), 2**63 - 1, 0):
        assert codec.decode(head + zigzag(value) + tail)["event_time"] == value
    for bad in (b"\xff" * 10 + b"\x01", b"\x80" * 10 + b"\x00", b"\xff" * 9 + b"\x02", b"\xfe" * 9 + b"\x7f"):
        with pytest.raises(DeserializeError, match="64 bits|at most 10 bytes"):
            codec.decode(head + bad + tail)


def test_input_schema_is_the_reader_schema_writers_resolve_to(feature_schema: dict[str, Any]) -> None:
    """Schema evolution: events written with the reader's own schema and with a newer writer
    schema both decode to the reader schema (input.schema): a field the writer lacks takes the
    reader's default, one the reader lacks is dropped; a writer that cannot resolve (it lacks a
    field the reader needs, with no default) is a deserialize error, a dead letter."""
    reg = registry()
    reader = {**feature_schema, "fields": feature_schema["fields"] + [
        {"name": "channel", "type": "string", "default": "web"}]}
    newer = {**feature_schema, "fields": feature_schema["fields"] + [{"name": "extra", "type": "int"}]}
    decoder = ConfluentAvroCodec(reg, "features-value", reader)
    for subject, writer, event in (("a-value", feature_schema, GOLDEN_EVENT),
                                   ("b-value", newer, {**GOLDEN_EVENT, "extra": 7})):
        got = decoder.decode(ConfluentAvroCodec(reg, subject, writer).encode(event))
        assert got == {**GOLDEN_EVENT, "channel": "web"}
    assert decoder.reader(1).resolves  # the fast path leaves these to the reference
    assert not ConfluentAvroCodec(reg, "features-value", feature_schema).reader(1).resolves
    older = {**feature_schema, "fields": [f for f in feature_schema["fields"] if f["name"] != "entity_id"]}
    framed = ConfluentAvroCodec(reg, "c-value", older).encode(
        {k: v for k, v in GOLDEN_EVENT.items() if k != "entity_id"})
    with pytest.raises(DeserializeError):
        decoder.decode(framed)


def test_the_wire_format_page_shows_the_bytes_the_codec_writes(feature_schema: dict[str, Any]) -> None:
    """docs/wire_formats.md's worked example is what AvroCodec writes (and the framing's length)."""
    page = (SCHEMAS.parents[1] / "docs" / "wire_formats.md").read_text()
    block = page.split("is these ", 1)[1]
    count, block = int(block.split(" ", 1)[0]), block.split("```text\n", 1)[1].split("```", 1)[0]
    shown = bytes.fromhex(" ".join(line.split("  ")[0] for line in block.splitlines()))
    event = {"event_id": "e-1", "entity_id": "a-9", "event_time": 1764417600123, "features": [0.5, -1.0]}
    assert AvroCodec(feature_schema).encode(event) == shown and len(shown) == count


@pytest.mark.parametrize("n", [0, -1, 1, -3, 63, -64, 64, 2 ** 31, -(2 ** 63), 2 ** 63 - 1, 1764417600123])
def test_the_varint_is_fastavros_long_and_reads_back(n: int) -> None:
    from streamer.formats.varint import read_zigzag
    from streamer.formats.varint import zigzag as write

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema("long"), n)
    assert write(n) == buf.getvalue() == zigzag(n)
    assert read_zigzag(b"\xaa" + write(n) + b"\xbb", 1) == (n, 1 + len(write(n)))
    assert write(-3) == b"\x05" and write(1764417600123).hex(" ") == "f6 e9 df f7 d9 66"  # the docstring's


def test_the_varint_refuses_numbers_past_the_data_or_64_bits() -> None:
    from streamer.formats.varint import read_zigzag

    for bad in (b"\x80", b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x02"):
        with pytest.raises(DeserializeError):
            read_zigzag(bad, 0)
