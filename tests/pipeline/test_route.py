"""The route stage against the reference: every event goes to the model its field's text names, in
the chunk's order; unknown values to the default or a ``route`` dead letter naming the field and
the value; undecodable events are the decode stage's dead letters. JSON's msgspec reading agrees
with the reference decoder on any value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamer.config import RouteConfig
from streamer.errors import RouteError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.codec import Codec
from streamer.formats.columnar.field_text import ConfluentAvroField
from streamer.formats.json_events import JsonCodec
from streamer.pipeline.records import Messages
from streamer.pipeline.route import Router, as_text, field_of
from tests.support.fakes import FakeMessage

ROOT = Path(__file__).resolve().parents[2]
LANES = ("general", "acme", "small")
MAP = {"acme": "acme", "7": "small", "true": "small", "globex": "general"}


def chunk(values: list[bytes | None]) -> Messages:
    return Messages.of([FakeMessage("t", 0, i, v) for i, v in enumerate(values)])


def reference(router: Router, codec: Codec, values: list[bytes | None], unknown: str,
              path: str = "tenant") -> tuple[dict[str, list[int]], list[int]]:
    """The offsets each model gets, and the offsets dead-lettered, by the reference decoder."""
    parts: dict[str, list[int]] = {}
    dead: list[int] = []
    for i, v in enumerate(values):
        try:
            assert v is not None
            text = as_text(field_of(codec.decode(v), path.split(".")))
        except Exception:  # noqa: BLE001 - any decode failure is a dead letter
            dead.append(i)
            continue
        name = MAP.get(text) if text is not None else None
        if name is None and unknown == "dead_letter":
            dead.append(i)
            continue
        parts.setdefault(name or "general", []).append(i)
    return parts, dead


def split(router: Router, values: list[bytes | None]) -> tuple[dict[str, list[int]], list[int]]:
    parts, rejects = router.split(chunk(values))
    return ({k: p.offsets.tolist() for k, p in parts.items()},
            sorted(m.offset() for _, m in rejects))


def test_each_event_goes_to_the_model_its_value_names_in_chunk_order() -> None:
    router = Router(RouteConfig("tenant", MAP, "dead_letter"), "general", LANES, JsonCodec())
    events = [{"tenant": "acme"}, {"tenant": 7}, {"tenant": "globex"}, {"tenant": "zeta"}, {"tenant": True},
              {"tenant": None}, {}, {"tenant": "acme", "x": [1, 2]}]
    values: list[bytes | None] = [json.dumps(e).encode() for e in events] + [b"{not json", None, b"[1]"]
    parts, rejects = router.split(chunk(values))
    assert {k: p.offsets.tolist() for k, p in parts.items()} == {"general": [2], "acme": [0, 7], "small": [1, 4]}
    assert list(parts) == ["general", "acme", "small"]  # lane order
    stages = {m.offset(): e.stage for e, m in rejects}
    assert stages == {3: "route", 5: "route", 6: "route", 8: "deserialize", 9: "deserialize", 10: "deserialize"}
    reasons = {m.offset(): str(e) for e, m in rejects}
    assert "route.field 'tenant' is 'zeta'" in reasons[3]
    assert "'tenant' is missing or null" in reasons[6]
    assert isinstance(rejects[0][0], RouteError)


def test_unknown_values_go_to_the_default_model_when_asked() -> None:
    router = Router(RouteConfig("tenant", MAP, "default"), "general", LANES, JsonCodec())
    values: list[bytes | None] = [json.dumps({"tenant": t}).encode() for t in ("zeta", "acme", None, "7")]
    assert split(router, values) == ({"general": [0, 2], "acme": [1], "small": [3]}, [])


def test_a_chunk_of_one_model_is_handed_on_whole() -> None:
    router = Router(RouteConfig("tenant", MAP, "default"), "general", LANES, JsonCodec())
    c = chunk([json.dumps({"tenant": "acme"}).encode()] * 5)
    parts, rejects = router.split(c)
    assert parts == {"acme": c} and not rejects


def test_a_nested_field_read_from_avro_by_the_reference_decoder() -> None:
    schema = load_schema(ROOT / "streamer" / "schemas" / "purchase_event.avsc")
    codec = AvroCodec(schema)
    router = Router(RouteConfig("card.country", {"US": "acme", "DE": "small"}, "dead_letter"), "general",
                    LANES, codec)
    base = {"event_id": "p", "entity_id": "c", "event_time": 1, "channel": "web", "amount": 1.0,
            "age_days": None, "n_items": 1, "placed_on": 19_700}
    values: list[bytes | None] = [codec.encode({**base, "card": {"country": c, "issuer": None}})
                                  for c in ("US", "FR", "DE", "US")]
    parts, rejects = split(router, values)
    assert parts == {"acme": [0, 3], "small": [2]} and rejects == [1]


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.sampled_from(["acme", "7", "globex", "zeta", ""]),
                   st.floats(allow_nan=True), st.lists(st.integers(), max_size=2),
                   st.dictionaries(st.sampled_from(["tenant", "x"]), st.integers(0, 9), max_size=2))


def encoded(event: Any, kind: str) -> bytes | None:
    if kind == "garbage":
        return b"\xff{"
    if kind == "tombstone":
        return None
    return json.dumps(event).encode()  # NaN and Infinity as JSON's extension writes them


@settings(max_examples=80, deadline=None)
@given(events=st.lists(st.tuples(st.one_of(VALUES.map(lambda v: {"tenant": v}),
                                           VALUES.map(lambda v: {"meta": {"tenant": v}}), VALUES),
                                 st.sampled_from(["json", "json", "json", "garbage", "tombstone"])), max_size=25),
       unknown=st.sampled_from(["default", "dead_letter"]), nested=st.booleans())
def test_json_routing_agrees_with_the_reference_decoder(events: list[tuple[Any, str]], unknown: str,
                                                        nested: bool) -> None:
    path = "meta.tenant" if nested else "tenant"
    router = Router(RouteConfig(path, MAP, unknown), "general", LANES, JsonCodec())  # type: ignore[arg-type]
    values = [encoded(e, kind) for e, kind in events]
    assert split(router, values) == reference(router, JsonCodec(), values, unknown, path)


@pytest.mark.parametrize(("value", "text"), [("a", "a"), (7, "7"), (True, "true"), (False, "false"), (None, None),
                                             (b"x", "x"), (1.5, "1.5"), (np.int64(3), "3")])
def test_a_value_as_text(value: Any, text: str | None) -> None:
    assert as_text(value) == text


SCHEMA = {"type": "record", "name": "E", "fields": [
    {"name": "id", "type": "string"},
    {"name": "xs", "type": {"type": "array", "items": "float"}},
    {"name": "meta", "type": {"type": "record", "name": "M", "fields": [
        {"name": "n", "type": ["null", "long"]}, {"name": "tenant", "type": ["null", "string"]}]}},
    {"name": "tenant", "type": ["null", "string", "long"]}]}
AVRO_TENANTS = st.one_of(st.none(), st.sampled_from(["acme", "7", "globex", "zeta", "", "ü"]), st.integers(-9, 9))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.text(max_size=3), st.lists(st.floats(width=32), max_size=3),
                               st.one_of(st.none(), st.integers(-(2 ** 63), 2 ** 63 - 1)),
                               st.one_of(st.none(), st.sampled_from(["acme", "7", "x"])),
                               AVRO_TENANTS, st.sampled_from(["ok", "ok", "ok", "cut"])), max_size=20),
       nested=st.booleans(), unknown=st.sampled_from(["default", "dead_letter"]))
def test_avro_routing_by_the_walk_agrees_with_the_reference_decoder(rows: list[tuple[Any, ...]], nested: bool,
                                                                    unknown: str) -> None:
    """The fast reader (formats/columnar/field_text.py) against fastavro: the top-level field and
    one in a nested record; a message cut inside its first field is the reference's dead letter."""
    codec = AvroCodec(SCHEMA)
    values: list[bytes | None] = []
    for id_, xs, n, meta_tenant, tenant, kind in rows:
        value = codec.encode({"id": id_, "xs": xs, "meta": {"n": n, "tenant": meta_tenant}, "tenant": tenant})
        values.append(value[:1] if kind == "cut" and value[0] > 2 else value)
    path = "meta.tenant" if nested else "tenant"
    router = Router(RouteConfig(path, MAP, unknown), "general", LANES, codec)  # type: ignore[arg-type]
    assert router._fast is not None  # the walk reads this layout
    assert split(router, values) == reference(router, codec, values, unknown, path)


class Registry:
    """A ConfluentAvroCodec's reader lookup: schema id 1 is SCHEMA; any other id is unknown."""

    def reader(self, schema_id: int) -> AvroCodec:
        if schema_id != 1:
            raise KeyError(schema_id)
        return AvroCodec(SCHEMA)


def test_avro_confluent_fields_are_read_per_writer_schema_id_and_unknown_ids_left_to_the_reference() -> None:
    codec = AvroCodec(SCHEMA)
    event = {"id": "e", "xs": [1.0], "meta": {"n": None, "tenant": None}}
    one = [b"\x00\x00\x00\x00\x01" + codec.encode({**event, "tenant": t}) for t in ("acme", None, 7)]
    unknown = b"\x00\x00\x00\x00\x02" + codec.encode({**event, "tenant": "acme"})
    reader = ConfluentAvroField(Registry(), ["tenant"])  # type: ignore[arg-type]
    texts, ok = reader.read(one)
    assert (texts, ok.tolist()) == (["acme", None, "7"], [True, True, True])
    texts, ok = reader.read([one[0], unknown, None, one[2]])
    assert (texts, ok.tolist()) == (["acme", None, None, "7"], [True, False, False, True])
