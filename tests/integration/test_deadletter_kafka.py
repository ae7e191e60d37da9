"""Poison rows on the real broker: every input ends as a prediction or a dead letter, never lost."""

from __future__ import annotations

import hashlib
import io
import time
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from streamer.commands import dlq
from streamer.commands.demo import synthetic_events
from streamer.commands.replay import run_replay
from streamer.config import Config, with_overrides
from streamer.errors import ConfigError, InferenceError
from streamer.formats.configured import input_codec, output_codec
from streamer.kafka.clients import KafkaClients
from streamer.kafka.deadletter import HEADER_PREFIX, REDRIVE_HEADER, TRUNCATED_BYTES, header
from streamer.kafka.ranges import When
from streamer.kafka.topics import create, create_topics
from streamer.model.runner import model_runner
from streamer.testing import FunctionRunner, PoisonRunner, score_matrix
from streamer.wiring.stream import build_processor
from tests.conftest import (
    Topics,
    committed_offsets,
    end_offsets,
    make_config,
    read_all,
    run_until_outputs,
)
from tests.support.faults import settled, wait_until

pytestmark = pytest.mark.kafka
SENTINEL = 4242.0
STAGE = {"garbage": "deserialize", "hostile": "deserialize", "nan": "validate",
         "width": "validate", "bounds": "validate", "poison": "infer"}


def zigzag(n: int) -> bytes:
    n, out = (n << 1) ^ (n >> 63), bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes([*out, n])


def payload(kind: str, event: dict[str, Any], codec: Any) -> bytes:
    e = dict(event, features=list(event["features"]))
    if kind == "hostile":  # a few bytes declaring 100 million floats
        return b"\x02a\x02b\x00" + zigzag(100_000_000) + b"\x00\x00\x80\x3f"
    if kind == "nan":
        e["features"][3] = float("nan")
    elif kind == "width":
        e["features"] = e["features"][:31]
    elif kind == "poison":
        e["features"][0] = SENTINEL
    elif kind == "bounds":
        e["features"][5] = 50.0
    data = codec.encode(e)
    return data[:7] if kind == "garbage" else data


Raw = tuple[bytes, bytes, list[tuple[str, bytes]]]  # key, value, headers


