"""Hostile bytes, fuzzed, through the real processor on the real broker.

For each input format, 1,200 messages: valid events with flipped, cut or extended bytes, huge
declared lengths, deep nesting, wrong magic bytes, unknown schema ids, empty values, tombstones,
values from 0 bytes to over ``input.max_message_bytes``, odd keys and headers. Every input offset
must end as exactly one prediction or one dead letter, the process must never die, and its
memory must stay bounded. The cases come from a seeded random generator (one seed per format),
so a failure replays exactly.
"""

from __future__ import annotations

import json
import random
import resource
from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from streamer.commands.demo import synthetic_events
from streamer.config import RegistryConfig, with_overrides
from streamer.formats import subjects
from streamer.formats.configured import input_codec, output_codec
from streamer.kafka.deadletter import header
from streamer.wiring.stream import build_processor
from tests.conftest import Topics, committed_offsets, end_offsets, make_config, read_all, run_until_outputs
from tests.integration.test_deadletter_kafka import produce_raw, zigzag

pytestmark = pytest.mark.kafka
CASES = 1_200
LIMIT = 200_000  # input.max_message_bytes for the run: some values go over it


def hostile(good: bytes, fmt: str, rng: random.Random) -> tuple[str, bytes | None]:
    """One mutated value and the name of its mutation."""
    kind = rng.choice(["good", "flip", "cut", "extend", "huge-length", "deep", "magic", "unknown-id",
                       "empty", "tombstone", "random", "over-limit"])
    if kind == "flip":
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return kind, bytes(data)
    if kind == "cut":
        return kind, good[:rng.randrange(len(good))]
    if kind == "extend":
        return kind, good + rng.randbytes(rng.randint(1, 64))
    if kind == "huge-length":  # a string or array that claims a billion entries
        head = good[:5] if fmt == "avro-confluent" else b""
        return kind, head + zigzag(10**9) + rng.randbytes(8) if fmt != "json" else \
            b'{"features": [' + b"1," * 10 + b'"event_id": "' + b"x" * 50
    if kind == "deep":
        return kind, (b"[" * 100_000) if fmt == "json" else good[:5] + b"\x02" * 100_000
    if kind == "magic":
        return kind, b"\x01" + good[1:]
    if kind == "unknown-id":
        return kind, b"\x00\x00\x00\x03\xe7" + good[5:]
    if kind == "empty":
        return kind, b""
    if kind == "tombstone":
        return kind, None
    if kind == "random":
        return kind, rng.randbytes(rng.randint(1, 300))
    if kind == "over-limit":
        return kind, good + rng.randbytes(LIMIT)
    return kind, good


@pytest.mark.timeout(360)
@pytest.mark.parametrize("fmt", ["avro", "json", "avro-confluent"])
def test_hostile_bytes_each_end_as_one_prediction_or_one_dead_letter(
        bootstrap: str, topics: Topics, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    rng = random.Random(f"fuzz-{fmt}")
    cfg = with_overrides(make_config(bootstrap, topics), input={"max_message_bytes": LIMIT})
    if fmt == "json":
        cfg = with_overrides(cfg, input={"format": "json", "schema": None})
    elif fmt == "avro-confluent":
        url = f"mock://{topics.group}"
        # An unknown id's 404 is held for 1 s, not 10, before its rows are dead letters: the same
        # hold, then the same end (the hold's length is the registry tests' matter).
        cfg = replace(cfg, input=replace(cfg.input, format="avro-confluent",
                                         registry=RegistryConfig(url=url, not_found_retry_ms=1_000)))
        registry = SchemaRegistryClient.new_client({"url": url})  # one store for both sides
        monkeypatch.setattr(subjects, "SchemaRegistryClient", SimpleNamespace(new_client=lambda conf: registry))
    codec = input_codec(cfg.input)
    events = synthetic_events(CASES, 32, seed=13)
    messages = []
    kinds: Counter[str] = Counter()
    for i, event in enumerate(events):
        good = json.dumps(event).encode() if fmt == "json" else codec.encode(event)
        kind, value = hostile(good, fmt, rng)
        kinds[kind] += 1
        key = rng.choice([None, b"", rng.randbytes(rng.randint(1, 40)), str(event["entity_id"]).encode()])
        headers = [("i", str(i).encode()), ("", b""), ("bin\x00", rng.randbytes(rng.randint(0, 20)))]
        messages.append((key, value, headers))
    produce_raw(bootstrap, topics.input, messages)  # type: ignore[arg-type]
    processor = build_processor(cfg)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run_until_outputs(processor, CASES, timeout_s=240)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    ends: Counter[tuple[int, int]] = Counter()
    for m in read_all(bootstrap, topics.output):
        p = output_codec(cfg).decode(m.value())
        ends[(p["source_partition"], p["source_offset"])] += 1
    for m in read_all(bootstrap, topics.dlq):
        ends[(int(header(m.headers(), "original.partition")), int(header(m.headers(), "original.offset")))] += 1
    inputs = {(m.partition(), m.offset()) for m in read_all(bootstrap, topics.input)}
    assert len(inputs) == CASES
    assert set(ends) == inputs and set(ends.values()) == {1}, "an input without exactly one end"
    assert committed_offsets(bootstrap, topics.group, topics.input) == end_offsets(bootstrap, topics.input)
    assert grown_mb < 300, f"memory grew by {grown_mb:.0f} MB"
    print(f"{fmt}: {CASES} cases {dict(kinds)}, predictions {processor.stats.predictions}, "
          f"dead letters {dict(processor.stats.dead_letters)}, memory +{grown_mb:.0f} MB")
