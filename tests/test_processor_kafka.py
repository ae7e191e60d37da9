"""End to end on the real broker: events in, Avro predictions out, offsets committed after acks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from prometheus_client import CollectorRegistry

from streamer.app import build_processor, input_codec, output_codec
from streamer.config import RegistryConfig
from streamer.demo import encoded_events, produce_events, synthetic_events
from tests.conftest import ROOT, Topics, committed_offsets, end_offsets, make_config, read_all

pytestmark = pytest.mark.kafka
N_FEATURES = 32


def produce(bootstrap: str, topics: Topics, n: int, seed: int = 1) -> list[dict[str, object]]:
    cfg = make_config(bootstrap, topics)
    codec = input_codec(cfg)
    events = synthetic_events(n, N_FEATURES, seed=seed)
    produce_events(bootstrap, topics.input, encoded_events(codec, events))
    return events


def input_index(bootstrap: str, topics: Topics) -> dict[tuple[int, int], dict[str, object]]:
    """(partition, offset) -> decoded event, as the broker stored them."""
    codec = input_codec(make_config(bootstrap, topics))
    return {(m.partition(), m.offset()): dict(codec.decode(m.value()))
            for m in read_all(bootstrap, topics.input)}


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_20k_events_scored_exactly_and_committed(bootstrap: str, topics: Topics, guarantee: str) -> None:
    n = 20_000
    produce(bootstrap, topics, n)
    cfg = make_config(bootstrap, topics, MAX_BATCH_SIZE="256", GUARANTEE=guarantee)
    registry = CollectorRegistry()
    processor = build_processor(cfg, registry=registry)
    processor.run(until=lambda s: s.outputs >= n)

    assert processor.stats.predictions == n
    assert processor.stats.batches < n / 10  # micro-batches, not one call per event
    metric = registry.get_sample_value
    assert metric("streamer_predictions_produced_total", {"topic": topics.output}) == n
    assert metric("streamer_events_consumed_total", {"topic": topics.input}) == n
    assert metric("streamer_batch_size_rows_sum") == n
    assert metric("streamer_batch_size_rows_count") == processor.stats.batches
    inputs = input_index(bootstrap, topics)
    out_codec = output_codec(cfg)
    outputs = read_all(bootstrap, topics.output)
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
        assert (p["model_name"], p["model_version"]) == ("fraud_mlp", "1")
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
    processor.run(until=lambda s: s.outputs >= total - first_run)
    assert processor.stats.outputs == total - first_run

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
def test_other_input_formats_end_to_end(bootstrap: str, topics: Topics, fmt: str) -> None:
    """JSON and Confluent-framed Avro inputs score like plain Avro (mock:// registry, in-process)."""
    cfg = make_config(bootstrap, topics)
    registry = RegistryConfig(url=f"mock://{topics.group}") if fmt == "avro-confluent" else None
    cfg = replace(cfg, input=replace(cfg.input, format=fmt, registry=registry))
    processor = build_processor(cfg)
    n = 500
    events = synthetic_events(n, N_FEATURES, seed=5)
    # The processor's own decoder encodes: with mock:// the registry lives in this process only.
    produce_events(bootstrap, topics.input, encoded_events(processor.decoder, events))
    processor.run(until=lambda s: s.outputs >= n)
    assert processor.stats.predictions == n
    got = {p["event_id"]: p for p in (output_codec(cfg).decode(m.value())
                                      for m in read_all(bootstrap, topics.output))}
    assert set(got) == {e["event_id"] for e in events}
    runner = processor.runner
    feats = np.asarray([e["features"] for e in events], dtype=np.float32)
    expected = runner.run(feats)
    np.testing.assert_allclose([got[e["event_id"]]["scores"] for e in events], expected, rtol=1e-5)
