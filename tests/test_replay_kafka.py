"""Replays on the real broker: exact windows, bounded while producers write, resumable, apart
from the live group and its output."""

from __future__ import annotations

import datetime as dt
import io
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from streamer.app import build_processor, input_codec, output_codec
from streamer.config import Config
from streamer.demo import synthetic_events
from streamer.errors import ConfigError
from streamer.faults import read_all, wait_until, write_config, written
from streamer.replay import ReplayFinishedError, When, parse_when, run_replay
from tests.conftest import Topics, committed_offsets, end_offsets, make_config

pytestmark = pytest.mark.kafka
T0 = 1_700_000_000_000  # event i is stamped T0 + i seconds


def produce_stamped(bootstrap: str, cfg: Config, topic: str, first: int, n: int) -> None:
    codec = input_codec(cfg)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    for i, e in enumerate(synthetic_events(n, 32, seed=first), start=first):
        event = dict(e, event_id=f"evt-{i}", event_time=T0 + i * 1000)
        producer.produce(topic, codec.encode(event), str(e["entity_id"]).encode(),
                         timestamp=T0 + i * 1000)
        producer.poll(0)
    assert producer.flush(60) == 0


def scored(bootstrap: str, cfg: Config, topic: str) -> list[dict[str, Any]]:
    codec = output_codec(cfg)
    return [dict(codec.decode(m.value())) for m in read_all(bootstrap, topic)]


def test_parse_when_forms() -> None:
    assert parse_when("earliest", "--from") == When("earliest")
    assert parse_when("2h", "--from", now_ms=10_000_000) == When("timestamp", 10_000_000 - 7_200_000)
    assert parse_when("2026-11-29T10:00:00Z", "--from").timestamp_ms == 1_795_946_400_000
    assert parse_when("0:10,2:5", "--from") == When("offsets", offsets=((0, 10), (2, 5)))
    with pytest.raises(ConfigError, match="--to"):
        parse_when("yesterday-ish", "--to")


def test_replay_scores_exactly_the_window_apart_from_live(bootstrap: str, topics: Topics) -> None:
    cfg = make_config(bootstrap, topics)
    produce_stamped(bootstrap, cfg, topics.input, 0, 3000)
    build_processor(cfg).run(until=lambda s: s.outputs >= 3000)  # the live group, caught up
    live_before = committed_offsets(bootstrap, topics.group, topics.input)
    live_out_before = len(read_all(bootstrap, topics.output))

    t1, t2 = T0 + 1000 * 1000, T0 + 2000 * 1000  # events 1000..1999
    summary = run_replay(cfg, When("timestamp", t1), When("timestamp", t2), run_id="window",
                         model_version="2-candidate", progress=io.StringIO())
    assert summary.events == 1000 and summary.stats.predictions == 1000
    out = scored(bootstrap, cfg, f"{topics.output}.backfill")
    assert sorted(int(p["event_id"][4:]) for p in out) == list(range(1000, 2000))
    assert {p["run_id"] for p in out} == {"window"}
    assert {p["model_version"] for p in out} == {"2-candidate"}
    # The live group and the live output are untouched.
    assert committed_offsets(bootstrap, topics.group, topics.input) == live_before
    assert len(read_all(bootstrap, topics.output)) == live_out_before
    assert all(p.get("run_id") is None for p in scored(bootstrap, cfg, topics.output))
    with pytest.raises(ReplayFinishedError):
        run_replay(cfg, When("timestamp", t1), When("timestamp", t2), run_id="window")
    with pytest.raises(ConfigError, match="live output"):
        run_replay(cfg, When("earliest"), output_topic=topics.output, run_id="oops")


def test_replay_ends_at_the_captured_end_while_producers_write(bootstrap: str, topics: Topics) -> None:
    cfg = make_config(bootstrap, topics)
    produce_stamped(bootstrap, cfg, topics.input, 0, 2000)
    stop, batches = threading.Event(), []

    def keep_writing() -> None:
        while not stop.is_set():
            produce_stamped(bootstrap, cfg, topics.input, 10_000 + 100 * len(batches), 100)
            batches.append(100)

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    try:
        summary = run_replay(cfg, When("earliest"), run_id="moving", progress=io.StringIO(),
                             batch_size=64, max_wait_ms=5)
    finally:
        stop.set()
        writer.join(60)
    assert batches, "the producer wrote nothing while the replay ran"
    # The range ends where the input ended when the run started: 2000 events plus whatever the
    # writer had added by then, and nothing the writer added later.
    ids = sorted(int(p["event_id"][4:]) for p in scored(bootstrap, cfg, f"{topics.output}.backfill"))
    assert summary.stats.predictions == summary.events == len(ids)
    assert ids[:2000] == list(range(2000))
    assert sum(end_offsets(bootstrap, topics.input).values()) > len(ids)  # more came; not scored


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()


def test_killed_replay_resumes_with_the_same_bounds(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    cfg = make_config(bootstrap, topics)
    produce_stamped(bootstrap, cfg, topics.input, 0, 30_000)
    config = write_config(tmp_path / "cfg.yaml", bootstrap=bootstrap, input_topic=topics.input,
                          output_topic=topics.output, group=topics.group, guarantee="at_least_once")
    argv = [sys.executable, "-m", "streamer", "replay", "--config", str(config),
            "--from", iso(T0 + 400_000), "--to", iso(T0 + 20_400_000),  # events 400..20399
            "--run-id", "crash", "--batch-size", "256"]
    log = tmp_path / "replay.log"
    backfill = f"{topics.output}.backfill"
    with log.open("ab") as out:
        first = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        wait_until(lambda: _exists(bootstrap, backfill) and written(bootstrap, backfill) >= 5000, 120,
                   "the replay to get going", lambda: log.read_text()[-3000:])
        first.send_signal(signal.SIGKILL)
        first.wait()
        produce_stamped(bootstrap, cfg, topics.input, 30_000, 1000)  # later events: outside
        second = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    assert second.returncode == 0, log.read_text()[-3000:]
    assert "resumed" in log.read_text()
    ids = {int(p["event_id"][4:]) for p in scored(bootstrap, cfg, backfill)}
    assert ids == set(range(400, 20_400))  # every event in range, none outside


def _exists(bootstrap: str, topic: str) -> bool:
    return topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