def produce_raw(bootstrap: str, topic: str, messages: list[Raw]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 10,
                         "message.max.bytes": 2_000_000})
    failed: list[str] = []
    for key, value, headers in messages:
        producer.produce(topic, value, key, headers=headers,
                         on_delivery=lambda err, _m: failed.append(str(err)) if err else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed


def mixed_stream(bootstrap: str, topics: Topics, cfg: Config, kinds: list[str]) -> list[dict[str, Any]]:
    codec = input_codec(cfg.input)
    events = synthetic_events(len(kinds), 32, seed=11)
    produce_raw(bootstrap, topics.input, [
        (str(e["entity_id"]).encode(), payload(kind, e, codec),
         [("trace-id", f"t{i}".encode()), ("bin", b"\x00\xff")])
        for i, (e, kind) in enumerate(zip(events, kinds, strict=True))])
    return events


def by_trace(bootstrap: str, topic: str) -> dict[int, Any]:
    """Input messages as stored, by the index in their trace-id header."""
    return {int(dict(m.headers())["trace-id"][1:]): m for m in read_all(bootstrap, topic)}


def test_1pct_each_kind_of_bad_row_goes_to_the_dead_letter_topic(bootstrap: str, topics: Topics) -> None:
    n = 20_000
    rng = np.random.default_rng(5)
    kinds = list(rng.choice(["good", "garbage", "nan", "width", "poison"], size=n,
                            p=[0.967, 0.01, 0.01, 0.01, 0.003]))
    kinds[1234] = "hostile"
    cfg = make_config(bootstrap, topics, MAX_BATCH_SIZE="256")
    events = mixed_stream(bootstrap, topics, cfg, kinds)
    processor = build_processor(cfg, runner=PoisonRunner(model_runner(cfg), SENTINEL))
    run_until_outputs(processor, n)

    bad = {i: k for i, k in enumerate(kinds) if k != "good"}
    assert processor.stats.predictions == n - len(bad)
    assert processor.stats.dead_letters == Counter(STAGE[k] for k in bad.values())
    assert processor.stats.bisections > 0

    # Good rows: predicted exactly as ONNX Runtime scores them, nothing for bad rows.
    predictions = {p["event_id"]: p for p in (output_codec(cfg).decode(m.value())
                                              for m in read_all(bootstrap, topics.output))}
    good = [i for i, k in enumerate(kinds) if k == "good"]
    assert set(predictions) == {events[i]["event_id"] for i in good}
    session = ort.InferenceSession(str(cfg.model.path), providers=["CPUExecutionProvider"])
    feats = np.asarray([events[i]["features"] for i in good], dtype=np.float32)
    expected = session.run(None, {"features": feats})[0]
    got = np.asarray([predictions[events[i]["event_id"]]["scores"] for i in good], dtype=np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)

    # Bad rows: each once in the dead-letter topic, original bytes, key and headers intact.
    inputs = by_trace(bootstrap, topics.input)
    letters = read_all(bootstrap, topics.dlq)
    assert len(letters) == len(bad)
    seen = set()
    for letter in letters:
        h = letter.headers()
        index = int(dict(h)["trace-id"][1:])
        original = inputs[index]
        assert header(h, "stage") == STAGE[bad[index]], (index, bad[index], header(h, "exception.message"))
        assert letter.value() == original.value() and letter.key() == original.key()
        assert h[:2] == original.headers()  # the original headers first, byte for byte
        assert (header(h, "original.topic"), header(h, "original.partition"),
                header(h, "original.offset")) == (topics.input, str(original.partition()),
                                                  str(original.offset()))
        assert header(h, "consumer.group") == topics.group and header(h, "attempt") == "1"
        assert header(h, "model.name") == "fraud_mlp" and header(h, "exception.class")
        seen.add(index)
    assert seen == set(bad)
    assert committed_offsets(bootstrap, topics.group, topics.input) == end_offsets(bootstrap, topics.input)


def test_a_broken_model_pauses_instead_of_flooding_the_dead_letter_topic(bootstrap: str,
                                                                         topics: Topics) -> None:
    n = 3_000
    cfg = with_overrides(make_config(bootstrap, topics), processing={"retry_backoff_ms": 100})
    mixed_stream(bootstrap, topics, cfg, ["good"] * n)
    real = model_runner(cfg)
    broken = [True]

    def model(x: np.ndarray) -> np.ndarray:
        if broken[0]:
            raise InferenceError("model file is corrupt")
        return score_matrix(real, x)

    runner = FunctionRunner(model, real.contract.feature_width)
    processor = build_processor(cfg, runner=runner)
    during: dict[str, Any] = {}

    def until(stats: Any) -> bool:
        if broken[0] and not processor.healthy and runner.calls >= 12:  # several retries in
            during.update(committed=committed_offsets(bootstrap, topics.group, topics.input),
                          dead_letters=sum(stats.dead_letters.values()),
                          reason=processor.unhealthy_reason, outputs=stats.outputs)
            broken[0] = False  # the model is fixed
        return stats.outputs >= n

    processor.run(until=until)
    assert during, "the processor never reported itself unhealthy"
    assert "model failing" in during["reason"]
    assert during["dead_letters"] == 0 and during["outputs"] == 0
    assert all(offset < 0 for offset in during["committed"].values())  # nothing committed
    assert processor.healthy
    assert processor.stats.predictions == n
    assert read_all(bootstrap, topics.dlq) == []
    assert committed_offsets(bootstrap, topics.group, topics.input) == end_offsets(bootstrap, topics.input)


def test_unwritable_dead_letter_topic_blocks_commits_until_it_exists(bootstrap: str,
                                                                     topics: Topics) -> None:
    n, bad_index = 2_000, 700
    missing = f"{topics.dlq}-later"
    cfg = make_config(bootstrap, topics)
    cfg = with_overrides(cfg, processing={"dead_letter_topic": missing, "retry_backoff_ms": 200,
                                          "create_dead_letter_topic": False})
    # librdkafka waits 30 s by default before calling a topic missing; the test needs less.
    cfg = replace(cfg, kafka={**cfg.kafka, "topic.metadata.propagation.max.ms": "1000"})
    kinds = ["good"] * n
    kinds[bad_index] = "garbage"
    mixed_stream(bootstrap, topics, cfg, kinds)
    bad = by_trace(bootstrap, topics.input)[bad_index]
    with pytest.raises(ConfigError, match=rf"'processing\.dead_letter_topic': topic '{missing}' does not exist"):
        build_processor(cfg)  # missing at start: refused, named, before anything is read
    # Missing after start (deleted under a running processor): the start-up check is skipped by
    # handing the clients in, and the loop blocks (unhealthy) until the topic is there again.
    processor = build_processor(cfg, clients=KafkaClients.from_config(cfg))
    during: dict[str, Any] = {}

    def until(stats: Any) -> bool:
        if not during and not processor.healthy:
            during["since"] = time.monotonic()
        elif "committed" not in during and during and time.monotonic() - during["since"] > 2:
            during["committed"] = committed_offsets(bootstrap, topics.group, topics.input)
            during["reason"] = processor.unhealthy_reason
            create_topics(bootstrap, {missing: 1})  # fixed: the topic exists now
        return stats.outputs >= n

    processor.run(until=until)
    assert "committed" in during, "the processor never blocked on the unwritable topic"
    assert missing in during["reason"]
    assert during["committed"][bad.partition()] <= bad.offset()  # nothing past the failing row
    letters = read_all(bootstrap, missing)
    assert [m.value() for m in letters] == [bad.value()]
    assert processor.stats.predictions == n - 1 and processor.healthy
    assert committed_offsets(bootstrap, topics.group, topics.input) == end_offsets(bootstrap, topics.input)


@pytest.mark.parametrize("dlq_limit", [None, 100_000])
def test_a_message_near_the_topic_limit_is_dead_lettered_and_nothing_stalls(
        bootstrap: str, topics: Topics, dlq_limit: int | None) -> None:
    """A 1,040,000-byte value (under the input topic's limit and input.max_message_bytes) that is
    not Avro, among 300 good events. librdkafka's default message.max.bytes (1,000,000) once
    refused its dead letter forever and paused every partition. Now the producer is sized from the
    dead-letter topic, and a dead-letter topic that is too small gets the letter cut short, with
    the original's size and digest."""
    cfg = make_config(bootstrap, topics)
    if dlq_limit is not None:
        small = f"{topics.dlq}-small"
        create(AdminClient({"bootstrap.servers": bootstrap}), {small: 1}, replication_factor=1,
               config={"max.message.bytes": str(dlq_limit)})
        cfg = with_overrides(cfg, processing={"dead_letter_topic": small})
    dlq_topic = small if dlq_limit is not None else topics.dlq
    big = b"\x07" * 1_040_000
    produce_raw(bootstrap, topics.input, [(b"k", big, [("trace-id", b"t0")])])
    mixed_stream(bootstrap, topics, cfg, ["good"] * 300)
    processor = build_processor(cfg)
    run_until_outputs(processor, 301)
    assert processor.stats.predictions == 300 and processor.stats.dead_letters["deserialize"] == 1
    assert committed_offsets(bootstrap, topics.group, topics.input) == end_offsets(bootstrap, topics.input)
    [letter] = read_all(bootstrap, dlq_topic)
    h = letter.headers()
    if dlq_limit is None:
        assert letter.value() == big and header(h, "truncated") is None
    else:
        assert letter.value() == big[:TRUNCATED_BYTES] and header(h, "truncated") == "true"
        assert header(h, "original.size") == str(len(big))
        assert header(h, "original.sha256") == hashlib.sha256(big).hexdigest()
        assert header(h, "stage") == "deserialize" and header(h, "original.offset") is not None
        assert dict(h).get("trace-id") is None  # the original's own headers went, counted
        assert header(h, "original.headers.bytes") == str(len("trace-id") + len("t0"))


def test_inspect_and_redrive_after_a_config_fix(bootstrap: str, topics: Topics) -> None:
    n = 1_000
    kinds = ["good"] * n
    for i in range(0, n, 50):
        kinds[i] = "bounds"  # 20 rows over input.feature_max
    for i in range(25, n, 100):
        kinds[i] = "garbage"  # 10 rows that no fix can save
    strict = with_overrides(make_config(bootstrap, topics), input={"feature_max": 10.0})
    events = mixed_stream(bootstrap, topics, strict, kinds)
    run_until_outputs(build_processor(strict), n)

    lines = dlq.inspect(strict)
    assert len(lines) == 30
    assert sum("validate" in line and "above input.feature_max 10" in line for line in lines) == 20
    assert all(f"{topics.input}[" in line and "attempt 1" in line for line in lines)
    assert len(dlq.inspect(strict, limit=5)) == 5

    fixed = with_overrides(strict, input={"feature_max": 100.0})
    result = dlq.redrive(fixed, stage="validate")
    assert (result.redriven, result.refused, result.skipped) == (20, 0, 10)
    processor = build_processor(fixed)
    run_until_outputs(processor, 20)
    assert processor.stats.predictions == 20

    predictions = [output_codec(fixed).decode(m.value()) for m in read_all(bootstrap, topics.output)]
    assert {p["event_id"] for p in predictions} == \
        {events[i]["event_id"] for i, k in enumerate(kinds) if k in ("good", "bounds")}
    redriven = [m for m in read_all(bootstrap, topics.input) if dict(m.headers()).get(REDRIVE_HEADER)]
    assert len(redriven) == 20 and all(dict(m.headers())[REDRIVE_HEADER] == b"1" for m in redriven)
    assert all(not k.startswith(HEADER_PREFIX) for m in redriven for k, _ in m.headers())

    again = dlq.redrive(fixed, stage="validate")
    assert again.redriven == 0  # progress was committed: nothing twice
    # A run of every stage reads the validate group's progress: those 20 are not sent again;
    # the 10 garbage rows are refused (max_redrives 0), and after it nothing is left to send.
    never = with_overrides(fixed, processing={"max_redrives": 0})
    every = dlq.redrive(never)
    assert (every.redriven, every.refused, every.already) == (0, 10, 20)
    assert dlq.redrive(fixed) == dlq.RedriveResult(0, 0, 0, 0)
    assert dlq.redrive(fixed, stage="validate").redriven == 0


def test_redrive_a_selection_by_offset_and_by_event_id(bootstrap: str, topics: Topics) -> None:
    """Only the selected letters go back; the stage groups do not move past the others, so a
    later redrive without a selection sends the rest and reports the selected ones ``already``;
    inspect shows which letters any run redrove."""
    n = 200
    kinds = ["bounds" if i % 20 == 0 else "good" for i in range(n)]  # 10 validate letters
    strict = with_overrides(make_config(bootstrap, topics), input={"feature_max": 10.0})
    events = mixed_stream(bootstrap, topics, strict, kinds)
    run_until_outputs(build_processor(strict), n)
    fixed = with_overrides(strict, input={"feature_max": 100.0})

    def letters() -> dict[str, str]:  # event id -> its inspect line
        lines = dlq.inspect(fixed)
        assert len(lines) == 10
        return {line.split("  event ")[1].split("  ")[0]: line for line in lines}

    before = letters()
    assert set(before) == {events[i]["event_id"] for i in range(0, n, 20)}  # decoded from the original
    assert all("  redriven no  attempt 1  " in line for line in before.values())
    by_offset, by_id = sorted(before)[:2]
    place = dlq.parse_place(before[by_offset].split()[1])

    assert dlq.redrive(fixed, offsets=[place]) == dlq.RedriveResult(1, 0, 0, 0)
    assert dlq.redrive(fixed, event_ids=[by_id]) == dlq.RedriveResult(1, 0, 0, 0)
    assert dlq.redrive(fixed, offsets=[place], event_ids=[by_id, "no-such-event"]) == \
        dlq.RedriveResult(0, 0, 0, 2, not_found=("no-such-event",))
    after = letters()
    assert {e for e, line in after.items() if "  redriven yes  " in line} == {by_offset, by_id}
    assert sum("  redriven no  " in line for line in after.values()) == 8

    assert dlq.redrive(fixed, stage="validate") == dlq.RedriveResult(8, 0, 0, 2)  # the rest, once
    assert all("  redriven yes  " in line for line in letters().values())
    assert dlq.redrive(fixed) == dlq.RedriveResult(0, 0, 0, 10)
    redriven = [m for m in read_all(bootstrap, topics.input) if dict(m.headers()).get(REDRIVE_HEADER)]
    assert sorted(input_codec(fixed.input).decode(m.value())["event_id"] for m in redriven) == sorted(before)


def test_a_replays_dead_letters_are_inspected_and_redriven_by_their_topic(bootstrap: str, topics: Topics) -> None:
    """A replay's dead letters go to ``<backfill>.dlq``, which its summary names; ``--topic`` reads
    and redrives them (the config's own dead-letter topic holds none of them)."""
    n = 200
    kinds = ["bounds" if i % 20 == 0 else "good" for i in range(n)]  # 10 validate letters
    strict = with_overrides(make_config(bootstrap, topics), input={"feature_max": 10.0})
    events = mixed_stream(bootstrap, topics, strict, kinds)
    summary = run_replay(strict, When("earliest"), run_id="letters", progress=io.StringIO())
    letters = f"{topics.output}.backfill.dlq"
    assert summary.dead_letter_topic == letters and sum(summary.stats.dead_letters.values()) == 10
    assert f"dead letters to {letters} (streamer dlq inspect --topic {letters})" in summary.lines()

    wait_until(lambda: settled(bootstrap, letters), 30, "the replay's last commit markers")
    fixed = with_overrides(strict, input={"feature_max": 100.0})
    assert dlq.inspect(fixed) == []  # the live dead-letter topic
    lines = dlq.inspect(fixed, topic=letters)
    assert len(lines) == 10 and all(" validate " in line and f"{topics.input}[" in line for line in lines)
    assert dlq.redrive(fixed, stage="validate", topic=letters) == dlq.RedriveResult(10, 0, 0, 0)
    assert dlq.redrive(fixed, topic=letters) == dlq.RedriveResult(0, 0, 0, 10)  # once
    assert all("  redriven yes  " in line for line in dlq.inspect(fixed, topic=letters))
    redriven = [m for m in read_all(bootstrap, topics.input) if dict(m.headers() or []).get(REDRIVE_HEADER)]
    assert sorted(input_codec(fixed.input).decode(m.value())["event_id"] for m in redriven) == \
        sorted(str(events[i]["event_id"]) for i in range(0, n, 20))


def test_redrive_by_offset_sends_only_the_named_partitions_letter(bootstrap: str, topics: Topics) -> None:
    """Two partitions of a dead-letter topic each hold a letter at offset 0: ``--offset 1:0`` is the
    letter of partition 1, not every letter at offset 0."""
    strict = with_overrides(make_config(bootstrap, topics), input={"feature_max": 10.0})
    events = mixed_stream(bootstrap, topics, strict, ["bounds", "good", "bounds"])
    run_until_outputs(build_processor(strict), 3)
    written = read_all(bootstrap, topics.dlq)
    assert len(written) == 2
    two = f"{topics.dlq}.two"
    create(AdminClient({"bootstrap.servers": bootstrap}), {two: 2})
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, m in enumerate(written):  # letter 0 at 0:0, letter 1 at 1:0
        producer.produce(two, m.value(), m.key(), headers=m.headers(), partition=partition)
    assert producer.flush(30) == 0
    places = {line.split()[1]: line.split("  event ")[1].split("  ")[0] for line in dlq.inspect(strict, topic=two)}
    assert set(places) == {"0:0", "1:0"}
    assert sorted(places.values()) == sorted(str(events[i]["event_id"]) for i in (0, 2))

    fixed = with_overrides(strict, input={"feature_max": 100.0})
    assert dlq.redrive(fixed, offsets=[(1, 0)], topic=two) == dlq.RedriveResult(1, 0, 0, 0)
    redriven = [m for m in read_all(bootstrap, topics.input) if dict(m.headers() or []).get(REDRIVE_HEADER)]
    assert [input_codec(fixed.input).decode(m.value())["event_id"] for m in redriven] == [places["1:0"]]
