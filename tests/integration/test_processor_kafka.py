"""End to end on the real broker: events in, Avro predictions out, offsets committed after acks."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry._sync import schema_registry_client as sr_client
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from prometheus_client import CollectorRegistry

from streamer.commands.demo import encoded_events, produce_events, synthetic_events
from streamer.config import RegistryConfig
from streamer.formats import subjects
from streamer.formats.avro import AvroCodec
from streamer.formats.configured import input_codec, output_codec
from streamer.wiring.stream import build_processor
from tests.conftest import (
    ROOT,
    Topics,
    committed_offsets,
    end_offsets,
    make_config,
    read_all,
    run_until_outputs,
)
from tests.support.registry import FakeRegistry

pytestmark = pytest.mark.kafka
N_FEATURES = 32


def produce(bootstrap: str, topics: Topics, n: int, seed: int = 1) -> list[dict[str, object]]:
    cfg = make_config(bootstrap, topics)
    codec = input_codec(cfg.input)
    events = synthetic_events(n, N_FEATURES, seed=seed)
    produce_events(bootstrap, topics.input, encoded_events(codec, events))
    return events


def input_index(bootstrap: str, topics: Topics) -> dict[tuple[int, int], dict[str, object]]:
    """(partition, offset) -> decoded event, as the broker stored them."""
    codec = input_codec(make_config(bootstrap, topics).input)
    return {(m.partition(), m.offset()): dict(codec.decode(m.value()))
            for m in read_all(bootstrap, topics.input)}


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_20k_events_scored_exactly_and_committed(bootstrap: str, topics: Topics, guarantee: str) -> None:
    n, max_size = 20_000, 256
    started = time.time()  # synthetic_events stamps each event_time with this moment or later
    produce(bootstrap, topics, n)
    cfg = make_config(bootstrap, topics, MAX_BATCH_SIZE=str(max_size), GUARANTEE=guarantee)
    registry = CollectorRegistry()
    processor = build_processor(cfg, registry=registry)
    run_until_outputs(processor, n)
    wall_ms = (time.time() - started) * 1000 + 1  # + 1: event times are truncated to the ms
    stats = processor.stats

    assert stats.predictions == n
    # Every event is in the topic before the processor starts, so batches are full but for the
    # tail of each consume() call: up to consume_max_messages = 1000 rows, i.e. 3 full batches
    # and 232 rows left over. Where scoring those 3 batches takes longer than max_wait_ms (20),
    # the leftover flushes on its timer (measured on 2 CPUs, both guarantees, every run: 80
    # batches, 60 full + 20 timeout, against ceil(20000 / 256) = 79); on a faster machine it
    # fills up with the next call's rows instead. The slack covers the short calls at start-up.
    assert stats.flushes["full"] + stats.flushes["timeout"] == stats.batches, stats.flushes
    assert stats.flushes["full"] >= 3 * (n // 1000) - 6, stats.flushes
    assert stats.batches <= math.ceil(n / max_size) + 6, (stats.batches, stats.flushes)
    metric = registry.get_sample_value
    assert metric("streamer_predictions_produced_total", {"topic": topics.output}) == n
    assert metric("streamer_events_consumed_total", {"topic": topics.input}) == n
    model = {"model": cfg.model.name}
    assert metric("streamer_batch_size_rows_sum", model) == n
    assert metric("streamer_batch_size_rows_count", model) == stats.batches
    assert metric("streamer_batch_size_rows_bucket", {**model, "le": "128.0"}) <= 6  # nearly all batches near full

    # End-to-end latency runs from each event's time to its acknowledged prediction: after the
    # event was produced and before this test measured the end of the run.
    assert len(stats.latencies_ms) == n
    lowest, highest = min(stats.latencies_ms), max(stats.latencies_ms)
    assert 0 < lowest and highest <= wall_ms, (lowest, highest, wall_ms)
    assert metric("streamer_end_to_end_latency_seconds_count") == n
    latency_sum = metric("streamer_end_to_end_latency_seconds_sum")
    assert latency_sum == pytest.approx(sum(stats.latencies_ms) / 1000)
    assert 0 < latency_sum / n <= wall_ms / 1000, (latency_sum / n, wall_ms)
    inputs = input_index(bootstrap, topics)
    out_codec = output_codec(cfg)
    outputs = read_all(bootstrap, topics.output)
    # model.version verbatim; the first 12 hex digits of the file's SHA-256 in model_digest.
    digest = hashlib.sha256(cfg.model.path.read_bytes()).hexdigest()[:12]
    predictions = [dict(out_codec.decode(m.value())) for m in outputs]
    assert len(predictions) == n

    # Every prediction points at its own event, and keys follow the input.
    by_source = {}
    for m, p in zip(outputs, predictions, strict=True):
        src = (p["source_partition"], p["source_offset"])
        assert p["source_topic"] == topics.input
        event = inputs[src]
        assert p["event_id"] == event["event_id"] and p["entity_id"] == event["entity_id"]
        assert m.key() == str(event["entity_id"]).encode()
        # one produce_batch call per batch: librdkafka's partitioner still runs on each key, as it
        # did for the producer of the input (same partition count): the same partition
        assert m.partition() == src[0]
        assert (p["model_name"], p["model_version"]) == ("fraud_mlp", cfg.model.version)
        assert p["model_digest"] == digest and m.headers() is None  # the batch call sends no headers
        by_source[src] = p
    assert set(by_source) == set(inputs)

    # Scores equal ONNX Runtime run directly on the same features.
    session = ort.InferenceSession(str(cfg.model.path), providers=["CPUExecutionProvider"])
    keys = sorted(inputs)
    feats = np.asarray([inputs[k]["features"] for k in keys], dtype=np.float32)
    expected = session.run(None, {session.get_inputs()[0].name: feats})[0]
    got = np.asarray([by_source[k]["scores"] for k in keys], dtype=np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)

    # Per-partition order of predictions follows input order.
    for part in range(3):
        offs = [p["source_offset"] for p in predictions if p["source_partition"] == part]
        assert offs == sorted(offs)

    assert committed_offsets(bootstrap, topics.group, topics.input) == \
        end_offsets(bootstrap, topics.input)


def test_sigterm_midstream_then_restart_scores_every_offset(bootstrap: str, topics: Topics,
                                                             tmp_path: Path) -> None:
    """`streamer run` stops cleanly on SIGTERM; a restart picks up from the committed offsets.

    The second wave is produced while no processor runs, so the restart always has work to do
    however quickly the first run got through the first wave.
    """
    first_wave, second_wave = 30_000, 5_000
    produce(bootstrap, topics, first_wave)
    env = dict(os.environ, KAFKA_BOOTSTRAP=bootstrap, INPUT_TOPIC=topics.input,
               OUTPUT_TOPIC=topics.output, GROUP_ID=topics.group, MAX_BATCH_SIZE="64")
    log = (tmp_path / "run.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "streamer", "run", "--config",
                             str(ROOT / "deploy" / "config" / "example.yaml")],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while sum(end_offsets(bootstrap, topics.output).values()) < 1_000:
            assert proc.poll() is None, f"streamer run exited early:\n{_text(log)}"
            assert time.monotonic() < deadline, f"no progress:\n{_text(log)}"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, _text(log)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "finishing the open batch" in _text(log)
    first_run = sum(end_offsets(bootstrap, topics.output).values())
    # A clean stop commits exactly what it acknowledged: nothing more, nothing less.
    committed = committed_offsets(bootstrap, topics.group, topics.input)
    assert sum(max(o, 0) for o in committed.values()) == first_run  # -1001: none committed

    produce(bootstrap, topics, second_wave, seed=2)
    total = first_wave + second_wave
    cfg = make_config(bootstrap, topics, MAX_BATCH_SIZE="64")
    processor = build_processor(cfg)
    run_until_outputs(processor, total - first_run)

    out_codec = output_codec(cfg)
    sources = [(p["source_partition"], p["source_offset"]) for p in
               (out_codec.decode(m.value()) for m in read_all(bootstrap, topics.output))]
    assert len(sources) == total
    assert sorted(sources) == sorted(input_index(bootstrap, topics))  # each once, no gaps
    assert committed_offsets(bootstrap, topics.group, topics.input) == \
        end_offsets(bootstrap, topics.input)


def _text(log: object) -> str:
    log.seek(0)  # type: ignore[attr-defined]
    return log.read()[-4000:]  # type: ignore[attr-defined]


@pytest.mark.parametrize("fmt", ["json", "avro-confluent"])
def test_other_input_formats_end_to_end(bootstrap: str, topics: Topics, fmt: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """JSON and Confluent-framed Avro inputs score like plain Avro (mock:// registry, in-process).

    Inputs are encoded, and scores computed, by the libraries themselves (json, confluent_kafka's
    AvroSerializer, a plain ONNX Runtime session), never by the processor's own codec or runner.
    """
    cfg = make_config(bootstrap, topics)
    n = 500
    events = synthetic_events(n, N_FEATURES, seed=5)
    if fmt == "json":
        cfg = replace(cfg, input=replace(cfg.input, format="json"))
        messages = [(str(e["entity_id"]).encode(), json.dumps(e).encode()) for e in events]
    else:
        url = f"mock://{topics.group}"
        cfg = replace(cfg, input=replace(cfg.input, format=fmt, registry=RegistryConfig(url=url)))
        # Every mock:// client keeps its own store (confluent-kafka 2.16), even for the same URL,
        # so the processor is handed the very client the serializer registers with.
        registry = SchemaRegistryClient.new_client({"url": url})
        urls: list[str] = []

        def new_client(conf: dict[str, str]) -> SchemaRegistryClient:
            urls.append(conf["url"])
            return registry

        monkeypatch.setattr(subjects, "SchemaRegistryClient", SimpleNamespace(new_client=new_client))
        serializer = AvroSerializer(registry, (ROOT / "streamer" / "schemas" / "feature_event.avsc").read_text())
        context = SerializationContext(topics.input, MessageField.VALUE)
        messages = [(str(e["entity_id"]).encode(), serializer(e, context)) for e in events]
    processor = build_processor(cfg)
    assert fmt == "json" or urls == [url]  # the processor's registry client is the configured one
    produce_events(bootstrap, topics.input, messages)
    run_until_outputs(processor, n)
    assert processor.stats.predictions == n
    got = {p["event_id"]: p for p in (output_codec(cfg).decode(m.value())
                                      for m in read_all(bootstrap, topics.output))}
    assert set(got) == {e["event_id"] for e in events}
    session = ort.InferenceSession(str(cfg.model.path), providers=["CPUExecutionProvider"])
    feats = np.asarray([e["features"] for e in events], dtype=np.float32)
    expected = session.run(None, {session.get_inputs()[0].name: feats})[0]
    np.testing.assert_allclose([got[e["event_id"]]["scores"] for e in events], expected,
                               rtol=1e-5, atol=1e-6)


def test_a_trickle_is_flushed_within_max_wait(bootstrap: str, topics: Topics) -> None:
    """A lone event is scored max_wait_ms after it arrives, not when a batch would fill.

    max_size is far above anything produced here, so only the batch timer can flush. Each event is
    produced once the previous one's prediction is acknowledged: one batch per event. Then a burst
    of events, close together, must be scored within max_wait_ms of the FIRST of them.
    """
    # Measured on 2 CPUs: 395-450 ms per event, 500 ms with both CPUs busy elsewhere. That is
    # max_wait_ms plus about two consume timeouts (100 ms each): consume() returns a lone event
    # only when its timeout ends, and the prediction's ack is collected on the next pass. The
    # bound is 3x the worst seen; a batch timer 50x too long (10 s) is far beyond it.
    max_wait_ms, margin_ms = 200, 1300
    cfg = make_config(bootstrap, topics, MAX_BATCH_SIZE="4096")
    cfg = replace(cfg, batching=replace(cfg.batching, max_wait_ms=max_wait_ms))
    processor = build_processor(cfg)
    thread = threading.Thread(target=processor.run, daemon=True)
    thread.start()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    codec = input_codec(cfg.input)
    events = iter(synthetic_events(40, N_FEATURES, seed=9))

    def produce_acked(count: int) -> float:
        """Produce ``count`` events at once; returns when the broker acknowledged the first."""
        acks: list[float] = []
        for e in itertools.islice(events, count):
            producer.produce(topics.input, codec.encode(e), str(e["entity_id"]).encode(),
                             on_delivery=lambda err, _m: acks.append(-1.0 if err else time.monotonic()))
        assert producer.flush(30) == 0 and len(acks) == count and min(acks) > 0, acks
        return acks[0]

    def scored(predictions: int, since: float, within_ms: float) -> float:
        """Milliseconds from ``since`` until ``predictions`` are acknowledged; fails past ``within_ms``."""
        while processor.stats.predictions < predictions:
            waited_ms = (time.monotonic() - since) * 1000
            assert thread.is_alive() and waited_ms <= within_ms, \
                f"{processor.stats.predictions} of {predictions} predictions after {waited_ms:.0f} ms"
            time.sleep(0.001)
        return (time.monotonic() - since) * 1000

    bound_ms = max_wait_ms + margin_ms
    try:
        wait_until(lambda: processor.status().ready, 60, "the processor to join its group")
        # The first event also waits for the consumer to find its start offsets: not measured.
        scored(1, produce_acked(1), within_ms=30_000)
        for i in range(2, 8):  # one at a time: each its own batch
            scored(i, produce_acked(1), within_ms=bound_ms)
        scored(12, produce_acked(5), within_ms=bound_ms)  # a burst: from its FIRST event
    finally:
        processor.stop()
        thread.join(60)
    assert not thread.is_alive()
    assert processor.stats.predictions == 12
    assert processor.stats.flushes == {"timeout": processor.stats.batches}, processor.stats.flushes
    assert processor.stats.batches >= 8  # one per lone event, one or more for the burst


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.timeout(300)
def test_a_registry_outage_blocks_and_resumes_by_itself(bootstrap: str, topics: Topics,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """avro-confluent with the registry answering 503: input pauses, the processor reports
    unhealthy with the reason and commits nothing; the registry comes back, every event is
    scored once, no dead letter, and the process never exited."""
    # The client's back-off between its own tries of a lookup is random (up to 1, 2, 4 s): none
    # here, so a lookup under way when the registry comes back ends at once. The processor's
    # back-off between lookups (processing.retry_backoff_ms) is the one this test is about.
    monkeypatch.setattr(sr_client, "full_jitter", lambda *_: 0.0)
    schema = json.loads((ROOT / "streamer" / "schemas" / "feature_event.avsc").read_text())
    registry = FakeRegistry({7: schema})
    registry.away = True
    try:
        cfg = make_config(bootstrap, topics)
        cfg = replace(cfg, input=replace(cfg.input, format="avro-confluent", registry=RegistryConfig(url=registry.url)),
                      processing=replace(cfg.processing, retry_backoff_ms=200, retry_backoff_max_ms=1000))
        body = AvroCodec(schema)
        n = 300
        events = synthetic_events(n, N_FEATURES, seed=8)
        produce_events(bootstrap, topics.input, [(str(e["entity_id"]).encode(), b"\0" + (7).to_bytes(4, "big")
                                                  + body.encode(e)) for e in events])
        processor = build_processor(cfg)
        during: dict[str, Any] = {}

        def until(stats: Any) -> bool:
            if "reason" not in during and not processor.healthy:
                during.update(reason=processor.unhealthy_reason, since=time.monotonic())
            elif "reason" in during and "back" not in during and time.monotonic() - during["since"] > 3:
                during["committed"] = committed_offsets(bootstrap, topics.group, topics.input)
                during["outputs"] = stats.outputs
                during["back"] = registry.asked
                registry.away = False
            return stats.outputs >= n

        processor.run(until=until)
        assert "back" in during, "the processor never blocked on the registry"
        assert during["reason"].startswith("schema registry:") and during["outputs"] == 0
        assert all(o < 0 for o in during["committed"].values()), during["committed"]
        assert during["back"] >= 2  # it asked again while away: a back-off, not a single try
        assert processor.stats.predictions == n and processor.stats.dead_letters.total() == 0
        assert processor.healthy
        assert committed_offsets(bootstrap, topics.group, topics.input) == end_offsets(bootstrap, topics.input)
    finally:
        registry.close()
